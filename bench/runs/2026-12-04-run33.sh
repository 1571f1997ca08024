#!/bin/bash
# Device run 33 of 2026-12-04: the column stage's rows in flight (bench/probes/column_unroll.py): the
# GPT-42M step's bias-gradient column reductions at unroll 1, 2, 4, 8 and with the row splits of two waves of CTAs against ATen's add/copy of the
# same rows, by CUPTI kernel durations.
# Host first: NOVA_CACHE_DIR=$PWD/.nova-cache python3 bench/probes/column_unroll.py build; tar the cache.
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run33; mkdir -p $R
timeout 200 python3 bench/probes/column_unroll.py run $R/column_unroll.json 2>&1 | grep -v -i warn | tail -20
