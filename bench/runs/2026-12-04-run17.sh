#!/bin/bash
# Device run 17 of 2026-12-04: the sm_80 kernel generation on the H200 (NOVA_TARGET=a100: kernels
# generated for sm_80 and JIT-compiled from their PTX): the executor's, rows, pointwise-indexing,
# optimizer and clipping GPU tests, and GPT-42M's training step (50 steps against eager).
# Host first: bash bench/runs/2026-12-04-run17-build.sh (writes .nova-cache.tgz; carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=a100 PYTHONUNBUFFERED=1
R=$OUT/run17; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 330 python3 -m pytest $T tests/test_executor_gpu.py tests/test_rows_gpu.py tests/test_pointwise_indexing_gpu.py \
    tests/test_optimizer_gpu.py tests/test_clipping_gpu.py > $R/gpu_tests_sm80.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests_sm80.log | head -20
timeout 200 python3 -m nova.bench.train --all --frameworks eager,nova --model gpt42m --batch 32 --steps 50 --warmup 3 \
    --timed 10 --repeats 2 --timeout 150 --out $R/gpt42m-sm80 2>&1 | grep -E "^\| |steady|error" | head -6
tar czf $OUT/run17.tgz -C $OUT run17
