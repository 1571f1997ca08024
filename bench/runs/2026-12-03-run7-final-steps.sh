# 2026-12-03, device run 7: run 6 again with its kernels (the registry fix: `nova cache prune` had removed
# the pointwise and multi-tensor kernels), plus grouped-query attention at the K/V heads, pointwise
# kernels writing strided outputs (RoPE's concats in place) and the outside-arena accounting.
# Results: bench/results/h200-2026-12-03/run7/.  torch.compile / eager / JAX of the same models: run 6.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
echo "== gpu tests $(date +%T)"
timeout 150 python3 -m pytest -q -m gpu tests/test_rows_gpu.py tests/test_executor_gpu.py tests/test_compile_gpu.py \
  tests/test_pointwise_gpu.py tests/test_grouped_query.py tests/test_embedding_gpu.py tests/test_attention_mask_gpu.py \
  tests/test_outside_arena.py -p no:cacheprovider -x --maxfail=30 2>&1 | grep -v DEBUG > $R/gpu_tests.log
grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | tail -n 30
for spec in "gpt42m 32" "hf-gpt2-42m 32" "llama42m 32" "gpt144m 16"; do
  set -- $spec
  echo "== $1 $(date +%T)"
  timeout 75 python3 -m nova.bench.train --framework nova --model $1 --batch $2 --steps 40 --out $R/$1 2>&1 \
    | grep -E "steady|peak|rror|loss curve" | tail -n 4
done
echo "== gpt144m 12GiB $(date +%T)"
timeout 75 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 --steps 40 --memory-budget 12GiB \
  --out $R/gpt144m-12GiB 2>&1 | grep -E "steady|peak|rror|memory" | tail -n 4
echo "== profile gpt42m $(date +%T)"
timeout 50 python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 --out $R/profile-gpt42m 2>&1 | tail -n 26
tar czf $OUT/run7.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
