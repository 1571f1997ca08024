#!/bin/bash
# Device run 109: the skinny GEMM with a chunk's first loads of B issued before its staging of A
# (SkinnySchedule.b_first, where it makes fewer dependent trips): its GPU tests, then seed 20261216's
# and 20261217's GEMM draws (their decode rows), then (phase b) a fresh draw, seed 20261218.
# Host: .nova-cache-run109 = run 108's cache plus, for T = h100 and h200, the three seeds'
# `nova.bench.heldout gemm --count 100 --seed S --precompile --target T` and
# `tests/test_skinny_gpu.py --target T --build`; `.nova-cache-run109.txz`.
. bench/runs/device_env.sh run109 .nova-cache-run109
phase=${1:-a}
if [ $phase = a ]; then
  timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_skinny_gpu.py 2>&1 | tail -5 \
      | tee $R/skinny_gpu_tests.log
  runs="20261216:16|20|23|40|64|67|76|84 20261217:12|16|36|60|64|91"
else
  runs="20261218:none"
fi
for run in $runs; do
  seed=${run%%:*}; rows=${run#*:}
  mkdir -p $R/gemm-$seed
  timeout 280 python3 -m nova.bench.heldout gemm --count 100 --seed $seed --settle-s 0.4 --graph-settle-s 0.2 \
      --out $R/gemm-$seed 2>&1 | tail -1
  grep -A2 "## Summary" -A3 $R/gemm-$seed/heldout_gemm.md | tail -2
  grep -E "^\| #($rows) " $R/gemm-$seed/heldout_gemm.md | cut -c1-150
done
true
