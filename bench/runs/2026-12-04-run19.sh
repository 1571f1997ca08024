#!/bin/bash
# Device run 19 of 2026-12-04: GPT-42M's step with and without reading the loss every step, eager,
# torch.compile and nova.compile (bench/probes/synced_steps.py); kernels from run 18's cache.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
mkdir -p $OUT/run19
timeout 200 python3 bench/probes/synced_steps.py --steps 40 2>&1 | grep -v -i warn | tee $OUT/run19/synced_steps.txt
