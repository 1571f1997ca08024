#!/bin/bash
# Device run 97 (either card).  Phase "a": the skinny kernel's schedule variants on decode GEMMs it lost to
# cuBLAS (`bench/probes/skinny_variants.py`, warm and cold L2, against cuBLAS), a fresh GEMM draw (seed 20261214, never run before) with L2
# flushed before every call of every library (`--cold-l2-mb 256`: a decode step's weights are not in L2).
# Phase "a" also runs Hugging Face Llama-42M at batch 32 under the default memory policy (lean) and under
# NOVA_MEMORY_POLICY=fast (no saving: the fastest plan), one after the other (the memory budget's "at full speed" target);
# phase "b": the held-out runs' GPU tests, a fresh attention draw (seed 20261214), then the Llama pair in
# the other order.
# Host: `.nova-cache-run97.txz`: `nova.bench.heldout gemm --count 100 --seed 20261214 --precompile --target T`
# and `nova.bench.heldout attention --count 40 --seed 20261214 --precompile --target T` for T = h200, h100;
# `nova precompile train hf-llama-42m --batch 32 --target h200`, with and without NOVA_MEMORY_POLICY=fast;
# `python3 bench/probes/skinny_variants.py --build` (`.nova-skinny-variants.json`, carried beside it);
# `python3 tests/test_heldout.py --target T` (phase b's GPU tests of the held-out runs, a masked problem too).
. bench/runs/device_env.sh run97 .nova-cache-run97
llama() {   # $1: policy (lean | fast), $2: folder suffix
  mkdir -p $R/hf-llama-42m-$1$2
  NOVA_TARGET=h200 NOVA_MEMORY_POLICY=$1 timeout 100 python3 -m nova.bench.train --all --frameworks nova \
      --model hf-llama-42m --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 2 --timeout 90 \
      --out $R/hf-llama-42m-$1$2 2>&1 | grep -E "^\| nova|rror|peak" | head -4
}
if [ "$1" = a ]; then
  OUT=$R timeout 120 python3 bench/probes/skinny_variants.py 2>&1 | tee $R/skinny_variants.txt | tail -60
  llama lean 1; llama fast 1
  mkdir -p $R/fresh-cold
  timeout 300 python3 -m nova.bench.heldout gemm --count 100 --seed 20261214 --settle-s 0.4 --graph-settle-s 0.2 \
      --cold-l2-mb 256 --out $R/fresh-cold 2>&1 | tail -1
  grep -A14 "## Summary" $R/fresh-cold/heldout_gemm.md | head -16
fi
if [ "$1" = b ]; then
  timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_heldout.py 2>&1 | tail -3 \
      | tee $R/heldout_gpu_tests.log
  mkdir -p $R/attention
  timeout 240 python3 -m nova.bench.heldout attention --count 40 --seed 20261214 --out $R/attention 2>&1 | tail -1
  grep -A16 "## Summary" $R/attention/heldout_attention.md | head -18
  llama fast 2; llama lean 2
fi
true
