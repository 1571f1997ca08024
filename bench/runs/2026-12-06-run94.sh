#!/bin/bash
# Device run 94 (either card): the skinny kernel with shifted rows at odd K.  Its GPU tests (float64
# reference, NaN-poisoned outputs, two runs bit-identical, a CUDA graph), then run 91's held-out GEMM draw
# (seed 20261213) again, the odd-K decode rows now on the shifted kernel.
# Host: `.nova-cache-skinny.txz` (`python tests/test_skinny_gpu.py --target T --build` and `python -m
# nova.bench.heldout gemm --count 100 --seed 20261213 --precompile --target T`, T = h200 and h100).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run94-$T; mkdir -p $R/fresh
tar xf .nova-cache-skinny.txz
export PYTHONPATH=.:${EXTRA_PYTHONPATH:-} NOVA_OFFLINE=1 PYTHONUNBUFFERED=1 NOVA_TARGET=$T NOVA_CACHE_DIR=$PWD/.nova-cache-heldout7
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_skinny_gpu.py 2>&1 | tail -6 | tee $R/skinny_gpu_tests.log
timeout 300 python3 -m nova.bench.heldout gemm --count 100 --seed 20261213 --settle-s 0.5 --graph-settle-s 0.3 \
    --out $R/fresh 2>&1 | tail -2
grep -A14 "## Summary" $R/fresh/heldout_gemm.md | head -16
grep -E "^\| #(52|88|92|16|56) " $R/fresh/heldout_gemm.md
true
