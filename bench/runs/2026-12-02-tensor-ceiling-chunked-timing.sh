# The ceiling and cluster measurements of a/call2 again, with the chunked timing
# (tensor_ceiling.sustained closes every ~50 ms of calls with a sync; in the first runs the launch queue let
# the first "chunk" hold seconds of the probe's launches, boost period included).  One tarball back.
# Results: bench/results/h200-2026-12-02/a/call3
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
echo "== tensor ceiling $(date +%T)"
timeout 300 python3 -m nova.bench.tensor_ceiling run --kernels .nova-cache/tensor_ceiling --seconds 4 --out $R/ceiling 2>&1 \
  | grep -v Warning | grep "^|" | tee $R/ceiling.log
echo "== squares, Nova on 2x1 clusters $(date +%T)"
NOVA_CLUSTER=2x1 timeout 100 python3 -m nova.bench.tensor_ceiling run --libraries nova --seconds 4 --out $R/cluster2x1 2>&1 \
  | grep -v Warning | grep "^|" | tee $R/cluster2x1.log
nvidia-smi --query-gpu=temperature.gpu --format=csv,noheader | tee -a $R/gpu.txt
tar czf $OUT/call3.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
