#!/bin/bash
# Device run 75: the graph-replay launch gap (the H100 calibration's t_launch_us, measured as the H200's was),
# and on an H200 the GPT-42M step kernel by kernel (the accumulate's search there).
#   `.nova-cache-probe.txz`: bench/probes/graph_launch_gap.py --build --target h100 / h200 (and run 74's probe)
#   `.nova-cache.txz`: as run 72's
tar xf .nova-cache-probe.txz
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/run75-$T; mkdir -p $R
NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache-probe NOVA_TARGET=$T PYTHONPATH=. timeout 120 \
    python3 bench/probes/graph_launch_gap.py 2>&1 | grep -v -i warn | tee $R/graph_launch_gap.txt
if [ $T = h200 ]; then
  tar xf .nova-cache.txz
  export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=$T PYTHONUNBUFFERED=1
  timeout 90 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R/gpt42m 2>&1 | grep -v -i warn | head -5
  timeout 150 python3 -m nova.bench.train --all --frameworks compile,nova --model gpt42m --batch 32 --steps 40 \
      --warmup 5 --timeout 130 --out $R/gpt42m 2>&1 | grep -E "^\| |steady|error" | head -8
fi
