#!/bin/bash
# Device run 15 of 2026-12-04: GPT-144M b16's 200-step curve through Nova with FP32-accurate attention
# scores (NOVA_ATTENTION_PRECISION=3xtf32) and with ATen's attention (NOVA_ATTENTION=aten), to set
# against run 14's FP32 curve.  Host first: both variants' `nova precompile train gpt144m --batch 16`.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run15; mkdir -p $R
Q="--model gpt144m --batch 16 --steps 200 --warmup 2 --timed 20 --repeats 2 --settle-s 0.5"
for v in "NOVA_ATTENTION_PRECISION=3xtf32 3xtf32" "NOVA_ATTENTION=aten aten-attention"; do
  set -- $v
  env $1 timeout 120 python3 -m nova.bench.train --framework nova $Q --out $R/gpt144m-b16-nova-$2 2>&1 \
      | grep -E "loss curve|steady|error"
done
tar czf $OUT/run15.tgz -C $OUT run15
