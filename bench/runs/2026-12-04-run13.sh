#!/bin/bash
# Device run 13 of 2026-12-04: the GPU tests whose kernels run 12's cache lacked; the loss curve's
# rounding floor at GPT-144M (eager FP32, eager with fused AdamW, Nova's default plan, against eager
# TF32, 200 steps each); the host's CUDA runtime calls in a GPT-42M step.
# Host first: bash bench/runs/2026-12-04-run4-build.sh tests (writes .nova-cache.tgz; carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run13; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 150 python3 -m pytest $T tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
    > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -12
P="--model gpt144m --batch 16 --steps 200 --warmup 5 --timed 20 --repeats 3"
for v in "eager tf32" "eager fp32 --fp32-matmul" "eager fused-adamw --adamw-impl fused" "nova default"; do
  set -- $v; fw=$1; name=$2; shift 2
  timeout 100 python3 -m nova.bench.train --framework $fw $P "$@" --out $R/gpt144m-b16-$fw-$name 2>&1 \
      | grep -E "steady|loss curve|error"
done
timeout 90 python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 --steps 5 --host \
    --out $R/profile-gpt42m > $R/profile-gpt42m.txt 2>&1; sed -n '/^idle/,$p' $R/profile-gpt42m.txt
tar czf $OUT/run13.tgz -C $OUT run13
