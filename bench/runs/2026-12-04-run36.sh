#!/bin/bash
# Device run 36 of 2026-12-04: is Llama-42M's loss curve a deterministic function of the program?
# The same Nova step (fused loss kernel) trained 200 steps twice in two processes, and once with
# NOVA_DETERMINISTIC=1; the curves against each other and against run 34's eager TF32.
# Host first: NOVA_DETERMINISTIC=1 nova precompile train llama42m --target h200.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run36; mkdir -p $R
Q="--steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5 --model llama42m --batch 32"
REF=bench/results/h200-2026-12-04/run34/llama42m-b32-eager/eager-llama42m-b32.json
for k in 1 2; do
  timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/nova-$k 2>&1 | grep -E "loss curve|error"
done
NOVA_DETERMINISTIC=1 timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/nova-deterministic 2>&1 | grep -E "loss curve|error"
rm -f $R/*/summary-*
python3 bench/probes/loss_curves.py $R/nova-1/nova-llama42m-b32.json $R/nova-2/nova-llama42m-b32.json
python3 bench/probes/loss_curves.py $REF $R/nova-1/nova-llama42m-b32.json $R/nova-2/nova-llama42m-b32.json \
    $R/nova-deterministic/nova-llama42m-b32.json
python3 -c "
import json; a, b = (json.load(open('$R/nova-%d/nova-llama42m-b32.json' % k))['losses'] for k in (1, 2))
print('first steps, run 1 / run 2:', [(x, y) for x, y in zip(a[:4], b[:4])])"
tar czf $OUT/run36.tgz -C $OUT run36; rm -rf $R
