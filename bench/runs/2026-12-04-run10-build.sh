#!/bin/bash
# Host: the kernels of device run 10 of 2026-12-04 (the bias gradients fused with both GELU spellings'
# backward; rows tanh through e^2x): the rows/executor/HF GPU tests' kernels, GPT-42M and HF GPT-2 42M
# (the host's and the device's transformers), into .nova-cache, then .nova-cache.tgz.
set -u
export NOVA_CACHE_DIR=$PWD/.nova-cache
python tests/test_rows_gpu.py --target h200 | grep "^nova precompile" | sh
python3 tests/test_executor_gpu.py --target h200 | sh
python tests/test_pointwise_indexing_gpu.py --target h200
PYTHONPATH=${TF517:-/tmp/tf517} python tests/test_pointwise_indexing_gpu.py --target h200
nova precompile train gpt42m --target h200
nova precompile train hf-gpt2-42m --target h200
PYTHONPATH=${TF517:-/tmp/tf517} nova precompile train hf-gpt2-42m --target h200
tar czf .nova-cache.tgz .nova-cache && ls -la .nova-cache.tgz
