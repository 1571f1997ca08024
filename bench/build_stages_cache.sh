#!/usr/bin/env bash
# Host (MLIR, no GPU): every kernel of `bench/device_stages.sh`'s stages into one cache directory —
# the GPU tests' kernels (runtime, executor, attention: each test file prints its precompile
# commands; the pointwise, optimizer and skinny GEMM kernels' tests build theirs), the GPT training steps (compile tests, train stage), the training-GEMM suite,
# the held-out GEMM draw (heldout: HELDOUT_COUNT, HELDOUT_SEED; default the 40 of seed 20261203, decode shapes
# included) and the attention benchmark.  Idempotent: kernels already in the cache are skipped; stale ones (an older
# kernel ABI) are pruned at the end.
#   bash bench/build_stages_cache.sh                 # -> .nova-cache/ (carry it: `run --carry .nova-cache`)
#   PARTS="tests attention" bash bench/build_stages_cache.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export NOVA_CACHE_DIR=${NOVA_CACHE_DIR:-.nova-cache} PYTHONPATH=${PYTHONPATH:-$PWD}
TARGET=${TARGET:-h200}
for part in ${PARTS:-tests attention train suite}; do
  echo "== $part $(date +%T)"
  case $part in
    # lines may start with environment assignments (NOVA_CLUSTER=2x1 nova precompile ...): eval them
    tests) { python3 tests/test_runtime_gpu.py --target "$TARGET"; python3 tests/test_executor_gpu.py --target "$TARGET"; } \
             | while read -r cmd; do eval "$cmd --cache-dir $NOVA_CACHE_DIR" < /dev/null | tail -n 1; done
           for t in pointwise optimizer; do python3 "tests/test_${t}_gpu.py" --target "$TARGET" | tail -n 1; done
           python3 tests/test_skinny_gpu.py --target "$TARGET" --build | tail -n 1 ;;
    heldout) python3 -m nova.bench.heldout gemm --count "${HELDOUT_COUNT:-40}" --seed "${HELDOUT_SEED:-20261203}" \
               --precompile --target "$TARGET" | tail -n 1 ;;
    attention) python3 -m nova.bench.attention --precompile --target "$TARGET" --jobs "${JOBS:-2}" | tail -n 3 ;;
    train) nova precompile train gpt42m --batch 32 --target "$TARGET" --cache-dir "$NOVA_CACHE_DIR" | tail -n 2
           nova precompile train gpt144m --batch 16 --target "$TARGET" --cache-dir "$NOVA_CACHE_DIR" | tail -n 2 ;;
    suite) nova precompile gemm --suite bench/suites/train_gemms.json --dtype tf32,bf16 --target "$TARGET" \
             --cache-dir "$NOVA_CACHE_DIR" | tail -n 1 ;;
  esac
done
nova cache prune --cache-dir "$NOVA_CACHE_DIR" | tail -n 1     # an ABI bump's stale generation: the carry is 64 MiB
du -sh "$NOVA_CACHE_DIR"
