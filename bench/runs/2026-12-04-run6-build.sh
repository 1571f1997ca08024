#!/bin/bash
# Host: the kernels of device run 6 of 2026-12-04 (after the step clock: the memory policy prices with it,
# so its plans may differ) -- run 4's build, plus HF Llama-42M at NOVA_MEMORY_POLICY=0.015 and GPT-144M's
# default plan.  Run with the venv on PATH; TF517 names a folder holding transformers 5.17 (the device's).
set -u
bash bench/runs/2026-12-04-run4-build.sh steps
bash bench/runs/2026-12-04-run4-build.sh hf517
export NOVA_CACHE_DIR=$PWD/.nova-cache
NOVA_MEMORY_POLICY=0.015 nova precompile train hf-llama-42m --target h200
NOVA_MEMORY_POLICY=0.015 PYTHONPATH=${TF517:-/tmp/tf517} nova precompile train hf-llama-42m --target h200
nova precompile train gpt144m --batch 16 --target h200
tar czf .nova-cache.tgz .nova-cache && ls -la .nova-cache.tgz
