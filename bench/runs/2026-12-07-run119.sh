#!/bin/bash
# Device run 119: where an eager call's host time goes on the GEMM draw's per-call bottom
# (`bench/probes/eager_host_profile.py`; the cache of run 118 with the probe's build added).
. bench/runs/device_env.sh run119 .nova-cache-run118
timeout 200 python3 bench/probes/eager_host_profile.py 2>&1 | tee $R/eager_host_profile.txt | grep -E "a call|launch|run\b|matmul|signature" | head -60
true
