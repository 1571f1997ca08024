# TF32 D128 dK/dV with one consumer warpgroup.  The attention GPU tests and the
# TF32 benchmark (CUDA-graph replay vs torch's FP32 SDPA), each kernel's CUPTI time (auto picks),
# compute-sanitizer over the TF32 D128 and T = 1 cases (C = 1 kernels), Nsight Compute on the TF32
# T512 and D128 kernels.  Run from the repository root with the attention cache in .nova-cache.
# Results: bench/results/h200-2026-12-01/g/call1
NCU_SECTIONS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy"
NCU_METRICS="l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__inst_executed_pipe_lsu.sum"
export PROBE="for s in 32,8,512,64 8,16,2048,128; do timeout 100 ncu --clock-control none -k regex:nova_attn -c 4 $NCU_SECTIONS \
  --metrics $NCU_METRICS python3 bench/probes/attention_ncu.py \$s tf32 > /tmp/device-stages/ncu-tf32-\${s//,/x}.txt 2>&1; echo \"ncu \$s exit \$?\"; done"
OUT=$OUT STAGES="attention kerneltimes sanitizer probe" ATTN_DTYPES=tf32 KT_MODES=auto KT_DTYPES=tf32 \
  SAN_TOOLS="memcheck racecheck synccheck" SAN_TESTS=tests/test_attention_gpu.py SAN_K="(tf32 and D128) or T1x1" \
  PROBE_S=230 bash bench/device_stages.sh 2>&1 | tail -n 60
