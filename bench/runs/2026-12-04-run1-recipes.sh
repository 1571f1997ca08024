#!/bin/bash
# Device run 1 of 2026-12-04: real-script recipes (issue: nova.compile on real training scripts).
# Host first: nova precompile train hf-gpt2-42m --autocast bf16 --padded --clip-grad-norm 1.0 --target h200 --cache-dir .nova-cache
#             nova precompile train gpt42m --clip-grad-norm 1.0 --target h200 --cache-dir .nova-cache
# carry .nova-cache and .wheels (the host's transformers, so the Hugging Face step is the one precompiled)
export NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader
python -m zipfile -e .wheels/transformers-*.whl /tmp/transformers-host >/dev/null 2>&1 && \
  PYTHONPATH=/tmp/transformers-host python -c "import transformers; print('transformers', transformers.__version__)" && \
  export PYTHONPATH=/tmp/transformers-host
python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
R="--steps 200 --schedule warmup-cosine --clip-grad-norm 1.0"
python -m nova.bench.train --all --frameworks eager,compile,nova --model hf-gpt2-42m --batch 32 --autocast bf16 --padded \
    $R --timeout 420 --out $OUT/hf-gpt2-recipe 2>&1 | grep -v "^\[transformers\]" | tail -40
python -m nova.bench.train --framework nova --model gpt42m --batch 32 $R --out $OUT/gpt42m-schedule 2>&1 | tail -4
python -m nova.bench.train --framework eager --model gpt42m --batch 32 $R --out $OUT/gpt42m-schedule 2>&1 | tail -3
python -m nova.bench.train --framework nova --model gpt42m --batch 32 --steps 200 --clip-grad-norm 1.0 --out $OUT/gpt42m-constant 2>&1 | tail -3
