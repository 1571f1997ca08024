#!/bin/bash
# Device run 42 (first run after 2026-12-05's host work; run 41 never ran): the GEMM epilogue kernels
# (residual, pre-activation) against float64 on both kernel generations, the GPU tests (rows with the
# norm backward's residual, the folded RoPE kernels among the pointwise indexing cases, the compiled
# steps), every launch of GPT-42M and Llama-42M timed one by one against its prediction, both steps
# against torch.compile in the same call, two Llama-42M 200-step curves against eager's envelope.
# Two calls: `bash ...run42.sh tests`, then `bash ...run42.sh rest` (each returns its own run42.tgz).
# Host first (a fresh .nova-cache: the fused GEMMs, the folded concats and the norms' residuals have new keys):
#   export NOVA_CACHE_DIR=$PWD/.nova-cache PATH=$PWD/.venv/bin:$PATH
#   bash bench/runs/2026-12-04-run4-build.sh all
#   python tests/test_gemm_epilogue_gpu.py --build --target h200
#   python tests/test_embedding_gpu.py --build --target h200
#   nova precompile train gpt144m --batch 16 --target h200
#   NOVA_DETERMINISTIC=1 nova precompile train llama42m --target h200
#   NOVA_DETERMINISTIC=1 nova precompile train gpt42m --batch 32 --target h200
#   python bench/probes/norm_backward.py build; python bench/probes/ce_fused_bitwise.py build
#   tar czf .nova-cache.tgz .nova-cache
tar xf .nova-cache.t*z   # .tgz or .txz (xz keeps the carry under 64 MiB)
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run42; mkdir -p $R
PART=${1:-all}             # tests | rest | all (all may pass the 600 s a call allows: two calls)
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
if [ "$PART" != rest ]; then
timeout 120 python3 -m pytest $T tests/test_gemm_epilogue_gpu.py > $R/gemm_epilogue.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gemm_epilogue.log | head -10
timeout 330 python3 -m pytest $T tests/test_rows_gpu.py tests/test_pointwise_indexing_gpu.py tests/test_compile_gpu.py \
    tests/test_executor_gpu.py tests/test_compile_executor.py tests/test_frontend_real_scripts.py \
    tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
    tests/test_embedding_gpu.py > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -20
fi
if [ "$PART" != tests ]; then
for m in gpt42m llama42m; do
  timeout 100 python3 -m nova.bench.step_kernels --model $m --batch 32 --out $R 2>&1 | grep -v -i warn | head -3
  python3 -m nova.bench.train --all --frameworks compile,nova --model $m --batch 32 --steps 50 --warmup 5 \
      --timeout 150 --out $R/$m 2>&1 | grep -E "^\| |steady|error" | head -8
done
Q="--steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5 --model llama42m --batch 32"
for k in 1 2; do
  timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/nova-$k 2>&1 | grep -E "loss curve|error"
done
E=bench/results/h200-2026-12-04/run38
python3 bench/probes/loss_curves.py $E/eager-1/eager-llama42m-b32.json $R/nova-1/nova-llama42m-b32.json \
    $R/nova-2/nova-llama42m-b32.json --also $E/eager-2/eager-llama42m-b32.json \
    bench/results/h200-2026-12-04/run34/llama42m-b32-eager/eager-llama42m-b32.json 2>&1 | tee $R/curves.txt
fi
rm -f $R/*/summary-*
tar czf $OUT/run42.tgz -C $OUT run42; rm -rf $R
