#!/bin/bash
# Device run 29 of 2026-12-04: the cross-entropy forward and backward in one rows kernel
# (cross_entropy_forward_backward): the rows and compiled-step GPU tests, then GPT-42M's launches
# timed one by one (the fused loss kernel against its prediction).
# Host first: bash bench/runs/2026-12-04-run4-build.sh tests; ... steps (the new kernels into .nova-cache).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run29; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 330 python3 -m pytest $T tests/test_rows_gpu.py tests/test_compile_gpu.py tests/test_executor_gpu.py \
    tests/test_compile_executor.py tests/test_frontend_real_scripts.py tests/test_clipping_gpu.py \
    > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -20
timeout 150 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R 2>&1 | grep -v -i warn \
    > $R/step_kernels-gpt42m.txt; head -4 $R/step_kernels-gpt42m.txt; grep -i cross $R/step_kernels-gpt42m.txt
