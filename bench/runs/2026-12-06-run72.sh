#!/bin/bash
# Device run 72: the embedding accumulate's (lanes + 1)-ary segment search on a GPU, and the step's
# memory-bound kernels counted kernel by kernel.  Cache: `.nova-cache.txz` (gitignored) with the
# embedding GPU test file's kernels and the GPT-42M and HF Llama-42M b32 steps for h200 and h100.
#   bash bench/runs/2026-12-06-run72.sh    the embedding GPU tests, then GPT-42M (every launch, each kernel
#                                          of a multi-kernel launch, the step against torch.compile) and
#                                          HF Llama-42M (every launch), on the plans of the chip that comes
tar xf .nova-cache.txz
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run72-$T; mkdir -p $R
NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONPATH=. NOVA_TARGET=h200 timeout 150 \
    python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=short -rf tests/test_embedding_gpu.py > $R/gpu_tests.log 2>&1
tail -3 $R/gpu_tests.log
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T PYTHONUNBUFFERED=1
timeout 90 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
timeout 150 python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 40 \
    --warmup 5 --timeout 130 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
timeout 90 python3 -m nova.bench.step_kernels --model hf-llama-42m --batch 32 --out $R/hf-llama 2>&1 | grep -v -i warn | head -5
