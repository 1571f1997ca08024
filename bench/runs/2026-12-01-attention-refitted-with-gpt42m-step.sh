# The then-final attention (persistent Hopper forward taken by the refitted
# model, D128 dK/dV at 24/240 with 64-row query tiles): GPU tests under memcheck, the benchmark in
# three dtypes (per-kernel CUDA-graph replay), then the GPT-42M training step (TF32: CODEGEN_ABI 9 GEMMs).
# Results: bench/results/h200-2026-12-01/c/call7
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
echo "== memcheck attention gpu tests"; timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 5 \
  python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider -x > $OUT/memcheck-attention.txt 2>&1
grep -E "ERROR SUMMARY|passed|failed|Error" $OUT/memcheck-attention.txt | tail -5
OUT=$OUT STAGES="attention train" ATTN_DTYPES=bf16,fp16,tf32 ATTN_BENCH_S=200 FRAMEWORKS=eager,nova TRAIN_S=220 \
  bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|B[0-9]+\.H|tok|peak|Error|nova|eager" | tail -30
