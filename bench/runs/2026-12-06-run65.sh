#!/bin/bash
# Device run 65: every GPU test file on the day's final code (attention ABI 11, the masked-row rule, the
# backward's buffers in donated inputs), kernels built for h200 (sm_90a) on the host:
#   NOVA_CACHE_DIR=.nova-cache PYTHONPATH=<transformers 5.17>:. python3 tests/gpu_build.py --all --target h200
#   bash bench/runs/2026-12-06-run65.sh
tar xf .nova-cache.txz
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p $OUT/run65
NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONPATH=. NOVA_TARGET=h200 timeout 420 \
    python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf --durations=15 \
    tests/test_attention_gpu.py tests/test_executor_gpu.py tests/test_compile_gpu.py tests/test_integrations_dynamo_gpu.py \
    tests/test_clipping_gpu.py tests/test_embedding_gpu.py tests/test_optimizer_gpu.py tests/test_pointwise_gpu.py \
    tests/test_pointwise_indexing_gpu.py tests/test_skinny_gpu.py tests/test_runtime_gpu.py \
    > $OUT/run65/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|Timeout|timeout" $OUT/run65/gpu_tests.log | head -30
tail -20 $OUT/run65/gpu_tests.log
