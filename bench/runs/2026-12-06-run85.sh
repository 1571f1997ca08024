#!/bin/bash
# Device run 85: the GEMM operand prep padding K to whole 128-byte lines and the line-pad step, measured: the
# odd-alignment probe's families on the new kernels, the GEMM/memory GPU tests (the line-pad cases, the
# chunked-loss step's peak with ATen attention's workspace listed); on an H200 first GPT-42M kernel by kernel.
# Host: `.nova-cache.txz` (tests/gpu_build.py --all --target h200; GPT-42M b32 h200/h100), `.nova-cache-probe2.txz`
# (bench/probes/odd_alignment.py --build).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache.txz && rm -rf .nova-cache/misses; tar xf .nova-cache-probe2.txz
R=$OUT/run85-$T; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1
if [ $T = h200 ]; then
  NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T timeout 110 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 \
      --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
fi
NOVA_CACHE_DIR=$PWD/.nova-cache-probe2 NOVA_TARGET=$T OUT=$R timeout 70 python3 bench/probes/odd_alignment.py \
    > $R/odd_alignment.txt 2>&1
grep -v -i warn $R/odd_alignment.txt | grep -v "^ *[0-9.]* us x[0-9]* *void" | head -70
NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 timeout 240 python3 -m pytest -q -n 0 -m gpu --show-capture=no \
    --tb=short -rf tests/test_runtime_gpu.py tests/test_memory_policy.py tests/test_outside_arena.py tests/test_heldout.py \
    > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|phase" $R/gpu_tests.log | head -12
[ -d .nova-cache/misses ] && tar cf $R/misses.tar -C .nova-cache misses && tar tf $R/misses.tar | wc -l
