#!/bin/bash
# Device run 91.  Phase "step" (an H200): GPT-42M kernel by kernel, its step against torch.compile at the
# default memory policy (host offload), Hugging Face Llama-42M's default-policy step and measured peak.
# Phase "memory" (either card): the same two default-policy steps' measured peaks (the H200's plans).
# Phase "gemm" (either card): a fresh held-out GEMM draw (seed 20261213) and split-K through a workspace
# kernel by kernel (main kernel against reduction, L2 flushed) on the draws of seeds 20261211/12.
# Host: `.nova-cache.txz` (GPU tests, GPT-42M and HF Llama-42M b32 for h200), `.nova-cache-heldout7.txz`
# (heldout gemm --seed 20261213 --precompile, h100 and h200), `.nova-cache-splitk.txz` (the caches of
# seeds 20261211 and 20261212 merged).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run91-$T; mkdir -p $R
export PYTHONPATH=.:${EXTRA_PYTHONPATH:-} NOVA_OFFLINE=1 PYTHONUNBUFFERED=1 NOVA_TARGET=$T
if [ "$1" = step ] && [ $T = h200 ]; then
  tar xf .nova-cache.txz && rm -rf .nova-cache/misses
  export NOVA_CACHE_DIR=$PWD/.nova-cache
  timeout 110 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
  timeout 170 python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 40 \
      --warmup 5 --timeout 150 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
  timeout 150 python3 -m nova.bench.train --all --frameworks nova --model hf-llama-42m --batch 32 --steps 40 \
      --warmup 5 --timeout 130 --out $R/hf-llama-42m 2>&1 | grep -E "^\| |steady|error|peak" | head -8
fi
if [ "$1" = memory ]; then       # either card: the H200's default plans (their peaks are the plan's, not the card's)
  tar xf .nova-cache.txz && rm -rf .nova-cache/misses
  export NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200
  for m in gpt42m hf-llama-42m; do
    timeout 140 python3 -m nova.bench.train --all --frameworks nova --model $m --batch 32 --steps 40 \
        --warmup 5 --timeout 120 --out $R/$m-memory 2>&1 | grep -E "^\| |steady|error|peak" | head -8
  done
fi
if [ "$1" = gemm ]; then
  tar xf .nova-cache-heldout7.txz; tar xf .nova-cache-splitk.txz
  mkdir -p $R/fresh
  NOVA_CACHE_DIR=$PWD/.nova-cache-heldout7 timeout 240 python3 -m nova.bench.heldout gemm --count 100 \
      --seed 20261213 --settle-s 0.5 --graph-settle-s 0.3 --out $R/fresh 2>&1 | tail -2
  grep -A14 "## Summary" $R/fresh/heldout_gemm.md | head -16
  export NOVA_CACHE_DIR=$PWD/.nova-cache-splitk
  mkdir -p $R/splitk-tf32 $R/splitk-bf16
  timeout 80 python3 -m nova.bench.kernel_profile --dtypes tf32 --flush-l2 256 --reps 20 --out $R/splitk-tf32 \
      --shapes 320x1984x49216,1984x320x22592:TN,1216x640x40960:TN,384x384x23488:NT,832x320x11136:NT,832x320x14976:NT,256x1152x25408:NT,1664x576x14656:TN,1344x704x8320:NT \
      2>&1 | grep -v -i warn | tail -60
  timeout 60 python3 -m nova.bench.kernel_profile --dtypes bf16 --flush-l2 256 --reps 20 --out $R/splitk-bf16 \
      --shapes 256x640x36352,384x1024x25920:NT,345x283x21742:TN,1088x320x42304,448x896x44224:NT,1536x768x9856:TN \
      2>&1 | grep -v -i warn | tail -40
fi
true
