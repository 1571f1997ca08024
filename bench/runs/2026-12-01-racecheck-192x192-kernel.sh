# Racecheck over one whole three-consumer-warpgroup kernel (768x768x16384 BF16 dW,
# 192x192 tiles, split 8: 38 us, short enough for racecheck; h/call4 and h/call5 ran out of time on the longer ones),
# and the test itself plainly first.
# Results: bench/results/h200-2026-12-01/h/call6
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
timeout 60 python3 -m pytest -m gpu tests/test_runtime_gpu.py -k "768x768x16384" -q -p no:cacheprovider 2>&1 | tail -n 3
timeout 400 compute-sanitizer --tool racecheck --report-api-errors no --target-processes all python3 -m pytest -m gpu \
  tests/test_runtime_gpu.py -k "768x768x16384" -q -p no:cacheprovider > $OUT/sanitizer-racecheck.txt 2>&1
echo "exit $?" >> $OUT/sanitizer-racecheck.txt; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|passed|failed|^exit" $OUT/sanitizer-racecheck.txt | tail -n 4
echo "== done $(date +%T)"
