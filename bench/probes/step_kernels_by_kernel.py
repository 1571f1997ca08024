"""A step_kernels result measured before the per-kernel count existed, counted kernel by kernel: each
launch's CUPTI kernels matched to the terms of the plan made again on the host (``explain``'s
``schedule.kernels``, by group index), then ``summarize`` and the list of DRAM-bound kernels below 85%.

    python3 bench/probes/step_kernels_by_kernel.py RESULT.json MODEL BATCH TARGET
    e.g. bench/results/h200-2026-12-06/run66/gpt42m/step_kernels-gpt42m.json gpt42m 32 h200

The terms are today's model's (the bytes and bounds of each role); the times are the result's."""
import json
import sys

from nova.bench.step_kernels import below_ceiling, each_kernel, summarize
from nova.compiler.explain import kernel_reports, plan_training_step
from nova.hwmodel import get_target

path, model, batch, target = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
result = json.load(open(path))
planned, _ = plan_training_step(model, batch, None, "adamw", target)
terms = {rep.index: (rep.schedule or {}).get("kernels") for rep in kernel_reports(planned, get_target(target))}
for row in result["rows"]:
    row["kernels"] = each_kernel(row, terms.get(row["group"]), result["ceiling_tbs"])
s = summarize(result["rows"], result["ceiling_tbs"])
print(f"{path}: {result['device']}, ceiling {result['ceiling_tbs']} TB/s")
print(f"per launch: {s['streaming_at_85pct']} of {s['streaming_kernels']} streaming launches at >= 85%")
print(f"per device kernel: {s['device_streaming_at_85pct']} of {s['device_streaming']} DRAM-bound kernels at >= 85% "
      f"({s['device_fixed_cost']} launch- or latency-bound or of a few CTAs)")
for name, k in below_ceiling(result["rows"]):
    print(f"  below: {name[:56]} {k.get('role', '')} {k['measured_us']} us, {k['of_ceiling']} of the ceiling")
