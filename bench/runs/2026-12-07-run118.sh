#!/bin/bash
# Device run 118: the skinny GEMM's chunk loop without its wasted tail trip (skipped at run time where a
# chunk ends on a whole trip), steps past a chunk masked on B alone, A's staging vectors along K only
# (stored as shared vectors): its GPU tests; the probe timing each pick against its variants (by
# elements, one chunk a slice) in one process; seed 20261218's GEMM draw (runs 113 and 117 timed it).
# Host: NOVA_CACHE_DIR=.nova-cache-run118, for T = h100 and h200: `python3 tests/test_skinny_gpu.py --target T
# --build`, `nova.bench.heldout gemm --count 100 --seed 20261218 --precompile --target T`; and
# `python3 bench/probes/skinny_along_k_ncu.py build`; `.nova-cache-run118.txz`.
. bench/runs/device_env.sh run118 .nova-cache-run118
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_skinny_gpu.py 2>&1 | tail -4 \
    | tee $R/skinny_gpu_tests.log
timeout 120 python3 bench/probes/skinny_along_k_ncu.py time 2>&1 | tee $R/probe_time.txt
mkdir -p $R/gemm-20261218
timeout 230 python3 -m nova.bench.heldout gemm --count 100 --seed 20261218 --settle-s 0.2 --graph-settle-s 0.1 \
    --out $R/gemm-20261218 2>&1 | tail -1
grep -A3 "## Summary" $R/gemm-20261218/heldout_gemm.md | tail -1
true
