# The hazard fixes on the device.  Attention (ATTN_ABI 9: S and dP without zeroed
# accumulators): GPU tests, benchmark BF16/FP16, CUPTI kernel times; GEMM (CODEGEN_ABI 11): runtime GPU
# tests (forced ping-pong cases included), the short-K training GEMMs cooperative (default) and ping-pong.
# Results: bench/results/h200-2026-12-01/d/call5
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
echo "== runtime gpu tests $(date +%T)"
timeout 120 python3 -m pytest -m gpu tests/test_runtime_gpu.py -q -p no:cacheprovider > $OUT/runtime-tests.txt 2>&1
tail -2 $OUT/runtime-tests.txt
OUT=$OUT STAGES="attention kerneltimes" ATTN_DTYPES=bf16,fp16 ATTN_BENCH_S=160 KT_MODES=auto bash bench/device_stages.sh 2>&1 | \
  grep -E "passed|failed|B[0-9]+\.H|Error" | tail -16
for mode in coop pingpong; do
  echo "== short-K $mode $(date +%T)"
  ( [ $mode = pingpong ] && export NOVA_PINGPONG=1; OUT=$OUT/shortk-$mode timeout 140 bash bench/train_gemms_device.sh \
      --suite bench/suites/short_k.json --dtypes tf32,bf16 --settle-s 0.5 --rounds 3 --budget-s 110 2>&1 | grep -E "geomean|\] " | tail -26 )
done
echo "== done $(date +%T)"
