"""``nova report``: results files in, a self-contained report directory out (no GPU needed).

    from nova.report import write_report
    write_report(["bench/results/h200-v0.1/bench.json"], oracle=None, out="reports/h200-2026-11-30")

The directory holds ``index.html`` and ``README.md`` (the same tables: pandas), and PNG figures
(``plots.py``): a roofline with every kernel on it, Nova/cuBLAS per shape, predicted vs measured
with the +-15% band, and the oracle ratio per shape when an oracle file is given.  Peaks and
bandwidths come from the hwmodel preset matching the device named in the results' environment.
"""
from __future__ import annotations

from pathlib import Path

from nova.report.load import Results, ResultsError, load_results
from nova.report.render import render

__all__ = ["write_report", "load_results", "Results", "ResultsError", "target_for", "default_out_dir"]


def target_for(env: dict):
    """The hwmodel preset for the results' device (``"NVIDIA H200"`` -> h200), or None."""
    from nova.hwmodel import get_target
    from nova.runtime.matmul import preset_for_device_name
    name = preset_for_device_name(str(env.get("device", "")).split(" / ")[0])
    return get_target(name) if name else None


def default_out_dir(res: Results) -> Path:
    env = res.environment
    target = target_for(env)
    tag = target.name if target else "unknown"
    date = str(env.get("date", "undated")).split(" / ")[0]
    return Path("reports") / f"{tag}-{date}"


def write_report(files: list[str], oracle: str | list[str] | None = None, out: str | Path | None = None,
                 title: str | None = None) -> Path:
    """Read ``files`` (and ``oracle``), write the report into ``out``; returns the directory."""
    if not files and not oracle:
        raise ResultsError("no results files given")
    res = load_results(list(files), oracle)
    out_dir = Path(out) if out else default_out_dir(res)
    out_dir.mkdir(parents=True, exist_ok=True)
    render(res, out_dir, target_for(res.environment), title)
    return out_dir
