#!/bin/bash
# Device run 62: what run 61 left unmeasured, on its cache (`.nova-cache.txz`, built by the commands in
# bench/runs/2026-12-05-run61.sh's header on the code of 2026-12-06).
#   bash bench/runs/2026-12-06-run62.sh a   the GELU GEMMs under both consumer schedules (f32, bf16),
#                                          the rows residency probe, the HF GPT-2 bf16 recipe's step
#   bash bench/runs/2026-12-06-run62.sh b   GPT-42M and Llama-42M FP32: every launch against its
#                                          prediction, then the step against torch.compile
#   bash bench/runs/2026-12-06-run62.sh c   the rows, torch.compile-backend and GEMM-epilogue GPU tests
case "$1" in
  a) bash bench/runs/2026-12-05-run61.sh epilogues
     bash bench/runs/2026-12-05-run61.sh residency
     bash bench/runs/2026-12-05-run51.sh hf 2>&1 | grep -v "^\[transformers\]" ;;
  b) bash bench/runs/2026-12-05-run51.sh gpt42m
     bash bench/runs/2026-12-05-run51.sh llama-fp32 ;;
  c) tar xf .nova-cache.txz
     mkdir -p $OUT/run62
     NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONPATH=. NOVA_TARGET=h200 timeout 400 \
         python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf -s \
         tests/test_rows_gpu.py tests/test_integrations_dynamo_gpu.py tests/test_gemm_epilogue_gpu.py \
         > $OUT/run62/gpu_tests.log 2>&1
     grep -E "^(FAILED|ERROR)|passed|failed|steady peak|measured peak" $OUT/run62/gpu_tests.log | head -20 ;;
esac
