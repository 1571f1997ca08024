#!/bin/bash
# Device run 108: seed 20261216's and 20261217's GEMM draws again with the tiles' L2 term at each active
# SM's port (hopper.L2_PORT_B_PER_CLK: a grid of fewer CTAs than SMs gets more than 1/SMs of the L2's
# TMA bandwidth per SM, up to the port's): ten picks move over the two draws.
# Host: .nova-cache-run108 = run 107's cache plus, for both seeds and T = h100 and h200,
# `nova.bench.heldout gemm --count 100 --seed S --precompile --target T`; `.nova-cache-run108.txz`.
. bench/runs/device_env.sh run108 .nova-cache-run108
for seed in 20261216 20261217; do
  mkdir -p $R/gemm-$seed
  timeout 280 python3 -m nova.bench.heldout gemm --count 100 --seed $seed --settle-s 0.4 --graph-settle-s 0.2 \
      --out $R/gemm-$seed 2>&1 | tail -1
  grep -A2 "## Summary" -A3 $R/gemm-$seed/heldout_gemm.md | tail -2
  grep -E "^\| #(16|37|53|57|58|74|81|82|83|91) " $R/gemm-$seed/heldout_gemm.md | cut -c1-150
done
true
