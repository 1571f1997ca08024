#!/bin/bash
# Device run 41 of 2026-12-04: after the race fix, the final sums over more CTAs and the embedding scan:
# the GPU tests (run 31's set and the embedding file; the two Llama-42M tests among them), every launch
# of GPT-42M and Llama-42M timed one by one, GPT-42M's step against torch.compile in the same call, two
# more Llama-42M 200-step curves (Nova's default) and a third eager one (the envelope), the norm backward
# probe (with two and four waves of partial rows) and the read-only DRAM ceiling (read_ceiling.py).
# Two calls: `bash ...run41.sh tests`, then `bash ...run41.sh rest` (each returns its own run41.tgz).
# Host first: bash bench/runs/2026-12-04-run4-build.sh all; nova precompile train gpt144m --batch 16;
# NOVA_DETERMINISTIC=1 nova precompile train llama42m / gpt42m --batch 32; the probe's build mode.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run41; mkdir -p $R
PART=${1:-all}             # tests | rest | all (all may pass the 600 s a call allows: two calls)
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
if [ "$PART" != rest ]; then
timeout 330 python3 -m pytest $T tests/test_rows_gpu.py tests/test_compile_gpu.py tests/test_executor_gpu.py \
    tests/test_compile_executor.py tests/test_frontend_real_scripts.py tests/test_pointwise_indexing_gpu.py \
    tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
    tests/test_embedding_gpu.py > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -20
fi
if [ "$PART" != tests ]; then
for m in gpt42m llama42m; do
  timeout 100 python3 -m nova.bench.step_kernels --model $m --batch 32 --out $R 2>&1 | grep -v -i warn | head -3
done
python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 50 --warmup 5 \
    --timeout 150 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
Q="--steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5 --model llama42m --batch 32"
for k in 1 2; do
  timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/nova-$k 2>&1 | grep -E "loss curve|error"
done
timeout 100 python3 -m nova.bench.train --framework eager $Q --out $R/eager-3 2>&1 | grep -E "loss curve|error"
E=bench/results/h200-2026-12-04/run38
python3 bench/probes/loss_curves.py $E/eager-1/eager-llama42m-b32.json $R/nova-1/nova-llama42m-b32.json \
    $R/nova-2/nova-llama42m-b32.json bench/results/h200-2026-12-04/run40/nova-det/nova-llama42m-b32.json \
    --also $E/eager-2/eager-llama42m-b32.json $R/eager-3/eager-llama42m-b32.json \
    bench/results/h200-2026-12-04/run34/llama42m-b32-eager/eager-llama42m-b32.json 2>&1 | tee $R/curves.txt
timeout 60 python3 bench/probes/norm_backward.py run $R/norm_backward.json 2>&1 | grep -v -i warn | cut -c1-220
timeout 60 python3 bench/probes/read_ceiling.py $R/read_ceiling.json 2>&1 | grep -v -i warn | cut -c1-160
fi
rm -f $R/*/summary-*
tar czf $OUT/run41.tgz -C $OUT run41; rm -rf $R
