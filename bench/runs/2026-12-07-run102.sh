#!/bin/bash
# Device run 102: the skinny GEMM GPU tests with the shifted columns on by default (odd N keeps its vector).
# Host: NOVA_CACHE_DIR=.nova-cache-run102 python3 tests/test_skinny_gpu.py --target T --build (h100, h200).
. bench/runs/device_env.sh run102 .nova-cache-run102
timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_skinny_gpu.py 2>&1 | tail -5 | tee $R/skinny_gpu_tests.log
