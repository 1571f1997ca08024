# The runtime's
# GPU tests, the oracle over the BF16 dW shapes' kernel structures (bench/suites/dw_192.txt) and two
# perf-suite shapes that now pick 128x192, then the training-GEMM suite (TF32, BF16).
# Results: bench/results/h200-2026-12-01/e/call7
# Host: PARTS="tests suite" bash bench/build_stages_cache.sh; nova tune gemm --suite bench/suites/dw_192.txt --dtype bf16
#   --trans-a --target h200 --exhaustive --limit 40 --strategy structure --jobs 2 --cache-dir .nova-cache-dw (and
#   3000x5000x700, 1536^3 BF16 NN at --limit 30 --manifest .nova-cache-dw/perf-manifest.json)
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p $OUT
NOVA_CACHE_DIR=.nova-cache timeout 200 python3 -m pytest -m gpu tests/test_runtime_gpu.py -q -p no:cacheprovider -x 2>&1 | tail -n 8 | tee $OUT/gpu-tests.txt
for m in tune-manifest perf-manifest; do
  NOVA_CACHE_DIR=.nova-cache-dw timeout 150 python3 -m nova.bench.oracle --manifest .nova-cache-dw/$m.json --out $OUT --tag $m \
    --rounds 3 --budget-s 120 2>&1 | grep -E "pick|best|geomean" | tail -n 14; done
NOVA_CACHE_DIR=.nova-cache OUT=/tmp/s7 timeout 280 bash bench/train_gemms_device.sh --dtypes tf32,bf16 --budget-s 240 2>&1 | grep -E "geomean" | tail -4
cp /tmp/s7/train-gemms/train_gemms.md /tmp/s7/train-gemms/train_gemms.json $OUT/ 2>/dev/null
echo "== done $(date +%T)"
