# The consumers step's ping-pong K-loop factor.  Every pick of the measured suites that
# PINGPONG_KLOOP_TENSOR = 0.80 (today's deep-K dX: ping-pong at 0.983-0.985 of the cooperative rate, x 0.81)
# instead of 0.74 (the earlier refit) would move (bench/suites/consumers_ab_{bf16,tf32}.json, 22 + 6), timed three
# ways in one call: the default picks, the picks at 0.80 (variant V: the constant patched in this copy of
# the tree, then restored), and NOVA_PINGPONG=128x192 where that tile can run; cuBLAS and XLA in each run.
# Results: bench/results/h200-2026-12-01/i/call2
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
H=nova/kernels/gemm/hopper.py
for dt in bf16 tf32; do
  for v in default V NOVA_PINGPONG=128x192; do d=$OUT/ab-$dt-${v//[^A-Za-z0-9]/_}
    [ $v = V ] && sed -i 's/^PINGPONG_KLOOP_TENSOR = 0.74 /PINGPONG_KLOOP_TENSOR = 0.80 /' $H
    ( case $v in NOVA_*) export $v;; esac
      OUT=/tmp/ab-$$ timeout 170 bash bench/train_gemms_device.sh --suite bench/suites/consumers_ab_$dt.json \
      --dtypes $dt --rounds 5 --budget-s 140 2>&1 | grep -E "geomean" | tail -1 )
    [ $v = V ] && sed -i 's/^PINGPONG_KLOOP_TENSOR = 0.80 /PINGPONG_KLOOP_TENSOR = 0.74 /' $H
    mkdir -p $d; cp /tmp/ab-$$/train-gemms/train_gemms.json $d/ 2>/dev/null; rm -rf /tmp/ab-$$; done; done
grep -c "0.74 " $H
echo "== done $(date +%T)"
