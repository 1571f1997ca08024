# Compute-sanitizer racecheck and synccheck over every attention GPU test at the
# then-final kernels (earlier runs that day ran them over subsets).  Attention cache in .nova-cache.
# Results: bench/results/h200-2026-12-01/g/call7
OUT=$OUT STAGES="sanitizer" SAN_TOOLS="synccheck racecheck" SAN_TESTS=tests/test_attention_gpu.py SAN_S=280 \
  bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|SUMMARY|exit" | tail -n 12
