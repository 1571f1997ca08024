"""Fit the memory-bound kernel families' DRAM efficiency (``eta_dram`` of ``<preset>.stream.json``) to the
per-launch device times of training steps (``nova.bench.step_kernels`` results).

    python3 -m nova.bench.calibrate_stream bench/results/h200-2026-12-04/run4/step_kernels-gpt42m.json \\
        bench/results/h200-2026-12-04/run4/step_kernels-llama42m.json [--write]

The kernels: every launch priced by the pointwise, rows, embedding or multi-tensor configurator.  Their
predictions were made with the constants the results file names (``eta_before``, ``t_launch_us``); a
prediction is launch latency plus a memory time inversely proportional to eta_dram, so at another eta
it is ``(predicted - t_launch) * eta_before / eta + t_launch`` (exact where the DRAM term binds; the
latency floor and the busiest-SM bound are the rarer case).  The fit: one eta for all four families,
least squares on log(measured / predicted), grid 0.50..1.00 by 0.005.  Reported: the share within
+-15% before and after, per family, and fitted on one model's step, checked on the other's.
``--write`` stores the constants with that provenance beside the GEMM calibrations.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

STREAM_MODELS = ("pointwise configurator", "rows configurator", "embedding configurator", "multi-tensor configurator")
BAND = 0.15


def stream_rows(result: dict) -> list[dict]:
    """The memory-bound families' launches of one ``step_kernels`` result."""
    return [r for r in result["rows"] if r["model"] in STREAM_MODELS and r["predicted_us"] and r["measured_us"]]


def repriced(row: dict, eta: float, eta_before: float, t_launch: float) -> float:
    return max(row["predicted_us"] - t_launch, 0.0) * eta_before / eta + t_launch


def within(rows, eta: float, eta_before: float, t_launch: float) -> float:
    if not rows:
        return 0.0
    return sum(abs(r["measured_us"] / repriced(r, eta, eta_before, t_launch) - 1) <= BAND for r in rows) / len(rows)


def fit_eta(rows, eta_before: float, t_launch: float) -> float:
    """The eta of least squared log error over ``rows``."""
    grid = [i / 1000 for i in range(500, 1001, 5)]
    return min(grid, key=lambda eta: sum(math.log(r["measured_us"] / repriced(r, eta, eta_before, t_launch)) ** 2
                                         for r in rows))


def calibrate(results: dict[str, dict], eta_before: float, t_launch: float) -> dict:
    """The fit over every file of ``results`` (name -> step_kernels result) and its checks."""
    rows = {name: stream_rows(r) for name, r in results.items()}
    every = [r for rs in rows.values() for r in rs]
    eta = fit_eta(every, eta_before, t_launch)
    families = {m: [r for r in every if r["model"] == m] for m in STREAM_MODELS}
    cross = {}
    for name in rows:
        others = [r for n, rs in rows.items() if n != name for r in rs]
        if others:
            held = fit_eta(others, eta_before, t_launch)
            cross[name] = {"eta_fitted_on_the_others": held,
                           "within_15pct": round(within(rows[name], held, eta_before, t_launch), 3)}
    return {"eta_dram": eta, "kernels": len(every),
            "before": {"within_15pct": round(within(every, eta_before, eta_before, t_launch), 3)},
            "after": {"within_15pct": round(within(every, eta, eta_before, t_launch), 3)},
            "per_family_after": {m: {"kernels": len(rs), "within_15pct": round(within(rs, eta, eta_before, t_launch), 3)}
                                 for m, rs in families.items() if rs},
            "leave_one_model_out": cross}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="step_kernels-<model>.json files")
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--eta-before", type=float, default=None,
                    help="the eta_dram the results were priced with (default: the stored stream calibration's, "
                         "else the GEMM calibration's)")
    ap.add_argument("--write", action="store_true", help="store <preset>.stream.json beside the GEMM calibrations")
    args = ap.parse_args(argv)
    from nova.hwmodel import calibration, get_target
    base = calibration.memory_constants(get_target(args.preset), streaming=True)     # what the results were priced with
    eta_before = args.eta_before if args.eta_before is not None else base["eta_dram"]
    t_launch = base["t_launch_us"]
    try:
        results = {Path(p).name: json.loads(Path(p).read_text()) for p in args.results}
    except (OSError, ValueError) as e:
        ap.error(f"cannot read a step_kernels result: {e}")
    fit = calibrate(results, eta_before, t_launch)
    print(json.dumps(fit, indent=1))
    if args.write:
        first = next(iter(results.values()))
        repo = Path(__file__).resolve().parents[2]
        doc = {"preset": args.preset, "family": "stream",
               "constants": {"eta_dram": fit["eta_dram"], "t_launch_us": t_launch},
               "model": "time = max(bytes / (dram_bw * eta_dram), trips * dram latency) + t_launch_us (pointwise, "
                        "multi-tensor); rows and embedding add L2 re-reads and the busiest SM's stream",
               "fit": "nova.bench.calibrate_stream: one eta_dram for the pointwise, rows, embedding and multi-tensor "
                      "launches of the steps, least squares on log(time); t_launch_us held (the GEMM calibration's)",
               "fixed": {"t_launch_us": t_launch, "eta_before": eta_before},
               "source": {"results": [str(Path(p).resolve().relative_to(repo)) if Path(p).resolve().is_relative_to(repo)
                                      else p for p in args.results],
                          "device": first.get("device"), "kernels": fit["kernels"]},
               "before": fit["before"], "after": fit["after"], "per_family_after": fit["per_family_after"],
               "leave_one_model_out": fit["leave_one_model_out"]}
        print(f"wrote {calibration.store(args.preset, 'stream', doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
