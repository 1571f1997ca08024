# The two-warpgroup TF32 kernels' producers at 88 registers (3 transposes in
# flight) where the consumers' tile fits.  GPU tests, the TF32 benchmark, CUPTI kernel times, memcheck
# + racecheck over the TF32 cases.  Run from the repository root with the attention cache in .nova-cache.
# Results: bench/results/h200-2026-12-01/g/call4
OUT=$OUT STAGES="attention kerneltimes sanitizer" ATTN_DTYPES=tf32 KT_MODES=auto KT_DTYPES=tf32 \
  SAN_TOOLS="memcheck racecheck" SAN_TESTS=tests/test_attention_gpu.py SAN_K="tf32" SAN_S=200 \
  bash bench/device_stages.sh 2>&1 | grep -v Warning | tail -n 30
