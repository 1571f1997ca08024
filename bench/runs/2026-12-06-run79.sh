#!/bin/bash
# Device run 79 (prepared): the five GPU tests run 78 lost to offline misses, on the cache that now holds
# the 54 kernels they recorded (`nova precompile misses`), then run 76's H200 branch where an H200 comes.
tar xf .nova-cache.txz && rm -rf .nova-cache/misses
R=$OUT/run79; mkdir -p $R
NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONPATH=. NOVA_TARGET=h200 timeout 100 python3 -m pytest -q -n 0 -m gpu \
    --show-capture=no --tb=line -rf tests/test_heldout.py tests/test_memory_policy.py \
    "tests/test_integrations_dynamo_gpu.py::test_training_steps_on_nova_match_float64_eager" > $R/gpu_tests_rerun.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests_rerun.log | head
[ -d .nova-cache/misses ] && tar cf $R/misses.tar -C .nova-cache misses && tar tf $R/misses.tar | wc -l
bash bench/runs/2026-12-06-run76.sh
