#!/bin/bash
# Device run 90: on an H200 first GPT-42M kernel by kernel; then a fresh held-out GEMM draw (seed 20261212), then the
# draw of seed 20261211 again (the decode ones at M >= 5 on the tiles where the skinny model now says so).
# Host: `.nova-cache.txz` (GPT-42M b32 h200), `.nova-cache-heldout5.txz` (heldout gemm --seed 20261211
# --precompile, h100 and h200), `.nova-cache-heldout6.txz` (the same for seed 20261212).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache.txz && rm -rf .nova-cache/misses; tar xf .nova-cache-heldout5.txz; tar xf .nova-cache-heldout6.txz
R=$OUT/run90-$T; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1
if [ $T = h200 ]; then
  NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T timeout 110 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 \
      --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
fi
mkdir -p $R/fresh
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout6 NOVA_TARGET=$T timeout 230 python3 -m nova.bench.heldout gemm --count 100 \
    --seed 20261212 --settle-s 0.5 --graph-settle-s 0.3 --out $R/fresh 2>&1 | tail -2
grep -A14 "## Summary" $R/fresh/heldout_gemm.md | head -16
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout5 NOVA_TARGET=$T timeout 230 python3 -m nova.bench.heldout gemm --count 100 \
    --seed 20261211 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -2
grep -A14 "## Summary" $R/heldout_gemm.md | head -16
true
