#!/bin/bash
# Device run 39 of 2026-12-04: which kernel of the NOVA_DETERMINISTIC=1 step gives different bits run
# to run (run 38: two deterministic Llama-42M runs part from step 2)?  bench/probes/deterministic_step.py:
# one step from the same start three times in one process, each parameter's AdamW moments compared.
# Host first: NOVA_DETERMINISTIC=1 nova precompile train llama42m / gpt42m --batch 32 --target h200.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run39; mkdir -p $R
for m in llama42m gpt42m; do
  NOVA_DETERMINISTIC=1 timeout 150 python3 bench/probes/deterministic_step.py --model $m --batch 32 --runs 3 \
      2>&1 | grep -v -i warn | tee $R/deterministic-$m.txt
done
tar czf $OUT/run39.tgz -C $OUT run39; rm -rf $R
