# Per-kernel GPU times by CUDA-graph replay, Hopper (forced) and mma.sync (the A/B
# inside the benchmark), BF16 and FP16: the data the Hopper forward's model is refitted on.
# Results: bench/results/h200-2026-12-01/c/call6
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv
mkdir -p $OUT/forced
NOVA_ATTENTION_HOPPER=force timeout 240 python3 -m nova.bench.attention --out $OUT/forced --dtypes bf16,fp16 2>&1 | grep -E "B[0-9]+\.H|Error" | tail -8
