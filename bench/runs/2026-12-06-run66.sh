#!/bin/bash
# Device run 66: the H200 checks the day's code waits for, and a fresh held-out draw (seed 20261207,
# never looked at).  Steps run on the plans of the chip the call gets; the draws' predictions and
# kernels are that chip's too (both targets built).
# Host builds:
#   `.nova-cache.txz`: run 63-65's (see their headers) plus
#       nova precompile train gpt144m --batch 24 --memory-budget 12GiB --target h200
#   `.nova-cache-heldout.txz` (tar cf - .nova-cache-heldout | xz -T2 -6 > .nova-cache-heldout.txz):
#       NOVA_CACHE_DIR=$PWD/.nova-cache-heldout python -m nova.bench.heldout gemm --count 100 --seed 20261207 \
#           --precompile --target h200      (then --target h100; then the same with `attention --count 40`)
#   bash bench/runs/2026-12-06-run66.sh steps   GPT-42M and the HF GPT-2 bf16 padded recipe against
#                                              torch.compile (every launch against its prediction), then
#                                              GPT-144M batch 24 inside 12 GiB (an H200's plan)
#   bash bench/runs/2026-12-06-run66.sh gemm    the held-out GEMM draw against cuBLAS and XLA
#   bash bench/runs/2026-12-06-run66.sh attn    the held-out attention draw against torch's SDPA backends,
#                                              then the torch.compile backend against Inductor at b32
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) TARGET=h100 ;; *) TARGET=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
case "$1" in
  steps) bash bench/runs/2026-12-05-run51.sh gpt42m
         bash bench/runs/2026-12-05-run51.sh hf 2>&1 | grep -v "^\[transformers\]"
         if [ $TARGET = h200 ]; then
           R=$OUT/run66; mkdir -p $R
           PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 timeout 100 \
             python3 -m nova.bench.train --framework nova --model gpt144m --memory-budget 12GiB \
             --steps 30 --warmup 5 --timed 10 --repeats 1 --batch 24 --out $R/gpt144m-b24-12GiB 2>&1 \
             | grep -E "steady|peak|error" | head -4
         fi ;;
  gemm|attn)
         tar xf .nova-cache-heldout.txz
         R=$OUT/run66-$TARGET; mkdir -p $R
         PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache-heldout NOVA_TARGET=$TARGET PYTHONUNBUFFERED=1 \
           timeout 330 python3 -m nova.bench.heldout $([ $1 = gemm ] && echo "gemm --count 100" || echo "attention --count 40") \
           --seed 20261207 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -3
         grep -A14 "## Summary" $R/heldout_*.md | head -40
         if [ $1 = attn ]; then
           tar xf .nova-cache.txz
           PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1 timeout 200 \
             python3 -m nova.bench.dynamo_vs_inductor --model gpt42m --batch 32 --steps 10 --settle-s 2 \
             --timed 20 --out $R/dynamo 2>&1 | grep -v "^\[transformers\]" | tail -8
           PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1 timeout 200 \
             python3 -m nova.bench.dynamo_vs_inductor --model llama42m --batch 32 --steps 10 --settle-s 2 \
             --timed 20 --out $R/dynamo-llama 2>&1 | grep -v "^\[transformers\]" | tail -8
           [ -d .nova-cache/misses ] && cp -r .nova-cache/misses $R/ && ls $R/misses | wc -l
         fi ;;
esac
