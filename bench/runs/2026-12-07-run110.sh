#!/bin/bash
# Device run 110, one call.  (a) The Hopper attention kernels with an additive bias (an attention mask):
# the masked GPU tests on the derived kernels and with NOVA_ATTENTION_HOPPER=force, then seed 20261216's
# held-out attention draw (run 105: its ten masked problems on mma.sync).  (b) The skinny GEMM with a
# chunk's first loads of B issued before its staging of A (SkinnySchedule.b_first): its GPU tests, then
# seed 20261216's GEMM draw (its decode rows).
# Host, for T = h100 and h200 (PYTHONPATH with transformers 5.17): into `.nova-cache-run110`,
# `python3 tests/test_attention_mask_gpu.py --target T --build`, `precompile_attention` of every
# `nova.bench.attention.GPU_TEST_CASES` problem and `nova.bench.heldout attention --count 40 --seed
# 20261216 --precompile --target T`; into `.nova-cache-run109`, `nova.bench.heldout gemm --count 100
# --seed S --precompile --target T` (S = 20261216, 20261217, 20261218) and `python3
# tests/test_skinny_gpu.py --target T --build`; `.nova-cache-run110.txz`, `.nova-cache-run109.txz`.
. bench/runs/device_env.sh run110 .nova-cache-run110
[ -d .nova-cache-run109 ] || tar xf .nova-cache-run109.txz
timeout 140 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_mask_gpu.py 2>&1 | tail -6 \
    | tee $R/attention_mask_gpu_tests.log
mkdir -p $R/attention
timeout 170 python3 -m nova.bench.heldout attention --count 40 --seed 20261216 --out $R/attention 2>&1 | tail -1
grep -A16 "## Summary" $R/attention/heldout_attention.md | head -18
grep -E "mask" $R/attention/heldout_attention.md | cut -c1-160
export NOVA_CACHE_DIR=$PWD/.nova-cache-run109
timeout 80 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_skinny_gpu.py 2>&1 | tail -4 \
    | tee $R/skinny_gpu_tests.log
mkdir -p $R/gemm-20261216
timeout 170 python3 -m nova.bench.heldout gemm --count 100 --seed 20261216 --settle-s 0.2 --graph-settle-s 0.1 \
    --out $R/gemm-20261216 2>&1 | tail -1
grep -A2 "## Summary" -A3 $R/gemm-20261216/heldout_gemm.md | tail -2
grep -E "^\| #(16|20|23|40|64|67|76|84) " $R/gemm-20261216/heldout_gemm.md | cut -c1-150
true
