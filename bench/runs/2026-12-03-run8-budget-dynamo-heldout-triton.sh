# 2026-12-03, device run 8: GPT-144M under a 12 GiB budget with the process capped at it; torch.compile's
# Inductor against backend="nova" (GPT-42M forward+backward, optimizer eager in both); the held-out GEMM
# and attention draws (seed 20261203, 40 each); Triton's matmul with Nova's one configuration.
# Results: bench/results/h200-2026-12-03/run8/.  Cache (host): nova precompile train gpt144m --memory-budget
# 12GiB; nova.bench.dynamo_vs_inductor --precompile; nova.bench.heldout {gemm,attention} --precompile.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
echo "== gpt144m 12GiB $(date +%T)"
timeout 75 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 --steps 30 --memory-budget 12GiB \
  --out $R/gpt144m-12GiB 2>&1 | grep -E "steady|peak|rror|memory" | tail -n 4
echo "== dynamo vs inductor $(date +%T)"
timeout 160 python3 -m nova.bench.dynamo_vs_inductor --model gpt42m --batch 32 --out $R/dynamo --timeout 75 2>&1 | tail -n 8
echo "== heldout gemm $(date +%T)"
timeout 90 python3 -m nova.bench.heldout gemm --count 40 --seed 20261203 --settle-s 0.1 --rounds 3 --min-time-s 0.01 \
  --out $R/heldout 2>&1 | tail -n 8
echo "== heldout attention $(date +%T)"
timeout 80 python3 -m nova.bench.heldout attention --count 40 --seed 20261203 --iters 20 --out $R/heldout 2>&1 | tail -n 8
echo "== triton $(date +%T)"
timeout 80 python3 -m nova.bench.triton_matmul --suite bench/suites/perf.txt --dtype bf16 --out $R/triton-bf16 --budget-s 40 \
  2>&1 | tail -n 12
tar czf $OUT/run8.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
