# Ping-pong tiles with the TMA-store epilogue again (d/call7's register-epilogue ping-pong
# was slow): the training-GEMM suite (TF32, BF16) and the GPT-42M step.
# Results: bench/results/h200-2026-12-01/d/call8
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
OUT=$OUT STAGES="suite train" SUITE_S=200 SUITE_DTYPES=tf32,bf16 TRAIN_S=120 bash bench/device_stages.sh 2>&1 | \
  grep -E "geomean|tok|Error" | tail -8
echo "== done $(date +%T)"
