# Nsight Compute on the TF32 forward (Nova NT +bias, Nova NN, cuBLAS NT +bias).
# Results: bench/results/h200-2026-12-01/d/call4-ncu
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
timeout 240 ncu --clock-control none --profile-from-start off -k regex:"gemm|xmma|cutlass" -c 3 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section MemoryWorkloadAnalysis \
  --metrics sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed.sum,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active \
  python3 bench/probes/tf32_forward_ncu.py > $OUT/ncu-tf32-forward.txt 2>&1
grep -E "^\s+(nova|sm90|void|cutlass)|Duration|SM Frequency|Compute \(SM\)|Memory Throughput|L2 Cache Throughput|DRAM Through|pipe_shared|bank_conflicts|inst_executed|Issue Slots|Warp Cycles Per Issued|No Eligible" $OUT/ncu-tf32-forward.txt | head -60
