#!/bin/bash
# Device run 128 (H100), main with the ping-pong ring cap (`hopper.pingpong_ring_cap`: a ping-pong ring no
# deeper than a unit's K tiles): 1. the variants probe again (forced ping-pong now gets 4 stages at K 256),
# each in its own process; 2. tests/test_runtime_gpu.py whole (its 17x300x200x256 case now cooperative);
# 3. the oracle's ping-pong candidates of 300x200x256, 1024x1024x256 and 300x200x2048 bf16 NT (stages <= K
# tiles; run 126's cache); 4. the two attention GPU tests run 124 failed (run 124's cache).
# Host, for T = h100 and h200: NOVA_CACHE_DIR=.nova-cache-run128 `python3 tests/gpu_build.py --all --only
# test_runtime_gpu.py --target T` and `python3 bench/probes/batched_pingpong.py build --target T`; the oracle's
# manifests `.nova-cache-run126/tune-{a,b,c}-T.json` (`nova tune gemm ... --target T`); the attention tests'
# kernels: run 124's cache (h100), `.nova-cache-run124h` (h200: the mask tests' build with transformers 5.17,
# the memory case's kernels).
. bench/runs/device_env.sh run128 .nova-cache-run128
for i in $(seq 0 14); do
    CUDA_LAUNCH_BLOCKING=1 timeout 30 python3 bench/probes/batched_pingpong.py run $i 2>&1 \
        | grep -E "^gemm|wrong \[|illegal|Error" | head -3 | tee -a $R/variants.txt
done
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider -n 0"
timeout 150 $PYTEST tests/test_runtime_gpu.py -rf > $R/runtime_gpu_tests.txt 2>&1
grep -E "^FAILED|passed|failed" $R/runtime_gpu_tests.txt | head -12
tar xf .nova-cache-run126.txz
for n in a b c; do
    mkdir -p $R/oracle-$n
    NOVA_CACHE_DIR=$PWD/.nova-cache-run126 timeout 100 python3 -m nova.bench.oracle \
        --manifest .nova-cache-run126/tune-$n-$T.json --budget-s 80 --rounds 1 --out $R/oracle-$n 2>&1 | tail -1
    python3 -c "
import json; d = json.load(open('$R/oracle-$n/oracle.json'))
for r in d['rows']:
    print(r['describe'], 'correct', r['correct'], 'wrong:', [t['label'] for t in r['timed'] if t.get('ok') is False])"
done
A=.nova-cache-run124$([ $T = h200 ] && echo h); tar xf $A.txz
NOVA_CACHE_DIR=$PWD/$A timeout 120 $PYTEST tests/test_attention_gpu.py tests/test_attention_mask_gpu.py \
    -k "test_memory_is_linear_in_sequence_length or test_hugging_face_padded_step_matches_eager" 2>&1 \
    | grep -E "^E |^FAILED|passed|failed" | head -12 | tee $R/attention_two.txt
true
