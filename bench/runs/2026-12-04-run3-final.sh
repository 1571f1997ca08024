#!/bin/bash
# Device run 3 of 2026-12-04: the GPU tests of the day's kernels, the training steps (GPT-42M against
# eager and torch.compile in the same call), torch.compile(backend="nova") vs Inductor, held-out draws.
# Host first: bash bench/runs/2026-12-04-run3-build.sh (writes .nova-cache.tgz; carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
T="-q -n 0 -m gpu -p no:logging --tb=line -rf"
python3 -m pytest $T tests/test_rows_gpu.py tests/test_executor_gpu.py tests/test_pointwise_indexing_gpu.py \
    tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_skinny_gpu.py tests/test_integrations_dynamo_gpu.py \
    > $OUT/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed|^/|Error" $OUT/gpu_tests.log | head -40
S="--steps 50 --warmup 5"
python3 -m nova.bench.train --all --frameworks eager,compile,nova --model gpt42m --batch 32 $S --timeout 300 \
    --out $OUT/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -12
python3 -m nova.bench.train --framework nova --model gpt42m --batch 32 $S --clip-grad-norm 1.0 --out $OUT/gpt42m-clip 2>&1 | grep -E "steady|error"
python3 -m nova.bench.train --framework nova --model llama42m --batch 32 $S --out $OUT/llama42m 2>&1 | grep -E "steady|error"
python3 -m nova.bench.train --framework nova --model hf-gpt2-42m --batch 32 $S --autocast bf16 --padded \
    --clip-grad-norm 1.0 --schedule warmup-cosine --out $OUT/hf-gpt2-recipe 2>&1 | grep -E "steady|error"
timeout 240 python3 -m nova.bench.dynamo_vs_inductor --model gpt42m --batch 32 --steps 10 --settle-s 2 --timed 20 \
    --repeats 3 --out $OUT/dynamo --timeout 105 2>&1 | tail -8
timeout 150 python3 -m nova.bench.heldout gemm --count 30 --seed 20261204 --settle-s 0.5 --graph-settle-s 0.3 \
    --out $OUT/heldout 2>&1 | tail -3
timeout 200 python3 -m nova.bench.heldout attention --count 20 --seed 20261204 --settle-s 0.5 --graph-settle-s 0.3 \
    --out $OUT/heldout 2>&1 | tail -3
grep -A14 "## Summary" $OUT/heldout/*.md | head -40
