#!/bin/bash
# Device run 10 of 2026-12-04: the bias gradients fused with GELU's backward (F.gelu's
# gelu_tanh_backward and the op-by-op tanh_backward chain); the rows kernels' tanh through e^2x.
# GPU tests of the rows kernels, compiled tiny steps and the HF models; GPT-42M's kernels one by one;
# GPT-42M and HF GPT-2 42M through nova.compile.
# Host first: bash bench/runs/2026-12-04-run10-build.sh (writes .nova-cache.tgz; carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run10; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 200 python3 -m pytest $T tests/test_rows_gpu.py tests/test_executor_gpu.py tests/test_pointwise_indexing_gpu.py \
    > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed|^/|Error" $R/gpu_tests.log | head -20
timeout 80 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R 2>&1 | head -3
for m in gpt42m hf-gpt2-42m; do
  timeout 120 python3 -m nova.bench.train --framework nova --model $m --batch 32 --steps 50 --warmup 5 \
      --out $R/$m 2>&1 | grep -E "steady|error"
done
tar czf $OUT/run10.tgz -C $OUT run10
