#!/bin/bash
# Device run 5 of 2026-12-04: after run 4 -- the backend's steady state (small outputs copied, a pool per
# output, unread inputs unbound), RMSNorm's eps as its f32 value, the column stage's new final sum, the
# memory-bound calibration.  Part a: GPU tests and torch.compile(backend="nova") vs Inductor; part b: the
# GPT-42M step against torch.compile in one call, its kernels one by one, Llama-42M.
# Host first: bash bench/runs/2026-12-04-run4-build.sh (writes .nova-cache.tgz; carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run5; mkdir -p $R
PART=${1:-all}
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
if [ "$PART" = all ] || [ "$PART" = a ]; then
  T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
  python3 -m pytest $T tests/test_rows_gpu.py tests/test_executor_gpu.py tests/test_integrations_dynamo_gpu.py \
      tests/test_pointwise_indexing_gpu.py tests/test_clipping_gpu.py > $R/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed|^/|Error" $R/gpu_tests.log | head -20
  for m in gpt42m llama42m; do
    timeout 200 python3 -m nova.bench.dynamo_vs_inductor --model $m --batch 32 --steps 10 --settle-s 2 --timed 20 \
        --repeats 3 --out $R/dynamo-$m --timeout 90 2>&1 | tail -5
  done
fi
if [ "$PART" = c ]; then        # after part a: saved storages <= 1 MiB staged; the backend on GPT-42M again
  timeout 170 python3 -m nova.bench.dynamo_vs_inductor --model gpt42m --batch 32 --steps 10 --settle-s 2 --timed 20 \
      --repeats 3 --out $R/dynamo-gpt42m-staged --timeout 75 2>&1 | tail -4
fi
if [ "$PART" = all ] || [ "$PART" = b ] || [ "$PART" = c ]; then
  python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 50 --warmup 5 \
      --timeout 300 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
  python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R 2>&1 | tail -14
  python3 -m nova.bench.train --framework nova --model llama42m --batch 32 --steps 30 --warmup 5 --out $R/llama42m \
      2>&1 | grep -E "steady|error"
fi
tar czf $OUT/run5-$PART.tgz -C $OUT run5
