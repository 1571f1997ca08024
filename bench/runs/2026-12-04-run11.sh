#!/bin/bash
# Device run 11 of 2026-12-04: GPT-42M through nova.compile against torch.compile in one
# call, the final plan (run 10's cache: bash bench/runs/2026-12-04-run10-build.sh).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
timeout 250 python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 50 --warmup 5 \
    --timeout 120 --out $OUT/run11/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -6
