#!/bin/bash
# Device run 70: the descriptor fix (wgmma descriptors or'ed from their masked start; attention ABI 12,
# GEMM ABI 17): the attention GPU tests (the fault's problem among them, float64, NaN-poisoned), then
# run 66's held-out attention draw (seed 20261207) in full.
# Host: NOVA_CACHE_DIR=$PWD/.nova-cache python3 tests/gpu_build.py --all --only test_attention_gpu.py --target h200;
#       the draw's kernels as in run 66's header (attention, h200 and h100).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) TARGET=h100 ;; *) TARGET=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache.txz; tar xf .nova-cache-heldout.txz
R=$OUT/run70-$TARGET; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1
NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 timeout 200 python3 -m pytest -q -n 0 -m gpu --tb=line -rf \
  tests/test_attention_gpu.py > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -12
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout NOVA_TARGET=$TARGET timeout 330 python3 -m nova.bench.heldout attention \
  --count 40 --seed 20261207 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -2
grep -A14 "## Summary" $R/heldout_attention.md | head -18
