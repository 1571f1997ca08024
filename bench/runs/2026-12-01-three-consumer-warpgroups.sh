# Three consumer warpgroups, 192x192 tiles: the runtime's GPU tests (the
# 192x192 cases among them, and the 4x1 cluster case now on 192-row tiles), then A/B in the training-GEMM
# harness, NOVA_WIDE_CONSUMERS=0 (the picks before) against the default: the weight-gradient suite
# (bench/suites/train_dw.json) and the shapes whose picks moved beside two controls
# (bench/suites/wide_consumers.json), BF16 and TF32, cuBLAS and XLA timed in every run.
# Results: bench/results/h200-2026-12-01/h/call3
# Host: PARTS="tests suite" NOVA_CACHE_DIR=.nova-cache-w3 bash bench/build_stages_cache.sh, and for w in 0 1:
#   NOVA_WIDE_CONSUMERS=$w nova precompile gemm --suite <each suite> --dtype tf32,bf16 --target h200; carried as .nova-cache.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv | tee $OUT/smi.txt
timeout 200 python3 -m pytest -m gpu tests/test_runtime_gpu.py -q -p no:cacheprovider 2>&1 | tail -n 15 | tee $OUT/gpu-tests.txt
for suite in train_dw wide_consumers; do for w in 0 1; do
  NOVA_WIDE_CONSUMERS=$w OUT=/tmp/s13-$suite-$w timeout 130 bash bench/train_gemms_device.sh --suite bench/suites/$suite.json \
    --dtypes bf16,tf32 --rounds 5 --budget-s 110 2>&1 | grep -E "geomean" | tail -2
  mkdir -p $OUT/$suite-w$w; cp /tmp/s13-$suite-$w/train-gemms/train_gemms.md /tmp/s13-$suite-$w/train-gemms/train_gemms.json $OUT/$suite-w$w/ 2>/dev/null; done; done
echo "== done $(date +%T)"
