#!/bin/bash
# Device run 69: the non-persistent Hopper attention forward at D64 faults (run 68); which part of its
# schedule does it: the same problem (B1 H4/2 T3105 D64 bf16) under schedule variants built on the host
# (`bench/probes/attention_variant.py ... --build`): the ring's depth 2 / 3 / 4, the persistent kernel
# on 100 and 132 CTAs, and D128 (which runs) at depth 3.
tar xf .nova-cache-heldout.txz
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_TARGET=h200 NOVA_CACHE_DIR=$PWD/.nova-cache-heldout CUDA_LAUNCH_BLOCKING=1
for v in base stages2 stages4 persistent100 persistent132; do
  timeout 60 python3 bench/probes/attention_variant.py 1 4 2 3105 64 $v 2>&1 | tail -1
done
timeout 60 python3 bench/probes/attention_variant.py 1 4 2 3105 128 stages3 2>&1 | tail -1
which compute-sanitizer; ls /usr/local/cuda*/bin 2>/dev/null | head -5
