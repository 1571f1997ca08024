#!/usr/bin/env bash
# The whole device job, from a cache built on the host (bench/build_device_cache.sh):
#   bash bench/device_run.sh [check|bench|oracle|all]     (on the GPU machine; results under $OUT)
# check: GPU tests, correctness sweep, compute-sanitizer memcheck + racecheck; bench: Nova vs cuBLAS
# (with SM clock/power samples), the K sweep, the L2/DRAM bandwidth probe and the host cost per call; oracle: the wgmma oracle of the cache's
# manifest (bench/README.md); all: everything (the oracle when the cache has its manifest).
# Nova runs from this tree (PYTHONPATH=.): the jobs are modules of nova.bench and the nova CLI, run with python3 -m.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1 NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache
OUT=${OUT:-bench/results}; mkdir -p "$OUT"
[ -d .nova-cache ] || tar xzf .nova-cache.tgz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/log.txt"
python3 -c "import torch, cuda.bindings; print('torch', torch.__version__, 'cuda-bindings', cuda.bindings.__version__)" | tee -a "$OUT/log.txt"
STAGE=${1:-all}
if [ "$STAGE" = all ] || [ "$STAGE" = check ]; then
echo "== gpu tests" | tee -a "$OUT/log.txt"
timeout 150 python3 -m pytest -m gpu tests/test_runtime_gpu.py -q -p no:cacheprovider 2>&1 | tail -n 25 | tee -a "$OUT/log.txt"
echo "== nova-config --target auto (from_device)" | tee -a "$OUT/log.txt"
python3 -m nova.cli.config explain matmul 4096 --target auto 2>&1 | grep -E "^gemm|Prediction|configured" | tee -a "$OUT/log.txt"
echo "== correctness sweep" | tee -a "$OUT/log.txt"
timeout 240 python3 -m nova.bench.correctness --out "$OUT" 2>&1 | tail -n 30 | tee -a "$OUT/log.txt"
for tool in memcheck racecheck; do
  echo "== compute-sanitizer $tool" | tee -a "$OUT/log.txt"
  # --report-api-errors no: torch and cuda-bindings probe driver entry points that may not exist
  # (cuGetProcAddress -> CUDA_ERROR_INVALID_VALUE); those are not kernel errors.
  timeout 200 compute-sanitizer --tool $tool --report-api-errors no --target-processes all \
      python3 -m nova.bench.correctness --suite bench/suites/sanitizer.txt --dtypes tf32,bf16,fp16 \
      --out /tmp/san --tag $tool > "$OUT/sanitizer-$tool.txt" 2>&1
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed, " "$OUT/sanitizer-$tool.txt" | tee -a "$OUT/log.txt"
done
fi
if [ "$STAGE" = all ] || [ "$STAGE" = bench ]; then
echo "== benchmark (SM clock and power sampled every 50 ms into clocks.csv)" | tee -a "$OUT/log.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,nounits -lms 50 > "$OUT/clocks.csv" &
SMI=$!
timeout 500 python3 -m nova.cli.main bench gemm --suite bench/suites/perf.txt --dtype tf32,bf16 --out "$OUT" 2>&1 | tail -n 40 | tee -a "$OUT/log.txt"
echo "== K sweep (bench/suites/ksweep.txt: per-tile fixed cost vs main loop)" | tee -a "$OUT/log.txt"
timeout 200 python3 -m nova.cli.main bench gemm --suite bench/suites/ksweep.txt --dtype tf32,bf16 --out "$OUT" --tag ksweep 2>&1 | tail -n 16 | tee -a "$OUT/log.txt"
kill $SMI
echo "== L2 and DRAM bandwidth ceilings (nova.bench.l2_probe)" | tee -a "$OUT/log.txt"
timeout 120 python3 -m nova.bench.l2_probe --out "$OUT" 2>&1 | tail -n 30 | tee -a "$OUT/log.txt"
echo "== host overhead per call (64^3)" | tee -a "$OUT/log.txt"
timeout 120 python3 -m nova.bench.host_profile --out "$OUT" --shapes 64x64x64 --dtypes tf32,bf16 2>&1 | grep "^shape=" | tee -a "$OUT/log.txt"
fi
if [ "$STAGE" = oracle ] || { [ "$STAGE" = all ] && [ -f .nova-cache/oracle-wgmma.json ]; }; then
echo "== wgmma oracle (every candidate of .nova-cache/oracle-wgmma.json timed, checked against float64)" | tee -a "$OUT/log.txt"
timeout 400 python3 -m nova.bench.oracle --manifest .nova-cache/oracle-wgmma.json --out "$OUT" --tag oracle-wgmma 2>&1 | tail -n 45 | tee -a "$OUT/log.txt"
fi
