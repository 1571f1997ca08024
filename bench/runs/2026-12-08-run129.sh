#!/bin/bash
# Device run 129 (any card).  1. tests/test_runtime_gpu.py whole on main with ping-pong held to 4 stages
# up to its K tiles (run 128: 2 stages for 1 K tile computed wrong results; its cases now 4-5 K tiles),
# each failure listed.  2. The branch `launch-price` (a launch priced at the target's graph gap, the
# skinny kernel's figure, not 5 us): seed 20261219's GEMM draw, timed by run 120 on main, again with
# the branch's picks, to compare the rows whose pick moved.
# Host: NOVA_CACHE_DIR=.nova-cache-run129 `python3 tests/gpu_build.py --all --only test_runtime_gpu.py
# --target T` (T = h100, h200); `.nova-cache-run129.txz`.  The branch: its `nova/` as
# `.branch-launch-price.txz` (lp/nova), its cache `nova.bench.heldout gemm --count 100 --seed 20261219
# --precompile --target T` as `.nova-cache-lp129.txz`.
. bench/runs/device_env.sh run129 .nova-cache-run129
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_runtime_gpu.py -rf \
    > $R/runtime_gpu_tests.txt 2>&1
grep -E "^FAILED|passed|failed" $R/runtime_gpu_tests.txt | head -12
grep -E "^E .*(rror|assert)" $R/runtime_gpu_tests.txt | head -6
tar xf .branch-launch-price.txz && tar xf .nova-cache-lp129.txz
mkdir -p $R/gemm-20261219-lp
(cd lp && PYTHONPATH=. NOVA_CACHE_DIR=$PWD/../.nova-cache-lp129 timeout 200 python3 -m nova.bench.heldout gemm \
    --count 100 --seed 20261219 --settle-s 0.2 --graph-settle-s 0.1 --out $R/gemm-20261219-lp 2>&1 | tail -1)
grep -A8 "## Summary" $R/gemm-20261219-lp/heldout_gemm.md | head -9
true
