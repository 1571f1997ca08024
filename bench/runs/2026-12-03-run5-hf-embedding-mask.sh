# 2026-12-03, device run 5: Hugging Face GPT-2 through Nova next to the built-in GPT; the embedding and
# attention-mask kernels' first GPU tests; the step's launch count.  Results: bench/results/h200-2026-12-03/run5/
# (1) GPU tests: tests/test_embedding_gpu.py, tests/test_attention_mask_gpu.py (their kernels built on the host
#     with `--build`), tests/test_passes_recompute-covered steps run through test_executor_gpu's GPT-tiny.
# (2) hf-gpt2-42m b32 (torch.compile, Nova) and gpt42m b32 (Nova), 60-step curves, each framework its own process.
# (3) a CUPTI profile of Nova's GPT-42M and HF GPT-2 steps (kernels and launches per step).
# Cache (host): nova precompile train gpt42m / hf-gpt2-42m --target h200; the two tests' --build.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
echo "== gpu tests $(date +%T)"
timeout 150 python3 -m pytest -q -m gpu tests/test_embedding_gpu.py tests/test_attention_mask_gpu.py -p no:cacheprovider \
  2>&1 | grep -v DEBUG > $R/gpu_tests.log
grep -E "^(FAILED|ERROR)|passed|failed|Error" $R/gpu_tests.log | tail -n 30
for spec in "hf-gpt2-42m 32 compile,nova" "gpt42m 32 nova"; do
  set -- $spec
  echo "== $1 $(date +%T)"
  timeout 260 python3 -m nova.bench.train --all --frameworks $3 --model $1 --batch $2 --steps 60 --out $R/$1 \
    --timeout 130 2>&1 | grep -v Warning | grep -E "^\||rror" | tail -n 4
done
for m in gpt42m hf-gpt2-42m; do
  echo "== profile $m $(date +%T)"
  timeout 70 python3 -m nova.bench.train_profile --framework nova --model $m --batch 32 --out $R/profile-$m 2>&1 | tail -n 24
done
tar czf $OUT/run5.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
