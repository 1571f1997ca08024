# The tensor maps' L2 promotion (NOVA_TMA_L2_PROMOTION: runtime-only, the
# same kernels) on the ragged squares of h/call7 (256 B, the default, measured there): does the 256-byte promotion overfetch when a row pitch
# is not a multiple of 128 B (3000^3: 112.6 us vs 3072^3's 88)?  Default picks (three warpgroups).
# Results: bench/results/h200-2026-12-01/h/call8
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
for l2 in 0 2; do
  NOVA_TMA_L2_PROMOTION=$l2 OUT=/tmp/s13-l2-$l2 timeout 65 bash bench/train_gemms_device.sh --suite bench/suites/ragged_squares.json \
    --dtypes bf16 --rounds 3 --budget-s 50 2>&1 | grep -E "geomean" | tail -1
  mkdir -p $OUT/l2promo-$l2; cp /tmp/s13-l2-$l2/train-gemms/train_gemms.json $OUT/l2promo-$l2/ 2>/dev/null; done
echo "== done $(date +%T)"
