#!/bin/bash
# Device run 24 of 2026-12-04: attention at NOVA_ATTENTION_PRECISION=fp32 (every product as three TF32
# products): its GPU tests against float64, its accuracy beside SDPA's f32 and TF32 attention
# (bench/probes/attention_accuracy.py), GPT-144M b16's 200-step loss curve and speed with it (against
# run 12's eager TF32 curve, offline), GPT-42M's speed with it.
# Host first: python -m nova.bench.attention --precompile --target h200, the probe's build, and
# NOVA_ATTENTION_PRECISION=fp32 nova precompile train gpt144m --batch 16 / gpt42m (into .nova-cache.tgz).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run24; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 150 python3 -m pytest $T tests/test_attention_gpu.py -k "fp32 or split_scores" > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -8
(python3 bench/probes/attention_accuracy.py run tf32;
 NOVA_ATTENTION_PRECISION=fp32 python3 bench/probes/attention_accuracy.py run fp32) 2>&1 | tee $R/attention_accuracy.txt
NOVA_ATTENTION_PRECISION=fp32 timeout 200 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 \
    --steps 200 --warmup 5 --timed 20 --repeats 3 --out $R/gpt144m-b16-fp32 2>&1 | grep -E "steady|peak|loss curve|error"
NOVA_ATTENTION_PRECISION=fp32 timeout 120 python3 -m nova.bench.train --framework nova --model gpt42m --batch 32 \
    --steps 50 --warmup 5 --timed 20 --repeats 3 --out $R/gpt42m-fp32 2>&1 | grep -E "steady|peak|error"
tar czf $OUT/run24.tgz -C $OUT run24
