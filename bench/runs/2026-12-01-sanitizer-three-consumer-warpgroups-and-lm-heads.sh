# Compute-sanitizer (memcheck, synccheck, racecheck) over the runtime tests of the
# 192x192 three-consumer-warpgroup kernels (the five CASES and the 4x1 cluster case on 192-row tiles), then
# the two LM heads (bench/suites/lm_heads.json, BF16) in the suite harness under the default pick
# (128x256 cooperative, TMA store), NOVA_PINGPONG=1 (128x128 ping-pong, a 0.3% model tie that measured 8%
# faster before) and NOVA_CLUSTER=1x2 / 2x1 (XLA runs 176x128 tiles in a 1x2 cluster).
# Results: bench/results/h200-2026-12-01/h/call4
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
K="768x3072x16384-bf16-TN or 3000x700x16000 or 3000x3000x3000 or 12288x1536x1536 or 2900x3000x1000"
for tool in memcheck synccheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --report-api-errors no --target-processes all python3 -m pytest -m gpu \
    tests/test_runtime_gpu.py -k "$K" -q -p no:cacheprovider > $OUT/sanitizer-$tool.txt 2>&1; echo "exit $?" >> $OUT/sanitizer-$tool.txt
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|^exit" $OUT/sanitizer-$tool.txt | tail -n 4; done
for v in default NOVA_PINGPONG=1 NOVA_CLUSTER=1x2 NOVA_CLUSTER=2x1; do d=$OUT/lm-${v//[^A-Za-z0-9]/_}
  ( [ $v = default ] || export $v; OUT=/tmp/lm-$$ timeout 70 bash bench/train_gemms_device.sh --suite bench/suites/lm_heads.json \
    --dtypes bf16 --rounds 5 --budget-s 55 2>&1 | grep -E "geomean" | tail -1 )
  mkdir -p $d; cp /tmp/lm-$$/train-gemms/train_gemms.json $d/ 2>/dev/null; rm -rf /tmp/lm-$$; done
echo "== done $(date +%T)"
