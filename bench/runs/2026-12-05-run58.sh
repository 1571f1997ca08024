#!/bin/bash
# Device runs 58-59: the TMA-store epilogue with R and P (GEMM ABI 14, then 15: R prefetched into L2) -- the GELU / residual GEMMs that
# run 57 measured at 1.6-3x their predictions through the register epilogue.  Host builds:
#   NOVA_CACHE_DIR=$PWD/.nova-cache python tests/gpu_build.py --all --target h200
#   nova precompile train gpt42m | llama42m | llama42m --autocast bf16 --batch 32 --target h100 (same cache)
#   PYTHONPATH=<transformers 5.17> nova precompile train hf-gpt2-42m --autocast bf16 --padded --clip-grad-norm 1.0 --batch 32 --target h100
#   NOVA_CACHE_DIR=/tmp/exp57/new nova precompile gemm --suite bench/runs/2026-12-05-run57-suite.json --target h100 --dtype bf16,tf32
#   then .nova-cache.txz (tar cJf) and .nova-cache-exp58.txz (-C /tmp/exp57 new)
#   bash bench/runs/2026-12-05-run58.sh first     the GEMM/executor/compile GPU tests, run 57's probe on the new kernels, GPT-42M's step
#   bash bench/runs/2026-12-05-run58.sh second    the HF GPT-2 bf16 padded recipe, Llama-42M FP32
tar xf .nova-cache.t*z
mkdir -p exp57 && tar xf .nova-cache-exp58.txz -C exp57
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1
R=$OUT/run58; mkdir -p $R
if [ "$1" = first ]; then
  NOVA_TARGET=h200 NOVA_CACHE_DIR=$PWD/.nova-cache timeout 200 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf \
      tests/test_gemm_epilogue_gpu.py tests/test_executor_gpu.py tests/test_compile_gpu.py > $R/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -14
  NOVA_TARGET=h100 NOVA_CACHE_DIR=$PWD/exp57/new timeout 100 python3 bench/runs/2026-12-05-run57-epilogues.py new-ppauto $R 2>&1 | grep -v -i warn
  bash bench/runs/2026-12-05-run51.sh gpt42m
else
  bash bench/runs/2026-12-05-run51.sh hf 2>&1 | grep -v "^\[transformers\]"
  bash bench/runs/2026-12-05-run51.sh llama-fp32
fi
