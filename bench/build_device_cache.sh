#!/usr/bin/env bash
# Build every kernel the device run needs, on a host with MLIR and no GPU, and pack the cache.
#   bash bench/build_device_cache.sh            # -> .nova-cache/ and .nova-cache.tgz (git-ignored)
# Then on the GPU machine: tar xzf .nova-cache.tgz && NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache ...
set -euo pipefail
cd "$(dirname "$0")/.."
export NOVA_CACHE_DIR=${NOVA_CACHE_DIR:-.nova-cache}
TARGET=${TARGET:-h200}
P="nova precompile gemm --target $TARGET"
# correctness sweep (two processes: the cache's atomic writes make that safe)
$P --suite bench/suites/correctness.txt --dtype tf32 > /tmp/nova-precompile-1.log &
$P --suite bench/suites/correctness.txt --dtype bf16,fp16 > /tmp/nova-precompile-2.log &
wait
tail -n 1 /tmp/nova-precompile-1.log /tmp/nova-precompile-2.log
$P --suite bench/suites/perf.txt --dtype tf32,bf16,fp16 | tail -n 1
$P --suite bench/suites/ksweep.txt --dtype tf32,bf16 | tail -n 1
# epilogue/layout cases of the sweep, and the kernels of tests/test_runtime_gpu.py
python3 -m nova.bench.correctness --print-precompile "$TARGET" | while read -r cmd; do eval "$cmd" < /dev/null | tail -n 1; done
python3 tests/test_runtime_gpu.py --target "$TARGET" | while read -r cmd; do eval "$cmd" < /dev/null | tail -n 1; done
tar czf .nova-cache.tgz "$NOVA_CACHE_DIR"
ls -la .nova-cache.tgz
