# 2026-12-03, device run 3: all three memory-bound families (rows, pointwise, multi-tensor optimizer) on the H200.
# Results: bench/results/h200-2026-12-03/run3/
# (1) GPU tests of the pointwise, optimizer, rows families and of the executor / nova.compile.
# (2) Llama-42M step parity (first-step gradients, then 30 AdamW steps) with Nova's attention and with ATen's.
# (3) GPT-42M b32 (eager, torch.compile, Nova), Llama-42M b32 (torch.compile, Nova), GPT-144M b16 (torch.compile,
#     Nova, Nova under a 12 GiB memory budget); a CUPTI profile of Nova's GPT-42M step.
# Cache (host): tests/test_{executor,pointwise,optimizer,rows}_gpu.py builds + nova precompile train for each step.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
echo "== gpu tests $(date +%T)"
timeout 240 python3 -m pytest -q -m gpu tests/test_pointwise_gpu.py tests/test_optimizer_gpu.py tests/test_rows_gpu.py \
  tests/test_executor_gpu.py tests/test_compile_gpu.py -p no:cacheprovider 2>&1 | grep -v DEBUG > $R/gpu_tests.log
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | tail -n 30
echo "== llama42m parity $(date +%T)"
timeout 100 python3 bench/probes/step_parity.py --model llama42m --steps 30 2>&1 | grep -v Warn | tee $R/parity.log | tail -n 20
NOVA_ATTENTION=aten timeout 100 python3 bench/probes/step_parity.py --model llama42m --steps 30 2>&1 | grep -v Warn \
  | tee $R/parity-aten-attention.log | tail -n 9
for spec in "gpt42m 32 eager,compile,nova" "llama42m 32 compile,nova" "gpt144m 16 compile,nova"; do
  set -- $spec
  echo "== $1 $(date +%T)"
  timeout 300 python3 -m nova.bench.train --all --frameworks $3 --model $1 --batch $2 --steps 60 --out $R/$1 \
    --timeout 140 2>&1 | grep -v Warning | grep "^|" | tail -n 3
done
echo "== gpt144m 12GiB $(date +%T)"
timeout 120 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 --steps 60 --memory-budget 12GiB \
  --out $R/gpt144m-12GiB 2>&1 | grep -E "steady|peak|error" | tail -n 3
echo "== profile $(date +%T)"
timeout 80 python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 --out $R/profile-gpt42m 2>&1 | tail -n 22
tar czf $OUT/run3.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
