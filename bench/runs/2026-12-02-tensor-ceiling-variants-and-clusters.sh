# The tensor-ceiling probe's variants (1/2/3 warpgroups, 1 or 2 accumulator chains:
# is the rate per clock the probe's structure or the tensor cores'?) and the squares again (run-to-run
# spread), the squares on 2x1 clusters (Nova: does the multicast's third less L2 traffic buy clock at the
# power cap?), then the GPT-144M step at 2026-12-01's final picks (a/call1's log of it did not come back).  Everything
# under $OUT is tarred into one file at the end (the device tool returns a limited number of files).
# Cache (host): a/call1's + NOVA_CLUSTER=2x1 nova precompile gemm of the squares.
# Results: bench/results/h200-2026-12-02/a/call2
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader | tee $R/gpu.txt
echo "== tensor ceiling $(date +%T)"
timeout 200 python3 -m nova.bench.tensor_ceiling run --kernels .nova-cache/tensor_ceiling --seconds 3 --out $R/ceiling 2>&1 \
  | grep -v Warning | grep "^|" | tee $R/ceiling.log
echo "== squares, Nova on 2x1 clusters $(date +%T)"
NOVA_CLUSTER=2x1 timeout 100 python3 -m nova.bench.tensor_ceiling run --libraries nova --seconds 3 --out $R/cluster2x1 2>&1 \
  | grep -v Warning | grep "^|" | tee $R/cluster2x1.log
echo "== gpt144m step $(date +%T)"
OUT=$R/gpt144m STAGES="train" MODEL=gpt144m BATCH=16 FRAMEWORKS=eager,nova TRAIN_S=200 bash bench/device_stages.sh > $R/gpt144m.log 2>&1
tail -n 25 $R/gpt144m/log.txt 2>/dev/null | grep -v "^$" | tail -14
tar czf $OUT/call2.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
