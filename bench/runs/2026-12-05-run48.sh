#!/bin/bash
# Device run 48: held-out draws at the size the generalization targets ask (fresh seed 20261205, never
# tuned on): 100 GEMMs over the three layouts, TF32 and BF16, against the best of cuBLAS and XLA; 40
# attention problems (BF16 and TF32, causal, GQA, ragged, decode, long T) against every torch SDPA
# backend; the configurator's prediction beside every kernel's device time.
# Host builds (their own cache), then `tar cf - .nova-cache-heldout | xz -T2 -6 > .nova-cache-heldout.txz`:
#   export NOVA_CACHE_DIR=$PWD/.nova-cache-heldout
#   python -m nova.bench.heldout gemm --count 100 --seed 20261205 --precompile --target h200
#   python -m nova.bench.heldout attention --count 40 --seed 20261205 --precompile --target h200
#   bash bench/runs/2026-12-05-run48.sh gemm        (then: ... attention)
tar xf .nova-cache-heldout.txz
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache-heldout NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run48; mkdir -p $R
if [ "$1" = gemm ]; then
  timeout 560 python3 -m nova.bench.heldout gemm --count 100 --seed 20261205 --settle-s 0.5 --graph-settle-s 0.3 \
      --out $R 2>&1 | tail -3
else
  timeout 560 python3 -m nova.bench.heldout attention --count 40 --seed 20261205 --settle-s 0.5 --graph-settle-s 0.3 \
      --out $R 2>&1 | tail -3
fi
grep -A14 "## Summary" $R/*.md | head -40
