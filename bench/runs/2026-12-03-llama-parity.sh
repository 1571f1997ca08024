# 2026-12-03, device run 4: why Llama-42M's loss curve leaves eager's (runs 2 and 3), taken apart by family:
# Results: bench/results/h200-2026-12-03/run4/
# the step-parity probe (first-step gradients by parameter, then 30 AdamW steps) with every Nova kernel,
# without the pointwise/optimizer kernels (NOVA_POINTWISE=none), and with ATen's attention; then the
# optimizer kernel's GPU tests (f16 cases with an eps f16 can hold) and the pointwise GPT-tiny step (step-count
# mirrors now on aligned rows).
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
for v in default "NOVA_POINTWISE=none" "NOVA_ATTENTION=aten"; do
  echo "== llama42m parity, $v $(date +%T)"
  env $( [ "$v" = default ] || echo $v ) timeout 110 python3 bench/probes/step_parity.py --model llama42m --steps 30 2>&1 \
    | grep -v -i warn | tee $R/parity-${v%%=*}.log | tail -n 17
done
echo "== optimizer and pointwise gpu tests $(date +%T)"
timeout 90 python3 -m pytest -q -m gpu tests/test_optimizer_gpu.py tests/test_pointwise_gpu.py -p no:cacheprovider 2>&1 | grep -E "^(FAILED|ERROR)|^E  |passed|failed" | tail -n 8
tar czf $OUT/run4.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
