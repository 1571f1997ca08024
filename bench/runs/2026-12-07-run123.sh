#!/bin/bash
# Device run 123 (branch hopper-fwd-split): the Hopper forward split over its keys.  Its GPU cases (the
# three new GPU_TEST_CASES, derived and with the Hopper kernels forced; the masked B2 H2 T1700 D128 TF32
# case), then seed 20261218's attention draw (run 114 timed it with the mma.sync forward split at #25
# and #16).
# Host: .nova-cache-run123 = run 120's cache plus, for T = h100 and h200, the new cases' kernels
# (`nova.bench.attention._precompile_one`, modes None and "force"), `python3 tests/test_attention_mask_gpu.py
# --target T --build` (PYTHONPATH with transformers 5.17) and `nova.bench.heldout attention --count 40
# --seed 20261218 --precompile --target T`; `.nova-cache-run123.txz`.
. bench/runs/device_env.sh run123 .nova-cache-run123
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_gpu.py tests/test_attention_mask_gpu.py \
    -k "T1700 or T1000x3001 or T700x2100" 2>&1 | tail -4 | tee $R/attention_split_gpu_tests.log
mkdir -p $R/attention-20261218
timeout 200 python3 -m nova.bench.heldout attention --count 40 --seed 20261218 --out $R/attention-20261218 2>&1 | tail -1
grep -A16 "## Summary" $R/attention-20261218/heldout_attention.md | head -18
grep -E "^\| #(5|7|16|25|26|27) " $R/attention-20261218/heldout_attention.md
true
