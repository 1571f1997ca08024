#!/bin/bash
# Device run 113.  The mma.sync GEMM kernels' device time on Hopper and the eager call's
# choice that reads it: (1) seed 20261216's held-out GEMM draw (100 problems) and seed 20261217's
# (50) with every tile problem on mma.sync (NOVA_HOPPER=0); (2) the card's mma.sync calibration refitted
# on the first, tested on the second (`nova.bench.calibrate`, written into this copy of the repository
# and brought back); (3) a fresh draw (seed 20261218, 100 problems) timed with that calibration: the
# eager column's picks.
# Host: NOVA_CACHE_DIR=.nova-cache-run113, for T = h200 and h100: NOVA_HOPPER=0 `nova.bench.heldout gemm
# --precompile --target T` of seeds 20261216 (--count 100) and 20261217 (--count 50);
# `bench/runs/precompile_eager_candidates.py 20261218 100 T` and `nova.bench.heldout gemm --count 100
# --seed 20261218 --precompile --target T`; `.nova-cache-run113.txz`.
. bench/runs/device_env.sh run113 .nova-cache-run113
for SC in 20261216:100 20261217:50; do
  S=${SC%:*}; mkdir -p $R/mma-$S
  NOVA_HOPPER=0 timeout 170 python3 -m nova.bench.heldout gemm --count ${SC#*:} --seed $S --settle-s 0.2 \
      --graph-settle-s 0.1 --out $R/mma-$S 2>&1 | tail -1
  grep -A2 "## Summary" -A3 $R/mma-$S/heldout_gemm.md | tail -2
done
timeout 100 python3 -m nova.bench.calibrate --results $R/mma-20261216/heldout_gemm.json --test \
    $R/mma-20261217/heldout_gemm.json --preset $T --no-leave-one-out --write > $R/calibrate.txt 2>&1
grep -E "constants|before|after|tested" $R/calibrate.txt; cp nova/hwmodel/calibration/$T.json $R/
mkdir -p $R/gemm-20261218
timeout 170 python3 -m nova.bench.heldout gemm --count 100 --seed 20261218 --settle-s 0.2 --graph-settle-s 0.1 \
    --out $R/gemm-20261218 2>&1 | tail -1
grep -A14 "## Summary" $R/gemm-20261218/heldout_gemm.md | head -16
true
