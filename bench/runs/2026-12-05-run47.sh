#!/bin/bash
# Device run 47: the integrations' measurements.  Triton's matmul with Nova's one configuration (the
# export now rounds Nova's blocks to Triton's powers of two: run 8's two 128x192 shapes failed to
# compile) against Triton autotuned over its list and cuBLAS, BF16 and TF32; then the torch.compile
# backend's GPU tests (training steps against float64 eager, memory against the plan and Inductor).
# Needs no Nova kernel for the Triton part (the configurator is Python); the backend tests use the
# run-45 cache (`.nova-cache.txz`, its header builds it).
#   bash bench/runs/2026-12-05-run47.sh
tar xf .nova-cache.t*z
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONUNBUFFERED=1
R=$OUT/run47; mkdir -p $R
for d in bf16 tf32; do
  timeout 110 python3 -m nova.bench.triton_matmul --suite bench/suites/perf.txt --dtype $d --out $R/triton-$d \
      --budget-s 60 2>&1 | tail -n 2
done
NOVA_TARGET=h200 timeout 240 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf \
    tests/test_integrations_dynamo_gpu.py > $R/dynamo_gpu.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/dynamo_gpu.log | head
