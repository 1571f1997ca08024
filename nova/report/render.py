"""Tables (pandas) and the two documents: ``README.md`` (Markdown) and ``index.html``."""
from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from nova.report import plots
from nova.report.load import Results, device_us

CSS = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
       "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
       "text-align:right}th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}code{background:#f6f6f6}")


# --------------------------------------------------------------------------- tables
def bench_table(bench: pd.DataFrame) -> pd.DataFrame:
    t = pd.DataFrame({
        "shape": bench["shape"], "dtype": bench.dtype, "schedule": bench.get("schedule", ""),
        "Nova us": bench.nova_b2b_us, "cuBLAS us": bench.cublas_b2b_us,
        "Nova TFLOP/s": 2 * bench.M * bench.N * bench.K / bench.nova_b2b_us / 1e6,
        "cuBLAS TFLOP/s": 2 * bench.M * bench.N * bench.K / bench.cublas_b2b_us / 1e6,
        "Nova/cuBLAS": bench.cublas_b2b_us / bench.nova_b2b_us})
    if "nova_graph_us" in bench.columns:
        t["Nova graph us"], t["cuBLAS graph us"] = bench.nova_graph_us, bench.cublas_graph_us
    return t.reset_index(drop=True)


def prediction_table(bench: pd.DataFrame, calibrated: pd.Series | None) -> pd.DataFrame:
    measured = device_us(bench)
    t = pd.DataFrame({"shape": bench["shape"], "dtype": bench.dtype, "bound": bench.get("predicted_bound", ""),
                      "predicted us": bench.predicted_us, "measured us": measured,
                      "error": bench.predicted_us / measured - 1})
    t["within ±15%"] = np.where(t.error.abs() <= plots.BAND, "yes", "no")
    if calibrated is not None:
        t["calibrated us"] = calibrated.to_numpy()
        t["calibrated error"] = t["calibrated us"] / t["measured us"] - 1
        t["cal. within ±15%"] = np.where(t["calibrated error"].abs() <= plots.BAND, "yes", "no")
    return t.reset_index(drop=True)


def oracle_table(oracle: pd.DataFrame) -> pd.DataFrame:
    cols = {"shape": "shape", "dtype": "dtype", "pick_schedule": "pick", "pick_us": "pick us",
            "best_schedule": "best", "best_us": "best us", "ratio": "best/pick", "pick_rank": "pick rank",
            "correct": "correct candidates", "space_size": "space size", "config_ms": "configure ms",
            "tune_s": "tuning s", "inductor_compile_s": "Inductor max-autotune s"}
    return oracle[[c for c in cols if c in oracle.columns]].rename(columns=cols).reset_index(drop=True)


def cost_table(oracles: list[pd.DataFrame]) -> pd.DataFrame:
    """Per problem with an Inductor measurement in any oracle run: Nova's configuration time, the
    exhaustive tuning of its sampled space (the run of record's), Inductor max-autotune's compile."""
    first = oracles[0].set_index(["shape", "dtype"])
    rows = []
    for df in oracles:
        if "inductor_compile_s" not in df.columns:
            continue
        for _, r in df[df.inductor_compile_s.notna()].iterrows():
            ref = first.loc[(r["shape"], r["dtype"])] if (r["shape"], r["dtype"]) in first.index else r
            rows.append({"shape": r["shape"], "dtype": r["dtype"], "Nova configure ms": r.get("config_ms"),
                         "exhaustive tuning s": ref.get("tune_s"), "candidates": ref.get("candidates"),
                         "Inductor max-autotune s": r["inductor_compile_s"]})
    return pd.DataFrame(rows).drop_duplicates(["shape", "dtype"])


def repeat_summary(oracle: pd.DataFrame, name: str, repeat: pd.DataFrame) -> str:
    """One line: a repeat run's geomean best/pick per dtype, and the run of record's on the same problems."""
    parts = []
    for dt in sorted(repeat.dtype.unique()):
        rep = repeat[repeat.dtype == dt]
        same = oracle[(oracle.dtype == dt) & oracle["shape"].isin(rep["shape"])]
        parts.append(f"{dt} {plots.geomean(rep.ratio):.3f} over {len(rep)} problems "
                     f"(run of record on the same problems: {plots.geomean(same.ratio):.3f})")
    return f"Oracle repeat run ({name}): " + "; ".join(parts)


def calibration_text(c: dict) -> str:
    """'wgmma: eta_tc, t_launch_us fitted on <file>, eta_dram held at 0.948 (measured), leave-one-shape-out 85%'."""
    fixed = c.get("fixed") or {}
    fitted = [k for k in c["constants"] if k not in fixed]
    held = "".join(f", {k} held at {v:g} " + ("(the preset's clock)" if k == "f_model_mhz" else "(measured)")
                   for k, v in fixed.items())
    return (f"{c.get('family', 'mma.sync')}: {', '.join(fitted)} fitted on {c['source']['results']}{held}, "
            f"leave-one-shape-out {c['leave_one_shape_out']['within_15pct']:.0%}")


def correctness_table(correctness: list[dict]) -> pd.DataFrame:
    rows = []
    for c in correctness:
        for dt, med in (c.get("median_error") or {}).items():
            rows.append({"dtype": dt, "cases (all dtypes)": c.get("cases"), "failed (all dtypes)": c.get("failed"),
                         "median rel. error": med, "max rel. error": (c.get("max_error") or {}).get(dt),
                         "tolerance": (c.get("tolerance") or {}).get(dt)})
    return pd.DataFrame(rows)


def calibrated_predictions(bench: pd.DataFrame, target) -> pd.Series | None:
    """The stored calibration of ``target`` applied to each row's current schedule (NaN where the
    configurator now picks another schedule than the one measured)."""
    if target is None or "schedule" not in bench.columns:
        return None
    from nova.configurator import GemmProblem
    from nova.kernels.gemm.space import measured_config
    from nova.hwmodel.calibration import calibrated_time_us, constants_for, load
    cals = {f: load(target.name, f) for f in ("mma.sync", "wgmma")}
    if not any(cals.values()):
        return None
    out = []
    for r in bench.itertuples():
        cfg = measured_config(GemmProblem(int(r.M), int(r.N), int(r.K), r.dtype), target, r.schedule)
        cal = cals.get(cfg.schedule.mma.family) if cfg is not None and not cfg.skinny else None   # each family its own fit
        out.append(float(calibrated_time_us(cfg.prediction.terms_us, cfg.schedule.launch_split,
                                            constants_for(cal["constants"], cfg.schedule),
                                            cfg.schedule.launches))
                   if cal else math.nan)
    return pd.Series(out, index=bench.index)


# --------------------------------------------------------------------------- documents
def _fmt(df: pd.DataFrame) -> pd.DataFrame:
    def cell(v):
        if isinstance(v, float):
            if math.isnan(v):
                return ""
            return f"{v:.3g}" if abs(v) < 1 else f"{v:.4g}" if abs(v) < 1e4 else f"{v:.0f}"
        return v
    return df.apply(lambda col: col.map(cell))


class _Doc:
    """Builds Markdown and HTML side by side from the same calls."""

    def __init__(self):
        self.md: list[str] = []
        self.html: list[str] = []

    def heading(self, text: str, level: int = 2):
        self.md.append(f"{'#' * level} {text}\n")
        self.html.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def para(self, text: str):
        self.md.append(text + "\n")
        self.html.append(f"<p>{html.escape(text)}</p>")

    def bullets(self, items: list[str]):
        self.md.append("\n".join(f"- {i}" for i in items) + "\n")
        self.html.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")

    def table(self, df: pd.DataFrame):
        shown = _fmt(df)
        self.md.append(shown.to_markdown(index=False) + "\n")
        self.html.append(shown.to_html(index=False, border=0, escape=True))

    def figure(self, name: str, caption: str):
        self.md.append(f"![{caption}]({name})\n")
        self.html.append(f'<figure><img src="{html.escape(name)}" alt="{html.escape(caption)}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def render(res: Results, out: Path, target, title: str | None) -> None:
    env = res.environment
    bench, oracle = res.bench, res.oracle
    dtypes = sorted(set(bench.dtype) if not bench.empty else set(oracle.dtype if oracle is not None else []))
    title = title or f"Nova on {env.get('device', 'an unknown GPU')}, {env.get('date', '')}".strip(", ")
    d = _Doc()
    d.heading(title, 1)
    d.para(f"Generated by `nova report` from {', '.join(res.sources)}. Figures state the device, software "
           f"versions, dtype and date: {plots.stamp_text(env, dtypes)}.")
    d.table(pd.DataFrame([{"quantity": k, "value": v} for k, v in env.items()]))

    summary = []
    calibrated = None
    if not bench.empty:
        ratio = bench.cublas_b2b_us / bench.nova_b2b_us
        summary.append("Nova/cuBLAS throughput, geomean: " + ", ".join(
            f"{dt} {plots.geomean(ratio[bench.dtype == dt]):.3f}" for dt in sorted(bench.dtype.unique())))
        if "predicted_us" in bench.columns:
            calibrated = calibrated_predictions(bench, target)
            line = (f"Predicted time within ±15% of measured: "
                    f"{plots.within_band(bench.predicted_us, device_us(bench)):.0%} of {len(bench)} kernels (model)")
            if calibrated is not None and calibrated.notna().any():
                ok = calibrated.notna()
                from nova.hwmodel.calibration import load
                fits = [c for c in (load(target.name, f) for f in ("mma.sync", "wgmma")) if c]
                line += (f", {plots.within_band(calibrated[ok], device_us(bench)[ok]):.0%} of {int(ok.sum())} "
                         f"with the {target.name} calibrations (a few constants per instruction family, never per shape: "
                         + "; ".join(calibration_text(c) for c in fits) + ")")
            summary.append(line)
    if oracle is not None and not oracle.empty:
        geo = {dt: plots.geomean(oracle[oracle.dtype == dt].ratio) for dt in sorted(oracle.dtype.unique())}
        worst = oracle.loc[oracle.ratio.astype(float).idxmin()]
        summary.append("Oracle (best candidate time / analytic pick time), geomean: "
                       + ", ".join(f"{k} {v:.3f}" for k, v in geo.items())
                       + f"; worst {worst['shape']} {worst['dtype']} {worst['ratio']:.3f} (pick "
                         f"{worst['pick_schedule']}, best {worst['best_schedule']})")
    for name, repeat in res.oracle_repeats:
        if oracle is not None and not repeat.empty:
            summary.append(repeat_summary(oracle, name, repeat))
    for c in res.correctness:
        summary.append(f"Correctness: {c.get('cases')} cases, {c.get('failed')} failed")
    d.heading("Summary")
    d.bullets(summary or ["no rows"])

    if not bench.empty:
        if target is not None:
            d.heading("Roofline")
            name = plots.roofline(bench, target, out, env)
            d.figure(name, f"Roofline on {target.full_name}: Nova (dots) and cuBLAS (crosses)")
        else:
            d.para("Roofline omitted: no hwmodel preset matches the device in the results' environment.")
        d.heading("Nova vs cuBLAS")
        d.figure(plots.ratio_bars(bench, out, env), "Nova/cuBLAS throughput per shape")
        d.para("Times are back-to-back medians (launch-overlapped), microseconds; TFLOP/s from them; "
               "graph columns (when present): CUDA-graph replay, device time per call.")
        d.table(bench_table(bench))
        if "predicted_us" in bench.columns:
            d.heading("Prediction error")
            d.figure(plots.prediction_scatter(bench, out, env, calibrated if calibrated is not None and
                                              calibrated.notna().any() else None),
                     "Predicted vs measured time with the ±15% band")
            d.para("error = predicted / measured - 1 (negative: the model is optimistic).")
            d.table(prediction_table(bench, calibrated))
    if oracle is not None and not oracle.empty:
        d.heading("Oracle: analytic pick vs exhaustive search")
        d.figure(plots.oracle_bars(oracle, out, env), "Oracle ratio per shape")
        d.para("best/pick = fastest correct candidate's time / the analytic pick's time (1: the pick is the "
               "best). pick rank is 1-based among the correct candidates.")
        d.table(oracle_table(oracle))
        cost = cost_table([oracle] + [r for _, r in res.oracle_repeats])
        if not cost.empty:
            d.heading("Cost: configuring vs searching")
            d.para("Nova configures in closed form (milliseconds, no GPU); the exhaustive tuning times the "
                   "sampled candidates on the GPU (seconds, after compiling them on the host); Inductor "
                   "max-autotune compiles and benchmarks its Triton templates (seconds, measured in the same "
                   "kind of run).")
            d.table(cost)
    if res.correctness:
        d.heading("Correctness")
        d.table(correctness_table(res.correctness))

    (out / "README.md").write_text("\n".join(d.md))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body>" + "\n".join(d.html) + "</body></html>\n")
    (out / "index.html").write_text(page)
