#!/bin/bash
# Device run 37 of 2026-12-04: the pointwise model's transposed stores (RoPE's backward) checked on
# fresh measurements: every launch of Llama-42M and Hugging Face Llama-42M (transformers 5.17, the
# device's) timed one by one.  No kernels beyond run 31's cache.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run37; mkdir -p $R
for m in llama42m hf-llama-42m; do
  timeout 100 python3 -m nova.bench.step_kernels --model $m --batch 32 --out $R 2>&1 | grep -v -i warn \
      > $R/step_kernels-$m.txt; head -3 $R/step_kernels-$m.txt; grep -E "3 in, 1 out" $R/step_kernels-$m.txt | head -3
done
