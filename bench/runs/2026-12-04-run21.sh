#!/bin/bash
# Device run 21 of 2026-12-04: where nova.compile's calls spend their host time in an unsynced
# GPT-42M loop (bench/probes/synced_steps.py --profile: cProfile over 20 calls).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
mkdir -p $OUT/run21
timeout 200 python3 bench/probes/synced_steps.py --steps 20 --frameworks nova --profile 20 2>&1 | grep -v -i warn \
    > $OUT/run21/profile.txt
