#!/bin/bash
# Device run 57: the GELU GEMMs' time (16384x2048x512, every epilogue of the training steps and
# relu / no-activation controls), ping-pong (auto) and cooperative (NOVA_PINGPONG=0), the emitted
# sigmoid with IEEE division (base) and with rcp.approx (rcp).  Host builds (h100 plans):
#   for v in base rcp; do NOVA_CACHE_DIR=/tmp/exp57/$v nova precompile gemm --suite bench/runs/2026-12-05-run57-suite.json \
#       --target h100 --dtype bf16,tf32; (the same with NOVA_PINGPONG=0); done   # rcp: times_sigmoid patched
#   (cd /tmp/exp57 && tar cJf .../.nova-cache-exp57.txz base rcp)
mkdir -p exp57 && tar xf .nova-cache-exp57.txz -C exp57
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h100 PYTHONUNBUFFERED=1
R=$OUT/run57; mkdir -p $R
for v in base rcp; do
  for pp in auto 0; do
    NOVA_CACHE_DIR=$PWD/exp57/$v NOVA_PINGPONG=$pp timeout 150 python3 bench/runs/2026-12-05-run57-epilogues.py $v-pp$pp $R 2>&1 | grep -v -i warn
  done
done
