# Compute-sanitizer racecheck and synccheck over the five runtime cases of the new
# kernels alone (192-wide tiles: registers, TMA store, swapped TF32, split-K with 16-byte partials).
# Results: bench/results/h200-2026-12-01/e/call11
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
OUT=$OUT STAGES="sanitizer" SAN_TESTS=tests/test_runtime_gpu.py SAN_TOOLS="racecheck synccheck" SAN_S=200 \
  SAN_K="777 or 2500 or 3072x1000 or (768x3072 and bf16 and not stream)" \
  bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|^exit|==" | tail -12
