#!/bin/bash
# Device run 83: runs 81 and 82 in one call (neither found a machine): on an H200, GPT-42M kernel by kernel; the
# odd tile problems beside their aligned neighbours; the two GPU tests run 80 failed; last (the longest), the held-out
# GEMM draw never looked at (seed 20261209, 100 problems).  The held-out attention draw is left to a later call.
# Host: the caches of runs 81 and 82 (`.nova-cache.txz`, `.nova-cache-heldout3.txz`, `.nova-cache-probe2.txz`).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
tar xf .nova-cache.txz && rm -rf .nova-cache/misses; tar xf .nova-cache-probe2.txz; tar xf .nova-cache-heldout3.txz
R=$OUT/run83-$T; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1
if [ $T = h200 ]; then
  NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T timeout 90 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 \
      --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
fi
NOVA_CACHE_DIR=$PWD/.nova-cache-probe2 NOVA_TARGET=$T OUT=$R timeout 60 python3 bench/probes/odd_alignment.py \
    > $R/odd_alignment.txt 2>&1
grep -v -i warn $R/odd_alignment.txt | grep -v "^ *[0-9.]* us x[0-9]* *void" | head -70
NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 timeout 80 python3 -m pytest -q -n 0 -m gpu --show-capture=no \
    --tb=short -rf tests/test_heldout.py tests/test_memory_policy.py > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed|phase" $R/gpu_tests.log | head -12
[ -d .nova-cache/misses ] && tar cf $R/misses.tar -C .nova-cache misses && tar tf $R/misses.tar | wc -l
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout3 NOVA_TARGET=$T timeout 300 python3 -m nova.bench.heldout gemm --count 100 \
    --seed 20261209 --settle-s 0.5 --graph-settle-s 0.3 --out $R 2>&1 | tail -2
grep -A14 "## Summary" $R/heldout_gemm.md | head -16
