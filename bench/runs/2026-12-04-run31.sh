#!/bin/bash
# Device run 31 of 2026-12-04: after the fused cross-entropy kernel (run 29), its repricing and the
# column stage's unroll (run 30): the GPU tests of run 28's set, every launch of GPT-42M and Llama-42M
# timed one by one, GPT-42M's and Llama-42M's steps against torch.compile in the same call.
# Host first: bash bench/runs/2026-12-04-run4-build.sh all; nova precompile train gpt144m --batch 16 --target h200.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run31; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 200 python3 -m pytest $T tests/test_rows_gpu.py tests/test_compile_gpu.py tests/test_executor_gpu.py \
    tests/test_compile_executor.py tests/test_frontend_real_scripts.py tests/test_pointwise_indexing_gpu.py \
    tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
    > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -20
for m in gpt42m llama42m; do
  timeout 100 python3 -m nova.bench.step_kernels --model $m --batch 32 --out $R 2>&1 | grep -v -i warn \
      > $R/step_kernels-$m.txt; head -3 $R/step_kernels-$m.txt; grep -E "cross|column_reduce 16384x2048" $R/step_kernels-$m.txt | head -3
  rm $R/step_kernels-$m.txt
done
for m in gpt42m llama42m; do
  python3 -m nova.bench.train --all --frameworks compile,nova --model $m --batch 32 --steps 50 --warmup 5 \
      --timeout 150 --out $R/$m 2>&1 | grep -E "^\| |steady|error" | head -8
  rm -f $R/$m/summary-*
done
