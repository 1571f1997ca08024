#!/bin/bash
# Device run 96 (either card).  Phase "a": the skinny kernel's shifted rows on the GPU (its GPU tests at
# odd K, odd-K decode GEMMs against cuBLAS), run 91's held-out GEMM draw (seed 20261213) again with the
# padding copy issuing its loads together (GEMM ABI 17) and eager calls picking by host time too, and
# Hugging Face Llama-42M's default plan (its measured peak against Liger Kernel's 5.46 GB).  Phase "b": a
# fresh GEMM draw (seed 20261214) with L2 flushed before every call of every library, a fresh attention
# draw (seed 20261214).  Phase "m" (little device time): the known draw and the Llama peak alone.
# Host: `.nova-cache-run96.txz`, for T = h200 and h100: `python tests/test_skinny_gpu.py --target T --build`,
# `bench/probes/skinny_odd_k.py --build`, `nova.bench.heldout gemm --count 100 --seed S --precompile --target T`
# for S = 20261213 and 20261214, `nova.bench.heldout attention --count 40 --seed 20261214 --precompile --target T`;
# and `nova precompile train hf-llama-42m --batch 32 --target h200` (the H200's plan: its peak is the same on
# either card).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run96-$T; mkdir -p $R
[ -d .nova-cache-run96 ] || tar xf .nova-cache-run96.txz
export PYTHONPATH=.:${EXTRA_PYTHONPATH:-} NOVA_OFFLINE=1 PYTHONUNBUFFERED=1 NOVA_TARGET=$T \
    NOVA_CACHE_DIR=$PWD/.nova-cache-run96
if [ "$1" = a ]; then
  timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_skinny_gpu.py 2>&1 | tail -3 \
      | tee $R/skinny_gpu_tests.log
  timeout 40 python3 bench/probes/skinny_odd_k.py 2>&1 | tail -6 | tee $R/skinny_odd_k.txt
  mkdir -p $R/draw13
  timeout 200 python3 -m nova.bench.heldout gemm --count 100 --seed 20261213 --settle-s 0.5 --graph-settle-s 0.3 \
      --out $R/draw13 2>&1 | tail -1
  grep -A14 "## Summary" $R/draw13/heldout_gemm.md | head -16
  grep -E "^\| #(19|43|65|67|15|88|92|52|64|72) " $R/draw13/heldout_gemm.md
  NOVA_TARGET=h200 timeout 130 python3 -m nova.bench.train --all --frameworks nova --model hf-llama-42m --batch 32 \
      --steps 20 --warmup 3 --timed 20 --repeats 2 --timeout 110 --out $R/hf-llama-42m 2>&1 | grep -E "^\| nova|rror|peak" | head -4
fi
if [ "$1" = m ]; then           # little device time: the known draw and the peak
  mkdir -p $R/draw13
  timeout 170 python3 -m nova.bench.heldout gemm --count 100 --seed 20261213 --settle-s 0.3 --graph-settle-s 0.2 \
      --out $R/draw13 2>&1 | tail -1
  grep -A14 "## Summary" $R/draw13/heldout_gemm.md | head -16
  NOVA_TARGET=h200 timeout 100 python3 -m nova.bench.train --all --frameworks nova --model hf-llama-42m --batch 32 \
      --steps 10 --warmup 2 --timed 10 --repeats 1 --timeout 90 --out $R/hf-llama-42m 2>&1 | grep -E "^\| nova|rror|peak" | head -4
fi
if [ "$1" = b ]; then
  mkdir -p $R/attention $R/fresh-cold
  timeout 290 python3 -m nova.bench.heldout gemm --count 100 --seed 20261214 --settle-s 0.5 --graph-settle-s 0.3 \
      --cold-l2-mb 256 --out $R/fresh-cold 2>&1 | tail -1
  grep -A14 "## Summary" $R/fresh-cold/heldout_gemm.md | head -16
  timeout 230 python3 -m nova.bench.heldout attention --count 40 --seed 20261214 --out $R/attention 2>&1 | tail -1
  grep -A16 "## Summary" $R/attention/heldout_attention.md | head -18
fi
true
