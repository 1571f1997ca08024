# 2026-12-03, data parallel on 2 H200s (nvidia-h200-x2): GPT-144M, batch 16 x 1024 per GPU.
# (1) the two-rank CPU tests (gloo) as a smoke check of this checkout;
# (2) Nova on one GPU (nova.bench.train: the single-GPU tokens/s the scaling is measured against);
# (3) torchrun --nproc_per_node 2, one launch per framework: eager DDP, torch.compile + DDP, Nova (nova.compile
#     of the step with the DDP-wrapped model: bucketed gradient all-reduce in the program), 200 loss-curve steps each;
# (4) the summary: tokens/s over both GPUs, scaling efficiency vs Nova's single-GPU number, loss parity vs eager DDP.
# Prediction to compare with: nova-config explain train gpt144m --batch 16 --target h200 --gpus 2
# Cache (host): nova precompile train gpt144m --batch 16 --target h200 (same kernels as one GPU).
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
echo "== ddp cpu tests $(date +%T)"
timeout 120 python3 -m pytest -q tests/test_data_parallel.py -p no:cacheprovider 2>&1 | tail -n 5
echo "== predicted $(date +%T)"
timeout 120 python3 -m nova.cli.config explain train gpt144m --batch 16 --target h200 --gpus 2 2>&1 | tail -n 12 > $R/predicted.txt
cat $R/predicted.txt
echo "== nova, 1 GPU $(date +%T)"
timeout 300 python3 -m nova.bench.train --framework nova --model gpt144m --batch 16 --steps 50 --out $R 2>&1 | tail -n 2
for fw in eager compile nova; do
  echo "== $fw, 2 GPUs $(date +%T)"
  timeout 420 torchrun --standalone --nproc_per_node 2 -m nova.bench.train_ddp --framework $fw --model gpt144m \
    --batch 16 --steps 200 --out $R 2>&1 | grep -v Warning | tail -n 3
done
python3 -m nova.bench.train_ddp --summary $R --single $R/nova-gpt144m-b16.json | tee $R/summary.md
tar czf $OUT/ddp-2gpu.tgz -C $R . && rm -rf $R
echo "== done $(date +%T)"
