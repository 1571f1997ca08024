"""Fit the cost model's efficiency constants for one preset from a benchmark results file.

    python3 -m nova.bench.calibrate --results bench/results/h200-v0.1/bench.json [--preset h200] [--write]
    NOVA_HOPPER=0 ... heldout gemm --out D   then   ... calibrate --results D/heldout_gemm.json --test E/heldout_gemm.json

Model (``nova/hwmodel/calibration/__init__.py``, ``clock_and_time``): a few constants per preset
and instruction family, never per shape,

    time_cal = max(t_tensor*s/eta_tc, t_smem*s/eta_tc, t_l2*s, t_dram/eta_dram + t_dram_wait) + t_epilogue*s + t_fill
               + t_split + t_prep/eta_dram + launches*t_launch_us

with the terms of the model's prediction for the schedule each row measured:
  eta_tc       achievable fraction of the modelled tensor-core rate (issue rate in the SM)
  eta_dram     achievable fraction of the datasheet DRAM bandwidth (measured: a linear stream); it divides
               t_dram too, whose loads' latency the model prices apart (t_dram_wait, not scaled)
  t_launch_us  per-launch overhead on the device (the gap between launches in a graph replay; in
               back-to-back results of older files it also holds the host's time per call when the
               kernel is shorter than it)
  s            1, or f_model / f with the power-limited clock f = min(f_max, f_sustained * duty^(-1/3))
               when ``--fix f_sustained_mhz=... --fix f_max_mhz=...`` are given (measured, never fitted)

Fit: least squares on log(time), i.e. minimise sum_i (log time_cal_i - log measured_i)^2 (relative
errors weigh every shape alike, whatever its size), by a deterministic coarse-to-fine grid search
over the constants not held by ``--fix``: eta_tc, eta_dram in [0.05, 1.5], t_launch_us in [0, 60]
(no scipy needed).  The measured time is the device time per call, ``nova_graph_us`` (CUDA-graph
replay, so the host's issue rate cannot bound a short kernel; results before v0.6 have only
``nova_b2b_us``, the back-to-back median), the quantity ``prediction_error`` in the results refers
to.  A row whose schedule the configurator no longer picks is predicted for the schedule it
measured (``space.measured_config``); only a schedule outside today's space is left out.

Reported: the fraction of shapes within +-15% before and after, the geomean |error|, and a
leave-one-shape-out cross-validation (each shape predicted by constants fitted without it), so an
in-sample fit cannot pass for a prediction.

``Config.calibrated_time_us`` and ``nova-config explain`` apply the stored constants; schedule
decisions never use them.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time

import numpy as np

from nova.hwmodel.calibration import calibrated_time_us

BAND = 0.15
GRID = {"eta_tc": (0.05, 1.5), "eta_dram": (0.05, 1.5), "t_launch_us": (0.0, 60.0)}


def load_rows(path: str, preset: str | None, family: str = "mma.sync"):
    """Rows of the results file with today's prediction terms; returns (preset, env, rows, skipped).
    ``path``: a ``nova bench gemm`` results file, or a held-out draw's ``heldout_gemm.json`` (its
    layouts read from ``trans_a``/``trans_b``, its failed rows left out; run with ``NOVA_HOPPER=0``
    for the mma.sync kernels' times on a Hopper card)."""
    from nova.configurator import GemmProblem
    from nova.kernels.gemm.space import measured_config
    from nova.hwmodel import get_target
    from nova.runtime.matmul import preset_for_device_name
    data = json.load(open(path))
    env = data.get("environment", {})
    preset = preset or preset_for_device_name(env.get("device", ""))
    if not preset:
        raise SystemExit(f"no preset for device {env.get('device')!r}; pass --preset")
    gpu = get_target(preset)
    rows, skipped = [], []
    for r in data["rows"]:
        layout = (r.get("trans_a", False), r.get("trans_b", False))
        if r.get("status", "ok") != "ok" or not (r.get("nova_graph_us") or r.get("nova_b2b_us")):
            skipped.append(f"{r['M']}x{r['N']}x{r['K']} {r['dtype']}: {r.get('status')}, no device time")
            continue
        problem = GemmProblem(r["M"], r["N"], r["K"], r["dtype"], *layout)
        cfg = measured_config(problem, gpu, r.get("schedule"))
        name = f"{r['M']}x{r['N']}x{r['K']} {r['dtype']}" + (f" {'NT'[layout[0]]}{'NT'[layout[1]]}" if any(layout) else "")
        if cfg is None:
            skipped.append(f"{name}: measured {r['schedule']}, the configurator no longer picks it")
            continue
        if cfg.skinny or cfg.schedule.mma.family != family:
            picked = "the skinny kernel" if cfg.skinny else cfg.schedule.mma.family
            skipped.append(f"{name}: {picked} (fitting the {family} model)")
            continue
        rows.append({"name": name, "measured_us": r.get("nova_graph_us") or r["nova_b2b_us"],
                     "terms": cfg.prediction.terms_us, "split_k": cfg.schedule.split_k,
                     "launches": cfg.schedule.launches,
                     "predicted_us": cfg.prediction.time_us,
                     "window": tuple(r.get("nova_graph_window") or (r.get("t_start"), r.get("t_end")))})
    return preset, env, rows, skipped


TERMS = ("tensor-core", "mma", "smem", "l2", "dram", "dram_wait", "ring", "fill", "epilogue", "arith", "split",
         "prep")


def _arrays(rows):
    t = {k: np.array([r["terms"].get(k, 0.0) for r in rows]) for k in TERMS}
    split = np.array([r["split_k"] for r in rows])
    return t, split, np.array([r["measured_us"] for r in rows])


def _launches(rows):
    """Each row's kernel launches (``Schedule.launches``), as ``Config.calibrated_time_us`` counts them."""
    return np.array([r["launches"] for r in rows])


def fit(rows, fixed: dict | None = None) -> dict:
    """Coarse-to-fine grid search of the log least-squares objective over the GRID constants;
    ``fixed`` ones (measured elsewhere, e.g. eta_dram by nova.bench.l2_probe) are held at their value,
    and so are the power-limited clock's (``HELD_ONLY``), which are never fitted."""
    t, split, meas = _arrays(rows)
    launches = _launches(rows)
    log_meas = np.log(meas)
    fixed = fixed or {}
    held = {k: v for k, v in fixed.items() if k not in GRID}
    free = [k for k in GRID if k not in fixed]
    lo = {k: GRID[k][0] for k in free}
    hi = {k: GRID[k][1] for k in free}
    best = dict(fixed)
    for _ in range(6):
        axes = [np.linspace(lo[k], hi[k], 41) for k in free]
        mesh = dict(zip(free, np.meshgrid(*axes, indexing="ij")))
        c = {**fixed, **{k: m[..., None] for k, m in mesh.items()}}      # grid axes broadcast against the rows
        loss = ((np.log(calibrated_time_us(t, split, c, launches)) - log_meas) ** 2).sum(-1)
        i = np.unravel_index(np.argmin(loss), loss.shape)
        best.update({k: float(m[i]) for k, m in mesh.items()})
        for k, a in zip(free, axes):                     # zoom to +-2 grid steps around the optimum
            step = a[1] - a[0]
            lo[k], hi[k] = max(GRID[k][0], best[k] - 2 * step), min(GRID[k][1], best[k] + 2 * step)
    return {k: best[k] for k in (*GRID, *held)}


def errors(rows, c: dict) -> np.ndarray:
    t, split, meas = _arrays(rows)
    return calibrated_time_us(t, split, c, _launches(rows)) / meas - 1


def model_errors(rows) -> np.ndarray:
    """The uncalibrated model's relative errors (predicted / measured - 1) of ``rows``."""
    return np.array([r["predicted_us"] / r["measured_us"] - 1 for r in rows])


def stats(err) -> dict:
    err = np.asarray(err)
    return {"within_15pct": float(np.mean(np.abs(err) <= BAND)),
            "geomean_factor_off": float(np.exp(np.mean(np.abs(np.log1p(err))))),
            "max_abs_error": float(np.max(np.abs(err)))}


def leave_one_shape_out(rows, fixed: dict | None = None) -> np.ndarray:
    """Each row predicted by constants fitted on the rows of the other shapes (all dtypes of a shape out)."""
    out = np.empty(len(rows))
    shapes = [r["name"].split()[0] for r in rows]
    for i, r in enumerate(rows):
        c = fit([q for q, s in zip(rows, shapes) if s != shapes[i]], fixed)
        out[i] = errors([r], c)[0]
    return out


def fit_pingpong(results_csv: str, preset: str, constants: dict) -> tuple[float, dict]:
    """``eta_tc_pingpong``: the Hopper calibration's eta_tc for ping-pong kernels, the other
    ``constants`` held.  Rows: the training-GEMM suite CSV (``nova.bench.train_gemms``) whose problem
    the configurator picks ping-pong for; measured time ``nova_us`` (back-to-back, power settled).
    Least squares on log(time) over 0.5-2.0 (by 0.01, then 0.001 around the best); returns it with its in-sample and
    leave-one-out errors (``stats``)."""
    import pandas as pd
    from nova.configurator import GemmProblem, configure
    from nova.hwmodel.calibration import clock_and_time
    points = []
    for r in pd.read_csv(results_csv).to_dict("records"):
        p = GemmProblem(M=int(r["M"]), N=int(r["N"]), K=int(r["K"]), dtype=str(r["dtype"]), trans_a=bool(r["trans_a"]),
                        trans_b=bool(r["trans_b"]), bias=bool(r["bias"]))
        c = configure(p, preset)
        if not c.skinny and c.schedule.pingpong and pd.notna(r["nova_us"]):
            points.append((c.prediction.terms_us, c.schedule.launch_split, c.schedule.launches, float(r["nova_us"])))

    def err(eta, pts):
        cc = {**constants, "eta_tc": eta}
        return np.array([clock_and_time(t, sk, cc, n)[1] / m - 1 for t, sk, n, m in pts])

    def loss(e, pts):
        return float(np.sum(np.log1p(err(e, pts)) ** 2))

    def best(pts):                             # coarse (0.01) then fine (0.001) around the coarse best
        coarse = min(np.round(np.arange(0.5, 2.0, 0.01), 2), key=lambda e: loss(e, pts))
        return float(min(np.round(np.arange(coarse - 0.01, coarse + 0.0105, 0.001), 3), key=lambda e: loss(e, pts)))

    eta = best(points)
    loo = np.array([err(best(points[:i] + points[i + 1:]), [points[i]])[0] for i in range(len(points))])
    return eta, {"kernels": len(points), **stats(err(eta, points)), "leave_one_out": stats(loo)}


def _dram_binds(cfg) -> bool:
    """The model's DRAM term (with its loads' wait) is the largest of the K loop's bounds (before any
    efficiency constant)."""
    t = cfg.prediction.terms_us
    return t.get("dram", 0) + t.get("dram_wait", 0) >= max(t.get("mma", 0), t.get("l2", 0), t.get("ring", 0))


def _pingpong_tma_store(cfg) -> bool:
    h = cfg.schedule.hopper
    return cfg.schedule.pingpong and h is not None and h.tma_store


HELDOUT_SELECT = {                      # the held-out tile kernels each Hopper constant is fitted on
    "eta_dram_tiles": _dram_binds,
    "eta_tc_pingpong": _pingpong_tma_store,
    "eta_split_workspace": lambda cfg: cfg.schedule.split_workspace,
}
HELDOUT_GRID = {"eta_dram_tiles": (0.4, 0.99), "eta_tc_pingpong": (0.8, 1.99), "eta_split_workspace": (0.6, 1.2)}


@functools.lru_cache(maxsize=None)
def _heldout_kernels(path: str, preset: str) -> tuple:
    """Every tile kernel of one held-out GEMM draw as (Config of the schedule the row measured, its
    measured device us); read once per process (a fit and its tests select from the same draws)."""
    from nova.bench.heldout import drawn, gemm_config
    from nova.kernels.gemm.space import label
    doc = json.load(open(path))
    abi = doc["environment"].get("abi", {}).get("gemm", LOADS_FIRST_ABI - 1)
    out = []
    for r in doc["rows"]:
        if r.get("status") != "ok" or not r.get("predictions") or not r.get("schedule"):
            continue
        cfg = gemm_config(drawn("gemm", r), preset, schedule=r["schedule"])
        if label(cfg.schedule) == r["schedule"] and not cfg.skinny:     # in today's space, tiles
            if abi < LOADS_FIRST_ABI and _padding_copy(cfg.schedule):
                continue                                                 # measured on the serial copy
            out.append((cfg, float(r["predictions"][0][1])))
    return tuple(out)


LOADS_FIRST_ABI = 17    # the GEMM ABI from which a padding copy issues its loads before its stores; a row
                        # measured before (its draw records no ABI, or an older one) ran the copy that
                        # waited a latency per element, a kernel today's model no longer prices


def _padding_copy(schedule) -> bool:
    """Whether the schedule runs an operand prep that copies without transposing (a padding copy)."""
    operands = schedule.hopper.operands if schedule.hopper else None
    return bool(operands) and any(role.prep and not role.prep.transpose for role in (operands.a, operands.b))


def heldout_points(results: list[str], preset: str, select) -> list[tuple]:
    """The tile kernels of held-out GEMM draws (``nova.bench.heldout``'s JSON) that ``select(cfg)``
    keeps, each as (schedule, terms, measured device us): the schedule the row measured
    (``heldout.gemm_config``) with today's terms, measured by its graph replay (``predictions``)."""
    return [(cfg.schedule, cfg.prediction.terms_us, measured)
            for path in results for cfg, measured in _heldout_kernels(path, preset) if select(cfg)]


def heldout_errors(points: list[tuple], constants: dict) -> np.ndarray:
    """Each held-out point's relative error (calibrated / measured - 1) under ``constants``."""
    from nova.hwmodel.calibration import clock_and_time, constants_for
    return np.array([clock_and_time(t, s.launch_split, constants_for(constants, s), s.launches)[1] / m - 1
                     for s, t, m in points])


def _without_and_with(points: list[tuple], name: str, constants: dict) -> dict:
    """The points' count and ``stats`` without ``name`` (the other constants held) and with ``constants``."""
    held = {k: v for k, v in constants.items() if k != name}
    return {"kernels": len(points), "before": stats(heldout_errors(points, held)),
            "after": stats(heldout_errors(points, constants))}


def fit_heldout(results: list[str], preset: str, name: str, constants: dict) -> tuple[float, dict]:
    """One Hopper constant ``name`` fitted on the held-out kernels ``HELDOUT_SELECT[name]`` keeps, the
    other ``constants`` held: least squares on log(time) over ``HELDOUT_GRID[name]`` by 0.01 (the
    calibrated time of each kernel's own schedule, ``constants_for``).  Returns it with the in-sample
    errors (``stats``) without ``name`` and with it."""
    points = heldout_points(results, preset, HELDOUT_SELECT[name])
    if not points:
        raise SystemExit(f"no held-out kernel in {', '.join(results)} selects {name}")
    held = {k: v for k, v in constants.items() if k != name}
    low, high = HELDOUT_GRID[name]
    value = float(min(np.round(np.arange(low, high + 1e-9, 0.01), 2),
                      key=lambda v: float(np.sum(np.log1p(heldout_errors(points, {**held, name: v})) ** 2))))
    return value, _without_and_with(points, name, {**held, name: value})


def heldout_check(results: list[str], preset: str, name: str, constants: dict) -> dict:
    """``constants[name]`` tested on draws it was never fitted on: ``stats`` of the kernels
    ``HELDOUT_SELECT[name]`` keeps there, without it and with it."""
    return _without_and_with(heldout_points(results, preset, HELDOUT_SELECT[name]), name, constants)


def fit_host(results: list[str], preset: str) -> dict:
    """The host time of an eager ``nova.matmul`` call, ``call + launches x launch`` microseconds: least
    squares over the host-bound rows of held-out GEMM draws (their per-call time, calls back to back,
    at least twice their graph replay's device time, so the device hides under the host), ``launches``
    the row's schedule's (``Schedule.launches``: the GEMM, each operand prep, split-K's second launch;
    the skinny kernel one).  Returns ``{"call_us", "launch_us", "rows"}``, rounded to 0.1 us."""
    from nova.bench.heldout import drawn, gemm_config
    launches, per_call = [], []
    for path in results:
        for r in json.load(open(path))["rows"]:
            if r.get("status") != "ok" or not r.get("schedule") or not r.get("nova_graph_us"):
                continue
            if r["nova_graph_us"] > 0.5 * r["nova_us"]:
                continue                                    # the device's time shows in the call's
            cfg = gemm_config(drawn("gemm", r), preset, schedule=r["schedule"])
            launches.append(cfg.schedule.launches)
            per_call.append(r["nova_us"])
    if len(set(launches)) < 2:
        raise SystemExit(f"too few host-bound rows in {', '.join(results)} to fit a launch's host time")
    x = np.array(launches, dtype=float)
    call, launch = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T, np.array(per_call), rcond=None)[0]
    return {"call_us": round(float(call + launch), 1), "launch_us": round(float(launch), 1), "rows": len(x)}


def row_clocks(rows, clocks_csv: str) -> list[float]:
    """Median SM clock (MHz) of the nvidia-smi samples inside each row's timing window (Nova's
    graph replay, ``nova_graph_window``, from v0.6d on; else the whole shape, ``t_start``..``t_end``,
    which also holds the idle gaps of the per-call timing; ``bench/device_run.sh`` writes
    clocks.csv); NaN where the row has no window or no sample fell inside it."""
    import pandas as pd
    smi = pd.read_csv(clocks_csv, skipinitialspace=True)
    smi.columns = [c.split(" [")[0].strip() for c in smi.columns]
    stamp = pd.to_datetime(smi["timestamp"], format="%Y/%m/%d %H:%M:%S.%f")         # the device's clock, UTC
    t = (stamp - pd.Timestamp("1970-01-01")).dt.total_seconds()
    out = []
    for r in rows:
        t0, t1 = r["window"]
        inside = smi["clocks.current.sm"][(t >= (t0 or math.inf)) & (t <= (t1 or -math.inf))]
        out.append(float(inside.median()) if len(inside) else math.nan)
    return out


HELD_ONLY = ("f_sustained_mhz", "f_max_mhz", "eta_dram_tiles")   # the power-limited clock's constants and (where
                                                # a calibration has one) the held-out fit's eta_dram_tiles


def parse_fixed(text: str) -> tuple[str, float]:
    name, _, value = text.partition("=")
    if name not in (*GRID, *HELD_ONLY) or not value:
        raise SystemExit(f"--fix {text!r}: expected NAME=VALUE with NAME one of {', '.join((*GRID, *HELD_ONLY))}")
    return name, float(value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True, help="benchmark results JSON (nova bench gemm)")
    ap.add_argument("--preset", default=None, help="hwmodel preset (default: from the results' device name)")
    ap.add_argument("--family", default="mma.sync", choices=["mma.sync", "wgmma"],
                    help="which model to fit: the Ampere-class mma.sync one or the Hopper wgmma one")
    ap.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                    help="hold a constant at a value measured elsewhere instead of fitting it, e.g. "
                         "eta_dram=0.948 (nova.bench.l2_probe: 1 GB read at 4.55 of 4.8 TB/s); repeatable; "
                         "f_sustained_mhz=F and f_max_mhz=F together switch on the power-limited clock")
    ap.add_argument("--clocks", default=None,
                    help="nvidia-smi samples (clocks.csv beside the results): show each row's median SM clock")
    ap.add_argument("--heldout", default=None, choices=sorted(HELDOUT_SELECT), metavar="NAME",
                    help="fit one Hopper constant (" + ", ".join(sorted(HELDOUT_SELECT)) + ") on held-out GEMM "
                         "draws instead: --results is then a comma-separated list of heldout_gemm.json files, "
                         "--preset required, the stored wgmma constants held")
    ap.add_argument("--test", default=None,
                    help="results never fitted on, to test the fitted constants on: with --heldout comma-separated "
                         "held-out draws, else one results file of the same preset and family")
    ap.add_argument("--no-leave-one-out", action="store_true",
                    help="skip the leave-one-shape-out cross-validation (one fit per shape: minutes on a hundred "
                         "rows); --test is then the out-of-sample check")
    ap.add_argument("--write", action="store_true",
                    help="write nova/hwmodel/calibration/<preset>.json (mma.sync) or <preset>.wgmma.json "
                         "(with --heldout: that constant and its provenance into the stored wgmma calibration)")
    args = ap.parse_args(argv)
    if args.heldout:
        return heldout_main(args)

    from nova.hwmodel.calibration import CONSTANTS, path_for
    preset, env, rows, skipped = load_rows(args.results, args.preset, args.family)
    if len(rows) < 2 * len(CONSTANTS):
        raise SystemExit(f"only {len(rows)} usable rows: too few to fit {len(CONSTANTS)} constants")
    before = model_errors(rows)
    fixed = dict(parse_fixed(f) for f in args.fix)
    if ("f_sustained_mhz" in fixed) != ("f_max_mhz" in fixed):
        raise SystemExit("the power-limited clock needs both f_sustained_mhz and f_max_mhz")
    if "f_sustained_mhz" in fixed:                   # the clock the model's peak figures assume
        from nova.hwmodel import get_target
        fixed["f_model_mhz"] = get_target(preset).clock_hz / 1e6
    c = fit(rows, fixed)
    after = errors(rows, c)
    loso = not args.no_leave_one_out
    loo = leave_one_shape_out(rows, fixed) if loso else np.full(len(rows), np.nan)
    print(f"{preset}: {len(rows)} kernels from {args.results} ({env.get('device')}, {env.get('date')})")
    for s in skipped:
        print(f"  skipped {s}")
    print("constants: " + ", ".join(f"{k} = {v:.4g}" for k, v in c.items()))
    from nova.hwmodel.calibration import predicted_clock_mhz
    clocks = row_clocks(rows, args.clocks) if args.clocks else [math.nan] * len(rows)
    t, split, _ = _arrays(rows)
    f_pred = predicted_clock_mhz(t, split, c, _launches(rows))
    f_pred = [math.nan] * len(rows) if f_pred is None else list(f_pred)
    print(f"{'kernel':28s} {'measured':>9s} {'model':>9s} {'err':>7s} {'calib.':>9s} {'err':>7s}" + " LOSO err" * loso
          + " MHz pred." * ("f_sustained_mhz" in c) + " MHz meas." * bool(args.clocks))
    for r, e0, e1, e2, mhz, fp in zip(rows, before, after, loo, clocks, f_pred):
        print(f"{r['name']:28s} {r['measured_us']:9.1f} {r['predicted_us']:9.1f} {e0:+7.1%} "
              f"{r['measured_us'] * (1 + e1):9.1f} {e1:+7.1%}" + f" {e2:+8.1%}" * loso + f" {fp:9.0f}" * ("f_sustained_mhz" in c)
              + f" {mhz:9.0f}" * bool(args.clocks))
    if args.clocks and "f_sustained_mhz" in c:
        ok = [(a, b) for a, b in zip(f_pred, clocks) if math.isfinite(b)]
        print(f"predicted vs measured SM clock: median |error| {np.median([abs(a - b) for a, b in ok]):.0f} MHz "
              f"over {len(ok)} kernels")
    result = {"preset": preset, "family": args.family, "constants": c, "model": "time = max(t_tensor*s/eta_tc, "
              "t_smem*s/eta_tc, t_l2*s, t_dram/eta_dram) + t_epilogue*s + t_fill + t_split + t_prep/eta_dram + "
              "launches * t_launch_us; s = f_model/f, f = min(f_max, f_sustained * duty^(-1/3)) with the power "
              "constants, else s = 1 (nova/hwmodel/calibration)",
              "fit": "least squares on log(time), grid search (nova.bench.calibrate)", "fixed": fixed,
              "source": {"results": args.results, "device": env.get("device"), "date": env.get("date"),
                         "torch": env.get("torch"), "nova": env.get("nova"), "kernels": len(rows),
                         "skipped": skipped},
              "before": stats(before), "after": stats(after),
              **({"leave_one_shape_out": stats(loo)} if loso else {}),
              "fitted": time.strftime("%Y-%m-%d")}
    if args.test:                    # constants fitted above, rows never fitted on
        _, test_env, test_rows, _ = load_rows(args.test, preset, args.family)
        result["tested"] = {"results": args.test, "kernels": len(test_rows),
                            "before": stats(model_errors(test_rows)),
                            "after": stats(errors(test_rows, c))}
    for k in ("before", "after") + ("leave_one_shape_out",) * loso:
        s = result[k]
        print(f"{k:20s}: {s['within_15pct']:.0%} within ±15%, typical factor off {s['geomean_factor_off']:.2f}x, "
              f"max {s['max_abs_error']:.0%}")
    if args.test:
        for k in ("before", "after"):
            s = result["tested"][k]
            print(f"tested {k:13s}: {s['within_15pct']:.0%} within ±15% of {result['tested']['kernels']} kernels of "
                  f"{args.test}, typical factor off {s['geomean_factor_off']:.2f}x, max {s['max_abs_error']:.0%}")
    if args.write:
        path_for(preset, args.family).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {os.path.relpath(path_for(preset, args.family))}")
    return 0 if math.isfinite(c["eta_tc"]) else 1


def heldout_main(args) -> int:
    """``--heldout NAME``: fit it on the draws of ``--results``, test it on ``--test``, print both."""
    from nova.hwmodel.calibration import load, store
    if not args.preset:
        raise SystemExit("--heldout needs --preset (the draws' device preset, e.g. h100)")
    doc = load(args.preset, "wgmma")
    if doc is None:
        raise SystemExit(f"no stored wgmma calibration for {args.preset!r} to hold the other constants of")
    train = [f for f in args.results.split(",") if f]
    value, fitted = fit_heldout(train, args.preset, args.heldout, doc["constants"])
    block = {"value": value, "fit": {"results": train, **fitted}}
    if args.test:
        test = [f for f in args.test.split(",") if f]
        block["tested"] = {"results": test, **heldout_check(test, args.preset, args.heldout,
                                                            {**doc["constants"], args.heldout: value})}
    for part in ("fit", "tested"):
        if part in block:
            b = block[part]
            print(f"{args.heldout} = {value} ({part}, {b['kernels']} kernels): within 15% "
                  f"{b['before']['within_15pct']:.0%} -> {b['after']['within_15pct']:.0%}, typical factor off "
                  f"{b['before']['geomean_factor_off']:.3f} -> {b['after']['geomean_factor_off']:.3f}")
    if args.write:
        previous = doc.get(args.heldout) if isinstance(doc.get(args.heldout), dict) else {}
        doc = {**doc, "constants": {**doc["constants"], args.heldout: value},
               args.heldout: {**{k: v for k, v in previous.items() if k == "what"}, **block}}
        print(f"wrote {os.path.relpath(store(args.preset, 'wgmma', doc))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
