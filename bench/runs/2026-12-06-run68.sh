#!/bin/bash
# Device run 68: where the Hopper attention forward's illegal address comes from (run 67: B1 H4/2
# T3105 D64 bf16, non-causal): Nova's forward alone on neighbours of that problem (GQA or not, T a
# multiple of the tile or not, D128, B2), each in its own process, launches synchronous; then the
# torch.compile backend's Llama-42M against Inductor with the kernels its graphs missed in run 67
# (built by `nova precompile misses`).
tar xf .nova-cache.txz; tar xf .nova-cache-heldout.txz
R=$OUT/run68; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1
while read B H HKV T D; do
  echo "== B$B H$H/$HKV T$T D$D: $(CUDA_LAUNCH_BLOCKING=1 NOVA_CACHE_DIR=$PWD/.nova-cache-heldout timeout 60 \
     python3 bench/probes/attention_one.py $B $H $HKV $T $D bf16 full nova-fwd 2>&1 | tail -1 | cut -c1-220)"
done < bench/runs/2026-12-06-run68-cases.txt
rm -rf .nova-cache/misses
NOVA_CACHE_DIR=$PWD/.nova-cache timeout 240 python3 -m nova.bench.dynamo_vs_inductor --model llama42m --batch 32 --steps 10 \
  --settle-s 2 --timed 20 --out $R/dynamo-llama 2>&1 | grep -v "^\[transformers\]" | tail -6
ls .nova-cache/misses 2>/dev/null | wc -l
