#!/bin/bash
# Device run 43: run 42's checks in the order that matters when a call may be cut short (each step
# time-boxed, its results written under $OUT/run43 as it goes: a call killed at its limit still
# returns them).  Host builds: run 42's header, then `bash bench/runs/2026-12-04-run4-build.sh tests`
# (the cast epilogue's and the 768-column norm backward's kernels), and the cache carried as
# .nova-cache.txz (`tar cf - .nova-cache | xz -T2 -6 > .nova-cache.txz`).
#   bash bench/runs/2026-12-05-run43.sh first    GEMM epilogues (cast included), GPT-42M step, rows/pointwise tests
#   bash bench/runs/2026-12-05-run43.sh second   Llama-42M step, the other GPU tests, Llama curves
tar xf .nova-cache.t*z
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run43; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
step() {   # step <model>: every launch against its prediction, then the step against torch.compile
  timeout 100 python3 -m nova.bench.step_kernels --model $1 --batch 32 --out $R 2>&1 | grep -v -i warn | head -3
  timeout 170 python3 -m nova.bench.train --all --frameworks compile,nova --model $1 --batch 32 --steps 40 \
      --warmup 5 --timeout 150 --out $R/$1 2>&1 | grep -E "^\| |steady|error" | head -8
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
  timeout 100 python3 -m nova.bench.train --framework nova --steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5 \
      --model llama42m --batch 32 --out $R/nova-1 2>&1 | grep -E "loss curve|error"
  E=bench/results/h200-2026-12-04/run38
  python3 bench/probes/loss_curves.py $E/eager-1/eager-llama42m-b32.json $R/nova-1/nova-llama42m-b32.json \
      --also $E/eager-2/eager-llama42m-b32.json 2>&1 | tee $R/curves.txt
fi
rm -f $R/*/summary-*
