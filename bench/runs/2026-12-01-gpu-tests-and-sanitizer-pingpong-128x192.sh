# The GPU tests at the final picks (runtime, executor, compile: the GPT-42M step against
# eager), compute-sanitizer (memcheck, synccheck, racecheck) over the 128x192 ping-pong cases, and the TF32
# moved shapes i/call3's budget left out (final picks).
# Results: bench/results/h200-2026-12-01/i/call4
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
timeout 260 python3 -m pytest -m gpu tests/test_runtime_gpu.py tests/test_executor_gpu.py tests/test_compile_gpu.py -q \
  -p no:cacheprovider > $OUT/gpu-tests.txt 2>&1; tail -n 2 $OUT/gpu-tests.txt
for tool in memcheck synccheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --report-api-errors no --target-processes all python3 -m pytest -m gpu \
    tests/test_runtime_gpu.py -k "pingpong_wide" -q -p no:cacheprovider > $OUT/sanitizer-$tool.txt 2>&1; echo "exit $?" >> $OUT/sanitizer-$tool.txt
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|^exit" $OUT/sanitizer-$tool.txt | tail -n 3; done
OUT=/tmp/mv-$$ timeout 70 bash bench/train_gemms_device.sh --suite bench/suites/consumers_moves_tf32.json --dtypes tf32 --rounds 5 \
  --budget-s 60 2>&1 | grep -E "geomean" | tail -1
mkdir -p $OUT/moves-tf32-final; cp /tmp/mv-$$/train-gemms/train_gemms.json $OUT/moves-tf32-final/ 2>/dev/null
echo "== done $(date +%T)"
