#!/bin/bash
# Device run 99 (an H200 first: nothing of run 98's was measured on one).  Phase "a": the attention GPU
# tests (split KV, split Q, the biased forward combine's dead-row rule through the compile path), seed
# 20261214's held-out attention draw (run 98's on an H100: device 1.842x, p10 0.934), and the skinny
# variants with the shifted columns fixed (`skinny.SHIFTED_COLUMNS` decided by it) and the cap unroll
# along N.  Phase "b": HF Llama-42M b32 under lean, fast, and lean without the host offload
# (`NOVA_HOST_OFFLOAD=0`: whether the offload's copies are what the lean plan's unpriced 1.6-2.3% is),
# then seed 20261214's GEMM draw with L2 flushed before every call (`--cold-l2-mb 256`).
# Host (NOVA_CACHE_DIR=.nova-cache-run99, PYTHONPATH with transformers 5.17), `.nova-cache-run99.txz`:
# `nova precompile train hf-llama-42m --batch 32 --target h200`, again with NOVA_MEMORY_POLICY=fast and
# with NOVA_HOST_OFFLOAD=0; for T = h200 and h100: `nova.bench.heldout gemm --count 100 --seed 20261214
# --precompile --target T`, `nova.bench.heldout attention --count 40 --seed 20261214 --precompile
# --target T`, `python3 tests/test_heldout.py --target T`, and `precompile_attention` of every
# `nova.bench.attention.GPU_TEST_CASES` problem, `python3 tests/test_attention_mask_gpu.py --target T
# --build`; `.nova-skinny-variants.json` from
# `python3 bench/probes/skinny_variants.py --build`, carried beside it.
. bench/runs/device_env.sh run99 .nova-cache-run99
llama() {   # $1: policy (lean | fast), $2: folder suffix, $3: NOVA_HOST_OFFLOAD (1 | 0)
  mkdir -p $R/hf-llama-42m-$1$2
  NOVA_TARGET=h200 NOVA_MEMORY_POLICY=$1 NOVA_HOST_OFFLOAD=$3 timeout 100 python3 -m nova.bench.train --all \
      --frameworks nova --model hf-llama-42m --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 2 \
      --timeout 90 --out $R/hf-llama-42m-$1$2 2>&1 | grep -E "^\| nova|rror|peak" | head -4
}
if [ "$1" = a ]; then
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_gpu.py \
      -k "test_forward_and_gradients_match_float64" 2>&1 | tail -4 | tee $R/attention_gpu_tests.log
  timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_mask_gpu.py \
      -k "matches_float64 or mma_sync" 2>&1 | tail -4 | tee $R/attention_mask_gpu_tests.log
  mkdir -p $R/attention
  timeout 240 python3 -m nova.bench.heldout attention --count 40 --seed 20261214 --out $R/attention 2>&1 | tail -1
  grep -A16 "## Summary" $R/attention/heldout_attention.md | head -18
  OUT=$R timeout 120 python3 bench/probes/skinny_variants.py 2>&1 | tee $R/skinny_variants.txt | tail -40
fi
if [ "$1" = b ]; then
  llama lean 1 1; llama fast 1 1; llama lean -no-offload 0
  mkdir -p $R/fresh-cold
  timeout 250 python3 -m nova.bench.heldout gemm --count 100 --seed 20261214 --settle-s 0.4 --graph-settle-s 0.2 \
      --cold-l2-mb 256 --out $R/fresh-cold 2>&1 | tail -1
  grep -A14 "## Summary" $R/fresh-cold/heldout_gemm.md | head -16
fi
true
