# The bias fix measured (TF32 layout probe by graph replay, against d/call1), the clock
# and power each library's GEMM holds under sustained load, then the training-GEMM suite (TF32, BF16)
# and the GPT-42M step (eager, Nova).
# Results: bench/results/h200-2026-12-01/d/call3
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
echo "== tf32 forward layouts $(date +%T)"
timeout 90 python3 bench/probes/tf32_forward_layouts.py $OUT 2>&1 | tail -8
echo "== sustained clocks $(date +%T)"
timeout 100 python3 bench/probes/sustained_clocks.py $OUT/clocks 2>&1 | grep -v Warning | tail -12
OUT=$OUT STAGES="suite train" SUITE_S=290 SUITE_DTYPES=tf32,bf16 TRAIN_S=170 bash bench/device_stages.sh 2>&1 | \
  grep -E "geomean|tok|Error|error" | tail -12
echo "== done $(date +%T)"
