#!/bin/bash
# Device run 16 of 2026-12-04: Nova's TF32 attention against float64, beside PyTorch's FP32 SDPA and
# attention written with TF32 matmuls (bench/probes/attention_accuracy.py; host: its `build`).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run16; mkdir -p $R
timeout 120 python3 bench/probes/attention_accuracy.py run tf32 2>&1 | tee $R/attention_accuracy.txt
NOVA_ATTENTION_PRECISION=3xtf32 timeout 60 python3 bench/probes/attention_accuracy.py run 3xtf32 2>&1 \
    | tee -a $R/attention_accuracy.txt
