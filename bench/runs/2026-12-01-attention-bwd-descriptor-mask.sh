# The wgmma dK/dV fix (ATTN_ABI 8: descriptor start masked to 14 bits) with the
# wgmma backward on: the localisation probe, every attention GPU test, memcheck on them, the benchmark.
# Results: bench/results/h200-2026-12-01/c/call2
export NOVA_ATTENTION_HOPPER_BWD=1 PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
echo "== probe"; timeout 150 python3 bench/probes/attention_cases.py run 2>&1
echo "== memcheck attention gpu tests"; timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 5 \
  python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider -x > $OUT/memcheck-attention.txt 2>&1
grep -E "ERROR SUMMARY|passed|failed" $OUT/memcheck-attention.txt | tail -3
OUT=$OUT STAGES=attention ATTN_DTYPES=bf16,fp16,tf32 ATTN_BENCH_S=300 bash bench/device_stages.sh 2>&1 | tail -40
