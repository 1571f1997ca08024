#!/bin/bash
# Device run 124 (main): tests/test_runtime_gpu.py whole -- run 121 (branch gemm-one-prep) saw the
# batched ping-pong TMA-store kernel of 17x300x200x256 bf16 NT fault (an illegal address at its own
# launch, right after the both-prepped 3x127x253x61 NN case); main builds that kernel identically.
# First the two cases alone under CUDA_LAUNCH_BLOCKING=1 (each in its own process: a fault of the first
# cannot poison the second), then the whole file.
# Host: NOVA_CACHE_DIR=.nova-cache-run124 `python3 tests/gpu_build.py --all --only test_runtime_gpu.py
# test_attention_call_plan.py --target T` for T = h100 and h200; `.nova-cache-run124.txz`.
. bench/runs/device_env.sh run124 .nova-cache-run124
for k in "17x300x200x256-bf16-NT" "3x127x253x61-bf16-NN"; do
    CUDA_LAUNCH_BLOCKING=1 timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_runtime_gpu.py \
        -k "batched_matmul_vs_float64 and $k" 2>&1 | grep -E "FAILED|Error|passed|failed" | head -4 | tee -a $R/alone.log
done
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_runtime_gpu.py 2>&1 | tail -15 \
    | tee $R/runtime_gpu_tests.log
# the unmasked planned attention calls (their kernels: `python -m nova.bench.attention --precompile`)
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_call_plan.py 2>&1 | tail -8 \
    | tee $R/call_plan_gpu_tests.log
true
