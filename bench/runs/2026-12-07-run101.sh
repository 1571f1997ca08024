#!/bin/bash
# Device run 101: GPT-144M inside 12 GiB (the process capped) on the plans the repriced host offload makes:
# batch 16 now recomputes alone (1.14 ms priced), batch 24 still copies 1.70 GiB (2.20 ms priced, was ~0.1).
# Host: NOVA_CACHE_DIR=.nova-cache-run101 nova precompile train gpt144m --batch B --target h200
# --memory-budget 12GiB for B = 16 and 24; `.nova-cache-run101.txz`.
. bench/runs/device_env.sh run101 .nova-cache-run101
for b in 16 24; do
  mkdir -p $R/gpt144m-b$b-12GiB
  NOVA_TARGET=h200 timeout 140 python3 -m nova.bench.train --framework nova --model gpt144m --memory-budget 12GiB \
      --steps 30 --warmup 5 --timed 10 --repeats 2 --batch $b --out $R/gpt144m-b$b-12GiB 2>&1 \
      | grep -E "^\| nova|rror|peak|memory" | head -5
done
true
