#!/bin/bash
# Device run 100.  Phase "a": HF Llama-42M b32 under the fast policy, the lean policy with the host
# offload priced at its measured toll (it now recomputes instead: 3 SwiGLU products, no copies) and
# under a 5.05 GiB budget (Liger Kernel's 5.46 GB peak is 5.08 GiB: 3 loss chunks, 4 SwiGLU products
# recomputed), then the lean policy again (the first and last bracket the clock); GPT-42M b32 lean and
# fast.  Phase "b": a fresh GEMM draw (seed 20261215, never measured) with the shifted columns on.
# Host (NOVA_CACHE_DIR=.nova-cache-run100, PYTHONPATH with transformers 5.17), `.nova-cache-run100.txz`:
# `nova precompile train hf-llama-42m --batch 32 --target h200` (default, NOVA_MEMORY_POLICY=fast,
# --memory-budget 5.05GiB), `nova precompile train gpt42m --batch 32 --target h200` (default and fast);
# for T = h200 and h100: `nova.bench.heldout gemm --count 100 --seed 20261215 --precompile --target T`.
. bench/runs/device_env.sh run100 .nova-cache-run100
train() {   # $1: model, $2: folder suffix, then the environment's and the benchmark's extra settings
  local model=$1 name=$2; shift 2
  mkdir -p $R/$model-$name
  env NOVA_TARGET=h200 "$@" timeout 110 python3 -m nova.bench.train --all --frameworks nova --model $model \
      --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 3 --timeout 100 --out $R/$model-$name \
      ${BUDGET:+--memory-budget $BUDGET --no-memory-cap} 2>&1 | grep -E "^\| nova|rror|peak" | head -4
}
if [ "$1" = a ]; then
  train hf-llama-42m fast NOVA_MEMORY_POLICY=fast
  train hf-llama-42m lean NOVA_MEMORY_POLICY=lean
  BUDGET=5.05GiB train hf-llama-42m budget NOVA_MEMORY_POLICY=lean
  train hf-llama-42m lean2 NOVA_MEMORY_POLICY=lean
  train gpt42m lean NOVA_MEMORY_POLICY=lean
  train gpt42m fast NOVA_MEMORY_POLICY=fast
fi
if [ "$1" = b ]; then
  mkdir -p $R/fresh
  timeout 300 python3 -m nova.bench.heldout gemm --count 100 --seed 20261215 --settle-s 0.4 --graph-settle-s 0.2 \
      --out $R/fresh 2>&1 | tail -1
  grep -A14 "## Summary" $R/fresh/heldout_gemm.md | head -16
fi
true
