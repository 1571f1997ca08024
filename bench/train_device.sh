#!/usr/bin/env bash
# The training-step benchmark on the GPU machine: PyTorch eager, torch.compile, JAX and Nova, each in
# its own process, on GPT-42M at batch 32 x 512, TF32, AdamW (nova/bench/train.py), then the summary.
#   bash bench/train_device.sh [MODEL [BATCH [extra nova.bench.train options]]]
# Results under $OUT/train-MODEL: <framework>-MODEL-b<BATCH>.json (4), summary-MODEL-b<BATCH>.md/.png,
# train.log (7 files: the device tool brings back 8 at most).  ~3-4 min for gpt42m b32 on an H200.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1 NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache
MODEL=${1:-gpt42m}
BATCH=${2:-32}
shift $(( $# < 2 ? $# : 2 ))
OUT=${OUT:-bench/results}
DIR="$OUT/train-$MODEL"
mkdir -p "$DIR"
LOG="$DIR/train.log"
[ -d .nova-cache ] || { [ -f .nova-cache.tgz ] && tar xzf .nova-cache.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
    --format=csv | tee "$LOG"
# one framework per process here too: torch and jaxlib each load their own CUDA libraries
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tee -a "$LOG"
python3 -c "import jax, optax; print('jax', jax.__version__, jax.devices(), 'optax', optax.__version__)" 2>&1 | tee -a "$LOG"
echo "== nova.bench.train --all --model $MODEL --batch $BATCH $*" | tee -a "$LOG"
timeout 460 python3 -m nova.bench.train --all --model "$MODEL" --batch "$BATCH" --out "$DIR" --timeout 200 "$@" \
    2>&1 | tee -a "$LOG"
# a driver stopped by the timeout writes no summary: render whatever results exist
[ -f "$DIR/summary-$MODEL-b$BATCH.md" ] || python3 -m nova.bench.train_report "$DIR" --model "$MODEL" \
    --batch "$BATCH" 2>&1 | tee -a "$LOG"
