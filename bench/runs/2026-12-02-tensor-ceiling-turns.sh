# Do two warpgroups that take turns on the tensor cores (named barriers, slot by slot:
# one warpgroup's wgmmas issued at a time, two sets of accumulators) run at the one-warpgroup probe's rate
# per clock?  The turns probes beside the one- and two-warpgroup ones, random data and zeros, 4 s each.
# Cache (host): the six probes in .nova-cache/tensor_ceiling5.
# Results: bench/results/h200-2026-12-02/a/call5
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
timeout 150 python3 -m nova.bench.tensor_ceiling run --kernels .nova-cache/tensor_ceiling5 --libraries "" --seconds 4 \
  --out $R/turns 2>&1 | grep -v Warning | grep "^|" | tee $R/turns.log
tar czf $OUT/call5.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
