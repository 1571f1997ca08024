#!/bin/bash
# Device run 115: the skinny GEMM with lanes along K under Nsight Compute
# (bench/probes/skinny_along_k_ncu.py: events, then one profiled launch of each problem).
# Host: NOVA_CACHE_DIR=.nova-cache-run115 `python3 bench/probes/skinny_along_k_ncu.py build`; `.nova-cache-run115.txz`.
. bench/runs/device_env.sh run115 .nova-cache-run115
timeout 100 python3 bench/probes/skinny_along_k_ncu.py time 2>&1 | tee $R/time.txt
timeout 300 ncu --clock-control none -k regex:nova_gemm_skinny --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
    python3 bench/probes/skinny_along_k_ncu.py run > $R/ncu.txt 2>&1
grep -E "gemm|nova_gemm_skinny|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Stall Long|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per" $R/ncu.txt | head -90
true
