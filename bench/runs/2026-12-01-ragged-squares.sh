# Why BF16 3000^3 trails cuBLAS (0.79 with 192x192 tiles,
# bench/results/h200-2026-12-01/h/call3): ragged M/N/K
# one at a time against 3072 and 2944 (bench/suites/ragged_squares.json), with 1-2 and with 3 consumer
# warpgroups, in the suite harness (cuBLAS and XLA beside).
# Results: bench/results/h200-2026-12-01/h/call7
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
for w in 0 1; do
  NOVA_WIDE_CONSUMERS=$w OUT=/tmp/s13-rs-$w timeout 100 bash bench/train_gemms_device.sh --suite bench/suites/ragged_squares.json \
    --dtypes bf16 --rounds 5 --budget-s 80 2>&1 | grep -E "geomean" | tail -1
  mkdir -p $OUT/ragged-w$w; cp /tmp/s13-rs-$w/train-gemms/train_gemms.json $OUT/ragged-w$w/ 2>/dev/null; done
echo "== done $(date +%T)"
