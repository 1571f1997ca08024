# The training steps with the then-current attention (head-order forward, TF32
# transposes in flight).  The compile and executor GPU tests, then GPT-42M (b32 x 512) and GPT-144M
# (b16 x 1024), TF32, eager and Nova in one process each.  Run from the repository root with the
# training cache (PARTS="tests train") in .nova-cache.
# Results: bench/results/h200-2026-12-01/g/call5
mkdir -p $OUT/gpt42m $OUT/gpt144m
OUT=$OUT/gpt42m STAGES="tests train" TESTS="tests/test_compile_gpu.py tests/test_executor_gpu.py" MODEL=gpt42m BATCH=32 \
  FRAMEWORKS=eager,nova TRAIN_S=200 bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|tok|peak|rror" | tail -12
OUT=$OUT/gpt144m STAGES="train" MODEL=gpt144m BATCH=16 FRAMEWORKS=eager,nova TRAIN_S=260 \
  bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|tok|peak|rror" | tail -12
