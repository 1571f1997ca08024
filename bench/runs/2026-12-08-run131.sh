#!/bin/bash
# Device run 131 (any card), from a checkout of the branch `pingpong-rings`: ping-pong rings as deep as the shared memory
# holds again (run 130 found the once-wrong rings right when built with masked descriptors, which the
# compile now picks from the SASS).  tests/test_runtime_gpu.py whole: its ping-pong cases at 1 K tile
# (2-7 stages), the 17x300x200x256 64x64 TMA-store one at 8 stages, the f32 4096x4096x128.
# Host: NOVA_CACHE_DIR=.nova-cache-run131 `python3 tests/gpu_build.py --all --only test_runtime_gpu.py
# --target T` (T = h100, h200); `.nova-cache-run131.txz`.
. bench/runs/device_env.sh run131 .nova-cache-run131
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_runtime_gpu.py -rf \
    > $R/runtime_gpu_tests.txt 2>&1
grep -E "^FAILED|passed|failed" $R/runtime_gpu_tests.txt | head -12
grep -E "^E .*(rror|assert)" $R/runtime_gpu_tests.txt | head -6
true
