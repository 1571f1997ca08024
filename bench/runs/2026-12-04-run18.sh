#!/bin/bash
# Device run 18 of 2026-12-04: the executor's GPU tests on the sm_80 (a100) and sm_86 (rtx3060) kernel
# generations, JIT-compiled from their PTX on the H200, with the tests' plans made for that target.
# Host first: python3 tests/test_executor_gpu.py --target T | sh and python tests/test_rows_gpu.py
# --target T | grep "^nova precompile" | sh for T in a100, rtx3060 (NOVA_TARGET=T), then the tarball.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONUNBUFFERED=1
R=$OUT/run18; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
for t in a100 rtx3060; do
  NOVA_TARGET=$t timeout 200 python3 -m pytest $T tests/test_executor_gpu.py tests/test_rows_gpu.py \
      > $R/gpu_tests_$t.log 2>&1; echo "== $t"; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests_$t.log | head -10
done
tar czf $OUT/run18.tgz -C $OUT run18
