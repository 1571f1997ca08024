#!/bin/bash
# Device run 86: on an H200 first GPT-42M kernel by kernel; then the held-out GEMM draw of seed 20261209 (100
# problems) on the new operand preps (K padded to whole lines, rows off the line priced, the line-pad step).
# Host: `.nova-cache.txz` (GPT-42M b32 h200), `.nova-cache-heldout3.txz` (heldout gemm --seed 20261209 --precompile).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache.txz && rm -rf .nova-cache/misses; tar xf .nova-cache-heldout3.txz
R=$OUT/run86-$T; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1
if [ $T = h200 ]; then
  NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T timeout 110 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 \
      --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
fi
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout3 NOVA_TARGET=$T timeout 330 python3 -m nova.bench.heldout gemm --count 100 \
    --seed 20261209 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -2
grep -A14 "## Summary" $R/heldout_gemm.md | head -16
true
