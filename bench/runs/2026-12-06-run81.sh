#!/bin/bash
# Device run 81: held-out draws never looked at (seed 20261209): 100 GEMMs (decode, square, deep-K, general; TF32 and
# BF16; NN, NT, TN) against cuBLAS and XLA, then 40 attention problems against every torch SDPA backend, each kernel
# with its prediction.  Host: for t in h200 h100; do NOVA_CACHE_DIR=$PWD/.nova-cache-heldout3 python3 -m nova.bench.heldout
#   gemm --seed 20261209 --precompile --target $t; ... attention --count 40 --seed 20261209 --precompile --target $t; done
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache-heldout3.txz
R=$OUT/run81-$T; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache-heldout3 NOVA_TARGET=$T PYTHONUNBUFFERED=1
timeout 320 python3 -m nova.bench.heldout gemm --count 100 --seed 20261209 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -2
grep -A14 "## Summary" $R/heldout_gemm.md | head -16
timeout 230 python3 -m nova.bench.heldout attention --count 40 --seed 20261209 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -2
grep -A14 "## Summary" $R/heldout_attention.md | head -16
