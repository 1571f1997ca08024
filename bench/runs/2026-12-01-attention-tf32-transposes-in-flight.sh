# The TF32 transposes with units in flight (the one-warpgroup D128 dK/dV: 4).  GPU
# tests, the TF32 benchmark, each kernel's CUPTI time (auto picks), memcheck + racecheck + synccheck
# over the TF32 D128 and T = 1 cases.  Run from the repository root with the attention cache in .nova-cache.
# Results: bench/results/h200-2026-12-01/g/call3
OUT=$OUT STAGES="attention kerneltimes sanitizer" ATTN_DTYPES=tf32 KT_MODES=auto KT_DTYPES=tf32 \
  SAN_TOOLS="memcheck racecheck synccheck" SAN_TESTS=tests/test_attention_gpu.py \
  SAN_K="(tf32 and D128) or T1x1" bash bench/device_stages.sh 2>&1 | grep -v Warning | tail -n 30
