#!/bin/bash
# Device run 63: run 62's parts on the code with the attention's own masked-row rule (attention ABI 11),
# the cache rebuilt for it (`.nova-cache.txz`: run 61's build plus, on this code,
#   nova precompile train gpt42m | llama42m --batch 32 --target h200|h100, the HF GPT-2 bf16 padded recipe,
#   PYTHONPATH=<transformers 5.17>:. python3 tests/gpu_build.py --all --only test_rows_gpu.py \
#       test_integrations_dynamo_gpu.py test_gemm_epilogue_gpu.py test_attention_mask_gpu.py --target h200)
#   bash bench/runs/2026-12-06-run63.sh steps   GPT-42M and the HF GPT-2 bf16 padded recipe: every launch
#                                              against its prediction, then the step against torch.compile
#   bash bench/runs/2026-12-06-run63.sh tests   the masked-attention, rows, backend and GEMM-epilogue GPU tests,
#                                              then the GELU GEMMs under both consumer schedules
#   bash bench/runs/2026-12-06-run63.sh more    Llama-42M FP32 against torch.compile, the rows residency probe
case "$1" in
  steps) bash bench/runs/2026-12-05-run51.sh gpt42m
         bash bench/runs/2026-12-05-run51.sh hf 2>&1 | grep -v "^\[transformers\]" ;;
  tests) tar xf .nova-cache.txz
         mkdir -p $OUT/run63
         NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONPATH=. NOVA_TARGET=h200 timeout 330 \
             python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf -s tests/test_attention_mask_gpu.py \
             tests/test_rows_gpu.py tests/test_integrations_dynamo_gpu.py tests/test_gemm_epilogue_gpu.py \
             > $OUT/run63/gpu_tests.log 2>&1
         grep -E "^(FAILED|ERROR)|passed|failed|steady peak|measured peak" $OUT/run63/gpu_tests.log | head -20
         bash bench/runs/2026-12-05-run61.sh epilogues ;;
  more)  bash bench/runs/2026-12-05-run51.sh llama-fp32
         bash bench/runs/2026-12-05-run61.sh residency ;;
esac
