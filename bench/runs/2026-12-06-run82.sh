#!/bin/bash
# Device run 82: the two GPU tests run 80 failed (the held-out attention test's kernel, now in the carried cache; the
# chunked-loss memory test, now printing the executor's memory phases), the odd tile problems beside their aligned
# neighbours (`bench/probes/odd_alignment.py`), and on an H200 GPT-42M kernel by kernel and against torch.compile.
# Host: `.nova-cache.txz` (tests/gpu_build.py --all --target h200, the GPT-42M / HF Llama-42M steps for h200 and h100),
#       `.nova-cache-probe2.txz` (NOVA_CACHE_DIR=$PWD/.nova-cache-probe2 python3 bench/probes/odd_alignment.py --build).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache.txz && rm -rf .nova-cache/misses; tar xf .nova-cache-probe2.txz
R=$OUT/run82-$T; mkdir -p $R
NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONPATH=. NOVA_TARGET=h200 timeout 120 python3 -m pytest -q -n 0 -m gpu \
    --show-capture=no --tb=short -rf tests/test_heldout.py tests/test_memory_policy.py > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|phase|first step|program build" $R/gpu_tests.log | head -20
[ -d .nova-cache/misses ] && tar cf $R/misses.tar -C .nova-cache misses && tar tf $R/misses.tar | wc -l
PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache-probe2 NOVA_TARGET=$T OUT=$R timeout 150 \
    python3 bench/probes/odd_alignment.py > $R/odd_alignment.txt 2>&1
grep -v -i warn $R/odd_alignment.txt | head -80
if [ $T = h200 ]; then
  ( export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T PYTHONUNBUFFERED=1
    timeout 90 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
    timeout 150 python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 40 \
        --warmup 5 --timeout 130 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8 )
fi
