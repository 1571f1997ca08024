# The GPT-42M TF32 training step (eager vs Nova) at the final code (CODEGEN_ABI 12).
# Results: bench/results/h200-2026-12-01/e/call10
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
OUT=$OUT STAGES="train" TRAIN_S=200 bash bench/device_stages.sh 2>&1 | grep -E "tok|Error|x eager|peak" | tail -8
