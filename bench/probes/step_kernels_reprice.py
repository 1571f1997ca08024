"""step_kernels results measured before ``gemms_at_clock`` existed, repriced: each calibrated GEMM at
the SM clock measured while its launches ran, beside the step clock's price (the plan made again on
the host, matched by group index; a group whose GEMM name differs is counted as a mismatch).

    python3 bench/probes/step_kernels_reprice.py [MODEL ...]      # run 23's gpt42m llama42m gpt144m hf-llama-42m
    (hf-llama-42m: with the device's transformers on PYTHONPATH, its graph is the one measured)
"""
import json, sys
from nova.hwmodel import get_target
from nova.bench.step_kernels import gemms_at_clock
from nova.compiler.explain import plan_training_step, kernel_reports_at_own_clocks
for path, model, batch in [("run23/step_kernels-gpt42m.json", "gpt42m", 32), ("run23/step_kernels-llama42m.json", "llama42m", 32),
                           ("run23/step_kernels-gpt144m.json", "gpt144m", 16), ("run23/step_kernels-hf-llama-42m.json", "hf-llama-42m", 32)]:
    if len(sys.argv) > 1 and model not in sys.argv[1:]:
        continue
    r = json.load(open("bench/results/h200-2026-12-04/" + path))
    planned, _ = plan_training_step(model, batch, None, "adamw", "h200")
    reports, _ = kernel_reports_at_own_clocks(planned, get_target("h200"))
    names = {rep.index: rep.name for rep in reports}
    mism = sum(1 for row in r["rows"] if row["kind"] == "gemm" and names.get(row["group"]) != row["name"])
    gemms_at_clock(r, planned, get_target("h200"))
    g = [row for row in r["rows"] if "predicted_at_measured_clock_us" in row]
    gin = sum(abs(row["measured_us"] / row["predicted_at_measured_clock_us"] - 1) <= 0.15 for row in g)
    print(model, "clock", r["sm_mhz"], "name mismatches", mism, "within at step clock", r["summary"]["within_band"],
          "at measured clock", r["summary"]["within_band_at_measured_clock"], "of", r["summary"]["priced"], "| GEMMs", gin, "of", len(g))
