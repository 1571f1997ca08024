#!/usr/bin/env bash
# Device (GPU, no MLIR), attention phase 2: GPU tests, per-kernel tile variants, fwd+bwd benchmark.
#   bash bench/attention_variants_device.sh [tests] [variants] [bench]     (results under $OUT)
# Host first: python -m nova.bench.attention_variants --precompile && python -m nova.bench.attention --precompile
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1 NOVA_OFFLINE=1 NOVA_CACHE_DIR=${NOVA_CACHE_DIR:-.nova-cache}
OUT=${OUT:-bench/results/attention}; mkdir -p "$OUT"
[ -d "$NOVA_CACHE_DIR" ] || tar xzf .nova-cache-attention.tgz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/log.txt"
for stage in "${@:-tests variants bench}"; do
  case $stage in
    tests) echo "== attention gpu tests" | tee -a "$OUT/log.txt"
      timeout ${TT:-60} python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider 2>&1 | tail -n 30 | tee -a "$OUT/log.txt" ;;
    variants) echo "== per-kernel tile variants" | tee -a "$OUT/log.txt"
      timeout ${VT:-60} python3 -m nova.bench.attention_variants --out "$OUT" --iters 10 2>&1 | tee "$OUT/variants.txt" | tail -n 3 | tee -a "$OUT/log.txt" ;;
    bench) echo "== fwd+bwd benchmark (causal) vs torch SDPA" | tee -a "$OUT/log.txt"
      timeout ${BT:-60} python3 -m nova.bench.attention --out "$OUT" --dtypes "${DTYPES:-tf32,bf16}" --iters 10 2>&1 | tail -n 12 | tee -a "$OUT/log.txt" ;;
  esac
done
