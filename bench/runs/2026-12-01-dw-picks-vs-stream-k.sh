# The BF16 dW shapes in the training-GEMM harness, the configurator's picks vs
# NOVA_STREAM_K=1.  Host: both sets of kernels into one small cache:
#   NOVA_STREAM_K=1 nova precompile gemm --suite bench/suites/train_dw.json --dtype bf16 --target h200 --cache-dir .nova-cache-sk
#   nova precompile gemm --suite bench/suites/train_dw.json --dtype bf16 --target h200 --cache-dir .nova-cache-sk
# Results: bench/results/h200-2026-12-01/e/call6-streamk
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache-sk NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p $OUT/default $OUT/streamk
timeout 200 python3 -m nova.bench.train_gemms --device --suite bench/suites/train_dw.json --dtypes bf16 --out $OUT/default \
  --settle-s 0.5 --rounds 3 --budget-s 150 2>&1 | grep -E "^\["
NOVA_STREAM_K=1 timeout 200 python3 -m nova.bench.train_gemms --device --suite bench/suites/train_dw.json --dtypes bf16 \
  --out $OUT/streamk --settle-s 0.5 --rounds 3 --budget-s 150 2>&1 | grep -E "^\["
