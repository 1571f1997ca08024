#!/bin/bash
# Device run 30 of 2026-12-04: the fused cross-entropy kernel in the steps: Llama-42M's and GPT-144M's
# launches timed one by one; GPT-42M's step against torch.compile in the same call (throughput, peak).
# Host first: as run 29 (and nova precompile train gpt144m --batch 16 --target h200).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run30; mkdir -p $R
for spec in "llama42m" "gpt144m --batch 16"; do
  set -- $spec; m=$1; shift
  timeout 150 python3 -m nova.bench.step_kernels --model $m --batch 32 "$@" --out $R 2>&1 | grep -v -i warn \
      > $R/step_kernels-$m.txt; head -4 $R/step_kernels-$m.txt; grep -i cross $R/step_kernels-$m.txt | head -3
done
python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 50 --warmup 5 \
    --timeout 200 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
