# The bias loaded a staging step ahead (CODEGEN_ABI 10): the runtime GPU tests, the
# TF32 forward-layout probe again, and the wgmma oracle (now with a bias) over the model's 48 best
# schedules of the forward 16384x2048x512 NT +bias and the GPT-42M LM head 16384x32768x512 NT, TF32 and BF16.
# Results: bench/results/h200-2026-12-01/d/call2
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
echo "== gpu tests $(date +%T)"
timeout 200 python3 -m pytest -m gpu tests/test_runtime_gpu.py -q -p no:cacheprovider > $OUT/gpu-tests.txt 2>&1
tail -3 $OUT/gpu-tests.txt
echo "== tf32 forward layouts $(date +%T)"
timeout 120 python3 bench/probes/tf32_forward_layouts.py $OUT 2>&1 | tail -12
for m in fwd-bias lmhead; do
  echo "== oracle $m $(date +%T)"
  timeout 200 python3 -m nova.bench.oracle --manifest .nova-cache/tune-$m.json --out $OUT --tag oracle-$m \
    --budget-s 170 2>&1 | tail -8
done
echo "== done $(date +%T)"
