#!/bin/bash
# Device run 5 of 2026-12-04: the backend's steady state again (small outputs copied, pools per output),
# the GPU tests the change touches, Llama-42M after RMSNorm's eps became the f32 value.
# Host first: bash bench/runs/2026-12-04-run4-build.sh (the same kernels; .nova-cache.tgz).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run5; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
for m in gpt42m llama42m; do
  timeout 200 python3 -m nova.bench.dynamo_vs_inductor --model $m --batch 32 --steps 10 --settle-s 2 --timed 20 \
      --repeats 3 --out $R/dynamo-$m --timeout 90 2>&1 | tail -5
done
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
python3 -m pytest $T tests/test_executor_gpu.py tests/test_integrations_dynamo_gpu.py tests/test_pointwise_indexing_gpu.py \
    tests/test_rows_gpu.py > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|^/|Error" $R/gpu_tests.log | head -20
python3 -m nova.bench.train --framework nova --model llama42m --batch 32 --steps 30 --warmup 5 --out $R/llama42m 2>&1 \
    | grep -E "steady|error"
tar czf $OUT/run5.tgz -C $OUT run5
