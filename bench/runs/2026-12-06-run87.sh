#!/bin/bash
# Device run 87: on an H200 first GPT-42M kernel by kernel; then, CUPTI kernel by kernel, the large odd problems
# of run 86's draw still 18-27% under their predictions with K padded to whole lines, each beside its M/N-rounded
# neighbour, and two aligned problems as the control (bench/probes/odd_alignment.py --large).
# Host: `.nova-cache.txz` (GPT-42M b32 h200), `.nova-cache-probe3.txz` (odd_alignment.py --large --build).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache.txz && rm -rf .nova-cache/misses; tar xf .nova-cache-probe3.txz
R=$OUT/run87-$T; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1
if [ $T = h200 ]; then
  NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T timeout 110 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 \
      --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
fi
NOVA_CACHE_DIR=$PWD/.nova-cache-probe3 NOVA_TARGET=$T OUT=$R timeout 150 python3 bench/probes/odd_alignment.py --large \
    > $R/odd_large.txt 2>&1
grep -v -i warn $R/odd_large.txt | grep -v "^ *[0-9.]* us x[0-9]* *void" | head -70
true
