"""The report's figures (matplotlib, Agg backend: no display needed).  Each returns the PNG's name.

Every figure carries a footer with the device, the software versions, the dtypes and the date
(``stamp``), so a PNG copied out of the report still says what it measured.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from nova.report.load import device_us  # noqa: E402

BAND = 0.15                    # the prediction target: within +-15% of measured
ORACLE_TARGET = 0.97           # the oracle target: pick >= 0.97x of the exhaustive best (geomean)
COLORS = {"tf32": "tab:blue", "bf16": "tab:orange", "fp16": "tab:green"}
PNG_METADATA = {"Software": None}   # no matplotlib version in the file: re-rendering gives the same bytes


def stamp_text(env: dict, dtypes) -> str:
    """``"NVIDIA H200 | torch 2.11.0+cu130, CUDA 13.0, Nova 0.1.0 | tf32, bf16 | 2026-11-30"``."""
    soft = ", ".join(f"{name} {env[key]}" for name, key in (("torch", "torch"), ("CUDA", "cuda"),
                                                              ("Nova", "nova")) if env.get(key))
    return " | ".join([env.get("device", "device unknown"), soft or "versions unknown",
                       ", ".join(sorted(set(dtypes))) or "dtype unknown", env.get("date", "date unknown")])


def _finish(fig, out: Path, name: str, env: dict, dtypes) -> str:
    fig.text(0.5, 0.005, stamp_text(env, dtypes), ha="center", va="bottom", fontsize=8, color="0.35")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out / name, dpi=110, metadata=PNG_METADATA)
    plt.close(fig)
    return name


def roofline(bench: pd.DataFrame, target, out: Path, env: dict) -> str:
    """Achieved TFLOP/s vs arithmetic intensity (FLOP per compulsory DRAM byte), one panel per dtype.
    Roofs: the datasheet tensor peak (best instruction family), the mma.sync rate Nova's kernel uses
    (the hwmodel's figure), and DRAM bandwidth x intensity (Williams et al., CACM 2009)."""
    from nova.kernels.gemm.problem import GemmProblem
    dtypes = sorted(bench.dtype.unique())
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6.2 * len(dtypes), 4.8), squeeze=False)
    for ax, dt in zip(axes[0], dtypes):
        g = bench[bench.dtype == dt]
        probs = [GemmProblem(int(m), int(n), int(k), dt) for m, n, k in zip(g.M, g.N, g.K)]
        ai = np.array([p.flops / p.min_bytes for p in probs])
        flops = np.array([p.flops for p in probs])
        lo, hi = max(1.0, ai.min() / 3), ai.max() * 3
        x = np.geomspace(lo, hi, 200)
        bw = target.dram_bw
        for family, style in (("best", "-"), ("mma.sync", "--")):
            fam = None if family == "best" else family
            if fam and not target.supports(fam, dt):
                continue
            peak = target.peak_flops(dt, fam)
            label = (f"{target.best_family(dt) if fam is None else fam} peak {peak / 1e12:.0f} TFLOP/s")
            ax.plot(x, np.minimum(peak, bw * x) / 1e12, style, color="k" if fam is None else "0.5", lw=1.2,
                    label=label)
        ax.plot([], [], " ", label=f"DRAM {bw / 1e12:.2f} TB/s (ridge {target.peak_flops(dt) / bw:.0f} FLOP/B)")
        ax.scatter(ai, flops / g.nova_b2b_us.to_numpy() / 1e6, marker="o", color=COLORS.get(dt, "tab:red"),
                   label="Nova", zorder=3)
        ax.scatter(ai, flops / g.cublas_b2b_us.to_numpy() / 1e6, marker="x", color="k", label="cuBLAS", zorder=3)
        for a_i, y, shape in zip(ai, flops / g.nova_b2b_us.to_numpy() / 1e6, g["shape"]):
            ax.annotate(shape, (a_i, y), fontsize=6, xytext=(3, -8), textcoords="offset points", color="0.3")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity, FLOP / compulsory DRAM byte")
        ax.set_ylabel("TFLOP/s (back-to-back)")
        ax.set_title(f"Roofline {dt} on {target.name} ({env.get('device', '?')})")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    return _finish(fig, out, "roofline.png", env, dtypes)


def _grouped_bars(ax, df: pd.DataFrame, value: str, dtypes: list[str]):
    shapes = list(dict.fromkeys(df["shape"]))
    width = 0.8 / len(dtypes)
    for i, dt in enumerate(dtypes):
        g = df[df.dtype == dt].set_index("shape")
        vals = [g[value].get(s, np.nan) for s in shapes]
        ax.bar(np.arange(len(shapes)) + (i - (len(dtypes) - 1) / 2) * width, vals, width, label=dt,
               color=COLORS.get(dt, None))
    ax.set_xticks(np.arange(len(shapes)))
    ax.set_xticklabels(shapes, rotation=45, ha="right", fontsize=8)
    return shapes


def ratio_bars(bench: pd.DataFrame, out: Path, env: dict) -> str:
    """Nova / cuBLAS throughput per shape (cuBLAS time / Nova time, back-to-back), per dtype."""
    df = bench.assign(ratio=bench.cublas_b2b_us / bench.nova_b2b_us)
    dtypes = sorted(df.dtype.unique())
    fig, ax = plt.subplots(figsize=(max(7.0, 0.55 * df["shape"].nunique() * len(dtypes) + 2), 4.6))
    _grouped_bars(ax, df, "ratio", dtypes)
    ax.axhline(1.0, color="k", lw=1)
    geo = {dt: geomean(df[df.dtype == dt].ratio) for dt in dtypes}
    ax.set_ylabel("Nova / cuBLAS throughput (1 = parity)")
    ax.set_title("Nova vs cuBLAS per shape; geomean " + ", ".join(f"{k} {v:.2f}" for k, v in geo.items()))
    ax.legend()
    ax.grid(True, axis="y", alpha=0.3)
    return _finish(fig, out, "ratio_vs_cublas.png", env, dtypes)


def prediction_scatter(bench: pd.DataFrame, out: Path, env: dict, extra: pd.Series | None = None,
                       extra_label: str = "calibrated") -> str:
    """Predicted vs measured device time (``load.device_us``), log-log, with the y = x line and the
    +-15% band.  ``extra``: a second set of predictions (e.g. calibrated) drawn hollow."""
    meas = device_us(bench).to_numpy()
    pred = bench.predicted_us.to_numpy()
    dtypes = sorted(bench.dtype.unique())
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    lo, hi = min(meas.min(), pred.min()) / 1.5, max(meas.max(), pred.max()) * 1.5
    x = np.geomspace(lo, hi, 100)
    ax.fill_between(x, x * (1 - BAND), x * (1 + BAND), color="tab:green", alpha=0.15, label="within ±15%")
    ax.plot(x, x, "k-", lw=1, label="predicted = measured")
    for dt in dtypes:
        m = (bench.dtype == dt).to_numpy()
        ax.scatter(meas[m], pred[m], color=COLORS.get(dt), label=f"{dt} model", zorder=3)
        if extra is not None:
            ax.scatter(meas[m], extra.to_numpy()[m], facecolors="none", edgecolors=COLORS.get(dt),
                       label=f"{dt} {extra_label}", zorder=3)
    within = within_band(pred, meas)
    title = f"Predicted vs measured: {within:.0%} within ±15%"
    if extra is not None:
        title += f" ({extra_label}: {within_band(extra.to_numpy(), meas):.0%})"
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured device time, us (CUDA-graph replay; back-to-back in older files)")
    ax.set_ylabel("predicted, us (nova.kernels.gemm.cost)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return _finish(fig, out, "predicted_vs_measured.png", env, dtypes)


def oracle_bars(oracle: pd.DataFrame, out: Path, env: dict) -> str:
    """best / pick time per shape (1 = the analytic pick is the fastest candidate), per dtype."""
    dtypes = sorted(oracle.dtype.unique())
    fig, ax = plt.subplots(figsize=(max(7.0, 0.45 * oracle["shape"].nunique() * len(dtypes) + 2), 4.6))
    _grouped_bars(ax, oracle, "ratio", dtypes)
    ax.axhline(ORACLE_TARGET, color="tab:red", lw=1, ls="--", label=f"target {ORACLE_TARGET}")
    ax.axhline(1.0, color="k", lw=1)
    geo = {dt: geomean(oracle[oracle.dtype == dt].ratio) for dt in dtypes}
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("best candidate time / analytic pick time")
    ax.set_title("Oracle: analytic pick vs exhaustive best; geomean "
                 + ", ".join(f"{k} {v:.3f}" for k, v in geo.items()))
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _finish(fig, out, "oracle_ratio.png", env, dtypes)


def geomean(values) -> float:
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v)) and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else math.nan


def within_band(pred, meas, band: float = BAND) -> float:
    """Fraction of points with |pred / meas - 1| <= band."""
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return float(np.mean(np.abs(pred / meas - 1) <= band)) if len(meas) else math.nan


def memory_schedule(report: dict, path: Path) -> Path:
    """The device memory of ``explain train``'s plan over its schedule (``report["memory"]
    ["over_schedule"]``, ``nova.compiler.explain.memory_over_schedule``), in GiB against the fraction
    of the step; with a budget, the budget's line and, when the report has it, the plan without the
    budget beside it.  Written to ``path`` (PNG)."""
    mem = report["memory"]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    gib = 2.0 ** 30
    curves = [("without the budget", mem.get("over_schedule_unbudgeted"), "0.55"),
              ("the plan" if not mem.get("budget") else "under the budget", mem["over_schedule"], "tab:blue")]
    top, bases = 0.0, set()
    for label, prof, color in curves:
        if not prof:
            continue
        top = max(top, prof["peak_bytes"] / gib)
        live = np.asarray(prof["live_bytes"], dtype=float)
        x = (np.arange(len(live)) + 0.5) / len(live)
        total = (live + prof["base_bytes"]) / gib
        ax.plot(x, total, color=color, lw=1.4,
                label=f"{label}: peak {prof['peak_bytes'] / gib:.2f} GiB ({prof['positions']} positions)")
        first = f"{prof['base_bytes'] / gib:.2f}" not in bases      # one label per base the legend can tell apart
        bases.add(f"{prof['base_bytes'] / gib:.2f}")
        ax.axhline(prof["base_bytes"] / gib, color=color, lw=0.8, ls=":",
                   label=(f"held throughout: {prof['base_bytes'] / gib:.2f} GiB (parameters, gradients, optimizer "
                          f"state, allocations outside the arena)") if first else None)
    budget = mem.get("budget")
    if budget and budget.get("budget_bytes"):
        top = max(top, budget["budget_bytes"] / gib)
        ax.axhline(budget["budget_bytes"] / gib, color="tab:red", lw=1.0, ls="--",
                   label=f"budget {budget['budget_bytes'] / gib:.2f} GiB")
        if budget.get("headroom_bytes"):
            fit = budget["budget_bytes"] - budget["headroom_bytes"]
            ax.axhline(fit / gib, color="tab:red", lw=0.8, ls=":",
                       label=f"less the allocator's headroom: {fit / gib:.2f} GiB")
    model = report.get("model", {})
    ax.set_title(f"{model.get('name', report.get('name', 'step'))} b{model.get('batch', '?')}x{model.get('seq', '?')} "
                 f"on {report.get('target', '?')}: device memory over the step's schedule")
    ax.set_xlabel("position in the step's schedule (fraction of its launches and frees)")
    ax.set_ylabel("GiB")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, top * 1.55)          # room above the curves for the legend
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(path, dpi=110, metadata=PNG_METADATA, format="png")    # exactly ``path``, whatever its suffix
    finally:
        plt.close(fig)
    return path
