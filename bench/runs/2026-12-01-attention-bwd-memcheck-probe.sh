# The wgmma attention backward's illegal address: the case probe with the Hopper backward on and off,
# memcheck on case 0, the attention GPU tests.
# Results: bench/results/h200-2026-12-01/c/call1
export PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv
echo "== probe HOPPER_BWD=1"; NOVA_ATTENTION_HOPPER_BWD=1 timeout 200 python3 bench/probes/attention_cases.py run 2>&1
echo "== probe HOPPER_BWD=0"; NOVA_ATTENTION_HOPPER_BWD=0 timeout 150 python3 bench/probes/attention_cases.py run 2>&1
echo "== memcheck case 0 HOPPER_BWD=1"; NOVA_ATTENTION_HOPPER_BWD=1 timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --print-limit 20 python3 bench/probes/attention_cases.py one 0 > $OUT/memcheck0.txt 2>&1; head -c 6000 $OUT/memcheck0.txt
echo "== attention gpu tests default"; timeout 150 python3 -m pytest -m gpu tests/test_attention_gpu.py -q -p no:cacheprovider 2>&1 | tail -15
