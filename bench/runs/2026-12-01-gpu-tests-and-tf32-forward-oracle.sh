# The runtime and attention GPU tests at the then-final code (the review's
# refactors had not run on a GPU), then the TF32 forward-GEMM probe (layouts x bias, Nova vs cuBLAS)
# and the wgmma oracle over 400 schedules of 16384x2048x512 TF32 NT +bias.
# Results: bench/results/h200-2026-12-01/d/call1
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
echo "== gpu tests $(date +%T)"
timeout 300 python3 -m pytest -m gpu tests/test_runtime_gpu.py tests/test_attention_gpu.py -q -p no:cacheprovider \
  > $OUT/gpu-tests.txt 2>&1; tail -5 $OUT/gpu-tests.txt
echo "== tf32 forward layouts $(date +%T)"
timeout 120 python3 bench/probes/tf32_forward_layouts.py $OUT 2>&1 | tail -12
echo "== oracle $(date +%T)"
timeout 150 python3 -m nova.bench.oracle --manifest .nova-cache/tune-manifest-fwd.json --out $OUT --tag oracle-fwd \
  --budget-s 120 2>&1 | tail -25
echo "== done $(date +%T)"
