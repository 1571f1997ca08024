#!/bin/bash
# Device run 125 (H100): the oracle on the tile candidates of four of seed 20261219's device-bottom GEMMs
# (run 120): #11 576x448x2624 tf32 TN (0.74x cuBLAS, 63 CTAs unsplit), #7 103x7980x2486 tf32 NT odd
# (0.69x: both operands prepped to pad K, 48 of 92 us priced), #88 5x7296x7744 bf16 NT (0.82x, the tiles
# at a decode shape), #70 256x1984x59968 bf16 TN deep K (0.75x, split 4 with a workspace).  Is the pick
# the best of its candidates (the model's ranking) and does any candidate reach cuBLAS (the space)?
# Host: `nova tune gemm <shape> --target h100 --dtype D [--trans-a|--trans-b] --exhaustive --limit 24
# --cache-dir .nova-cache-run125 --manifest .nova-cache-run125/tune-<n>-h100.json`; `.nova-cache-run125.txz`.
. bench/runs/device_env.sh run125 .nova-cache-run125
for n in 11 7 88 70; do
    mkdir -p $R/oracle-$n
    timeout 120 python3 -m nova.bench.oracle --manifest .nova-cache-run125/tune-$n-h100.json --budget-s 100 \
        --out $R/oracle-$n 2>&1 | tail -3
done
true
