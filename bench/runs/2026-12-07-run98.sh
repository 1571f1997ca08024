#!/bin/bash
# Device run 98 (either card).  Phase "a": split attention kernels (split KV for the forward and dQ, split
# Q for dK/dV) -- the attention GPU tests (float64, NaN-poisoned outputs; three decode cases split KV,
# the grouped-query ones split dK/dV), then seed 20261214's held-out attention draw (never measured).
# Phase "b": the skinny kernel's schedule variants (`bench/probes/skinny_variants.py`, warm and cold L2,
# against cuBLAS: decides `skinny.DEEP_UNROLL` and `skinny.SHIFTED_COLUMNS`); Hugging Face Llama-42M at
# batch 32 under the lean and the fast memory policy, one after the other and in the other order (the
# memory budget's "at full speed" target); the held-out runs' GPU tests; seed 20261214's GEMM draw with
# L2 flushed before every call of every library (`--cold-l2-mb 256`).
# Host (NOVA_CACHE_DIR=.nova-cache-run98, PYTHONPATH with transformers 5.17), `.nova-cache-run98.txz`:
# `nova precompile train hf-llama-42m --batch 32 --target h200`, again with NOVA_MEMORY_POLICY=fast; for
# T = h200 and h100: `nova.bench.heldout gemm --count 100 --seed 20261214 --precompile --target T`,
# `nova.bench.heldout attention --count 40 --seed 20261214 --precompile --target T`,
# `python3 tests/test_heldout.py --target T`, and `precompile_attention` of every
# `nova.bench.attention.GPU_TEST_CASES` problem; `.nova-skinny-variants.json` from
# `python3 bench/probes/skinny_variants.py --build`, carried beside it.
. bench/runs/device_env.sh run98 .nova-cache-run98
llama() {   # $1: policy (lean | fast), $2: folder suffix
  mkdir -p $R/hf-llama-42m-$1$2
  NOVA_TARGET=h200 NOVA_MEMORY_POLICY=$1 timeout 100 python3 -m nova.bench.train --all --frameworks nova \
      --model hf-llama-42m --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 2 --timeout 90 \
      --out $R/hf-llama-42m-$1$2 2>&1 | grep -E "^\| nova|rror|peak" | head -4
}
if [ "$1" = a ]; then
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_gpu.py \
      -k "test_forward_and_gradients_match_float64" 2>&1 | tail -6 | tee $R/split_gpu_tests.log
  mkdir -p $R/attention
  timeout 240 python3 -m nova.bench.heldout attention --count 40 --seed 20261214 --out $R/attention 2>&1 | tail -1
  grep -A16 "## Summary" $R/attention/heldout_attention.md | head -18
fi
if [ "$1" = b ]; then
  OUT=$R timeout 120 python3 bench/probes/skinny_variants.py 2>&1 | tee $R/skinny_variants.txt | tail -40
  llama lean 1; llama fast 1; llama fast 2; llama lean 2
  timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_heldout.py 2>&1 | tail -3 \
      | tee $R/heldout_gpu_tests.log
  mkdir -p $R/fresh-cold
  timeout 200 python3 -m nova.bench.heldout gemm --count 100 --seed 20261214 --settle-s 0.4 --graph-settle-s 0.2 \
      --cold-l2-mb 256 --out $R/fresh-cold 2>&1 | tail -1
  grep -A14 "## Summary" $R/fresh-cold/heldout_gemm.md | head -16
fi
true
