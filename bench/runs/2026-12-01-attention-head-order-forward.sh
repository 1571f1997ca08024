# The persistent forward in head order and the dK/dV slot released by every
# consumer thread.  GPU tests + the TF32 and BF16 benchmark, each kernel's CUPTI time (auto picks) in
# head order and again in query order (A/B), memcheck over every attention GPU test, racecheck and
# synccheck over the dK/dV cases with one consumer warpgroup (TF32 D128, T = 1) and a GQA BF16 one.
# Run from the repository root with the attention cache in .nova-cache.
# Results: bench/results/h200-2026-12-01/g/call2
export PROBE="NOVA_ATTENTION_TILE_ORDER=query KT_DTYPES=tf32,bf16 timeout 120 python3 bench/probes/attention_kernel_times.py \
  /tmp/device-stages/kernel_times_query.json 2>&1 | grep '^B' | sed 's/^/query order: /'
echo '== memcheck, every attention GPU test'; timeout 200 compute-sanitizer --tool memcheck --report-api-errors no \
  python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider > /tmp/device-stages/sanitizer-memcheck-all.txt 2>&1
grep -E 'ERROR SUMMARY|passed|failed' /tmp/device-stages/sanitizer-memcheck-all.txt | tail -3"
OUT=$OUT STAGES="attention kerneltimes probe sanitizer" ATTN_DTYPES=tf32,bf16 KT_MODES=auto KT_DTYPES=tf32,bf16 \
  PROBE_S=330 SAN_TOOLS="racecheck synccheck" SAN_TESTS=tests/test_attention_gpu.py \
  SAN_K="(tf32 and D128) or T1x1 or T150x150" bash bench/device_stages.sh 2>&1 | grep -v Warning | tail -n 40
