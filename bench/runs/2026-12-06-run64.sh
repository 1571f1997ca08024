#!/bin/bash
# Device run 64: the torch.compile backend against Inductor at GPT-42M batch 32 with the backward's
# gradients in the donated saved tensors, then, on an H200, the GPT-42M and HF GPT-2 bf16 steps.
# Cache: run 63's plus `python3 -m nova.bench.dynamo_vs_inductor --precompile --target h200 --model gpt42m
# --batch 32 --cache-dir .nova-cache` on this code.
#   bash bench/runs/2026-12-06-run64.sh
tar xf .nova-cache.txz
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONUNBUFFERED=1
R=$OUT/run64; mkdir -p $R
NOVA_TARGET=h200 timeout 240 python3 -m nova.bench.dynamo_vs_inductor --model gpt42m --batch 32 --steps 10 --settle-s 2 \
    --timed 20 --out $R/dynamo 2>&1 | grep -v "^\[transformers\]" | tail -8
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) bash bench/runs/2026-12-06-run63.sh steps ;;
esac
