#!/bin/bash
# Device run 8 of 2026-12-04: the 12 GiB targets not measured before -- Hugging Face's
# GPT-2 at GPT-144M's sizes, batch 16 x 1024, and GPT-144M at batch 20 (24 does not fit: explain's
# smallest plan is 13.1 GiB), each under memory_budget="12GiB" with the process capped at 12 GiB.
# Host first: nova precompile train hf-gpt2-144m --batch 16 --memory-budget 12GiB --target h200 (with the
# host's and the device's transformers), nova precompile train gpt144m --batch 20 --memory-budget 12GiB.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run8; mkdir -p $R
python3 -m nova.bench.train --framework nova --model hf-gpt2-144m --batch 16 --steps 30 --warmup 5 \
    --memory-budget 12GiB --out $R/hf-gpt2-144m-12GiB 2>&1 | grep -E "steady|peak|error|Error" | head -5
python3 -m nova.bench.train --framework nova --model gpt144m --batch 20 --steps 30 --warmup 5 \
    --memory-budget 12GiB --out $R/gpt144m-b20-12GiB 2>&1 | grep -E "steady|peak|error|Error" | head -5
tar czf $OUT/run8.tgz -C $OUT run8
