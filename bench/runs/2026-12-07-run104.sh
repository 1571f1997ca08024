#!/bin/bash
# Device run 104: Hugging Face's GPT-2 at GPT-144M's sizes inside 12 GiB (the process capped), on the plans
# the repriced host offload makes (batch 16: recomputation alone, 11.80 GiB planned; batch 24: see NOTES).
# Host: NOVA_CACHE_DIR=.nova-cache-run104 nova precompile train hf-gpt2-144m --batch B --target h200
# --memory-budget 12GiB for B = 16 and 24 (PYTHONPATH with transformers 5.17); `.nova-cache-run104.txz`.
. bench/runs/device_env.sh run104 .nova-cache-run104
for b in 16 24; do
  mkdir -p $R/hf-gpt2-144m-b$b-12GiB
  NOVA_TARGET=h200 timeout 120 python3 -m nova.bench.train --framework nova --model hf-gpt2-144m --memory-budget 12GiB \
      --steps 30 --warmup 5 --timed 10 --repeats 2 --batch $b --out $R/hf-gpt2-144m-b$b-12GiB 2>&1 \
      | grep -E "^\| nova|rror|peak|memory" | head -5
done
true
