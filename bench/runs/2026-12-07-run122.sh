#!/bin/bash
# Device run 122: the skinny GEMM along K under Nsight Compute after the chunk loop's fix (run 115 profiled
# it before): where the K-lane kernels still 1.3-1.6x their model spend their time (16-bit, chunks of one
# trip, grids under one wave).  Events with the variants first, then one profiled launch of each pick.
# Then the tile candidates of 11x2688x1408 bf16 NN (the skinny pick at 0.56x cuBLAS: are the tiles' split-K
# candidates, priced at 15 us, faster?) timed by the oracle.
# Host: NOVA_CACHE_DIR=.nova-cache-run120 `python3 bench/probes/skinny_along_k_ncu.py build` (with run 120's
# kernels), `nova tune gemm --suite <11x2688x1408> --target T --dtype bf16 --exhaustive --limit 24 --cache-dir
# .nova-cache-run120 --manifest .nova-cache-run120/tune-87-T.json` for T = h100 and h200; `.nova-cache-run120.txz`.
. bench/runs/device_env.sh run122 .nova-cache-run120
timeout 120 python3 bench/probes/skinny_along_k_ncu.py time 2>&1 | tee $R/time.txt
timeout 300 ncu --clock-control none -k regex:nova_gemm_skinny --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --section InstructionStats python3 bench/probes/skinny_along_k_ncu.py run > $R/ncu.txt 2>&1
grep -E "gemm|nova_gemm_skinny|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Stall Long|Warp Cycles Per Issued|Issued Warp|No Eligible|Executed Instructions " $R/ncu.txt | head -120
mkdir -p $R/oracle-87
timeout 120 python3 -m nova.bench.oracle --manifest .nova-cache-run120/tune-87-$T.json --out $R/oracle-87 2>&1 | tail -4
true
