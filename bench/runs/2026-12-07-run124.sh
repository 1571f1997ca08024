#!/bin/bash
# Device run 124 (branch hopper-bwd-slab-row: main plus the split Hopper backward's slab row computed in
# its epilogue, attention ABI 13; no GEMM kernel differs from main's).
# 1. tests/test_runtime_gpu.py whole -- run 121 (branch gemm-one-prep) saw the batched ping-pong
#    TMA-store kernel of 17x300x200x256 bf16 NT fault (an illegal address at its own launch, right after
#    the both-prepped 3x127x253x61 NN case); main builds that kernel identically.  First the two cases
#    alone under CUDA_LAUNCH_BLOCKING=1 (each in its own process: a fault of the first cannot poison
#    the second), then both under compute-sanitizer memcheck, then the whole file.
# 2. The attention GPU tests (the split backward's kernels changed), the masked ones and the planned calls.
# 3. The branch gemm-one-prep as it was (its tree `.branch-one-prep.txz`: `git archive gemm-one-prep nova
#    tests pyproject.toml bench`, its cache `.nova-cache-run121`): the same two cases alone, then the file.
# Host: NOVA_CACHE_DIR=.nova-cache-run124 `python3 tests/gpu_build.py --all --only test_attention_gpu.py
# test_attention_call_plan.py test_attention_mask_gpu.py test_runtime_gpu.py --target T` for T = h100
# and h200; `.nova-cache-run124.txz` (its h100 kernels: the carry limit; run on an H100).
. bench/runs/device_env.sh run124 .nova-cache-run124
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider -n 0"
alone() {   # the two batched cases, each alone under CUDA_LAUNCH_BLOCKING=1, into $1
    for k in "17x300x200x256-bf16-NT" "3x127x253x61-bf16-NN"; do
        echo "== $k" >> $1
        CUDA_LAUNCH_BLOCKING=1 timeout 60 $PYTEST tests/test_runtime_gpu.py -k "batched_matmul_vs_float64 and $k" \
            2>&1 | grep -E "FAILED|Error|passed|failed" | head -4 | tee -a $1
    done
    # both in the order that faulted, under compute-sanitizer's memcheck (an out-of-bounds access named)
    echo "== memcheck, both" >> $1
    timeout 150 compute-sanitizer --tool memcheck --print-limit 4 $PYTEST tests/test_runtime_gpu.py \
        -k "batched_matmul_vs_float64 and (3x127x253x61-bf16-NN or 17x300x200x256-bf16-NT)" 2>&1 \
        | grep -E "Invalid|ERROR SUMMARY|at 0x|by thread|Address|passed|failed|nova_" | head -24 | tee -a $1
}
alone $R/alone.log
timeout 150 $PYTEST tests/test_runtime_gpu.py 2>&1 | grep -E "^FAILED|^ERROR|passed|failed" | tail -15 \
    | tee $R/runtime_gpu_tests.log
timeout 200 $PYTEST tests/test_attention_gpu.py tests/test_attention_mask_gpu.py tests/test_attention_call_plan.py \
    2>&1 | grep -E "^FAILED|^ERROR|passed|failed" | tail -15 | tee $R/attention_gpu_tests.log
B=/tmp/one-prep; mkdir -p $B; tar xf .branch-one-prep.txz -C $B; tar xf .nova-cache-run121-h100.txz -C $B
( cd $B && export PYTHONPATH=$B NOVA_CACHE_DIR=$B/.nova-cache-run121-h100 && alone $R/one_prep_alone.log &&
  timeout 150 $PYTEST tests/test_runtime_gpu.py 2>&1 | grep -E "^FAILED|^ERROR|passed|failed" | tail -15 \
      | tee $R/one_prep_runtime_gpu_tests.log )
true
