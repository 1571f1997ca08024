#!/bin/bash
# Device run 113, one call.  (m) The mma.sync GEMM kernels' device time on Hopper (NOVA_HOPPER=0): the
# held-out draws of seeds 20261216 and 20261217 with every tile problem on mma.sync, for a refit of the
# card's mma.sync calibration (the eager call's choice between the wgmma tiles and the single-launch
# mma.sync kernel reads it).  (L, an H200 only) HF Llama-42M b32: the fastest plan and the 5.05 GiB budget
# twice each, interleaved (fast, budget, fast, budget), for a same-call comparison of their speed.
# Host: NOVA_HOPPER=0 NOVA_CACHE_DIR=.nova-cache-run113, for T = h200 and h100 and S = 20261216, 20261217:
# `nova.bench.heldout gemm --count 100 --seed S --precompile --target T`; `.nova-cache-run113.txz`;
# the Llama plans are run 108's cache (`bench/runs/2026-12-07-run105.sh`, phase c).
. bench/runs/device_env.sh run113 .nova-cache-run113
for S in 20261216 20261217; do
  mkdir -p $R/mma-$S
  NOVA_HOPPER=0 timeout 175 python3 -m nova.bench.heldout gemm --count 100 --seed $S --settle-s 0.2 \
      --graph-settle-s 0.1 --out $R/mma-$S 2>&1 | tail -1
  grep -A2 "## Summary" -A3 $R/mma-$S/heldout_gemm.md | tail -2
done
if [ $T = h200 ]; then
  [ -d .nova-cache-run108 ] || tar xf .nova-cache-run108.txz
  export NOVA_CACHE_DIR=$PWD/.nova-cache-run108
  for run in fast-1 budget-1 fast-2 budget-2; do
    mkdir -p $R/hf-llama-42m-$run
    env NOVA_MEMORY_POLICY=$([ ${run%-*} = fast ] && echo fast || echo lean) timeout 80 python3 -m nova.bench.train \
        --all --frameworks nova --model hf-llama-42m --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 3 \
        --timeout 75 --out $R/hf-llama-42m-$run $([ ${run%-*} = budget ] && echo --memory-budget 5.05GiB \
        --no-memory-cap) 2>&1 | grep -E "^\| nova|rror|peak" | head -3
  done
fi
true
