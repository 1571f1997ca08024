#!/bin/bash
# Device run 105.  Phase "a": the Hopper tiles' per-K-tile time, register-fed X against shared-memory-fed,
# over tile shapes (bench/probes/register_fed_chain.py), then a fresh GEMM draw (seed 20261216, never
# measured).  Phase "b": a fresh attention draw (seed 20261216).
# Host: `python3 bench/probes/register_fed_chain.py --build` (.nova-register-fed-chain.json, carried);
# NOVA_CACHE_DIR=.nova-cache-run105, for T = h200 and h100: `nova.bench.heldout gemm --count 100 --seed
# 20261216 --precompile --target T`, `nova.bench.heldout attention --count 40 --seed 20261216 --precompile
# --target T`; `.nova-cache-run105.txz`.
. bench/runs/device_env.sh ${RUN:-run105} ${CACHE:-.nova-cache-run105}
if [ "$1" = a ]; then
  OUT=$R timeout 150 python3 bench/probes/register_fed_chain.py 2>&1 | tee $R/register_fed_chain.txt
  mkdir -p $R/gemm
  timeout 330 python3 -m nova.bench.heldout gemm --count 100 --seed 20261216 --settle-s 0.4 --graph-settle-s 0.2 \
      --out $R/gemm 2>&1 | tail -1
  grep -A14 "## Summary" $R/gemm/heldout_gemm.md | head -16
fi
if [ "$1" = b ]; then
  mkdir -p $R/attention
  timeout 280 python3 -m nova.bench.heldout attention --count 40 --seed 20261216 --out $R/attention 2>&1 | tail -1
  grep -A16 "## Summary" $R/attention/heldout_attention.md | head -18
fi

# Phase "c" (an H200 only: the targets' card): HF Llama-42M b32 fast / lean / 5.05 GiB budget and GPT-144M
# b16 inside 12 GiB (capped).  Host, same cache: `nova precompile train hf-llama-42m --batch 32 --target
# h200` (default, NOVA_MEMORY_POLICY=fast, --memory-budget 5.05GiB), `nova precompile train gpt144m
# --batch B --target h200 --memory-budget 12GiB` for B = 16 and 24.
if [ "$1" = c ]; then
  for run in "fast NOVA_MEMORY_POLICY=fast" "lean NOVA_MEMORY_POLICY=lean" "budget NOVA_MEMORY_POLICY=lean"; do
    set -- $run; name=$1; mkdir -p $R/hf-llama-42m-$name
    env NOVA_TARGET=h200 $2 timeout 110 python3 -m nova.bench.train --all --frameworks nova --model hf-llama-42m \
        --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 3 --timeout 100 --out $R/hf-llama-42m-$name \
        $([ $name = budget ] && echo --memory-budget 5.05GiB --no-memory-cap) 2>&1 | grep -E "^\| nova|rror|peak" | head -4
  done
  mkdir -p $R/gpt144m-b16-12GiB
  NOVA_TARGET=h200 timeout 140 python3 -m nova.bench.train --framework nova --model gpt144m --memory-budget 12GiB \
      --steps 30 --warmup 5 --timed 10 --repeats 2 --batch 16 --out $R/gpt144m-b16-12GiB 2>&1 \
      | grep -E "^\| nova|rror|peak|memory" | head -5
fi
true
