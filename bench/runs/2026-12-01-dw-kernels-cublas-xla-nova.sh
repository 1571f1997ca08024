# What cuBLAS, XLA and Nova launch for the BF16 dW shapes and GPT-144M's LM head
# (bench/probes/dw_kernels.py), Nsight Compute on 768x3072x16384 (cuBLAS vs Nova), and the squares
# (4096^3, 6144^3, 8192^3; TF32, BF16) in the training-GEMM harness.
# Results: bench/results/h200-2026-12-01/e/call1
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $OUT/smi.txt
DW_LIBS=cublas,nova,xla timeout 150 python3 bench/probes/dw_kernels.py $OUT/dw_kernels.json > $OUT/dw_kernels.txt 2>&1
tail -n 3 $OUT/dw_kernels.txt
DW_NCU=1 DW_ONLY=768x3072x16384 DW_LIBS=cublas,nova timeout 150 ncu --clock-control none -c 6 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section WarpStateStats --section Occupancy \
  python3 bench/probes/dw_kernels.py /tmp/x.json > $OUT/ncu-dw-768x3072.txt 2>&1
grep -E "^\s+[a-zA-Z_].*\(|Duration|Compute \(SM\)|DRAM Through|L2 Hit|L1/TEX Hit|Memory Throughput|Grid Size|Block Size|Registers|Cluster|Warp Cycles Per Issued" $OUT/ncu-dw-768x3072.txt | head -70
OUT=/tmp/sq timeout 150 bash bench/train_gemms_device.sh --suite bench/suites/squares.json --dtypes tf32,bf16 --budget-s 110 2>&1 | grep -E "geomean|tflops|square" | tail -12
cp /tmp/sq/train-gemms/train_gemms.md $OUT/squares.md 2>/dev/null; cp /tmp/sq/train-gemms/clocks.csv $OUT/squares-clocks.csv 2>/dev/null
grep "^| squares" $OUT/squares.md
echo "== done $(date +%T)"
