# The training-GEMM suite at the then-final picks (three consumer warpgroups on
# GPT-144M's BF16 weight gradients), TF32 and BF16, then racecheck over two of the 192x192 runtime cases
# (h/call4's racecheck ran out of time on five).
# Results: bench/results/h200-2026-12-01/h/call5
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
OUT=/tmp/s13-suite timeout 340 bash bench/train_gemms_device.sh --dtypes tf32,bf16 --budget-s 300 2>&1 | grep -E "geomean" | tail -2
cp /tmp/s13-suite/train-gemms/train_gemms.md /tmp/s13-suite/train-gemms/train_gemms.json /tmp/s13-suite/train-gemms/clocks.csv $OUT/ 2>/dev/null
timeout 200 compute-sanitizer --tool racecheck --report-api-errors no --target-processes all python3 -m pytest -m gpu \
  tests/test_runtime_gpu.py -k "3000x700x16000 or 768x3072x16384-bf16-TN" -q -p no:cacheprovider > $OUT/sanitizer-racecheck.txt 2>&1
echo "exit $?" >> $OUT/sanitizer-racecheck.txt; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|passed|failed|^exit" $OUT/sanitizer-racecheck.txt | tail -n 4
echo "== done $(date +%T)"
