#!/bin/bash
# Device run 20 of 2026-12-04: nova.compile's host work per call after the leaner guard and
# write-back (bench/probes/synced_steps.py, with each call's host time); whether relaunching a CUDA
# graph that still runs blocks the host (bench/probes/graph_relaunch.py); the GPU tests of the
# compiled step, the executor and the real training scripts; GPT-42M's step-boundary idle.
# Kernels: the cache of run 18 (.nova-cache.tgz; carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run20; mkdir -p $R
timeout 60 python3 bench/probes/graph_relaunch.py 2>&1 | tee $R/graph_relaunch.txt
timeout 200 python3 bench/probes/synced_steps.py --steps 40 2>&1 | grep -v -i warn | tee $R/synced_steps.txt
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 200 python3 -m pytest $T tests/test_compile_gpu.py tests/test_executor_gpu.py tests/test_compile_executor.py \
    tests/test_frontend_real_scripts.py > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -12
timeout 90 python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 --steps 5 --host \
    --out $R/profile-gpt42m > $R/profile-gpt42m.txt 2>&1; sed -n '/^idle/,$p' $R/profile-gpt42m.txt | head -20
