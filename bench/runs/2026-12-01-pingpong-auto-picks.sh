# The model's ping-pong picks (AUTO_PINGPONG on): runtime, executor and compile GPU
# tests (the whole GPT step against eager), the training-GEMM suite (TF32, BF16) and the GPT-42M step.
# Results: bench/results/h200-2026-12-01/d/call6
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
OUT=$OUT STAGES="tests suite train" TESTS="tests/test_runtime_gpu.py tests/test_executor_gpu.py tests/test_compile_gpu.py" \
  TESTS_S=150 SUITE_S=270 SUITE_DTYPES=tf32,bf16 TRAIN_S=150 bash bench/device_stages.sh 2>&1 | \
  grep -E "passed|failed|geomean|tok|Error" | tail -12
echo "== done $(date +%T)"
