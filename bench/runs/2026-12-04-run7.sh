#!/bin/bash
# Device run 7 of 2026-12-04: run 6's steps again after the final sum (loads in flight, more CTAs) and the
# residual add fused into the bias gradient; step_kernels samples the clock inside the launches; HF
# Llama-42M at NOVA_MEMORY_POLICY=0.015; GPT-144M under the default policy; results in run7/.
# Host first: bash bench/runs/2026-12-04-run6-build.sh, then bench/runs/2026-12-04-run4-build.sh tests.
RUN=run7 exec bash "$(dirname "$0")/2026-12-04-run6.sh" "$@"
