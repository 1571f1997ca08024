#!/bin/bash
# Device run 25 of 2026-12-04: NOVA_ATTENTION_PRECISION=fp32 after its kernels sum each tile's
# P V, dS^T Q, P^T dO and dS K products from zero and add them to the running sums by FP32 adds (run
# 24's dK and dV carried a -1e-5 bias): the GPU tests against float64, the accuracy probe, GPT-144M
# b16's 200-step loss curve (against run 12's eager TF32 curve, offline) and speed.
# Host first: python -m nova.bench.attention --precompile --target h200, the probe's build and
# NOVA_ATTENTION_PRECISION=fp32 nova precompile train gpt144m --batch 16 (into .nova-cache.tgz).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run25; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 150 python3 -m pytest $T tests/test_attention_gpu.py -k "fp32 or split_scores" > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -8
NOVA_ATTENTION_PRECISION=fp32 python3 bench/probes/attention_accuracy.py run fp32 2>&1 | grep -v Warn \
    | tee $R/attention_accuracy.txt
NOVA_ATTENTION_PRECISION=fp32 timeout 200 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 \
    --steps 200 --warmup 5 --timed 20 --repeats 3 --out $R/gpt144m-b16-fp32 2>&1 | grep -E "steady|peak|loss curve|error"
