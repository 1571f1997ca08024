#!/usr/bin/env bash
# Device (GPU, no MLIR): fused-attention check and benchmark from the host-built cache.
#   bash bench/attention_device.sh [check|bench|all]      (results under $OUT, default bench/results/attention)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1 NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=${NOVA_TARGET:-h200}
OUT=${OUT:-bench/results/attention}; mkdir -p "$OUT"
[ -d .nova-cache ] || tar xzf .nova-cache-attention.tgz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/log.txt"
STAGE=${1:-all}
if [ "$STAGE" = all ] || [ "$STAGE" = check ]; then
  echo "== attention gpu tests" | tee -a "$OUT/log.txt"
  timeout 300 python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider 2>&1 | tail -n 40 | tee -a "$OUT/log.txt"
fi
if [ "$STAGE" = all ] || [ "$STAGE" = bench ]; then
  echo "== attention benchmark (fwd+bwd, causal) vs torch SDPA backends" | tee -a "$OUT/log.txt"
  timeout 500 python3 -m nova.bench.attention --out "$OUT" --dtypes "${DTYPES:-tf32,bf16,fp16}" 2>&1 | tail -n 20 | tee -a "$OUT/log.txt"
fi
