# The 128x192 ping-pong GPU cases after the register rule's last change (1000x1024x520
# TN and 4095x4104x1000 fp16 NT, TMA store), racecheck over the shortest of them, and the tensor maps' L2
# promotion left open by h/call8: ragged_squares.json (BF16) at the per-map rule (default) vs 256 B on
# every map (NOVA_TMA_L2_PROMOTION=3), in one call.
# Results: bench/results/h200-2026-12-01/i/call5
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
timeout 60 python3 -m pytest -m gpu tests/test_runtime_gpu.py -k "pingpong_wide" -q -p no:cacheprovider > $OUT/gpu-tests.txt 2>&1
tail -n 1 $OUT/gpu-tests.txt
timeout 150 compute-sanitizer --tool racecheck --report-api-errors no --target-processes all python3 -m pytest -m gpu \
  tests/test_runtime_gpu.py -k "pingpong_wide and 1000x1024" -q -p no:cacheprovider > $OUT/sanitizer-racecheck.txt 2>&1
echo "exit $?" >> $OUT/sanitizer-racecheck.txt; grep -E "RACECHECK SUMMARY|passed|failed|^exit" $OUT/sanitizer-racecheck.txt | tail -n 3
for l2 in default 3; do
  ( [ $l2 = default ] || export NOVA_TMA_L2_PROMOTION=$l2; OUT=/tmp/l2-$$ timeout 70 bash bench/train_gemms_device.sh \
    --suite bench/suites/ragged_squares.json --dtypes bf16 --rounds 5 --budget-s 55 2>&1 | grep -E "geomean" | tail -1 )
  mkdir -p $OUT/l2promo-$l2; cp /tmp/l2-$$/train-gemms/train_gemms.json $OUT/l2promo-$l2/ 2>/dev/null; rm -rf /tmp/l2-$$; done
echo "== done $(date +%T)"
