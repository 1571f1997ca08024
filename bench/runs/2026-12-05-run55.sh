#!/bin/bash
# Device run 55: a fresh held-out GEMM draw (seed 20261206, never looked at before the skinny kernel's
# tail and column-block changes were made on seed 20261205's draw): 100 GEMMs over the three layouts,
# TF32 and BF16, against the best of cuBLAS and XLA.
# Host builds (into the held-out cache, beside seed 20261205's kernels), then xz it:
#   NOVA_CACHE_DIR=$PWD/.nova-cache-heldout python -m nova.bench.heldout gemm --count 100 --seed 20261206 --precompile --target h200
#   bash bench/runs/2026-12-05-run55.sh
tar xf .nova-cache-heldout.txz
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache-heldout NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run55; mkdir -p $R
timeout 330 python3 -m nova.bench.heldout gemm --count 100 --seed 20261206 --settle-s 0.5 --graph-settle-s 0.3 \
    --out $R 2>&1 | tail -3
grep -A14 "## Summary" $R/*.md | head -20
