# 2026-12-03, device run 1: real training scripts on the H200.
# Results: bench/results/h200-2026-12-03/run1/
# (1) The GPU tests of the graph compiler (CUDA graph replay, the hyper-parameter mirror under an LR schedule).
# (2) GPT-42M b32, 200 steps, warmup-cosine LR + clip_grad_norm 1.0: eager, torch.compile, Nova (one process each),
#     then Nova with the constant schedule and the same clipping (the cost of the schedule).
# (3) A CUPTI profile of Nova's GPT-42M step (the ATen calibration's profile: the plan changed).
# Cache (host): nova precompile train gpt42m --batch 32 + tests/test_executor_gpu.py's commands.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader | tee $R/gpu.txt
echo "== gpu tests $(date +%T)"
timeout 240 python3 -m pytest -q -m gpu tests/test_compile_gpu.py tests/test_executor_gpu.py -p no:cacheprovider 2>&1 | tail -n 15 | tee $R/gpu_tests.log
echo "== schedule run $(date +%T)"
timeout 420 python3 -m nova.bench.train --all --frameworks eager,compile,nova --model gpt42m --batch 32 --steps 200 \
  --schedule warmup-cosine --clip-grad-norm 1.0 --out $R/schedule --timeout 200 2>&1 | grep -v Warning | tail -n 12
echo "== constant run $(date +%T)"
timeout 150 python3 -m nova.bench.train --framework nova --model gpt42m --batch 32 --steps 200 \
  --schedule constant --clip-grad-norm 1.0 --out $R/constant 2>&1 | grep -v Warning | tail -n 4
echo "== profile $(date +%T)"
timeout 120 python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 --out $R/profile 2>&1 | tail -n 8
tar czf $OUT/run1.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
