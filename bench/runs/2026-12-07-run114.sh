#!/bin/bash
# Device run 114.  (a) A fresh attention draw (seed 20261218, 40 problems): the attention device-
# time model's lone-block and empty-block terms (fitted on run 110) out of sample, and the split counts
# they now choose.  (b, an H200 only) HF Llama-42M b32: the fastest plan and the 5.05 GiB budget twice
# each, interleaved (fast, budget, fast, budget), for a same-call comparison of their speed.
# Host: NOVA_CACHE_DIR=.nova-cache-run114 (PYTHONPATH with transformers 5.17), for T = h200 and h100:
# `nova.bench.heldout attention --count 40 --seed 20261218 --precompile --target T`;
# `.nova-cache-run114.txz`; the Llama plans are run 108's cache (`bench/runs/2026-12-07-run105.sh` c).
. bench/runs/device_env.sh run114 .nova-cache-run114
mkdir -p $R/attention-20261218
timeout 280 python3 -m nova.bench.heldout attention --count 40 --seed 20261218 --out $R/attention-20261218 2>&1 | tail -1
grep -A16 "## Summary" $R/attention-20261218/heldout_attention.md | head -18
if [ $T = h200 ]; then
  [ -d .nova-cache-run108 ] || tar xf .nova-cache-run108.txz
  export NOVA_CACHE_DIR=$PWD/.nova-cache-run108
  for run in fast-1 budget-1 fast-2 budget-2; do
    mkdir -p $R/hf-llama-42m-$run
    env NOVA_MEMORY_POLICY=$([ ${run%-*} = fast ] && echo fast || echo lean) timeout 70 python3 -m nova.bench.train \
        --all --frameworks nova --model hf-llama-42m --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 3 \
        --timeout 65 --out $R/hf-llama-42m-$run $([ ${run%-*} = budget ] && echo --memory-budget 5.05GiB \
        --no-memory-cap) 2>&1 | grep -E "^\| nova|rror|peak" | head -3
  done
fi
true
