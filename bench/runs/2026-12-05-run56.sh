#!/bin/bash
# Device run 56: the GEMM epilogue that loads bias and R of four column blocks before their stores
# (GEMM ABI 13), never run before: its GPU tests, then the steps of run 51 against its prediction.
# Cache: `.nova-cache.txz` (run 51's header; `tests/gpu_build.py --all --target h200` + the step plans).
#   bash bench/runs/2026-12-05-run56.sh check    the epilogue's GPU tests, then GPT-42M's step
#   bash bench/runs/2026-12-05-run56.sh llama    Llama-42M FP32 and bf16 steps
tar xf .nova-cache.t*z
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONUNBUFFERED=1
R=$OUT/run56; mkdir -p $R
if [ "$1" = check ]; then
  NOVA_TARGET=h200 timeout 240 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf \
      tests/test_gemm_epilogue_gpu.py tests/test_executor_gpu.py tests/test_compile_gpu.py \
      > $R/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -14
  bash bench/runs/2026-12-05-run51.sh gpt42m
else
  bash bench/runs/2026-12-05-run51.sh llama
fi
