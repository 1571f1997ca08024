# Is the one-warpgroup probe's higher rate per clock (0.89-0.90 vs 0.85-0.86,
# bench/results/h200-2026-12-02/a/call3)
# the structure's or the clock reading's?  Every probe on zeros (far below the power cap: all at ~1950-1980
# MHz).  Then Nova's squares, cooperative (default) and forced ping-pong (NOVA_PINGPONG=1: one warpgroup's
# wgmma at a time, as the one-warpgroup probe), each sustained 4 s.  One tarball back.
# Results: bench/results/h200-2026-12-02/a/call4
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
echo "== probes on zeros $(date +%T)"
timeout 120 python3 -m nova.bench.tensor_ceiling run --kernels .nova-cache/tensor_ceiling --data zeros --libraries "" \
  --seconds 4 --out $R/zeros 2>&1 | grep -v Warning | grep "^|" | tee $R/zeros.log
for pp in default 1; do
  echo "== Nova squares, NOVA_PINGPONG=$pp $(date +%T)"
  ( [ $pp = default ] || export NOVA_PINGPONG=$pp
    timeout 100 python3 -m nova.bench.tensor_ceiling run --libraries nova --seconds 4 --out $R/squares-$pp 2>&1 \
      | grep -v Warning | grep "^|" | tee $R/squares-$pp.log )
done
tar czf $OUT/call4.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
