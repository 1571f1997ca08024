#!/bin/bash
# Device run 44: run 43's checks on whichever Hopper the call gets.  The GPU tests run the kernels
# built for h200 (sm_90a, the same code on an H100); the steps run the plans of the chip the call
# got (NOVA_TARGET from nvidia-smi), so step_kernels compares each launch with that chip's model.
# Host builds: `bash bench/runs/2026-12-04-run4-build.sh tests`, then
# `nova precompile train gpt42m|llama42m --target h200|h100`, then
# `python tests/test_gemm_epilogue_gpu.py --build --target h200`, carried as .nova-cache.txz.
#   bash bench/runs/2026-12-05-run44.sh first    GEMM epilogues, GPT-42M step, rows/pointwise tests
#   bash bench/runs/2026-12-05-run44.sh second   Llama-42M step, the other GPU tests, a Llama curve
tar xf .nova-cache.t*z
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) STEP_TARGET=h200 ;; *H100*) STEP_TARGET=h100 ;; *) STEP_TARGET=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run44-$STEP_TARGET; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
step() {   # step <model>: every launch against its prediction, then the step against torch.compile
  NOVA_TARGET=$STEP_TARGET timeout 100 python3 -m nova.bench.step_kernels --model $1 --batch 32 --out $R 2>&1 \
      | grep -v -i warn | head -3
  NOVA_TARGET=$STEP_TARGET timeout 170 python3 -m nova.bench.train --all --frameworks compile,nova --model $1 \
      --batch 32 --steps 40 --warmup 5 --timeout 150 --out $R/$1 2>&1 | grep -E "^\| |steady|error" | head -8
}
if [ "$1" = first ]; then
  timeout 150 python3 -m pytest $T tests/test_gemm_epilogue_gpu.py > $R/gemm_epilogue.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" $R/gemm_epilogue.log | head -10
  step gpt42m
  timeout 150 python3 -m pytest $T tests/test_rows_gpu.py tests/test_pointwise_indexing_gpu.py \
      > $R/gpu_tests_rows_pointwise.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests_rows_pointwise.log | head -20
else
  step llama42m
  timeout 200 python3 -m pytest $T tests/test_compile_gpu.py tests/test_executor_gpu.py tests/test_compile_executor.py \
      tests/test_frontend_real_scripts.py tests/test_clipping_gpu.py tests/test_optimizer_gpu.py \
      tests/test_integrations_dynamo_gpu.py tests/test_embedding_gpu.py > $R/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -20
  NOVA_TARGET=$STEP_TARGET timeout 100 python3 -m nova.bench.train --framework nova --steps 200 --warmup 2 --timed 5 \
      --repeats 1 --settle-s 0.5 --model llama42m --batch 32 --out $R/nova-1 2>&1 | grep -E "loss curve|error"
  E=bench/results/h200-2026-12-04/run38
  python3 bench/probes/loss_curves.py $E/eager-1/eager-llama42m-b32.json $R/nova-1/nova-llama42m-b32.json \
      --also $E/eager-2/eager-llama42m-b32.json 2>&1 | tee $R/curves.txt
fi
rm -f $R/*/summary-*
