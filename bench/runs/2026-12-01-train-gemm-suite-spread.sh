# The training-GEMM suite again at the final code (TF32, BF16), for run-to-run spread.
# Results: bench/results/h200-2026-12-01/e/call9
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=/tmp/s9 timeout 300 bash bench/train_gemms_device.sh --dtypes tf32,bf16 --budget-s 260 2>&1 | grep -E "geomean" | tail -4
mkdir -p $OUT; cp /tmp/s9/train-gemms/train_gemms.md /tmp/s9/train-gemms/train_gemms.json /tmp/s9/train-gemms/clocks.csv $OUT/
