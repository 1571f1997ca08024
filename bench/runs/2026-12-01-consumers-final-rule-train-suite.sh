# The consumers step's final rule (PINGPONG_KLOOP_TENSOR 0.80, CONTENTION_NORM 8, ping-pong
# 128x192 tiles): the whole training-GEMM suite (60 cases) at the final picks, then the perf and batched
# shapes whose picks the rule moves (bench/suites/consumers_moves_{bf16,tf32}.json) under the final picks
# and under the previous constants (0.74, CONTENTION_NORM 0, 40 overhead registers; patched in this copy
# of the tree, then restored), cuBLAS and XLA in each run.
# Results: bench/results/h200-2026-12-01/i/call3
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false NOVA_CACHE_DIR=.nova-cache
mkdir -p $OUT
H=nova/kernels/gemm/hopper.py
OUT=/tmp/suite-$$ timeout 320 bash bench/train_gemms_device.sh --dtypes tf32,bf16 --rounds 5 --budget-s 280 2>&1 | grep -E "geomean" | tail -2
mkdir -p $OUT/suite; cp /tmp/suite-$$/train-gemms/train_gemms.{json,md} /tmp/suite-$$/train-gemms/clocks.csv $OUT/suite/ 2>/dev/null
for v in final old; do
  if [ $v = old ]; then sed -i -e 's/^PINGPONG_KLOOP_TENSOR = 0.80 /PINGPONG_KLOOP_TENSOR = 0.74 /' \
      -e 's/^CONTENTION_NORM = 8 /CONTENTION_NORM = 0 /' -e 's/^PINGPONG_OVERHEAD_REGS = 32 /PINGPONG_OVERHEAD_REGS = 40 /' $H; fi
  for dt in bf16 tf32; do
    OUT=/tmp/mv-$$ timeout 75 bash bench/train_gemms_device.sh --suite bench/suites/consumers_moves_$dt.json \
      --dtypes $dt --rounds 5 --budget-s 60 2>&1 | grep -E "geomean" | tail -1
    mkdir -p $OUT/moves-$dt-$v; cp /tmp/mv-$$/train-gemms/train_gemms.json $OUT/moves-$dt-$v/ 2>/dev/null; rm -rf /tmp/mv-$$; done; done
sed -i -e 's/^PINGPONG_KLOOP_TENSOR = 0.74 /PINGPONG_KLOOP_TENSOR = 0.80 /' -e 's/^CONTENTION_NORM = 0 /CONTENTION_NORM = 8 /' \
    -e 's/^PINGPONG_OVERHEAD_REGS = 40 /PINGPONG_OVERHEAD_REGS = 32 /' $H
grep -cE "^(PINGPONG_KLOOP_TENSOR = 0.80|CONTENTION_NORM = 8|PINGPONG_OVERHEAD_REGS = 32) " $H
echo "== done $(date +%T)"
