# The persistent Hopper forward (default) — attention GPU tests, memcheck on them,
# the benchmark (BF16/FP16), then the same BF16 benchmark with NOVA_ATTENTION_PERSISTENT=0 (A/B).
# Results: bench/results/h200-2026-12-01/c/call4
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
echo "== memcheck attention gpu tests"; timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 5 \
  python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider -x > $OUT/memcheck-attention.txt 2>&1
grep -E "ERROR SUMMARY|passed|failed|Error" $OUT/memcheck-attention.txt | tail -5
OUT=$OUT STAGES=attention ATTN_DTYPES=bf16,fp16 ATTN_BENCH_S=200 bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|B[0-9]+\.H" | tail -12
mkdir -p $OUT/nonpersistent; echo "== NOVA_ATTENTION_PERSISTENT=0"
NOVA_ATTENTION_PERSISTENT=0 timeout 150 python3 -m nova.bench.attention --out $OUT/nonpersistent --dtypes bf16 2>&1 | grep -E "B[0-9]+\.H" | tail -4
