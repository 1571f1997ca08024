#!/bin/bash
# Device run 27 of 2026-12-04: NOVA_ATTENTION_PRECISION=fp32 at the schedules the corrected register
# estimate picks (a tile's output product summed from zero holds D/2 more registers): each kernel's
# time (CUPTI) beside its prediction, the accuracy probe, the GPU tests, GPT-144M b16 and GPT-42M speed.
# Host first: the attention, probe and step kernels (runs 24-26's build commands) into .nova-cache.tgz.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run27; mkdir -p $R
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 150 python3 -m pytest $T tests/test_attention_gpu.py -k "fp32 or split_scores" > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -8
export NOVA_ATTENTION_PRECISION=fp32
KT_DTYPES=tf32 timeout 150 python3 bench/probes/attention_kernel_times.py $R/kernel_times-fp32.json 2>&1 | grep -v -i warn
python3 bench/probes/attention_accuracy.py run fp32 2>&1 | grep -v -i warn | tee $R/attention_accuracy.txt
timeout 150 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 --steps 30 --warmup 5 --timed 20 \
    --repeats 3 --out $R/gpt144m-b16-fp32 2>&1 | grep -E "steady|error"
timeout 120 python3 -m nova.bench.train --framework nova --model gpt42m --batch 32 --steps 30 --warmup 5 --timed 20 \
    --repeats 3 --out $R/gpt42m-fp32 2>&1 | grep -E "steady|error"
