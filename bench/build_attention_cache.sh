#!/usr/bin/env bash
# Host (MLIR, no GPU): compile every attention kernel the device run needs and pack the cache.
#   bash bench/build_attention_cache.sh        # -> .nova-cache/ and .nova-cache-attention.tgz (git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
export NOVA_CACHE_DIR=${NOVA_CACHE_DIR:-.nova-cache} PYTHONPATH=${PYTHONPATH:-$PWD}
TARGET=${TARGET:-h200}
python3 -m nova.bench.attention --precompile --target "$TARGET" --jobs "${JOBS:-2}" | tail -n 60
tar czf .nova-cache-attention.tgz "$NOVA_CACHE_DIR"
ls -la .nova-cache-attention.tgz
