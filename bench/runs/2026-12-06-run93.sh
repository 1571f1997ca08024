#!/bin/bash
# Device run 93 (an H200): the fused-kernel targets on the model steps, each framework in its own process.
# GPT-144M b16 x 1024 against torch.compile; Hugging Face GPT-2 42M (op-by-op gelu_new) beside GPT-42M
# (F.gelu) through Nova; the built-in Llama-42M against torch.compile.
# Host: `.nova-cache.txz` (GPU tests, GPT-42M and HF Llama-42M b32 for h200) and `.nova-cache-models.txz`
# (`nova precompile train gpt144m --batch 16`, `hf-gpt2-42m --batch 32`, `llama42m --batch 32`, h200).
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run93; mkdir -p $R
tar xf .nova-cache.txz && tar xf .nova-cache-models.txz && rm -rf .nova-cache/misses
export PYTHONPATH=.:${EXTRA_PYTHONPATH:-} NOVA_OFFLINE=1 PYTHONUNBUFFERED=1 NOVA_TARGET=h200 NOVA_CACHE_DIR=$PWD/.nova-cache
timeout 230 python3 -m nova.bench.train --all --frameworks compile,nova --model gpt144m --batch 16 --steps 30 \
    --warmup 5 --timeout 200 --out $R/gpt144m 2>&1 | grep -E "^\| |steady|rror" | head -8
for m in hf-gpt2-42m gpt42m; do
  timeout 100 python3 -m nova.bench.train --all --frameworks nova --model $m --batch 32 --steps 30 \
      --warmup 5 --timeout 90 --out $R/$m 2>&1 | grep -E "^\| nova|rror" | head -4
done
timeout 160 python3 -m nova.bench.train --all --frameworks compile,nova --model llama42m --batch 32 --steps 30 \
    --warmup 5 --timeout 140 --out $R/llama42m 2>&1 | grep -E "^\| |rror" | head -6
true
