#!/bin/bash
# Device run 4 of 2026-12-04: the GPU tests (float64-twin step parity, the shared per-call storage,
# cuDNN attention in the backend's trace), the default memory policy (lean) against the fastest plan
# and against eager / torch.compile, torch.compile(backend="nova") vs Inductor in its steady state.
# Host first: bash bench/runs/2026-12-04-run4-build.sh (writes .nova-cache.tgz; carry it).
# The device returns a few files per call: everything is tarred into $OUT/run4.tgz.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run4; mkdir -p $R
PART=${1:-all}
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
S="--steps 50 --warmup 5"
if [ "$PART" = all ] || [ "$PART" = a ]; then
  T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
  python3 -m pytest $T tests/test_rows_gpu.py tests/test_executor_gpu.py tests/test_pointwise_indexing_gpu.py \
      tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
      > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed|^/|Error" $R/gpu_tests.log | head -30
  python3 -m nova.bench.train --all --frameworks eager,compile,nova --model gpt42m --batch 32 $S --timeout 300 \
      --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -12
  NOVA_MEMORY_POLICY=fast python3 -m nova.bench.train --framework nova --model gpt42m --batch 32 $S \
      --out $R/gpt42m-fast 2>&1 | grep -E "steady|peak|error"
  for m in llama42m hf-llama-42m; do
    for p in lean fast; do
      echo "$m $p:"; NOVA_MEMORY_POLICY=$p python3 -m nova.bench.train --framework nova --model $m --batch 32 $S \
          --out $R/$m-$p 2>&1 | grep -E "steady|peak|error"
    done
  done
  python3 -m nova.bench.train --framework nova --model hf-gpt2-42m --batch 32 $S --autocast bf16 --padded \
      --clip-grad-norm 1.0 --schedule warmup-cosine --out $R/hf-gpt2-recipe 2>&1 | grep -E "steady|peak|error"
fi
if [ "$PART" = all ] || [ "$PART" = tk ]; then    # after part a: the tests it failed, fixed; the step's kernels
  T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
  python3 -m pytest $T tests/test_pointwise_indexing_gpu.py tests/test_clipping_gpu.py tests/test_rows_gpu.py \
      tests/test_integrations_dynamo_gpu.py > $R/gpu_tests_tk.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed|^/|Error|steady peak|measured peak" $R/gpu_tests_tk.log | head -30
  for m in gpt42m llama42m; do
    python3 -m nova.bench.step_kernels --model $m --batch 32 --out $R 2>&1 | tail -20
  done
fi
if [ "$PART" = all ] || [ "$PART" = b ]; then
  for m in gpt42m llama42m; do
    timeout 250 python3 -m nova.bench.dynamo_vs_inductor --model $m --batch 32 --steps 10 --settle-s 2 --timed 20 \
        --repeats 3 --out $R/dynamo-$m --timeout 110 2>&1 | tail -6
  done
fi
tar czf $OUT/run4-$PART.tgz -C $OUT run4
