#!/bin/bash
# Device run 60: the rows kernels at their planned residency (the register cap) and a norm backward's
# residual loaded with the row (early loads).  Host builds (MLIR), into .nova-cache, then tar cJf:
#   NOVA_CACHE_DIR=$PWD/.nova-cache python tests/gpu_build.py --all --target h200
#   nova precompile train gpt42m | llama42m | llama42m --autocast bf16 --batch 32 --target h100|h200
#   PYTHONPATH=<transformers 5.17> nova precompile train hf-gpt2-42m --autocast bf16 --padded --clip-grad-norm 1.0 --batch 32 --target h100|h200
#   NOVA_TARGET=h100 python3 bench/probes/norm_backward_registers.py build    (and NOVA_TARGET=h200)
#   TARGET=h100 nova precompile gemm --suite bench/suites/perf.txt --dtype tf32,bf16 (and ksweep.txt): the calibration's GEMMs
#   bash bench/runs/2026-12-05-run60.sh first     the probe (old and new schedules side by side), the rows/compile/
#                                                 executor/clipping GPU tests, GPT-42M's step
#   bash bench/runs/2026-12-05-run60.sh second    Llama-42M FP32; the GEMM benchmark, K sweep and bandwidth probe
#                                                 of an H100 calibration (bench/device_run.sh bench, h100 kernels)
#   bash bench/runs/2026-12-05-run60.sh third     the HF GPT-2 bf16 recipe
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) T=h200 ;; *) T=h100 ;;
esac
R=$OUT/run60; mkdir -p $R
if [ "$1" = first ]; then
  tar xf .nova-cache.txz
  export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1 NOVA_CACHE_DIR=$PWD/.nova-cache
  NOVA_TARGET=$T timeout 60 python3 bench/probes/norm_backward_registers.py run $R/norm_backward_registers-$T.json \
      2>&1 | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()); continue
    r = json.loads(line); print(f\"{r['problem']:32s} {r['variant']:22s} {r['us']:7.2f} us {r['tb_per_s']:.3f} TB/s pred {r['predicted_us']} {r['row']} same {r['same_as_configured']} finite {r['finite']}\")"
  NOVA_TARGET=h200 timeout 220 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf \
      tests/test_rows_gpu.py tests/test_compile_gpu.py tests/test_executor_gpu.py tests/test_clipping_gpu.py > $R/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -14
  bash bench/runs/2026-12-05-run51.sh gpt42m
elif [ "$1" = second ]; then
  bash bench/runs/2026-12-05-run51.sh llama-fp32
  NOVA_TARGET=$T OUT=$R/calibration-$T bash bench/device_run.sh bench 2>&1 | grep -E "geomean|summary|DRAM|L2|copy|==" | head -30
else
  bash bench/runs/2026-12-05-run51.sh hf 2>&1 | grep -v "^\[transformers\]"
fi
