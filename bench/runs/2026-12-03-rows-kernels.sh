# 2026-12-03, device run 2: the rows kernels (norms, softmax, cross-entropy, row/column reductions) on the H200.
# Results: bench/results/h200-2026-12-03/run2/
# (1) tests/test_rows_gpu.py (every kind vs float64, NaN-poisoned; compiled GPT/Llama-tiny steps vs eager),
#     the graph compiler's GPU tests (now with rows kernels in the steps).
# (2) GPT-42M b32 and Llama-42M b32: eager, torch.compile, Nova, each in its own process.
# (3) CUPTI profiles of Nova's GPT-42M and Llama-42M steps (kernel by kernel) and of torch.compile's... (eager only
#     is supported by train_profile: eager's).
# Cache (host): python3 tests/test_rows_gpu.py + nova precompile train tiny/llama-tiny (b4 s16), gpt42m/llama42m (b32).
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
echo "== rows gpu tests $(date +%T)"
timeout 200 python3 -m pytest -q -m gpu tests/test_rows_gpu.py -p no:cacheprovider -x 2>&1 | grep -v DEBUG > $R/rows_tests.log; tail -n 25 $R/rows_tests.log
echo "== compiler gpu tests $(date +%T)"
timeout 150 python3 -m pytest -q -m gpu tests/test_compile_gpu.py tests/test_executor_gpu.py -p no:cacheprovider 2>&1 | grep -v DEBUG > $R/compile_tests.log; tail -n 25 $R/compile_tests.log
for m in gpt42m llama42m; do
  echo "== $m $(date +%T)"
  timeout 330 python3 -m nova.bench.train --all --frameworks eager,compile,nova --model $m --batch 32 --steps 100 \
    --out $R/$m --timeout 150 2>&1 | grep -v Warning | grep "^|" | tail -n 4
done
echo "== profiles $(date +%T)"
timeout 90 python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 --out $R/profile-gpt42m 2>&1 | tail -n 25
timeout 90 python3 -m nova.bench.train_profile --framework nova --model llama42m --batch 32 --out $R/profile-llama42m 2>&1 | tail -n 3
tar czf $OUT/run2.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
