# Nsight Compute on Nova's deep-K dW candidates (split-K workspace units vs one
# unit per CTA vs 64x128 ping-pong) and cuBLAS's kernels on the same shapes.
# Results: bench/results/h200-2026-12-01/e/call4-ncu
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache-dw NOVA_TARGET=h200 PYTHONUNBUFFERED=1
mkdir -p $OUT
SEC="--section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section ComputeWorkloadAnalysis"
timeout 200 ncu --clock-control none -k regex:nova_gemm -c 12 $SEC python3 bench/probes/oracle_ncu.py .nova-cache-dw/tune-manifest.json \
  "128x256x64 w8x1 st4 sk7ws g6@768x768x16384" "128x256x64 w8x1 st4 sk1 g1 tma@768x3072x16384" \
  "128x256x64 w8x1 st4 sk5ws g6@768x3072x16384" "64x128x64 w8x1 st8 sk1 g1 tma pp@1536x512x16384" \
  "128x256x64 w8x1 st4 sk5ws g7@1536x512x16384" "128x256x64 w8x1 st4 sk4ws g4@512x2048x16384" > $OUT/ncu-nova.txt 2>&1
for s in 768x768x16384 768x3072x16384 512x2048x16384; do
  DW_NCU=1 DW_ONLY=$s DW_LIBS=cublas timeout 60 ncu --clock-control none -k regex:nvjet -c 2 $SEC \
    python3 bench/probes/dw_kernels.py /tmp/x.json >> $OUT/ncu-cublas.txt 2>&1; done
for f in $OUT/ncu-nova.txt $OUT/ncu-cublas.txt; do echo "== $f"
grep -E "^launched|^  [a-z_0-9]+.*\(|SM Frequency|Duration|Compute \(SM\) Th|L2 Hit Rate|DRAM Through|L2 Cache Through|Grid Size|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A|stalled|This stall type" $f | cut -c1-160 | head -150; done
