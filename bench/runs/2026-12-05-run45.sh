#!/bin/bash
# Device run 45: run 44's checks with the autocast kernels of 2026-12-05's third block (a norm backward's
# dy parts and 16-bit dx, grouped-query attention through the casts, the RoPE backward in one kernel,
# the parameters' casts as one multi-tensor map), then the autocast steps against torch.compile under
# the same autocast.  Steps run on the plans of the chip the call gets (NOVA_TARGET from nvidia-smi);
# the GPU tests on the h200 kernels (sm_90a: the same code on an H100).
# Host builds (a fresh .nova-cache), then `rm -f .nova-cache.txz; tar cf - .nova-cache | xz -T2 -6 > .nova-cache.txz`:
#   export NOVA_CACHE_DIR=$PWD/.nova-cache PATH=$PWD/.venv/bin:$PATH
#   bash bench/runs/2026-12-04-run4-build.sh tests
#   python tests/test_gemm_epilogue_gpu.py --build --target h200
#   python tests/test_grouped_query.py --target h200
#   for t in h200 h100; do for m in gpt42m llama42m "llama42m --autocast bf16"; do nova precompile train $m --target $t; done; done
#   for t in h200 h100; do PYTHONPATH=/tmp/tf517 nova precompile train hf-gpt2-42m --autocast bf16 --padded --clip-grad-norm 1.0 --target $t; done
#   (/tmp/tf517: transformers 5.17 + huggingface-hub 1.33, the device's, so the HF graphs match its capture)
#   bash bench/runs/2026-12-05-run45.sh first    GEMM epilogues, rows/clipping/pointwise tests, GPT-42M step
#   bash bench/runs/2026-12-05-run45.sh second   Llama-42M FP32 and bf16 steps, the other GPU tests
#   bash bench/runs/2026-12-05-run45.sh third    HF GPT-2-42M bf16 padded recipe step, a Llama bf16 curve
tar xf .nova-cache.t*z
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) STEP_TARGET=h200 ;; *H100*) STEP_TARGET=h100 ;; *) STEP_TARGET=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run45-$STEP_TARGET; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
step() {   # step <name> <explain train args...>: every launch against its prediction, then the step vs torch.compile
  local name=$1; shift
  NOVA_TARGET=$STEP_TARGET timeout 100 python3 -m nova.bench.step_kernels --model "$@" --batch 32 --out $R/$name 2>&1 \
      | grep -v -i warn | head -3
  NOVA_TARGET=$STEP_TARGET timeout 170 python3 -m nova.bench.train --all --frameworks compile,nova --model "$@" \
      --batch 32 --steps 40 --warmup 5 --timeout 150 --out $R/$name 2>&1 | grep -E "^\| |steady|error" | head -8
}
tests() {  # tests <log> <files...>
  local log=$1; shift
  timeout 200 python3 -m pytest $T "$@" > $R/$log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/$log | head -12
}
if [ "$1" = first ]; then
  tests gemm_epilogue.log tests/test_gemm_epilogue_gpu.py
  tests rows_clipping_pointwise.log tests/test_rows_gpu.py tests/test_clipping_gpu.py tests/test_pointwise_indexing_gpu.py \
      tests/test_grouped_query.py
  step gpt42m gpt42m
elif [ "$1" = second ]; then
  step llama42m llama42m
  step llama42m-bf16 llama42m --autocast bf16
  tests gpu_tests.log tests/test_compile_gpu.py tests/test_executor_gpu.py tests/test_compile_executor.py \
      tests/test_frontend_real_scripts.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
      tests/test_embedding_gpu.py
else
  step hf-gpt2-bf16 hf-gpt2-42m --autocast bf16 --padded --clip-grad-norm 1.0
  NOVA_TARGET=$STEP_TARGET timeout 100 python3 -m nova.bench.train --framework nova --steps 200 --warmup 2 --timed 5 \
      --repeats 1 --settle-s 0.5 --model llama42m --autocast bf16 --batch 32 --out $R/nova-bf16 2>&1 | grep -E "loss curve|error"
  NOVA_TARGET=$STEP_TARGET timeout 150 python3 -m nova.bench.train --framework eager --steps 200 --warmup 2 --timed 5 \
      --repeats 1 --settle-s 0.5 --model llama42m --autocast bf16 --batch 32 --out $R/eager-bf16 2>&1 | grep -E "loss curve|error"
  python3 bench/probes/loss_curves.py $R/eager-bf16/eager-llama42m-b32.json $R/nova-bf16/nova-llama42m-b32.json \
      2>&1 | tee $R/curves-bf16.txt
fi
rm -f $R/*/summary-*
