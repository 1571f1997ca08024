#!/bin/bash
# Device run 12 of 2026-12-04: GEMM and attention groups launched as the plan decided them (GPU
# tests, an attention kept on ATen by the plan); GPT-144M under 12 GiB for 200 steps against
# uncapped eager (loss parity); GPT-42M against torch.compile; GPT-42M's idle time between kernels.
# Host first: nova precompile train gpt144m --batch 16 --memory-budget 12GiB --target h200, then
# tar czf .nova-cache.tgz .nova-cache (carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run12; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 200 python3 -m pytest $T tests/test_executor_gpu.py tests/test_rows_gpu.py tests/test_pointwise_indexing_gpu.py \
    tests/test_clipping_gpu.py tests/test_optimizer_gpu.py tests/test_integrations_dynamo_gpu.py \
    > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed|Error" $R/gpu_tests.log | head -20
P="--steps 200 --warmup 5 --timed 20 --repeats 3"
timeout 150 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 --memory-budget 12GiB $P \
    --out $R/gpt144m-b16-12GiB 2>&1 | grep -E "steady|peak|loss curve|error"
timeout 150 python3 -m nova.bench.train --framework eager --model gpt144m --batch 16 $P \
    --out $R/gpt144m-b16-eager 2>&1 | grep -E "steady|peak|loss curve|error"
python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 50 --warmup 5 \
    --timeout 200 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
timeout 90 python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 --steps 5 \
    --out $R/profile-gpt42m > $R/profile-gpt42m.txt 2>&1; sed -n '1,3p;/^idle/,$p' $R/profile-gpt42m.txt
tar czf $OUT/run12.tgz -C $OUT run12
