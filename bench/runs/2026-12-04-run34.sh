#!/bin/bash
# Device run 34 of 2026-12-04: 200-step loss curves with the fused cross-entropy kernel: GPT-42M and
# Llama-42M b32, Nova against eager TF32 (bench/probes/loss_curves.py compares them).
# Host first: as run 31 (its cache).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run34; mkdir -p $R
Q="--steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5"
for m in gpt42m llama42m; do
  for fw in eager nova; do
    timeout 120 python3 -m nova.bench.train --framework $fw --model $m --batch 32 $Q \
        --out $R/$m-b32-$fw 2>&1 | grep -E "loss curve|error"
    rm -f $R/$m-b32-$fw/summary-*
  done
  python3 bench/probes/loss_curves.py $R/$m-b32-eager/eager-$m-b32.json $R/$m-b32-nova/nova-$m-b32.json
done
tar czf $OUT/run34.tgz -C $OUT run34
