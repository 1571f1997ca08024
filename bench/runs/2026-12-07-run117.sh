#!/bin/bash
# Device run 117: the skinny GEMM staging A by vectors (`SkinnySchedule.a_vec`): its GPU tests, the
# lanes-along-K probe timing each vector schedule against the same schedule staging by elements (one
# process), and with DRAW=1 seed 20261218's GEMM draw (run 113 timed it on an H100 before the change).
# Host: NOVA_CACHE_DIR=.nova-cache-run117, for T = h100 and h200: `python3 tests/test_skinny_gpu.py --target T
# --build`, `nova.bench.heldout gemm --count 100 --seed 20261218 --precompile --target T`; and
# `python3 bench/probes/skinny_along_k_ncu.py build`; `.nova-cache-run117.txz`.
. bench/runs/device_env.sh run117 .nova-cache-run117
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_skinny_gpu.py 2>&1 | tail -4 \
    | tee $R/skinny_gpu_tests.log
timeout 100 python3 bench/probes/skinny_along_k_ncu.py time 2>&1 | tee $R/probe_time.txt
[ -n "$DRAW" ] || exit 0          # the draw only where the device time allows (DRAW=1)
mkdir -p $R/gemm-20261218
timeout 175 python3 -m nova.bench.heldout gemm --count 100 --seed 20261218 --settle-s 0.2 --graph-settle-s 0.1 \
    --out $R/gemm-20261218 2>&1 | tail -1
grep -A2 "## Summary" -A3 $R/gemm-20261218/heldout_gemm.md | tail -2
grep -E "skinny" $R/gemm-20261218/heldout_gemm.md | cut -c1-150
true
