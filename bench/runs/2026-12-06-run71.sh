#!/bin/bash
# Device run 71 (prepared, not yet run): the third block's code on a GPU.  Cache: `.nova-cache.txz` as
# NOTES "Next steps (2026-12-06, third block)" 1 lists (rebuild with its commands if the code changed).
#   bash bench/runs/2026-12-06-run71.sh tests   every GPU test file (h200 kernels; the counted offline miss,
#                                               the rotary GEMM on Nova); the misses any test recorded come
#                                               back in one file for `nova precompile misses`
#   bash bench/runs/2026-12-06-run71.sh steps   GPT-42M and HF Llama-42M (its rotary angles now on Nova)
#                                               against torch.compile, every launch against its prediction
tar xf .nova-cache.txz
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run71; mkdir -p $R
case "$1" in
  tests)
    rm -rf .nova-cache/misses
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONPATH=. NOVA_TARGET=h200 timeout 540 \
        python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf --durations=15 tests/ \
        > $R/gpu_tests.log 2>&1
    grep -E "^(FAILED|ERROR)|passed|failed|Timeout|timeout" $R/gpu_tests.log | head -30
    [ -d .nova-cache/misses ] && tar cf $R/misses.tar -C .nova-cache misses && tar tf $R/misses.tar | wc -l ;;
  steps)
    bash bench/runs/2026-12-05-run51.sh gpt42m
    case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
      *H100*) T=h100 ;; *) T=h200 ;;
    esac
    export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T PYTHONUNBUFFERED=1
    timeout 90 python3 -m nova.bench.step_kernels --model hf-llama-42m --batch 32 --out $R/hf-llama 2>&1 | grep -v -i warn | head -3
    timeout 150 python3 -m nova.bench.train --all --frameworks compile,nova --model hf-llama-42m --batch 32 \
        --steps 40 --warmup 5 --timeout 130 --out $R/hf-llama 2>&1 | grep -E "^\| |steady|error" | head -8 ;;
esac
