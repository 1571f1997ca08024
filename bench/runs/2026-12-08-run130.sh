#!/bin/bash
# Device run 130 (any card), main at ABI 18: every wgmma kernel's SASS read back, a GEMM whose
# descriptor words ptxas left unwritten rebuilt with masked descriptors.  1. The probe's variants and
# forced rings (bench/probes/batched_pingpong.py: the rings run 128 found wrong, now masked), each in
# its own process.  2. tests/test_runtime_gpu.py whole.  3. The branch `launch-price`: seed
# 20261219's GEMM draw (run 120 timed it on main) with the branch's picks.
# Host: NOVA_CACHE_DIR=.nova-cache-run130, T = h100, h200: `python3 bench/probes/batched_pingpong.py
# build --target T`, `python3 tests/gpu_build.py --all --only test_runtime_gpu.py --target T`;
# `.nova-cache-run130.txz`.  The branch: `.branch-launch-price.txz` (lp/nova) and its cache
# `.nova-cache-lp129.txz` (`nova.bench.heldout gemm --count 100 --seed 20261219 --precompile --target T`).
. bench/runs/device_env.sh run130 .nova-cache-run130
for i in $(seq 0 20); do
    CUDA_LAUNCH_BLOCKING=1 timeout 30 python3 bench/probes/batched_pingpong.py run $i 2>&1 \
        | grep -E "^gemm|wrong \[|illegal|Error" | head -3 | tee -a $R/variants.txt
done
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -n 0 tests/test_runtime_gpu.py -rf \
    > $R/runtime_gpu_tests.txt 2>&1
grep -E "^FAILED|passed|failed" $R/runtime_gpu_tests.txt | head -12
grep -E "^E .*(rror|assert)" $R/runtime_gpu_tests.txt | head -6
tar xf .branch-launch-price.txz && tar xf .nova-cache-lp129.txz
mkdir -p $R/gemm-20261219-lp
(cd lp && PYTHONPATH=. NOVA_CACHE_DIR=$PWD/../.nova-cache-lp129 timeout 200 python3 -m nova.bench.heldout gemm \
    --count 100 --seed 20261219 --settle-s 0.2 --graph-settle-s 0.1 --out $R/gemm-20261219-lp 2>&1 | tail -1)
grep -A8 "## Summary" $R/gemm-20261219-lp/heldout_gemm.md | head -9
true
