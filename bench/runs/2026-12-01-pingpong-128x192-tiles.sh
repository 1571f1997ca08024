# The ping-pong GPU tests (the new 128x192 warpgroup tiles, NOVA_PINGPONG=128x192, and
# the old ones), then bench/suites/pingpong_probe.json in BF16 (the two LM heads, five bias-free dX, TF32's
# 3000x5000x700 NT pick in BF16) under the default picks, NOVA_PINGPONG=1 (the model's fastest ping-pong
# tile) and NOVA_PINGPONG=128x192, cuBLAS and XLA timed in each run.
# Results: bench/results/h200-2026-12-01/i/call1
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
timeout 150 python3 -m pytest -m gpu tests/test_runtime_gpu.py -k "pingpong" -q -p no:cacheprovider > $OUT/gpu-tests.txt 2>&1
tail -n 3 $OUT/gpu-tests.txt
for v in default NOVA_PINGPONG=1 NOVA_PINGPONG=128x192; do d=$OUT/probe-bf16-${v//[^A-Za-z0-9]/_}
  ( [ $v = default ] || export $v; OUT=/tmp/pp-$$ timeout 130 bash bench/train_gemms_device.sh --suite bench/suites/pingpong_probe.json \
    --dtypes bf16 --rounds 5 --budget-s 110 2>&1 | grep -E "geomean" | tail -1 )
  mkdir -p $d; cp /tmp/pp-$$/train-gemms/train_gemms.json /tmp/pp-$$/train-gemms/train_gemms.md $d/ 2>/dev/null; rm -rf /tmp/pp-$$; done
echo "== done $(date +%T)"
