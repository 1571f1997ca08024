#!/bin/bash
# Host: the sm_80 kernels (target a100: mma.sync GEMMs and attention, the SIMT families at the A100's
# configuration) of the executor's, rows, pointwise-indexing, optimizer and clipping GPU tests and of
# GPT-42M's training step, into .nova-cache, then .nova-cache.tgz.  The H200 loads them from their PTX.
set -u
export NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=a100
python tests/test_rows_gpu.py --target a100 | grep "^nova precompile" | sh
python3 tests/test_executor_gpu.py --target a100 | sh
python tests/test_pointwise_indexing_gpu.py --target a100
PYTHONPATH=${TF517:-/tmp/tf517} python tests/test_pointwise_indexing_gpu.py --target a100   # the device's transformers
python tests/test_clipping_gpu.py --target a100
python tests/test_optimizer_gpu.py --target a100
nova precompile train gpt42m --target a100
tar czf .nova-cache.tgz .nova-cache && ls -la .nova-cache.tgz
