# Why the split-K fixup ran slower than the workspace (bench/results/h200-2026-12-01/h/call1: BF16
# 3072x768x16384 dW 143.9 -> 189.7 us).  Two experimental builds of the fixup kernel (not committed; same
# cache keys, so each in its own cache): "slice" walks the units slice-major as the workspace kernel does
# (the fixup's last slices then come in the last round), "nosum" skips the last slice's read-back (wrong
# results: the arrival's cost alone).  The BF16 weight-gradient suite under each, then Nsight Compute on
# 3072x768 for the workspace kernel and the fixup kernel (tile-major, as committed) and the slice-major
# one.
# Results: bench/results/h200-2026-12-01/h/call2
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
mkdir -p $OUT
for v in slice nosum; do
  NOVA_CACHE_DIR=.nova-cache-$v NOVA_SPLIT_REDUCTION=fixup OUT=/tmp/s13-$v timeout 110 bash bench/train_gemms_device.sh \
    --suite bench/suites/train_dw.json --dtypes bf16 --rounds 5 --budget-s 90 2>&1 | grep -E "geomean" | tail -2
  mkdir -p $OUT/dw-$v; cp /tmp/s13-$v/train-gemms/train_gemms.md /tmp/s13-$v/train-gemms/train_gemms.json $OUT/dw-$v/ 2>/dev/null; done
for v in workspace:.nova-cache fixup:.nova-cache fixup:.nova-cache-slice; do r=${v%%:*}; c=${v#*:}
  NOVA_CACHE_DIR=$c NOVA_SPLIT_REDUCTION=$r timeout 60 ncu --clock-control none --kernel-name nova_gemm --launch-skip 3 \
    --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    python3 bench/probes/cluster_one.py 3072 768 16384 bf16 TN > $OUT/ncu-$r${c#.nova-cache}.txt 2>&1
  grep -E "Duration|DRAM Throughput|L2 Hit Rate|Compute \(SM\)|Stall|Memory Throughput" $OUT/ncu-$r${c#.nova-cache}.txt | head -12; done
echo "== done $(date +%T)"
