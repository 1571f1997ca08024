#!/bin/bash
# Device run 14 of 2026-12-04: the FP32 loss curves (eager with --fp32-matmul) that Nova's and eager
# TF32's curves are measured against: GPT-144M b16 and GPT-42M b32, 200 steps; GPT-42M's eager TF32
# and Nova curves beside them.  No kernels beyond run 13's cache.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run14; mkdir -p $R
Q="--steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5"
timeout 200 python3 -m nova.bench.train --framework eager --model gpt144m --batch 16 $Q --fp32-matmul \
    --out $R/gpt144m-b16-eager-fp32 2>&1 | grep -E "loss curve|error"
for v in "eager tf32" "eager fp32 --fp32-matmul" "nova default"; do
  set -- $v; fw=$1; name=$2; shift 2
  timeout 100 python3 -m nova.bench.train --framework $fw --model gpt42m --batch 32 $Q "$@" \
      --out $R/gpt42m-b32-$fw-$name 2>&1 | grep -E "loss curve|error"
done
tar czf $OUT/run14.tgz -C $OUT run14
