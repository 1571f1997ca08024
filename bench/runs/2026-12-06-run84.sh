#!/bin/bash
# Device run 84: on an H200, GPT-42M kernel by kernel (the memory-bound kernels against 85% of the DRAM roofline);
# on either card, who allocates the chunked-loss step's warm-up transient (bench/probes/chunked_loss_memory.py),
# then the held-out attention draw never measured (seed 20261209, 40 problems, every torch SDPA backend).
# Host: `.nova-cache.txz` (GPU tests' kernels for h200; GPT-42M b32 for h200/h100), `.nova-cache-heldout3.txz`.
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache.txz && rm -rf .nova-cache/misses; tar xf .nova-cache-heldout3.txz
R=$OUT/run84-$T; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1
if [ $T = h200 ]; then
  NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T timeout 100 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 \
      --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
fi
NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 timeout 60 python3 bench/probes/chunked_loss_memory.py \
    > $R/chunked_loss_memory.txt 2>&1
grep -v -i warn $R/chunked_loss_memory.txt | head -60
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout3 NOVA_TARGET=$T timeout 240 python3 -m nova.bench.heldout attention --count 40 \
    --seed 20261209 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -2
grep -A14 "## Summary" $R/heldout_attention.md | head -16
