#!/usr/bin/env bash
# Every GEMM of the GPT-42M and GPT-144M training steps (bench/suites/train_gemms.json, 30 problems),
# each in TF32 and BF16: Nova vs cuBLAS (torch.matmul) vs XLA (jax.jit of lax.dot_general) in one
# process, offline from the carried kernel cache (nova/bench/train_gemms.py).
#   bash bench/train_gemms_device.sh [extra nova.bench.train_gemms options, e.g. --models gpt42m --dtypes tf32]
# Host first (MLIR, no GPU; ~40 s on 2 cores):
#   nova precompile gemm --suite bench/suites/train_gemms.json --dtype tf32,bf16 --target h200 --cache-dir .nova-cache
# Results under $OUT/train-gemms: train_gemms.json/.csv/.md, clocks.csv (SM clock and power every 100 ms),
# log.txt.  ~3-5 min on an H200 (60 cases; the run starts no new case after --budget-s, default 480 s).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1 NOVA_OFFLINE=1 NOVA_CACHE_DIR=${NOVA_CACHE_DIR:-.nova-cache}
export NOVA_TARGET=${NOVA_TARGET:-h200} XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-bench/results}
DIR="$OUT/train-gemms"
mkdir -p "$DIR"
LOG="$DIR/log.txt"
[ -d "$NOVA_CACHE_DIR" ] || { [ -f .nova-cache.tgz ] && tar xzf .nova-cache.tgz; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
    --format=csv | tee "$LOG"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tee -a "$LOG"
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -n 1 | tee -a "$LOG"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,nounits -lms 100 \
    > "$DIR/clocks.csv" 2>/dev/null &
SMI=$!
echo "== nova.bench.train_gemms --device $*" | tee -a "$LOG"
timeout 560 python3 -m nova.bench.train_gemms --device --out "$DIR" "$@" 2>&1 | tee -a "$LOG"
STATUS=${PIPESTATUS[0]}
kill "$SMI" 2>/dev/null
exit "$STATUS"
