# Racecheck over the strided-operand attention GPU tests that the full racecheck's 280 s
# (bench/results/h200-2026-12-01/g/call7) did not reach (fused, separate and padded layouts, plain and
# forced-Hopper).  Attention cache in .nova-cache.
# Results: bench/results/h200-2026-12-01/g/call8
OUT=$OUT STAGES="sanitizer" SAN_TOOLS="racecheck" SAN_TESTS=tests/test_attention_gpu.py \
  SAN_K="fused or separate or padded" SAN_S=230 bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|SUMMARY|exit" | tail -n 6
