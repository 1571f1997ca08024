#!/bin/bash
# Device run 22 of 2026-12-04: each launch of the GPT-42M and Llama-42M steps timed both ways
# (nova.bench.step_kernels --timing cupti: its kernels' own durations, the event span beside them);
# the synced loop after the host step counts moved behind the launch; the GPU tests of the
# compiled step and the executor.  Kernels: the cache of run 18 (.nova-cache.tgz; carry it).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run22; mkdir -p $R
for m in gpt42m llama42m; do
  timeout 150 python3 -m nova.bench.step_kernels --model $m --batch 32 --timing cupti --out $R 2>&1 \
      | grep -v -i warn | tee $R/step_kernels-$m.txt | head -14
done
timeout 150 python3 bench/probes/synced_steps.py --steps 40 --frameworks compile,nova 2>&1 | grep -v -i warn \
    | tee $R/synced_steps.txt
T="-q -n 0 -m gpu --show-capture=no --tb=line -rf"
timeout 150 python3 -m pytest $T tests/test_compile_gpu.py tests/test_executor_gpu.py tests/test_compile_executor.py \
    > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -12
