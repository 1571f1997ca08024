#!/bin/bash
# Device run 38 of 2026-12-04: is the fused loss kernel the cause of Llama-42M's loss curves leaving
# eager's?  (1) The fused kernel against the two it replaces, bit for bit, on one loss chunk.
# (2) Llama-42M 200 steps with NOVA_DETERMINISTIC=1: the default plan twice (is the program
# reproducible?) and the plan with the loss pair kept apart (bench/probes/loss_pair_ab.py).
# (3) Eager TF32 twice: eager's own spread over 200 steps.
# Host first: the probe's build mode; NOVA_PLAN_CACHE=0 NOVA_DETERMINISTIC=1 python3
# bench/probes/loss_pair_ab.py precompile train llama42m --target h200.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run38; mkdir -p $R
timeout 60 python3 bench/probes/ce_fused_bitwise.py 2>&1 | tee $R/ce_fused_bitwise.txt
Q="--steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5 --model llama42m --batch 32"
for k in 1 2; do
  NOVA_DETERMINISTIC=1 timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/nova-det-$k 2>&1 | grep -E "loss curve|error"
done
NOVA_PLAN_CACHE=0 NOVA_DETERMINISTIC=1 timeout 100 python3 bench/probes/loss_pair_ab.py train --framework nova $Q \
    --out $R/nova-det-apart 2>&1 | grep -E "loss curve|error"
for k in 1 2; do
  timeout 100 python3 -m nova.bench.train --framework eager $Q --out $R/eager-$k 2>&1 | grep -E "loss curve|error"
done
rm -f $R/*/summary-*
F=$R/nova-det-1/nova-llama42m-b32.json
python3 bench/probes/loss_curves.py $F $R/nova-det-2/nova-llama42m-b32.json $R/nova-det-apart/nova-llama42m-b32.json \
    --threshold 0 2>&1 | tee $R/curves-nova.txt
python3 bench/probes/loss_curves.py $R/eager-1/eager-llama42m-b32.json $R/eager-2/eager-llama42m-b32.json $F \
    $R/nova-det-apart/nova-llama42m-b32.json 2>&1 | tee $R/curves-eager.txt
python3 -c "
import json; a, b = (json.load(open(p))['losses'] for p in ('$F', '$R/nova-det-apart/nova-llama42m-b32.json'))
print('first steps, fused / apart:', [(x, y) for x, y in zip(a[:4], b[:4])])
print('last step, fused / apart:', a[-1], b[-1])" | tee -a $R/curves-nova.txt
tar czf $OUT/run38.tgz -C $OUT run38; rm -rf $R
