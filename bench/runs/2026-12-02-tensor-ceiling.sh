# The measured power-limited ceiling (nova.bench.tensor_ceiling: the wgmma-only
# probe, randn and zeros, then Nova / cuBLAS / XLA on 4096^3 and 8192^3 NN, TF32 and BF16, each sustained 4 s
# alone with nvidia-smi sampling), then the GPT-144M step at 2026-12-01's final picks (eager, Nova).
# Cache (host): the squares (nova precompile gemm), the probe kernels (tensor_ceiling build --out
# .nova-cache/tensor_ceiling) and `nova precompile train gpt144m --batch 16`.
# Results: bench/results/h200-2026-12-02/a/call1
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader
echo "== tensor ceiling $(date +%T)"
timeout 200 python3 -m nova.bench.tensor_ceiling run --kernels .nova-cache/tensor_ceiling --out $OUT/ceiling 2>&1 \
  | grep -v Warning | tail -24
if [ -n "${STEP144:-1}" ]; then
  echo "== gpt144m step $(date +%T)"
  mkdir -p $OUT/gpt144m
  OUT=$OUT/gpt144m STAGES="train" MODEL=gpt144m BATCH=16 FRAMEWORKS=eager,nova TRAIN_S=200 \
    bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|tok|peak|rror" | tail -12
fi
echo "== done $(date +%T)"
