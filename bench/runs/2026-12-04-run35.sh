#!/bin/bash
# Device run 35 of 2026-12-04: where Llama-42M's 200-step loss curve leaves eager's (run 34: 174 of 200
# steps over 0.5%, largest 1.26%): Nova with ATen's FP32 attention, with FP32-accurate attention
# (NOVA_ATTENTION_PRECISION=fp32), Nova as of 030b575 (before the fused loss kernel; its package
# carried as oldnova/, not committed), and eager with FP32 matmuls, each against run 34's eager TF32.
# Host first: NOVA_ATTENTION=aten / NOVA_ATTENTION_PRECISION=fp32 nova precompile train llama42m --target h200.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run35; mkdir -p $R
Q="--steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5 --model llama42m --batch 32"
REF=bench/results/h200-2026-12-04/run34/llama42m-b32-eager/eager-llama42m-b32.json
NOVA_ATTENTION=aten timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/aten-attention 2>&1 | grep -E "loss curve|error"
NOVA_ATTENTION_PRECISION=fp32 timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/fp32-attention 2>&1 | grep -E "loss curve|error"
timeout 100 python3 -m nova.bench.train --framework eager $Q --fp32-matmul --out $R/eager-fp32 2>&1 | grep -E "loss curve|error"
(cd oldnova && PYTHONPATH=. timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/nova-030b575 2>&1 | grep -E "loss curve|error")
rm -f $R/*/summary-*
python3 bench/probes/loss_curves.py $REF $R/aten-attention/nova-llama42m-b32.json $R/fp32-attention/nova-llama42m-b32.json \
    $R/eager-fp32/eager-llama42m-b32.json $R/nova-030b575/nova-llama42m-b32.json
tar czf $OUT/run35.tgz -C $OUT run35; rm -rf $R
