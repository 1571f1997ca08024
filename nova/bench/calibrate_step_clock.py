"""Fit the step clock's constant (``f_step_sustained_mhz`` of ``<preset>.step.json``) to the SM clocks
measured while training steps ran (``nova.bench.train`` results: ``clocks.timed_sm_mhz_median``).

    python3 -m nova.bench.calibrate_step_clock [--write]

The model (``nova.compiler.step_clock``): f_step = min(f_max, f_step_sustained * duty^(-1/3)), duty the
step's tensor-core time over its time.  Each row of ``ROWS`` names a result file and the memory
policy it ran under; the file gives the model, batch, sequence and recipe.  The step is planned here
for the preset, its duty computed with its GEMMs at the measured clock
(``step_clock.duty_at``), and the row's constant is f_measured * duty^(1/3).  The fit is their
geometric mean (least squares on log f).  Reported per row: the duty, the clock the fitted constant
predicts (the fixed point ``step_clock.settle`` solves) against the measured one, and the same with
the constant fitted on the other rows (leave one out).  ``--write`` stores the constant with that
provenance beside the GEMM calibrations.

Planning a step takes seconds to a minute on a CPU; ``--rows`` limits the fit to some rows.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Row:
    results: str              # a nova.bench.train result (relative to the repository)
    policy: str               # the NOVA_MEMORY_POLICY it ran under


# TF32 steps only: a bf16 step (run4/hf-gpt2-recipe, 1875 MHz measured) draws less power per tensor-core
# busy cycle, which the duty does not see (this fit predicts it 1744 MHz, 7% low).
ROWS = (
    Row("bench/results/h200-2026-12-04/run10/gpt42m/nova-gpt42m-b32.json", "lean"),
    Row("bench/results/h200-2026-12-04/run10/hf-gpt2-42m/nova-hf-gpt2-42m-b32.json", "lean"),
    Row("bench/results/h200-2026-12-04/run4/llama42m-lean/nova-llama42m-b32.json", "lean"),
    Row("bench/results/h200-2026-12-04/run4/llama42m-fast/nova-llama42m-b32.json", "fast"),
    Row("bench/results/h200-2026-12-04/run7/hf-llama-42m-0.015/nova-hf-llama-42m-b32.json", "0.015"),
    Row("bench/results/h200-2026-12-04/run7/gpt144m/nova-gpt144m-b16.json", "lean"),
)


def measured(row: Row) -> dict:
    """What the result file says: model, batch, seq, recipe, the median SM clock while timed."""
    d = json.loads((REPO / row.results).read_text())
    return {"model": d["model"], "batch": d["batch"], "seq": d["seq"], "recipe": (d.get("recipe") or {}),
            "mhz": d["clocks"]["timed_sm_mhz_median"]}


def step_inputs(row: Row, target: str):
    """The planned step's pricing inputs: (GEMMs, attention tensor-core us, everything else us)."""
    from nova import options
    from nova.compiler.explain import kernel_reports_at_own_clocks, plan_training_step, step_clock_inputs
    from nova.hwmodel import get_target
    from nova.models.recipe import TrainRecipe
    m = measured(row)
    r = m["recipe"]
    recipe = TrainRecipe(autocast=r.get("autocast"), padded=bool(r.get("padded")),
                         clip_grad_norm=float(r.get("clip_grad_norm") or 0.0))
    opts = options.parse({"NOVA_MEMORY_POLICY": row.policy})
    planned, _ = plan_training_step(m["model"], m["batch"], m["seq"], target=target, recipe=recipe, opts=opts)
    return step_clock_inputs(*kernel_reports_at_own_clocks(planned, get_target(target)))


def fit(rows: list[dict]) -> float:
    """The geometric mean of the rows' constants: least squares on log f."""
    return math.exp(sum(math.log(r["sustained_mhz"]) for r in rows) / len(rows))


def predicted_mhz(sustained: float, gemms, attention: float, other: float) -> float:
    """The clock ``sustained`` predicts for a step (``step_clock.solve``, as ``settle`` does)."""
    from nova.compiler import step_clock
    return step_clock.solve(gemms, attention, other, sustained, gemms[0].constants["f_max_mhz"])[0]


def calibrate(rows=ROWS, target: str = "h200", progress=None) -> dict:
    """The fit over ``rows`` and its checks (module docstring)."""
    from nova.compiler import step_clock
    table = []
    for row in rows:
        if progress:
            progress(row)
        m = measured(row)
        gemms, attention, other = step_inputs(row, target)
        duty, step_us = step_clock.duty_at(m["mhz"], gemms, attention, other)
        table.append({"results": row.results, "policy": row.policy, "model": m["model"], "batch": m["batch"],
                      "recipe": m["recipe"].get("describe", "plain"), "measured_mhz": m["mhz"],
                      "duty_at_measured": round(duty, 4), "step_us_at_measured": round(step_us, 1),
                      "sustained_mhz": m["mhz"] * duty ** (1 / 3), "_inputs": (gemms, attention, other)})
    sustained = fit(table)
    for i, r in enumerate(table):
        held = fit([o for j, o in enumerate(table) if j != i]) if len(table) > 1 else sustained
        r["predicted_mhz"] = round(predicted_mhz(sustained, *r["_inputs"]), 1)
        r["predicted_mhz_left_out"] = round(predicted_mhz(held, *r["_inputs"]), 1)
        r["sustained_mhz"] = round(r["sustained_mhz"], 1)
    for r in table:
        del r["_inputs"]
    errors = [abs(r["predicted_mhz"] / r["measured_mhz"] - 1) for r in table]
    left_out = [abs(r["predicted_mhz_left_out"] / r["measured_mhz"] - 1) for r in table]
    return {"f_step_sustained_mhz": round(sustained, 1), "rows": table,
            "max_clock_error": round(max(errors), 4), "max_clock_error_left_out": round(max(left_out), 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--rows", type=int, default=None, help="fit on the first N rows only (default: all)")
    ap.add_argument("--write", action="store_true", help="store <preset>.step.json beside the GEMM calibrations")
    args = ap.parse_args(argv)
    if args.rows is not None and not 1 <= args.rows <= len(ROWS):
        ap.error(f"--rows must be 1..{len(ROWS)} (the committed rows), got {args.rows}")
    from nova.hwmodel import calibration
    rows = ROWS[: args.rows] if args.rows else ROWS
    result = calibrate(rows, args.preset, progress=lambda r: print(f"planning {r.results} ({r.policy})",
                                                                    file=sys.stderr))
    for r in result["rows"]:
        print(f"{r['model']:14s} b{r['batch']:<3d} {r['recipe']:30s} {r['policy']:5s} duty {r['duty_at_measured']:.3f} "
              f"measured {r['measured_mhz']:6.0f} MHz  predicted {r['predicted_mhz']:6.0f}  "
              f"left out {r['predicted_mhz_left_out']:6.0f}")
    print(f"f_step_sustained = {result['f_step_sustained_mhz']} MHz; largest clock error "
          f"{100 * result['max_clock_error']:.1f}% ({100 * result['max_clock_error_left_out']:.1f}% left out)")
    if args.write:
        stored = {"preset": args.preset, "family": "step",
                  "constants": {"f_step_sustained_mhz": result["f_step_sustained_mhz"]},
                  "model": "f_step = min(f_max, f_step_sustained * duty^(-1/3)); duty = (GEMM + attention "
                           "tensor-core time) / step time, the GEMMs at f_step (nova.compiler.step_clock)",
                  "fit": "nova.bench.calibrate_step_clock: the geometric mean of f_measured * duty^(1/3) over "
                         "the rows, duty with the GEMMs at the measured clock",
                  "rows": result["rows"], "max_clock_error": result["max_clock_error"],
                  "max_clock_error_left_out": result["max_clock_error_left_out"]}
        print(f"wrote {calibration.store(args.preset, 'step', stored)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
