#!/bin/bash
# Device run 107: a fresh GEMM draw (seed 20261217, never measured) on the model with the DRAM wait.
# Phase "c" is run 105's (an H200 only).
# Host: .nova-cache-run107 = run 106's cache plus, for T = h100 and h200, `nova.bench.heldout gemm --count
# 100 --seed 20261217 --precompile --target T`; `.nova-cache-run107.txz`.
. bench/runs/device_env.sh run107 .nova-cache-run107
if [ "$1" = a ]; then
  mkdir -p $R/gemm
  timeout 330 python3 -m nova.bench.heldout gemm --count 100 --seed 20261217 --settle-s 0.4 --graph-settle-s 0.2 \
      --out $R/gemm 2>&1 | tail -1
  grep -A14 "## Summary" $R/gemm/heldout_gemm.md | head -16
fi
if [ "$1" = c ]; then
  RUN=run107 CACHE=.nova-cache-run107 bash bench/runs/2026-12-07-run105.sh c
fi
true
