#!/bin/bash
# Device run 40 of 2026-12-04: (1) the race fixed: Llama-42M's deterministic step twice, bit for bit
# (probe and GPU test), and its 200-step curve against run 38's two eager curves; (2) where the norm
# backwards' time goes (bench/probes/norm_backward.py: row kernel and partials_final apart, variants
# of the partial sums) and Nsight Compute on the configured kernels, if it reads counters here;
# (3) GPT-42M every launch with each kernel's own duration (step_kernels' kernel_us).
# Host first: the probe's build mode; nova precompile train llama42m (and with NOVA_DETERMINISTIC=1).
tar xzf .nova-cache.tgz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=$PWD/.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
R=$OUT/run40; mkdir -p $R
NOVA_DETERMINISTIC=1 timeout 150 python3 bench/probes/deterministic_step.py --model llama42m --batch 32 --runs 3 \
    2>&1 | grep -v -i warn | tee $R/deterministic-llama42m.txt | head -8
timeout 200 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=short -rf tests/test_compile_gpu.py \
    -p no:cacheprovider 2>&1 | tail -15 | tee $R/gpu_tests.log
Q="--steps 200 --warmup 2 --timed 5 --repeats 1 --settle-s 0.5 --model llama42m --batch 32"
NOVA_DETERMINISTIC=1 timeout 100 python3 -m nova.bench.train --framework nova $Q --out $R/nova-det 2>&1 | grep -E "loss curve|error"
E=bench/results/h200-2026-12-04/run38
python3 bench/probes/loss_curves.py $E/eager-1/eager-llama42m-b32.json $E/eager-2/eager-llama42m-b32.json \
    $R/nova-det/nova-llama42m-b32.json 2>&1 | tee $R/curves.txt
python3 bench/probes/loss_curves.py $E/eager-2/eager-llama42m-b32.json $R/nova-det/nova-llama42m-b32.json 2>&1 | tee -a $R/curves.txt
timeout 120 python3 bench/probes/norm_backward.py run $R/norm_backward.json 2>&1 | grep -v -i warn
(which ncu && timeout 120 ncu --clock-control none --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis -k regex:nova_rows python3 bench/probes/norm_backward.py once) > $R/ncu.txt 2>&1
grep -E "==PROF==|==ERROR==|nova_rows|DRAM Throughput|Duration|Achieved Occupancy|Memory Throughput" $R/ncu.txt | head -40
timeout 120 python3 -m nova.bench.step_kernels --model gpt42m --batch 32 --out $R 2>&1 | grep -v -i warn | head -3
rm -f $R/*/summary-*
tar czf $OUT/run40.tgz -C $OUT run40; rm -rf $R
