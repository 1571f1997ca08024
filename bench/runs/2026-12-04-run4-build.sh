#!/bin/bash
# Host: every kernel device run 4 of 2026-12-04 needs (the default memory policy's plans, the fast
# plans beside them, the backend's steady state, the GPU tests), into .nova-cache, then .nova-cache.tgz.
set -u
export NOVA_CACHE_DIR=$PWD/.nova-cache
PART=${1:-all}
if [ "$PART" = all ] || [ "$PART" = tests ]; then
  python tests/test_rows_gpu.py --target h200 | grep "^nova precompile" | sh
  python3 tests/test_executor_gpu.py --target h200 | sh
  python tests/test_pointwise_indexing_gpu.py --target h200
  python tests/test_clipping_gpu.py --target h200
  python tests/test_frontend_real_scripts.py --target h200
  python tests/test_optimizer_gpu.py --target h200
  python3 tests/test_integrations_dynamo_gpu.py --target h200 --build --cache-dir .nova-cache
fi
if [ "$PART" = all ] || [ "$PART" = steps ]; then
  for m in "gpt42m" "llama42m" "hf-llama-42m" "hf-gpt2-42m --autocast bf16 --padded --clip-grad-norm 1.0"; do
    nova precompile train $m --target h200                               # lean (the default policy)
    NOVA_MEMORY_POLICY=fast nova precompile train $m --target h200       # the fastest plan, for the comparison
  done
  for m in gpt42m llama42m; do
    python3 -m nova.bench.dynamo_vs_inductor --precompile --target h200 --model $m --batch 32 --cache-dir .nova-cache
  done
fi
if [ "$PART" = all ] || [ "$PART" = hf517 ]; then     # the device's transformers (5.17, hub 1.33): its HF graphs
  PYTHONPATH=${TF517:-/tmp/tf517} python tests/test_pointwise_indexing_gpu.py --target h200
  PYTHONPATH=${TF517:-/tmp/tf517} nova precompile train hf-llama-42m --target h200
fi
tar czf .nova-cache.tgz .nova-cache && ls -la .nova-cache.tgz
