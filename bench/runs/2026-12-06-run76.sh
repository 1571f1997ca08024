#!/bin/bash
# Device run 76: the skinny GPU tests under the new K-split rule (every case's kernel rebuilt:
# `python3 tests/test_skinny_gpu.py --target h200 --build` into `.nova-cache`), and on an H200 the GPT-42M
# step kernel by kernel and against torch.compile (the accumulate's search there).
tar xf .nova-cache.txz
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run76-$T; mkdir -p $R
NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache PYTHONPATH=. NOVA_TARGET=h200 timeout 200 \
    python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=short -rf tests/test_skinny_gpu.py > $R/gpu_tests.log 2>&1
tail -3 $R/gpu_tests.log
if [ $T = h200 ]; then
  export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T PYTHONUNBUFFERED=1
  timeout 90 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
  timeout 150 python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 40 \
      --warmup 5 --timeout 130 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
fi
