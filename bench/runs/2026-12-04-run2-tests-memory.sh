#!/bin/bash
# Device run 2 of 2026-12-04: GPU tests of the merged work; GPT-144M's memory under a 12 GiB budget.
# Host first (NOVA_CACHE_DIR=.nova-cache): python tests/test_rows_gpu.py --target h200 (+ the commands it prints);
#   python3 tests/test_executor_gpu.py --target h200 | sh; python tests/test_pointwise_indexing_gpu.py --target h200;
#   python tests/test_embedding_gpu.py --build --target h200;
#   nova precompile train gpt144m --batch 16 [--memory-budget 12GiB] --target h200
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
python3 -m pytest -q -n 0 -m gpu tests/test_rows_gpu.py tests/test_executor_gpu.py tests/test_outside_arena.py \
    tests/test_launch_workspaces.py tests/test_pointwise_indexing_gpu.py tests/test_embedding_gpu.py 2>&1 | tail -25 \
    | tee $OUT/gpu_tests.log
B="--model gpt144m --batch 16 --steps 30 --warmup 5 --timed 20 --repeats 3"
python3 -m nova.bench.train --framework nova $B --memory-budget 12GiB --no-memory-cap --out $OUT/gpt144m-12GiB-uncapped 2>&1 | tail -3
python3 -m nova.bench.train --framework nova $B --memory-budget 12GiB --out $OUT/gpt144m-12GiB 2>&1 | tail -3
python3 -m nova.bench.train --framework nova $B --out $OUT/gpt144m 2>&1 | tail -3
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/gpt144m*/nova-*.json")):
    r = json.load(open(f)); d = r.get("memory_diagnostic", {})
    print(f, r["status"], r.get("error", ""), "peak", r.get("memory", {}) and r["memory"]["peak_allocated_bytes"],
          "unexplained", d.get("unexplained_bytes"), "tok/s", r.get("tokens_per_s"))
PY
