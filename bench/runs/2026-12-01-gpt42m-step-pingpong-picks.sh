# The GPT-42M training step (b32 x 512, TF32, AdamW) at the day's final picks (its LM head
# on 128x192 ping-pong tiles), eager and Nova in one process each.  Cache: PARTS="tests" + the gpt42m step.
# Results: bench/results/h200-2026-12-01/i/call6
mkdir -p $OUT/gpt42m
OUT=$OUT/gpt42m STAGES="train" MODEL=gpt42m BATCH=32 FRAMEWORKS=eager,nova TRAIN_S=170 \
  bash bench/device_stages.sh 2>&1 | grep -E "passed|failed|tok|peak|rror" | tail -12
echo "== done $(date +%T)"
