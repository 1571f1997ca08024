#!/bin/bash
# Host: every kernel device run 3 of 2026-12-04 needs, into .nova-cache, then .nova-cache.tgz (carried).
set -u
export NOVA_CACHE_DIR=$PWD/.nova-cache
PART=${1:-all}
if [ "$PART" = all ] || [ "$PART" = tests ]; then
  python tests/test_rows_gpu.py --target h200 | grep "^nova precompile" | sh
  python3 tests/test_executor_gpu.py --target h200 | sh
  python tests/test_pointwise_indexing_gpu.py --target h200
  python tests/test_clipping_gpu.py --target h200
  python tests/test_optimizer_gpu.py --target h200
  python3 tests/test_skinny_gpu.py --target h200 --build
  python -m nova.bench.heldout gemm --count 30 --seed 20261204 --precompile --target h200
  python -m nova.bench.heldout attention --count 20 --seed 20261204 --precompile --target h200
fi
if [ "$PART" = all ] || [ "$PART" = steps ]; then
  for m in "gpt42m" "gpt42m --clip-grad-norm 1.0" "llama42m" "hf-gpt2-42m --autocast bf16 --padded --clip-grad-norm 1.0"; do
    nova precompile train $m --target h200
  done
  python3 -m nova.bench.dynamo_vs_inductor --precompile --target h200 --model gpt42m --batch 32 --cache-dir .nova-cache
  python3 tests/test_integrations_dynamo_gpu.py --target h200 --build --cache-dir .nova-cache
fi
tar czf .nova-cache.tgz .nova-cache && ls -la .nova-cache.tgz
