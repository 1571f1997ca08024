# The split-K fixup (the tile's last slice adds the partials inside the GEMM):
# the runtime's GPU tests (the fixup cases forced with NOVA_SPLIT_REDUCTION=fixup among them), memcheck
# and synccheck over the fixup tests, then the weight-gradient suite (bench/suites/train_dw.json) twice in
# the training-GEMM harness: every split through the workspace + reduction kernel, then every split by
# the fixup (cuBLAS and XLA timed in both runs).
# Results: bench/results/h200-2026-12-01/h/call1
# Host: PARTS="tests suite" NOVA_CACHE_DIR=.nova-cache-s13 bash bench/build_stages_cache.sh, and for r in
#   workspace fixup: NOVA_SPLIT_REDUCTION=$r nova precompile gemm --suite bench/suites/train_dw.json --dtype tf32,bf16
#   --target h200 --cache-dir .nova-cache-s13; carried as .nova-cache.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv | tee $OUT/smi.txt
timeout 220 python3 -m pytest -m gpu tests/test_runtime_gpu.py -q -p no:cacheprovider 2>&1 | tail -n 15 | tee $OUT/gpu-tests.txt
for tool in memcheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool --report-api-errors no --target-processes all python3 -m pytest -m gpu \
    tests/test_runtime_gpu.py -k fixup -q -p no:cacheprovider > $OUT/sanitizer-$tool.txt 2>&1; echo "exit $?" >> $OUT/sanitizer-$tool.txt
  grep -E "ERROR SUMMARY|passed|failed|^exit" $OUT/sanitizer-$tool.txt | tail -n 4; done
for r in workspace fixup; do
  NOVA_SPLIT_REDUCTION=$r OUT=/tmp/s13-$r timeout 150 bash bench/train_gemms_device.sh --suite bench/suites/train_dw.json \
    --dtypes bf16,tf32 --rounds 5 --budget-s 125 2>&1 | grep -E "geomean|worst" | tail -4
  mkdir -p $OUT/dw-$r; cp /tmp/s13-$r/train-gemms/train_gemms.md /tmp/s13-$r/train-gemms/train_gemms.json $OUT/dw-$r/ 2>/dev/null; done
echo "== done $(date +%T)"
