#!/bin/bash
# Device run 46: the host offload (nova/passes/offload.py) on the device.  The copy engines measured
# (bench/probes/host_link.py: each direction alone, both, beside a GEMM loop); the GPU test of a
# program whose saved activations go to page-locked host memory and back inside the CUDA graph; then
# GPT-144M inside 12 GiB (the process capped): batch 24, which plans only with offloads, and batch 16
# with and without them (NOVA_HOST_OFFLOAD=0), 60 steps each.
# Host builds (a fresh .nova-cache), then `rm -f .nova-cache.txz; tar cf - .nova-cache | xz -T2 -6 > .nova-cache.txz`:
#   export NOVA_CACHE_DIR=$PWD/.nova-cache PATH=$PWD/.venv/bin:$PATH
#   python3 tests/test_executor_gpu.py --target h200 | sh
#   for t in h200 h100; do for b in 16 24; do nova precompile train gpt144m --batch $b --memory-budget 12GiB --target $t; done
#     NOVA_HOST_OFFLOAD=0 nova precompile train gpt144m --batch 16 --memory-budget 12GiB --target $t; done
#   (for an H100 batch 24 does not plan inside 12 GiB: that line refuses in one line, here and on the device)
#   bash bench/runs/2026-12-05-run46.sh
tar xf .nova-cache.t*z
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) STEP_TARGET=h200 ;; *H100*) STEP_TARGET=h100 ;; *) STEP_TARGET=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run46-$STEP_TARGET; mkdir -p $R
timeout 60 python3 bench/probes/host_link.py --out $R/host_link.json 2>&1 | tail -1
timeout 120 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf tests/test_executor_gpu.py \
    -k "offload or replays_match" > $R/gpu_tests.log 2>&1; grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head
P="--model gpt144m --memory-budget 12GiB --steps 60 --warmup 5 --timed 10 --repeats 2"
for b in 24 16; do
  NOVA_TARGET=$STEP_TARGET timeout 150 python3 -m nova.bench.train --framework nova $P --batch $b \
      --out $R/gpt144m-b$b-12GiB 2>&1 | grep -E "steady|peak|error" | head -4
done
NOVA_HOST_OFFLOAD=0 NOVA_TARGET=$STEP_TARGET timeout 150 python3 -m nova.bench.train --framework nova $P --batch 16 \
    --out $R/gpt144m-b16-12GiB-no-offload 2>&1 | grep -E "steady|peak|error" | head -4
rm -f $R/*/summary-*
