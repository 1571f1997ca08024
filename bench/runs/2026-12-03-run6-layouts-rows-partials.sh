# 2026-12-03, device run 6: the step after attention results are stored in their readers' layout
# (storage.py), the norms' weight/bias gradients summed in the row kernel's pass, RMSNorm recognised,
# op-by-op GELU as gelu_tanh, the embedding kernels.  Results: bench/results/h200-2026-12-03/run6/
# (1) GPU tests: rows (partials), executor (strided attention outputs), compile (GPT-42M vs eager),
#     embedding and masked attention (re-run after run 5's two test fixes).
# (2) gpt42m b32 (eager, torch.compile, JAX, Nova), hf-gpt2-42m b32 (Nova), llama42m b32 (torch.compile,
#     Nova), gpt144m b16 (Nova): 60-step curves, each framework its own process.
# (3) CUPTI profiles of Nova's GPT-42M and Llama-42M steps.
# Cache (host): nova precompile train gpt42m / hf-gpt2-42m / llama42m / gpt144m --target h200; the tests' builds.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
echo "== gpu tests $(date +%T)"
timeout 200 python3 -m pytest -q -m gpu tests/test_rows_gpu.py tests/test_executor_gpu.py tests/test_compile_gpu.py \
  tests/test_embedding_gpu.py tests/test_attention_mask_gpu.py -p no:cacheprovider 2>&1 | grep -v DEBUG > $R/gpu_tests.log
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | tail -n 30
for spec in "gpt42m 32 eager,compile,jax,nova" "hf-gpt2-42m 32 nova" "llama42m 32 compile,nova" "gpt144m 16 nova"; do
  set -- $spec
  echo "== $1 $(date +%T)"
  timeout 280 python3 -m nova.bench.train --all --frameworks $3 --model $1 --batch $2 --steps 60 --out $R/$1 \
    --timeout 110 2>&1 | grep -v Warning | grep -E "^\||rror" | tail -n 5
done
for m in gpt42m llama42m; do
  echo "== profile $m $(date +%T)"
  timeout 60 python3 -m nova.bench.train_profile --framework nova --model $m --batch 32 --out $R/profile-$m 2>&1 | tail -n 26
done
tar czf $OUT/run6.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
