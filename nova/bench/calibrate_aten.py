"""Fit the constants of ATen's kernels (the groups of a compiled step that run on ATen) for one
preset, from a CUPTI profile of a Nova training step (``nova.bench.train_profile``).

    python3 -m nova.bench.calibrate_aten --profile bench/results/h200-2026-12-01/gemm-v3/profile-nova.json [--preset h200] [--write]

Model (``nova.compiler.cost.aten_kinds_time``), per kernel kind (``nova.compiler.aten_launches``):

    time_kind = kernels_kind * t_fixed + bytes_kind / (dram_bw * eta_kind)

Data.  The profile holds, per kernel family (``train_profile.kernel_family``), the total device time
and the kernel count of a few steps; ``PROFILE_KINDS`` maps its families to kinds (Nova's own kernels,
split-K memsets and the input copies before the graph are not ATen groups' and are left out).
It has no per-call bytes, so the kernels and bytes of each kind come from ``explain``'s own meta
dispatch of the same step (``explain.aten_dispatch`` over ``plan_training_step(model, batch, seq)``
of the profile's model, batch and sequence): today's plan must be the profiled one, which the
kernel counts check (dispatch vs profile, per kind, stored with the fit).

Fit.  One total per kind cannot give both a kind's fixed time and its bandwidth, so the fixed time
is shared and taken from the profile's kernels that move (almost) nothing: t_fixed = the mean
duration of the ``T_FIXED_FAMILY`` kernels (the driver's copies of the LayerNorm statistics and
weight gradients, <= 64 KB each, whose count the dispatch's small copies must match).  Each kind's
eta then follows from its measured total:

    eta_kind = bytes_kind / (dram_bw * (measured_kind - kernels_kind * t_fixed))

That is 1 + (number of kinds) measured numbers for as many constants: an exact solve, no residual
in sample (stored per kind as ``fitted_us - measured_us``, zero up to rounding).  What checks the
model is out of sample: the GPT-144M step's prediction (``bench/NOTES.md``) and any new profile.
An eta above 1 would mean the kind's bytes come from L2 more than from DRAM.

The JSON (``nova/hwmodel/calibration/<preset>.aten.json``) stores the constants, the fit's data per
kind (profile and dispatch kernels, bytes, measured and fitted time) and the profile it came from;
``tests/test_calibrate_aten.py`` refits from the committed profile and compares.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

# profile family (train_profile.kernel_family; truncated names by prefix) -> ATen kind
PROFILE_KINDS = {
    "elementwise": "elementwise",
    "reduction": "reduction",
    "softmax": "softmax",
    "layer_norm": "layer_norm",
    "void at::native::(anonymous namespace)::GammaBetaBackward": "layer_norm_weight_grad",
    "foreach (optimizer)": "foreach",
    "copy": "cat",                                   # CatArrayBatchedCopy
    "memcpy128": "memcpy",
    "memcpy32_post": "memcpy",
    "void at::native::vectorized_gather_kernel": "gather",
}
# families that are not ATen kernels of the program's groups
NOT_ATEN = {
    "nova_": "Nova's GEMM and attention kernels (their configurators price them)",
    "memset": "split-K workspace memsets of Nova's GEMMs (the GEMM model's launches)",
    "Memcpy DtoD": "the step's inputs copied into the program before its CUDA graph (not a launch)",
}
T_FIXED_FAMILY = "memcpy32_post"
SMALL_COPY_BYTES = 1 << 20        # a copy this small is one of T_FIXED_FAMILY's (moves 2x <= 64 KB)


def family_kind(family: str) -> str | None:
    """The ATen kind of a profile family, None for a family that is not an ATen kernel's; a family
    neither mapped nor excluded is an error (a new kernel to place)."""
    for prefix in NOT_ATEN:
        if family.startswith(prefix):
            return None
    for prefix, kind in PROFILE_KINDS.items():
        if family == prefix or (len(prefix) > 30 and family.startswith(prefix[:40])):
            return kind
    raise ValueError(f"profile family {family!r} is neither an ATen kind (PROFILE_KINDS) nor excluded (NOT_ATEN)")


def measured_kinds(profile: dict) -> dict:
    """``{kind: {"kernels": per step, "us": per step, "families": [...]}}`` from a train_profile JSON."""
    steps = profile["steps"]
    kinds: dict[str, dict] = {}
    for family, row in profile["kernels"].items():
        kind = family_kind(family)
        if kind is None:
            continue
        entry = kinds.setdefault(kind, {"kernels": 0.0, "us": 0.0, "families": []})
        entry["kernels"] += row["count"] / steps
        entry["us"] += row["us"] / steps
        entry["families"].append(family)
    return kinds


def dispatched_kinds(planned) -> tuple[dict, int]:
    """``({kind: [kernels, bytes]}, small copies)`` of a planned step's ATen groups, from explain's
    meta dispatch; a small copy moves at most SMALL_COPY_BYTES."""
    from nova.compiler.aten_launches import Dispatched
    from nova.compiler.explain import aten_dispatch
    total, small = Dispatched(), 0
    for d in aten_dispatch(planned).values():
        for kind, kernels, nbytes in d.records:
            total.add(kind, kernels, nbytes)
            small += kernels if kind == "memcpy" and nbytes <= SMALL_COPY_BYTES else 0
    return total.kinds, small


def fit(measured: dict, dispatched: dict, t_fixed_us: float, dram_bw: float) -> dict:
    """The constants (``t_fixed_us`` and ``eta`` per kind) and the per-kind data of the fit."""
    missing = sorted(set(measured) ^ set(dispatched))
    if missing:
        raise ValueError(f"kinds in only one of the profile and the dispatch: {missing}")
    eta, data = {}, {}
    for kind in sorted(measured, key=lambda k: -measured[k]["us"]):
        m = measured[kind]
        kernels, nbytes = dispatched[kind]
        t_bytes = m["us"] - kernels * t_fixed_us
        if t_bytes <= 0:
            raise ValueError(f"{kind}: {kernels} kernels x {t_fixed_us:.2f} us exceed its measured {m['us']:.1f} us")
        eta[kind] = nbytes / (dram_bw * t_bytes * 1e-6)
        fitted = kernels * t_fixed_us + nbytes / (dram_bw * eta[kind]) * 1e6
        data[kind] = {"families": m["families"], "profile_kernels": round(m["kernels"], 3), "kernels": kernels,
                      "bytes": nbytes, "measured_us": round(m["us"], 3), "fitted_us": round(fitted, 3),
                      "residual_us": round(fitted - m["us"], 6)}
    return {"constants": {"t_fixed_us": t_fixed_us, "eta": eta}, "data": data}


def calibrate(profile_path: str, preset: str = "h200", planned=None) -> dict:
    """The calibration record for ``preset`` from a profile file (everything but the dates);
    ``planned``: the profiled step already planned for ``preset`` (else planned here)."""
    from nova.compiler.explain import plan_training_step
    from nova.hwmodel import get_target
    target = get_target(preset)
    profile = json.loads(Path(profile_path).read_text())
    if profile.get("framework") != "nova":
        raise ValueError(f"{profile_path}: a profile of nova.compile's step is needed (framework "
                         f"{profile.get('framework')!r}); eager launches other kernels")
    row = profile["kernels"][T_FIXED_FAMILY]
    t_fixed_us = row["us"] / row["count"]
    measured = measured_kinds(profile)
    if planned is None:
        planned, _ = plan_training_step(profile["model"], profile["batch"], profile.get("seq"), target=preset)
    dispatched, small = dispatched_kinds(planned)
    per_step = row["count"] / profile["steps"]
    if small != per_step:
        raise ValueError(f"{T_FIXED_FAMILY}: {per_step:g} kernels per step in the profile, {small} small copies "
                         "in today's plan: the plan is not the profiled one")
    result = fit(measured, dispatched, t_fixed_us, target.dram_bw)
    return {
        "preset": preset, "family": "aten", "constants": result["constants"],
        "model": "time = sum over kinds of kernels * t_fixed_us + bytes / (dram_bw * eta[kind]) "
                 "(nova/compiler/cost.py aten_kinds_time; kinds and bytes: nova/compiler/aten_launches.py)",
        "fit": f"t_fixed_us = mean duration of the profile's {T_FIXED_FAMILY} kernels ({per_step:g} per step, "
               f"copies of <= 64 KB); eta per kind solved from the kind's measured total with the kernels and "
               f"bytes of explain's meta dispatch: {1 + len(measured)} measured numbers, as many constants, "
               "exact (residual_us ~ 0); nova.bench.calibrate_aten",
        "source": {"profile": profile_path, "program": f"{profile['model']} batch {profile['batch']} x seq "
                   f"{profile.get('seq')}, adamw, nova.compile", "steps": profile["steps"],
                   "gpu_ms_per_step": round(profile["gpu_ms_per_step"], 4), "device": "NVIDIA H200",
                   "dram_bw": target.dram_bw},
        "data": result["data"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nova.bench.calibrate_aten", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a train_profile JSON of nova.compile's step")
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--date", default=None, help="the profile's date (stored as source.date)")
    ap.add_argument("--write", action="store_true", help="write nova/hwmodel/calibration/<preset>.aten.json")
    args = ap.parse_args(argv)
    from nova.hwmodel import calibration
    try:
        record = calibrate(args.profile, args.preset)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.date:
        record["source"]["date"] = args.date
    record["fitted"] = datetime.date.today().isoformat()
    c = record["constants"]
    print(f"t_fixed {c['t_fixed_us']:.3f} us per kernel")
    print(f"{'kind':24s} {'kernels':>9s} {'profile':>8s} {'GB':>7s} {'eta':>6s} {'measured us':>12s} {'fitted us':>10s}")
    for kind, d in record["data"].items():
        print(f"{kind:24s} {d['kernels']:9d} {d['profile_kernels']:8.1f} {d['bytes'] / 1e9:7.3f} "
              f"{c['eta'][kind]:6.3f} {d['measured_us']:12.1f} {d['fitted_us']:10.1f}")
    if args.write:
        path = calibration.path_for(args.preset, "aten")
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
