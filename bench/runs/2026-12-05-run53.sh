#!/bin/bash
# Device run 53: the skinny GEMM's last CTA (loads over a thread's outputs in runs of 32, the model's
# honest tail) on the GPU and on run 48's held-out draw again; the GPU tests whose kernels were missing
# from run 52's cache (every GPU test file's build now: `tests/gpu_build.py --all`).
# Host builds (the tests' cache and the held-out one), then xz each:
#   NOVA_CACHE_DIR=$PWD/.nova-cache python tests/gpu_build.py --all --target h200
#   NOVA_CACHE_DIR=$PWD/.nova-cache-heldout python -m nova.bench.heldout gemm --count 100 --seed 20261205 --precompile --target h200
#   bash bench/runs/2026-12-05-run53.sh
tar xf .nova-cache.t*z; tar xf .nova-cache-heldout.txz
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run53; mkdir -p $R
NOVA_CACHE_DIR=$PWD/.nova-cache timeout 260 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf \
    tests/test_skinny_gpu.py tests/test_embedding_gpu.py tests/test_compile_gpu.py tests/test_bench_step_kernels.py \
    "tests/test_executor_gpu.py::test_replay_reads_new_data_each_step" \
    "tests/test_executor_gpu.py::test_offline_missing_kernel_fails_before_touching_parameters" \
    > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -14
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout timeout 300 python3 -m nova.bench.heldout gemm --count 100 --seed 20261205 \
    --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -3
grep -A14 "## Summary" $R/*.md | head -20
