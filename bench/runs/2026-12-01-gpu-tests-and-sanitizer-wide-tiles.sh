# The GPU tests at the final code (runtime, executor, compile: the GPT-42M step vs
# eager), and compute-sanitizer memcheck + racecheck over the runtime cases with the new kernels
# (192-wide tiles, 16-byte split-K / stream-K partial stores, the moved cluster case).
# Results: bench/results/h200-2026-12-01/e/call8
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
OUT=$OUT STAGES="tests sanitizer" TESTS="tests/test_runtime_gpu.py tests/test_executor_gpu.py tests/test_compile_gpu.py" TESTS_S=300 \
  SAN_TESTS=tests/test_runtime_gpu.py SAN_TOOLS="memcheck racecheck" SAN_S=120 \
  SAN_K="777 or 2500 or 3072x1000 or 768x3072 or 512x512 or 300x200 or stream_k or 2000x1500 or 3000x5000" \
  bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|^exit" | tail -12
