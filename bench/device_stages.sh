#!/usr/bin/env bash
# A staged device job, one device command: the runtime's GPU tests (split-K workspace, determinism), the
# GEMM suite of the GPT training steps (Nova vs cuBLAS vs XLA), the wgmma oracle of the dW shapes
# (bench/suites/dw.txt, manifest from `nova tune gemm --suite bench/suites/dw.txt --trans-a ...`),
# the four layouts of three BF16 shapes (bench/suites/layouts.json), and the GPT-42M step (Nova and
# eager).  Host first: see bench/README.md ("The staged device job").
#   STAGES="tests suite oracle train" bash bench/device_stages.sh
# Stages: tests suite oracle layouts profile trainprofile train (FRAMEWORKS, MODEL, BATCH), trainalt (Nova
# under ALT_ENV, default NOVA_ATTENTION_PRECISION=tf32, beside the train stage's eager run or EAGER_FROM),
# attention (GPU tests + benchmark, ATTN_DTYPES), kerneltimes (each attention kernel's CUPTI time against
# its prediction, bench/probes/attention_kernel_times.py, for the dtypes KT_DTYPES (default bf16), under NOVA_ATTENTION_HOPPER = each of KT_MODES,
# default "auto force off"), clusters (bench/suites/cluster_probe.json under
# NOVA_CLUSTER = each of CLUSTERS, "none" = the configurator's pick; CLUSTER_SUITE), batched
# (bench/suites/batched_gemms.json: Nova vs torch.bmm vs XLA), heldout (nova.bench.heldout gemm: HELDOUT_COUNT
# problems of HELDOUT_SEED, default the 40 of 20261203 with its decode shapes; HELDOUT_S), sanitizer (every GPU test file of SAN_TESTS
# under each compute-sanitizer tool of SAN_TOOLS, default memcheck racecheck synccheck initcheck, SAN_S each;
# SAN_K a pytest -k filter), probe (the command PROBE, PROBE_S). suite: SUITE (default the training GEMMs), SUITE_DTYPES.
# Results: $OUT/device-stages.tgz (everything) + the summaries beside it (the device tool returns 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1 NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200
OUT=${OUT:-bench/results}; RES=/tmp/device-stages; mkdir -p "$RES" "$OUT"
STAGES=${STAGES:-tests suite oracle}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv | tee "$RES/log.txt"
for stage in $STAGES; do
  echo "== $stage $(date +%T)" | tee -a "$RES/log.txt"
  case $stage in
    tests)  timeout ${TESTS_S:-200} python3 -m pytest -m gpu ${TESTS:-tests/test_runtime_gpu.py} -q -p no:cacheprovider \
              2>&1 | tail -n 40 | tee "$RES/gpu-tests.txt" | tee -a "$RES/log.txt" ;;
    suite)  OUT=$RES timeout ${SUITE_S:-330} bash bench/train_gemms_device.sh ${SUITE:+--suite $SUITE} ${SUITE_DTYPES:+--dtypes $SUITE_DTYPES} --budget-s $(( ${SUITE_S:-330} - 40 )) \
              2>&1 | tail -n 60 >> "$RES/log.txt" ;;
    oracle) timeout ${ORACLE_S:-170} python3 -m nova.bench.oracle --manifest .nova-cache/tune-manifest.json \
              --out "$RES" --tag oracle-dw --budget-s $(( ${ORACLE_S:-170} - 30 )) 2>&1 | tail -n 40 >> "$RES/log.txt" ;;
    layouts) mkdir -p "$RES/layouts"; timeout ${LAYOUTS_S:-120} python3 -m nova.bench.train_gemms --device \
              --suite bench/suites/layouts.json --dtypes bf16 --out "$RES/layouts" --settle-s 0.5 --rounds 3 \
              --budget-s $(( ${LAYOUTS_S:-120} - 20 )) 2>&1 | tail -n 20 >> "$RES/log.txt" ;;
    profile) timeout 90 python3 -m nova.bench.kernel_profile --shapes ${PROFILE_SHAPES:-512x2048x16384,4096x4096x4096} \
              --dtypes bf16 --out "$RES" 2>&1 | tail -n 30 >> "$RES/log.txt" ;;
    trainprofile) timeout 120 python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 \
              --out "$RES" 2>&1 | tail -n 40 >> "$RES/log.txt" ;;
    heldout) mkdir -p "$RES/heldout"; timeout ${HELDOUT_S:-400} python3 -m nova.bench.heldout gemm --count ${HELDOUT_COUNT:-40} \
              --seed ${HELDOUT_SEED:-20261203} --out "$RES/heldout" 2>&1 | tail -n 15 | tee -a "$RES/log.txt"
            cp "$RES/heldout/heldout_gemm.md" "$OUT/" 2>/dev/null ;;
    attention) timeout ${ATTN_TESTS_S:-150} python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider \
              2>&1 | tail -n 30 | tee "$RES/attention-tests.txt" | tee -a "$RES/log.txt"
            mkdir -p "$RES/attention"; timeout ${ATTN_BENCH_S:-300} python3 -m nova.bench.attention --out "$RES/attention" \
              --dtypes ${ATTN_DTYPES:-tf32,3xtf32} 2>&1 | tail -n 20 | tee -a "$RES/log.txt" ;;
    trainalt) ALT=${ALT_ENV:-NOVA_ATTENTION_PRECISION=tf32}; D="$RES/train-${ALT//[^A-Za-z0-9]/_}"; mkdir -p "$D"
            cp "$RES"/train/eager-*.json ${EAGER_FROM:-} "$D/" 2>/dev/null
            env $ALT timeout ${TRAIN_S:-240} python3 -m nova.bench.train --framework nova \
              --model ${MODEL:-gpt42m} --batch ${BATCH:-32} --out "$D" 2>&1 | tail -n 20 >> "$RES/log.txt"
            python3 -m nova.bench.train_report "$D" --model ${MODEL:-gpt42m} --batch ${BATCH:-32} \
              2>&1 | tail -n 30 >> "$RES/log.txt" ;;
    clusters) for c in ${CLUSTERS:-none 2x1 1x2}; do mkdir -p "$RES/clusters-$c"
              ( [ "$c" = none ] || export NOVA_CLUSTER=$c; timeout ${CLUSTER_S:-100} python3 -m nova.bench.train_gemms --device \
                --suite ${CLUSTER_SUITE:-bench/suites/cluster_probe.json} --dtypes ${CLUSTER_DTYPES:-bf16} --out "$RES/clusters-$c" --settle-s 0.5 \
                --rounds 3 --budget-s $(( ${CLUSTER_S:-100} - 20 )) 2>&1 | tail -n 12 >> "$RES/log.txt" ); done ;;
    batched) OUT=$RES/batched timeout ${BATCHED_S:-150} bash bench/train_gemms_device.sh --suite bench/suites/batched_gemms.json \
              --dtypes ${BATCHED_DTYPES:-tf32,bf16} --settle-s 0.5 --rounds 3 --budget-s $(( ${BATCHED_S:-150} - 30 )) \
              2>&1 | tail -n 20 >> "$RES/log.txt" ;;
    sanitizer) for tool in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
              echo "== compute-sanitizer $tool $(date +%T)" | tee -a "$RES/log.txt"
              timeout ${SAN_S:-150} compute-sanitizer --tool $tool --report-api-errors no --target-processes all \
                python3 -m pytest -m gpu ${SAN_TESTS:-tests/test_runtime_gpu.py tests/test_attention_gpu.py} ${SAN_K:+-k "$SAN_K"} -q -p no:cacheprovider \
                > "$RES/sanitizer-$tool.txt" 2>&1; echo "exit $?" >> "$RES/sanitizer-$tool.txt"
              grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed|^exit" "$RES/sanitizer-$tool.txt" | tee -a "$RES/log.txt"; done ;;
    kerneltimes) for m in ${KT_MODES:-auto force off}; do
              NOVA_ATTENTION_HOPPER=$m timeout ${KT_S:-90} python3 bench/probes/attention_kernel_times.py \
                "$RES/kernel_times_$m.json" 2>&1 | grep "^B" | tee -a "$RES/log.txt"; done ;;
    probe)  timeout ${PROBE_S:-120} bash -c "${PROBE:-true}" 2>&1 | tail -n ${PROBE_LINES:-80} | tee "$RES/probe.txt" >> "$RES/log.txt" ;;
    train)  timeout ${TRAIN_S:-240} python3 -m nova.bench.train --all --frameworks ${FRAMEWORKS:-eager,nova} --model ${MODEL:-gpt42m} --batch ${BATCH:-32} \
              --out "$RES/train" --timeout 110 2>&1 | tail -n 30 >> "$RES/log.txt" ;;
  esac
  tar czf "$OUT/device-stages.tgz" -C "$RES" .          # after every stage: a call stopped at its limit keeps what ran
done
cp "$RES/log.txt" "$OUT/"
[ -f "$RES/train-gemms/train_gemms.md" ] && cp "$RES/train-gemms/train_gemms.md" "$OUT/"
ls -la "$OUT"
