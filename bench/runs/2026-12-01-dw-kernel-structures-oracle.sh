# The oracle over kernel structures of the BF16 dW shapes.
# Results: bench/results/h200-2026-12-01/e/call2-oracle, bench/results/h200-2026-12-01/e/call5-oracle
# Host (MLIR; ~2 min on 2 cores; a cache of its own: with .nova-cache the carry passes 64 MiB):
#   nova tune gemm --suite bench/suites/dw_bf16.txt --dtype bf16 --trans-a --target h200 --exhaustive \
#       --limit 90 --strategy structure --jobs 2 --cache-dir .nova-cache-dw      # e/call5-oracle (without 3072x768)
#   (e/call2-oracle: 512x2048, 768x3072, 512x512, 768x768, 1536x512 at --limit 80, before SPLIT_TRIES joined the space)
# Device (run --carry .nova-cache-dw):
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache-dw NOVA_TARGET=h200 PYTHONUNBUFFERED=1
mkdir -p $OUT
python3 -c "import torch; x=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); [x@x for _ in range(200)]; torch.cuda.synchronize()"
timeout 400 python3 -m nova.bench.oracle --manifest .nova-cache-dw/tune-manifest.json --out $OUT --tag dw-structure2 \
  --rounds 3 --budget-s 330 2>&1 | tail -n 12
# Then (e/call4-ncu): NOVA_CACHE_DIR=.nova-cache-dw OUT=$OUT bash bench/runs/2026-12-01-ncu-deep-k-dw-candidates.sh (Nsight Compute on chosen candidates)
