#!/bin/bash
# Device run 6 of 2026-12-04: the GPU tests after the executor's bind refactor; the step
# clock (step_kernels now samples the SM clock beside the prediction); HF Llama-42M at
# NOVA_MEMORY_POLICY=0.015 against Liger's 5.46 GB; GPT-144M under the default policy.
# The column stage loads several rows before adding them (ColumnTile.unroll).
# Host first: bash bench/runs/2026-12-04-run6-build.sh (writes .nova-cache.tgz; carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
RUN=${RUN:-run6}                 # the results folder (run 7 ran these steps again: RUN=run7)
R=$OUT/$RUN; mkdir -p $R
PART=${1:-all}
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
S="--steps 50 --warmup 5"
if [ "$PART" = all ] || [ "$PART" = a ]; then
  T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
  timeout 330 python3 -m pytest $T tests/test_rows_gpu.py tests/test_executor_gpu.py tests/test_pointwise_indexing_gpu.py \
      tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
      > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed|^/|Error" $R/gpu_tests.log | head -30
  for m in gpt42m llama42m; do
    timeout 100 python3 -m nova.bench.step_kernels --model $m --batch 32 --out $R 2>&1 | head -6
  done
fi
if [ "$PART" = all ] || [ "$PART" = b ]; then
  python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 $S --timeout 300 \
      --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
  NOVA_MEMORY_POLICY=0.015 python3 -m nova.bench.train --framework nova --model hf-llama-42m --batch 32 $S \
      --out $R/hf-llama-42m-0.015 2>&1 | grep -E "steady|peak|error"
  python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 --steps 30 --warmup 5 \
      --out $R/gpt144m 2>&1 | grep -E "steady|peak|error"
fi
tar czf $OUT/$RUN-$PART.tgz -C $OUT $RUN
