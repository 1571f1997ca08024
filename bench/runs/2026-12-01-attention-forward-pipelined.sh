# The forward pipelined in a warpgroup (ATTN_ABI 9) — attention GPU tests under
# memcheck, the benchmark (model's choice), then BF16 with NOVA_ATTENTION_HOPPER=force (the Hopper
# forward measured at D64 too).
# Results: bench/results/h200-2026-12-01/c/call5
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
echo "== memcheck attention gpu tests"; timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 5 \
  python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider -x > $OUT/memcheck-attention.txt 2>&1
grep -E "ERROR SUMMARY|passed|failed|Error" $OUT/memcheck-attention.txt | tail -5
OUT=$OUT STAGES=attention ATTN_DTYPES=bf16,fp16 ATTN_BENCH_S=200 bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|B[0-9]+\.H" | tail -12
mkdir -p $OUT/forced; echo "== NOVA_ATTENTION_HOPPER=force"
NOVA_ATTENTION_HOPPER=force timeout 150 python3 -m nova.bench.attention --out $OUT/forced --dtypes bf16 2>&1 | grep -E "B[0-9]+\.H" | tail -4
