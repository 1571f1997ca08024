#!/bin/bash
# Device run 9 of 2026-12-04: run 8 again after the budget keeps a headroom for the caching
# allocator (ALLOCATOR_SLACK): GPT-144M at batch 16 and 20, Hugging Face's GPT-2 at GPT-144M's sizes at
# batch 16, each under memory_budget="12GiB" with the process capped at 12 GiB.
# Host first: nova precompile train gpt144m --batch 16|20 --memory-budget 12GiB --target h200; the same for
# hf-gpt2-144m --batch 16 with the host's and the device's transformers.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run9; mkdir -p $R
for spec in "gpt144m 16" "gpt144m 20" "hf-gpt2-144m 16"; do
  set -- $spec
  echo "$1 batch $2:"
  python3 -m nova.bench.train --framework nova --model $1 --batch $2 --steps 30 --warmup 5 \
      --memory-budget 12GiB --out $R/$1-b$2-12GiB 2>&1 | grep -E "steady|peak|error|Error" | head -4
done
tar czf $OUT/run9.tgz -C $OUT run9
