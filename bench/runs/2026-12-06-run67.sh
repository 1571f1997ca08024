#!/bin/bash
# Device run 67: run 66's attention draw stopped at #14 (GQA B1 H4/2 T3105 D64 bf16) with an
# asynchronous CUDA error: that problem alone, Nova and each SDPA backend in its own process, launches
# synchronous; then the kernels the torch.compile backend's Llama-42M graphs missed (recorded in the
# cache's misses/, brought back in one file for `nova precompile misses`).
tar xf .nova-cache.txz; tar xf .nova-cache-heldout.txz
R=$OUT/run67; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 CUDA_LAUNCH_BLOCKING=1
for who in nova flash cudnn efficient math; do
  NOVA_CACHE_DIR=$PWD/.nova-cache-heldout timeout 60 python3 bench/probes/attention_one.py 1 4 2 3105 64 bf16 full $who 2>&1 \
    | grep -v Warning | tail -4
done
unset CUDA_LAUNCH_BLOCKING
rm -rf .nova-cache/misses
NOVA_CACHE_DIR=$PWD/.nova-cache timeout 200 python3 -m nova.bench.dynamo_vs_inductor --model llama42m --batch 32 --steps 3 \
  --settle-s 0 --timed 2 --out $R/dynamo-llama 2>&1 | grep -i -E "nova:|fell back|on torch" | cut -c1-600 | head -6
tar cf $R/misses.tar -C .nova-cache misses && tar tf $R/misses.tar | wc -l
