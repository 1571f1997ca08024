#!/bin/bash
# Device run 106: seed 20261216's GEMM draw again (run 105 measured it) with the DRAM wait in the tiles'
# model (hopper.dram_wait_time) and the held-out constants refitted with it: ten picks move (three decode
# rows to the skinny kernel, seven split counts).  Phase "c" is run 105's (an H200 only).
# Host: .nova-cache-run106 = run 105's cache plus, for T = h100 and h200, `nova.bench.heldout gemm --count
# 100 --seed 20261216 --precompile --target T`; `.nova-cache-run106.txz`.
. bench/runs/device_env.sh run106 .nova-cache-run106
if [ "$1" = a ]; then
  mkdir -p $R/gemm
  timeout 330 python3 -m nova.bench.heldout gemm --count 100 --seed 20261216 --settle-s 0.4 --graph-settle-s 0.2 \
      --out $R/gemm 2>&1 | tail -1
  grep -A14 "## Summary" $R/gemm/heldout_gemm.md | head -16
  grep -E "^\| #(0|60|75|95|99) " $R/gemm/heldout_gemm.md | cut -c1-160
fi
if [ "$1" = c ]; then
  RUN=run106 CACHE=.nova-cache-run106 bash bench/runs/2026-12-07-run105.sh c
fi
true
