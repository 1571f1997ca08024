#!/bin/bash
# Device run 126 (H100): run 124 found main's batched ping-pong TMA-store GEMM 17x300x200x256 bf16 NT
# wrong alone (relative error 0.70-0.71, memcheck clean).  1. The variants probe: which tiles are wrong
# and whose values they hold.  2. tests/test_runtime_gpu.py whole, every failure listed (run 124 kept
# the tail only).  3. The two attention GPU tests that failed in run 124, alone with their errors.
# Host: NOVA_CACHE_DIR=.nova-cache-run126 `python3 bench/probes/batched_pingpong.py build --target h100`;
# `.nova-cache-run126.txz`; run 124's cache `.nova-cache-run124.txz` (h100).
. bench/runs/device_env.sh run126 .nova-cache-run126
timeout 120 python3 bench/probes/batched_pingpong.py run 2>&1 | tee $R/batched_pingpong.txt
tar xf .nova-cache-run124.txz
export NOVA_CACHE_DIR=$PWD/.nova-cache-run124
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider -n 0"
timeout 150 $PYTEST tests/test_runtime_gpu.py -rf > $R/runtime_gpu_tests.txt 2>&1
grep -E "^FAILED|passed|failed" $R/runtime_gpu_tests.txt | head -12
grep -E "Error|error" $R/runtime_gpu_tests.txt | head -8
timeout 150 $PYTEST tests/test_attention_gpu.py tests/test_attention_mask_gpu.py \
    -k "test_memory_is_linear_in_sequence_length or test_hugging_face_padded_step_matches_eager" > $R/attention_two.txt 2>&1
grep -E "^E |^FAILED|passed|failed" $R/attention_two.txt | head -30
true
