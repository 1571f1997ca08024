#!/bin/bash
# Device run 51: the model steps against torch.compile that runs 45 and 49 could not reach, on the
# cache rebuilt for them (`.nova-cache.txz`; run 45's header builds it).  Steps run on the plans of the
# chip the call gets.
#   bash bench/runs/2026-12-05-run51.sh steps     GPT-42M, Llama-42M FP32 and bf16: every launch against
#                                                its prediction, then the step against torch.compile
#   bash bench/runs/2026-12-05-run51.sh gpt42m    (or llama, llama-fp32, hf): one part of `steps` / `more`
#   bash bench/runs/2026-12-05-run51.sh more      the HF GPT-2-42M bf16 padded recipe, GPT-144M batch 24
#                                                inside 12 GiB (an H200's plan; an H100 refuses it)
tar xf .nova-cache.t*z
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) STEP_TARGET=h200 ;; *H100*) STEP_TARGET=h100 ;; *) STEP_TARGET=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$STEP_TARGET PYTHONUNBUFFERED=1
R=$OUT/run51-$STEP_TARGET; mkdir -p $R
step() {   # step <name> <model args...>: every launch against its prediction, then the step vs torch.compile
  local name=$1; shift
  timeout 90 python3 -m nova.bench.step_kernels --model "$@" --batch 32 --out $R/$name 2>&1 | grep -v -i -e warn -e "^\[transformers\]" | head -3
  timeout 150 python3 -m nova.bench.train --all --frameworks compile,nova --model "$@" \
      --batch 32 --steps 40 --warmup 5 --timeout 130 --out $R/$name 2>&1 | grep -E "^\| |steady|error" | head -8
}
if [ "$1" = steps ] || [ "$1" = gpt42m ]; then
  step gpt42m gpt42m
fi
if [ "$1" = steps ] || [ "$1" = llama ] || [ "$1" = llama-fp32 ]; then
  step llama42m llama42m
fi
if [ "$1" = steps ] || [ "$1" = llama ]; then
  step llama42m-bf16 llama42m --autocast bf16
fi
if [ "$1" = more ] || [ "$1" = hf ]; then
  step hf-gpt2-bf16 hf-gpt2-42m --autocast bf16 --padded --clip-grad-norm 1.0
fi
if [ "$1" = more ]; then
  timeout 100 python3 -m nova.bench.train --framework nova --model gpt144m --memory-budget 12GiB \
      --steps 30 --warmup 5 --timed 10 --repeats 1 --batch 24 --out $R/gpt144m-b24-12GiB 2>&1 | grep -E "steady|peak|error" | head -4
fi
rm -f $R/*/summary-*
