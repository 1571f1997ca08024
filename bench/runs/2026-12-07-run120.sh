#!/bin/bash
# Device run 120: attention calls with a bias take call plans (in place, or through the float32 copy):
# the masked-attention GPU tests (the planned calls among them), then seed 20261218's attention draw
# (run 114 timed it before: its masked problems took the general path on every call); then a fresh GEMM
# draw (seed 20261219, never timed before) on the skinny kernel's chunk fix.
# Host: NOVA_CACHE_DIR=.nova-cache-run120 (run 114's cache), for T = h100 and h200:
# `python3 tests/test_attention_mask_gpu.py --target T --build` (PYTHONPATH with transformers 5.17),
# `nova.bench.heldout attention --count 40 --seed 20261218 --precompile --target T`, `nova.bench.heldout gemm
# --count 100 --seed 20261219 --precompile --target T`; `.nova-cache-run120.txz`.
. bench/runs/device_env.sh run120 .nova-cache-run120
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_attention_mask_gpu.py \
    tests/test_attention_call_plan.py -k "not hugging_face" 2>&1 | tail -4 | tee $R/attention_mask_gpu_tests.log
mkdir -p $R/attention-20261218
timeout 150 python3 -m nova.bench.heldout attention --count 40 --seed 20261218 --out $R/attention-20261218 2>&1 | tail -1
grep -A16 "## Summary" $R/attention-20261218/heldout_attention.md | head -18
mkdir -p $R/gemm-20261219
timeout 185 python3 -m nova.bench.heldout gemm --count 100 --seed 20261219 --settle-s 0.2 --graph-settle-s 0.1 \
    --out $R/gemm-20261219 2>&1 | tail -1
grep -A8 "## Summary" $R/gemm-20261219/heldout_gemm.md | head -9
true
