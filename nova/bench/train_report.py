"""The summary of a training benchmark run: a Markdown table and one PNG.

    python3 -m nova.bench.train_report DIR [--model gpt42m] [--batch 32]

Reads ``DIR/<framework>-<model>-b<batch>.json`` (``nova.bench.train``), writes
``DIR/summary-<model>-b<batch>.md`` (tokens/s, ratio vs eager, step time and its spread, peak
memory, first-step time, SM clock, loss agreement with eager) and ``DIR/summary-<model>-b<batch>.png``
(loss curves; tokens/s and peak memory bars).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FRAMEWORKS = ("eager", "compile", "jax", "nova")          # what nova.bench.train runs, in report order

GB = 1e9


def load_results(out: str | Path, model: str, batch: int) -> dict[str, dict]:
    res = {}
    for fw in FRAMEWORKS:
        p = Path(out) / f"{fw}-{model}-b{batch}.json"
        if p.exists():
            res[fw] = json.loads(p.read_text())
    return res


def _fmt(x, spec: str, dash: str = "—") -> str:
    return dash if x is None else format(x, spec)


def summary_rows(results: dict[str, dict]) -> list[dict]:
    eager = results.get("eager", {})
    eager_tps = (eager.get("timing") or {}).get("tokens_per_s") if eager.get("status") == "ok" else None
    eager_losses = eager.get("losses") if eager.get("status") == "ok" else None
    rows = []
    for fw, r in results.items():
        t = r.get("timing") or {}
        mem = r.get("memory") or {}
        clocks = r.get("clocks") or {}
        tps = t.get("tokens_per_s")
        dloss = None
        losses = r.get("losses")
        if eager_losses and losses and fw != "eager":
            pairs = [(a, b) for a, b in zip(losses, eager_losses) if a is not None and b is not None]
            dloss = max((abs(a - b) for a, b in pairs), default=None)
        note = r.get("error") if r.get("status") != "ok" else ""
        rows.append({"framework": fw, "status": r.get("status"), "tokens_per_s": tps,
                     "vs_eager": tps / eager_tps if tps and eager_tps else None,
                     "step_ms": t.get("step_ms_median"), "spread_pct": t.get("spread_pct"),
                     "peak_alloc_gb": mem["peak_allocated_bytes"] / GB if mem.get("peak_allocated_bytes") else None,
                     "peak_reserved_gb": mem["peak_reserved_bytes"] / GB if mem.get("peak_reserved_bytes") else None,
                     "first_step_s": r.get("first_step_s"), "sm_mhz": clocks.get("timed_sm_mhz_median"),
                     "loss_first": (losses or [None])[0], "loss_last": (losses or [None])[-1],
                     "max_dloss_vs_eager": dloss, "note": note or ""})
    return rows


def markdown(results: dict[str, dict], model: str, batch: int) -> str:
    rows = summary_rows(results)
    any_r = next((r for r in results.values() if r.get("status") == "ok"), next(iter(results.values()), {}))
    seq = any_r.get("seq")
    dev = next((r.get("device_name") for r in results.values() if r.get("device_name")), "?")
    p = any_r.get("protocol") or {}
    mode = "TF32" if any(r.get("device") == "cuda" for r in results.values()) else "FP32"
    lines = [f"# Training step: {model}, batch {batch} x {seq} tokens, {mode}, AdamW ({dev})", "",
             f"Steady state: median of {p.get('repeats')} x {p.get('timed')} steps after the {p.get('steps')}-step "
             f"loss curve and >= {p.get('settle_s')} s / {p.get('warmup')} steps of settling; memory = peak over "
             "the whole run (torch: max_memory_allocated / max_memory_reserved; JAX: peak_bytes_in_use, no reserved "
             "figure while XLA preallocates its pool); "
             "first step includes compilation. GB = 1e9 bytes.", "",
             "| framework | tokens/s | vs eager | ms/step (spread) | peak alloc GB | reserved GB | first step s "
             "| SM MHz | loss 0 → last | max abs Δloss vs eager | note |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        spread = "" if r["spread_pct"] is None else f" ({r['spread_pct']:.1f}%)"
        lines.append(
            f"| {r['framework']} | {_fmt(r['tokens_per_s'], ',.0f')} | {_fmt(r['vs_eager'], '.3f')} "
            f"| {_fmt(r['step_ms'], '.2f')}{spread} | {_fmt(r['peak_alloc_gb'], '.2f')} "
            f"| {_fmt(r['peak_reserved_gb'], '.2f')} | {_fmt(r['first_step_s'], '.1f')} | {_fmt(r['sm_mhz'], '.0f')} "
            f"| {_fmt(r['loss_first'], '.4f')} → {_fmt(r['loss_last'], '.4f')} | {_fmt(r['max_dloss_vs_eager'], '.2e')} "
            f"| {r['status'] if r['status'] != 'ok' else ''}{': ' + r['note'] if r['note'] else ''} |")
    for fw, r in results.items():
        extra = []
        if r.get("optimizer"):
            o = r["optimizer"]
            extra.append(f"optimizer {o.get('class')} ({o.get('impl')})")
        if r.get("compile"):
            extra.append(f"torch.compile {r['compile']}")
        if r.get("jit"):
            extra.append(f"jit lower {r['jit']['lower_s']:.1f} s, compile {r['jit']['compile_s']:.1f} s")
        if (r.get("nova") or {}).get("stats") is not None:
            extra.append(f"nova stats {json.dumps(r['nova']['stats'])[:300]}")
        if extra:
            lines.append(f"\n- **{fw}**: " + "; ".join(extra))
    return "\n".join(lines) + "\n"


def plot(results: dict[str, dict], model: str, batch: int, path: Path) -> Path:
    """Loss curves, their distance from eager's, tokens/s and peak memory (allocated, reserved)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    rows = summary_rows(results)
    color = {fw: f"C{i}" for i, fw in enumerate(FRAMEWORKS)}
    curve = {fw: np.array([np.nan if v is None else v for v in r["losses"]], dtype=float)
             for fw, r in results.items() if r.get("losses")}
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.5), gridspec_kw={"width_ratios": [1.6, 1.3, 1, 1]})
    ax = axes[0]
    for fw, y in curve.items():
        ax.plot(y, label=fw, lw=1.2, color=color[fw], ls="-" if fw == "eager" else "--")
    ax.set(xlabel="step", ylabel="training loss", title=f"{model} b{batch}: loss (same data and initial weights)")
    if curve:
        ax.legend()
    ax = axes[1]
    others = [fw for fw in curve if fw != "eager"] if "eager" in curve else []
    for fw in others:
        y = curve[fw]
        n = min(len(y), len(curve["eager"]))
        ax.semilogy(np.maximum(np.abs(y[:n] - curve["eager"][:n]), 1e-9), label=fw, lw=1, color=color[fw])
    if others:
        ax.legend()
    ax.set(xlabel="step", title="|loss - eager loss| (floor 1e-9)")
    names = [r["framework"] for r in rows]
    ax = axes[2]
    vals = [r["tokens_per_s"] or 0.0 for r in rows]
    bars = ax.bar(names, vals, color=[color[n] for n in names])
    for b, r in zip(bars, rows):
        v = r["tokens_per_s"]
        txt = r["status"] if v is None else f"{v / 1e3:,.1f}k" + (f"\n×{r['vs_eager']:.2f}" if r["vs_eager"] else "")
        ax.annotate(txt, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
    ax.set_title("tokens/s (steady state)")
    ax.margins(y=0.2)
    ax = axes[3]
    x = np.arange(len(rows))
    alloc = [r["peak_alloc_gb"] or 0.0 for r in rows]
    resv = [r["peak_reserved_gb"] or 0.0 for r in rows]
    ax.bar(x - 0.2, alloc, 0.4, color=[color[n] for n in names], label="peak allocated")
    ax.bar(x + 0.2, resv, 0.4, color=[color[n] for n in names], alpha=0.4, hatch="//", label="reserved / pool")
    for i, r in enumerate(rows):
        txt = "n/a" if r["peak_alloc_gb"] is None else f"{r['peak_alloc_gb']:.2f}"
        ax.annotate(txt, (x[i] - 0.2, alloc[i]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, names)
    ax.set_title("peak memory, GB (1e9 B)")
    ax.legend(fontsize=8)
    ax.margins(y=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def write_report(out: str | Path, model: str, batch: int) -> tuple[Path, Path]:
    out = Path(out)
    results = load_results(out, model, batch)
    if not results:
        raise FileNotFoundError(f"no results for {model} b{batch} under {out}")
    md = out / f"summary-{model}-b{batch}.md"
    md.write_text(markdown(results, model, batch))
    png = plot(results, model, batch, out / f"summary-{model}-b{batch}.png")
    return md, png


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--model", default="gpt42m")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args(argv)
    md, png = write_report(args.dir, args.model, args.batch)
    print(md.read_text())
    print(f"wrote {md} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
