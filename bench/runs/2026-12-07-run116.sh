#!/bin/bash
# Device run 116 (an H200 only; on another card it stops at once): HF Llama-42M b32, the fastest plan and
# the 5.05 GiB budget twice each, interleaved (fast, budget, fast, budget): their speed compared in
# one process tree on one warm card.  The plans are run 108's cache (`bench/runs/2026-12-07-run105.sh` c).
. bench/runs/device_env.sh run116 .nova-cache-run108
[ $T = h200 ] || { echo "not an H200: nothing run"; exit 0; }
for run in fast-1 budget-1 fast-2 budget-2; do
  mkdir -p $R/hf-llama-42m-$run
  env NOVA_MEMORY_POLICY=$([ ${run%-*} = fast ] && echo fast || echo lean) timeout 80 python3 -m nova.bench.train \
      --all --frameworks nova --model hf-llama-42m --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 3 \
      --timeout 75 --out $R/hf-llama-42m-$run $([ ${run%-*} = budget ] && echo --memory-budget 5.05GiB \
      --no-memory-cap) 2>&1 | grep -E "^\| nova|rror|peak" | head -3
done
true
