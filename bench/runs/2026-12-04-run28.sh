#!/bin/bash
# Device run 28 of 2026-12-04: the GPU tests after this block's changes (the leaner guard and
# write-back, the host step counts after the launch, the refitted memory-bound and step-clock
# constants, attention precision fp32): compiled step, executor, real scripts, rows, pointwise,
# clipping, optimizer, dynamo backend (attention: runs 24-27).
# Host first: bash bench/runs/2026-12-04-run4-build.sh tests (and the attention builds of runs 24-27).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run28; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 300 python3 -m pytest $T tests/test_compile_gpu.py tests/test_executor_gpu.py tests/test_compile_executor.py \
    tests/test_frontend_real_scripts.py tests/test_rows_gpu.py tests/test_pointwise_indexing_gpu.py \
    tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
    > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -20
