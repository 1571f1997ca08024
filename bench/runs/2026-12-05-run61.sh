#!/bin/bash
# Device run 61: long rows at two resident CTAs or a lone one (rows_residency probe), the norm
# backwards' early loads at a CTA fewer (the configured schedule now), the torch.compile backend's
# Hugging Face graphs on the GPU, and the steps.  Host builds (MLIR), into .nova-cache, then tar cJf:
#   NOVA_TARGET=h100|h200 python3 bench/probes/rows_residency.py build   (and norm_backward_registers.py build)
#   nova precompile train gpt42m | llama42m --batch 32 --target h100|h200; the HF GPT-2 bf16 recipe (run 60)
#   PYTHONPATH=<transformers 5.17> python tests/gpu_build.py --all --only test_rows_gpu.py \
#       test_integrations_dynamo_gpu.py test_gemm_epilogue_gpu.py --target h200
# (2026-12-06: the HF GPT-2 bf16 plan with its GELU backward in the dgrad GEMM's epilogue; the
# activation-grad GPU cases gain HF's bf16 NT shape)
#   bash bench/runs/2026-12-05-run61.sh probes   the two probes, the rows and backend GPU tests
#   bash bench/runs/2026-12-05-run61.sh steps    GPT-42M, Llama-42M FP32, HF GPT-2 bf16 against torch.compile
#   bash bench/runs/2026-12-05-run61.sh all      the residency probe, the HF GPT-2 step, the GPU tests (one call)
#   bash bench/runs/2026-12-05-run61.sh models   GPT-42M and Llama-42M FP32
#   bash bench/runs/2026-12-05-run61.sh residency   the residency probe alone
#   bash bench/runs/2026-12-05-run61.sh core     the residency probe, the HF GPT-2 step, a minute of the rows GPU tests
#   bash bench/runs/2026-12-05-run61.sh epilogues  the same GEMMs in f32 and bf16 timed with events, as configured and
#                                                under NOVA_PINGPONG=0 and 1 (built under each on the host)
#   bash bench/runs/2026-12-05-run61.sh tests    the rows and backend GPU tests
#   bash bench/runs/2026-12-05-run61.sh ncu      GPT-42M's 16384x2048x512 GEMMs (plain, +gelu+P, gelu'(R)) under Nsight
#                                                Compute (bench/probes/epilogue_ncu.py build h100|h200 first)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H200*) T=h200 ;; *) T=h100 ;;
esac
R=$OUT/run61; mkdir -p $R
export PYTHONPATH=. NOVA_OFFLINE=1 PYTHONUNBUFFERED=1 NOVA_CACHE_DIR=$PWD/.nova-cache
tar xf .nova-cache.txz
if [ "$1" = probes ] || [ "$1" = all ] || [ "$1" = core ] || [ "$1" = residency ]; then
  NOVA_TARGET=$T timeout 90 python3 bench/probes/rows_residency.py run $R/rows_residency-$T.json 2>&1 | python3 -c "
import json, sys
for line in sys.stdin:
    if not line.startswith('{'): print(line.rstrip()[:300]); continue
    r = json.loads(line); print(f\"{r['problem'][:24]:24s} {r['variant'][-1]} {r['us']:8.2f} us {r['tb_per_s']:.2f} TB/s pred {r['predicted_us']} {r['row']['in_registers']} {r['row']['blocks_per_sm']} {r['roles']} finite {r['finite']} diff {r['rel_diff_vs_first']}\")"
fi
if [ "$1" = all ] || [ "$1" = core ]; then
  bash bench/runs/2026-12-05-run51.sh hf 2>&1 | grep -v "^\[transformers\]"
fi
if [ "$1" = core ]; then
  NOVA_TARGET=h200 timeout 60 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf \
      tests/test_rows_gpu.py > $R/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -8
fi
if [ "$1" = probes ] || [ "$1" = all ]; then
  [ "$1" = probes ] && NOVA_TARGET=$T timeout 60 python3 bench/probes/norm_backward_registers.py run $R/norm_backward_registers-$T.json \
      2>&1 | grep -o '"problem": "[^"]*", "describe[^{]*"variant": "[^"]*"\|"us": [0-9.]*' | paste - - | head -12
  NOVA_TARGET=h200 timeout 170 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf \
      tests/test_rows_gpu.py tests/test_integrations_dynamo_gpu.py tests/test_gemm_epilogue_gpu.py > $R/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -14
fi
if [ "$1" = steps ]; then
  bash bench/runs/2026-12-05-run51.sh gpt42m
  bash bench/runs/2026-12-05-run51.sh llama-fp32
  bash bench/runs/2026-12-05-run51.sh hf 2>&1 | grep -v "^\[transformers\]"
fi
if [ "$1" = models ]; then
  bash bench/runs/2026-12-05-run51.sh gpt42m
  bash bench/runs/2026-12-05-run51.sh llama-fp32
fi
if [ "$1" = ncu ]; then
  NOVA_TARGET=$T timeout 150 ncu --clock-control none -k regex:gemm -c 3 --section SpeedOfLight \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      python3 bench/probes/epilogue_ncu.py run > $R/epilogue_ncu-$T.txt 2>&1
  grep -E "us \(events|gemm|Duration|Throughput|Stall|Warp Cycles Per|Issued Warp|No Eligible|==PROF==|==ERROR==" \
      $R/epilogue_ncu-$T.txt | head -70
fi
if [ "$1" = epilogues ]; then
  for pp in "" 0 1; do
    echo "NOVA_PINGPONG=$pp"
    NOVA_PINGPONG=$pp NOVA_TARGET=$T timeout 60 python3 bench/probes/epilogue_ncu.py time 2>&1 | tail -6
  done | tee $R/epilogues-$T.txt
fi
if [ "$1" = tests ]; then
  NOVA_TARGET=h200 timeout 170 python3 -m pytest -q -n 0 -m gpu --show-capture=no --tb=line -rf \
      tests/test_rows_gpu.py tests/test_integrations_dynamo_gpu.py > $R/gpu_tests.log 2>&1
  grep -E "^(FAILED|ERROR)|passed|failed" $R/gpu_tests.log | head -14
fi
