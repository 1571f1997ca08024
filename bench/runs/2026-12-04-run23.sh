#!/bin/bash
# Device run 23 of 2026-12-04: the memory-bound families' calibration refitted to kernel durations
# (h200.stream.json, eta_dram 0.875 from run 22's CUPTI times), checked on fresh measurements: every
# launch of GPT-42M and Llama-42M (the models it was fitted on) and of GPT-144M b16 and Hugging Face
# Llama-42M (not in the fit); GPT-42M's step against torch.compile and GPT-144M's under the default
# policy, whose plans recompute one more LayerNorm output at the new prices.
# Host first: the kernels of these plans into .nova-cache (nova precompile train ...), then .nova-cache.tgz.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run23; mkdir -p $R
for spec in "gpt42m" "llama42m" "gpt144m --batch 16" "hf-llama-42m"; do
  set -- $spec; m=$1; shift
  timeout 150 python3 -m nova.bench.step_kernels --model $m --batch 32 "$@" --out $R 2>&1 | grep -v -i warn \
      > $R/step_kernels-$m.txt; head -4 $R/step_kernels-$m.txt
done
python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 50 --warmup 5 \
    --timeout 200 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
timeout 150 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 --steps 30 --warmup 5 --timed 20 \
    --repeats 3 --out $R/gpt144m-b16 2>&1 | grep -E "steady|peak|error"
