#!/bin/bash
# Device run 95 (either card; little device time left): the skinny kernel's shifted rows on the GPU (its
# GPU tests at odd K with B stored [N, K], and four odd-K decode GEMMs against cuBLAS), then Hugging Face
# Llama-42M's default plan with the SwiGLU product recomputed in its backward's kernel (its peak).
# Host: `.nova-cache-skinny.txz` (test_skinny_gpu.py --build, bench/probes/skinny_odd_k.py --build, h200 and
# h100) and `.nova-cache-llama.txz` (`nova precompile train hf-llama-42m --batch 32`, h200 and h100).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
R=$OUT/run95-$T; mkdir -p $R
tar xf .nova-cache-skinny.txz; tar xf .nova-cache-llama.txz
export PYTHONPATH=.:${EXTRA_PYTHONPATH:-} NOVA_OFFLINE=1 PYTHONUNBUFFERED=1 NOVA_TARGET=$T
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout7 timeout 60 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 \
    tests/test_skinny_gpu.py -k "4099 or 3001 or 14759 or 7603 or 1389 or 483" 2>&1 | tail -3 | tee $R/skinny_gpu_tests.log
NOVA_CACHE_DIR=$PWD/.nova-cache-heldout7 timeout 40 python3 bench/probes/skinny_odd_k.py 2>&1 | tail -4 | tee $R/skinny_odd_k.txt
NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 timeout 110 python3 -m nova.bench.train --all --frameworks nova \
    --model hf-llama-42m --batch 32 --steps 20 --warmup 3 --timed 20 --repeats 2 --timeout 100 --out $R/hf-llama-42m 2>&1 \
    | grep -E "^\| nova|rror|peak" | head -4
true
