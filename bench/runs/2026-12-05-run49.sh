#!/bin/bash
# Device run 49: the most of runs 45 and 46 that one call holds, for a session with one call's budget.
# The GPU tests of the kernels built since the last device run (GEMM epilogues, rows with dx casts and
# dy parts, the clipping's multi-tensor map, pointwise indexing, grouped-query attention through the
# casts, the executor's host offload), GPT-42M against torch.compile, GPT-144M batch 24 inside 12 GiB
# (the offload's plan).  The run-45/46 cache (`.nova-cache.txz`; both scripts' headers build it).
#   bash bench/runs/2026-12-05-run49.sh
tar xf .nova-cache.t*z
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) STEP_TARGET=h200 ;; *H100*) STEP_TARGET=h100 ;; *) STEP_TARGET=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run49-$STEP_TARGET; mkdir -p $R
timeout 280 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf tests/test_gemm_epilogue_gpu.py \
    tests/test_rows_gpu.py tests/test_clipping_gpu.py tests/test_pointwise_indexing_gpu.py tests/test_grouped_query.py \
    "tests/test_executor_gpu.py::test_host_offloads_run_on_copy_streams_inside_the_cuda_graph" > $R/gpu_tests.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -12
NOVA_TARGET=$STEP_TARGET timeout 160 python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m \
    --batch 32 --steps 40 --warmup 5 --timeout 140 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
NOVA_TARGET=$STEP_TARGET timeout 100 python3 -m nova.bench.train --framework nova --model gpt144m --memory-budget 12GiB \
    --steps 30 --warmup 5 --timed 10 --repeats 1 --batch 24 --out $R/gpt144m-b24-12GiB 2>&1 | grep -E "steady|peak|error" | head -4
rm -f $R/*/summary-*
