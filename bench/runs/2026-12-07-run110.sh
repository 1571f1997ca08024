#!/bin/bash
# Device run 110: the Hopper attention kernels with an additive bias (an attention mask): the masked GPU
# tests on the derived kernels and with NOVA_ATTENTION_HOPPER=force (every masked case on the Hopper
# kernels where they can run), the attention GPU tests (unbiased kernels unchanged), then seed
# 20261216's held-out attention draw (run 105: its ten masked problems on mma.sync).
# Host (`.nova-cache-run110`, `.nova-cache-run110.txz`), for T = h100 and h200: `python3
# tests/test_attention_mask_gpu.py --target T --build` (PYTHONPATH with transformers 5.17),
# `precompile_attention` of every `nova.bench.attention.GPU_TEST_CASES` problem and
# `nova.bench.heldout attention --count 40 --seed 20261216 --precompile --target T`.
. bench/runs/device_env.sh run110 .nova-cache-run110
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_mask_gpu.py 2>&1 | tail -6 \
    | tee $R/attention_mask_gpu_tests.log
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_gpu.py \
    -k "test_forward_and_gradients_match_float64" 2>&1 | tail -4 | tee $R/attention_gpu_tests.log
mkdir -p $R/attention
timeout 240 python3 -m nova.bench.heldout attention --count 40 --seed 20261216 --out $R/attention 2>&1 | tail -1
grep -A16 "## Summary" $R/attention/heldout_attention.md | head -18
grep -E "mask" $R/attention/heldout_attention.md | cut -c1-160
true
