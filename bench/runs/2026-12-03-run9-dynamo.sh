# 2026-12-03, device run 9: torch.compile's Inductor against backend="nova", GPT-42M b32 forward+backward
# (optimizer eager in both), with a per-backend limit that fits (run 8 killed both at 75 s, before timing).
# Results: bench/results/h200-2026-12-03/run9/.  Cache (host): nova.bench.dynamo_vs_inductor --precompile.
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
timeout 225 python3 -m nova.bench.dynamo_vs_inductor --model gpt42m --batch 32 --steps 10 --settle-s 2 --timed 20 \
  --repeats 3 --out $R/dynamo --timeout 105 2>&1 | grep -v Warning | grep -E "Error|error|\\|" | tail -n 16
tar czf $OUT/run9.tgz -C $R . && rm -rf $R
