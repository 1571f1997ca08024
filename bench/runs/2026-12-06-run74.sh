#!/bin/bash
# Device run 74: the skinny kernel's K split in whole waves, on a GPU.
#   `.nova-cache-probe.txz`: NOVA_CACHE_DIR=$PWD/.nova-cache-probe python3 bench/probes/skinny_width.py --build
#   `.nova-cache-heldout2.txz`: for t in h100 h200; do NOVA_CACHE_DIR=$PWD/.nova-cache-heldout2 \
#       python3 -m nova.bench.heldout gemm --seed 20261208 --precompile --target $t; done
#   bash bench/runs/2026-12-06-run74.sh    the width probe (each width under the new split rule), then a fresh
#                                          held-out GEMM draw (seed 20261208, never looked at) against cuBLAS and XLA
tar xf .nova-cache-probe.txz; tar xf .nova-cache-heldout2.txz
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run74-$T; mkdir -p $R
NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache-probe PYTHONPATH=. timeout 120 python3 bench/probes/skinny_width.py \
    2>&1 | grep -v -i warn > $R/skinny_width.txt; grep -c " us " $R/skinny_width.txt
PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache-heldout2 NOVA_TARGET=$T PYTHONUNBUFFERED=1 \
    timeout 330 python3 -m nova.bench.heldout gemm --count 100 --seed 20261208 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -3; grep -A14 "## Summary" $R/heldout_gemm.md | head -30
