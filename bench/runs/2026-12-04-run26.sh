#!/bin/bash
# Device run 26 of 2026-12-04: each attention kernel's device time (CUPTI) for float32 attention at
# the three precisions (tf32, 3xtf32 scores, fp32 every product) on the four benchmark shapes, beside
# the configurator's prediction (bench/probes/attention_kernel_times.py).
# Host first: python3 bench/probes/attention_kernel_times.py build tf32:fp32,tf32:3xtf32,tf32:tf32.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run26; mkdir -p $R
for pr in tf32 3xtf32 fp32; do
  NOVA_ATTENTION_PRECISION=$pr KT_DTYPES=tf32 timeout 150 python3 bench/probes/attention_kernel_times.py \
      $R/kernel_times-$pr.json 2>&1 | grep -v -i warn
done
