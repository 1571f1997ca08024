# The then-final attention.  GPU tests, the benchmark in TF32, BF16 and FP16 on
# the four benchmark shapes (a second D128 one added), each kernel's CUPTI time (TF32, BF16; auto picks).
# Run from the repository root with the attention cache in .nova-cache.
# Results: bench/results/h200-2026-12-01/g/call6
OUT=$OUT STAGES="attention kerneltimes" ATTN_DTYPES=tf32,bf16,fp16 KT_MODES=auto KT_DTYPES=tf32,bf16 \
  bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|^B[0-9]" | tail -n 30
