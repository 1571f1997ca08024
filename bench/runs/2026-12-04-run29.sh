#!/bin/bash
# Device run 29 of 2026-12-04: the cross-entropy forward and backward in one rows kernel
# (cross_entropy_forward_backward): the GPU tests of run 28's set, every launch of GPT-42M, Llama-42M
# and GPT-144M b16 timed one by one (the fused loss kernel against its prediction), GPT-42M's step
# against torch.compile in the same call (throughput, peak).
# Host first: bash bench/runs/2026-12-04-run4-build.sh all; nova precompile train gpt144m --batch 16 --target h200.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run29; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 200 python3 -m pytest $T tests/test_rows_gpu.py tests/test_compile_gpu.py tests/test_executor_gpu.py \
    tests/test_compile_executor.py tests/test_frontend_real_scripts.py tests/test_pointwise_indexing_gpu.py \
    tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
    > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -20
for spec in "gpt42m" "llama42m" "gpt144m --batch 16"; do
  set -- $spec; m=$1; shift
  timeout 100 python3 -m nova.bench.step_kernels --model $m --batch 32 "$@" --out $R 2>&1 | grep -v -i warn \
      > $R/step_kernels-$m.txt; head -3 $R/step_kernels-$m.txt; grep -i "cross" $R/step_kernels-$m.txt | head -2
done
python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 50 --warmup 5 \
    --timeout 150 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
