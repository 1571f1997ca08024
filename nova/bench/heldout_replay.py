"""Held-out results through today's models: each kernel's measured device time against the prediction
the run recorded (before) and the one the configurator makes now (after).

    python3 -m nova.bench.heldout_replay bench/results/h200-2026-12-03/run8/heldout

For every ``heldout_<kind>.json`` in the folder, every ok row is put through ``heldout.gemm_prediction``
or ``heldout.attention_prediction`` for the preset of the run's device (``environment.device``), and
each of its kernels (a GEMM; an attention problem's forward and backward) is compared with its
measured device time: the fraction within ``heldout.PREDICTION_BAND``, overall and per class, dtype
and layout, for the recorded and for today's predictions.  GEMM rows that carry a measured SM clock
(``nova_graph_sm_mhz``, runs after the clock sampling was added) also get the calibrated model at
that clock (``at_clock_us``), which separates the kernel model's error from the clock model's.

A model whose constants were fitted on a run's rows predicts that run in sample: the figure is a
fit, not a prediction (a fresh seed's draw is).  The printout says which constants were.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from nova import options
from nova.bench import heldout

IN_SAMPLE = {    # constants fitted on a run's rows: (folder, kind) -> where
    ("h200-2026-12-03/run8/heldout", "attention"): "LONE_BLOCK_LATENCIES, PERSISTENT_* (device_time.py)",
    ("h200-2026-12-03/run8/heldout", "gemm"): "eta_dram_tiles (h200.wgmma.json)",
    ("h200-2026-12-07/run110-h200/attention", "attention"):
        "LONE_BLOCK_BASE_LATENCIES, EMPTY_BLOCK_SHARE (device_time.py)",
    **{(f"h100-2026-12-06/{run}-h100", "gemm"): "eta_split_workspace (h100.wgmma.json)"
       for run in ("run83", "run89", "run90")},
    **{(f"h100-2026-12-06/{run}-h100", "gemm"): "eta_dram_tiles, eta_tc_pingpong, eta_split_workspace (h100.wgmma.json)"
       for run in ("run86", "run88")},
}


# the kernel a row without a ``kernel`` field is scored against: runs before the field was recorded
# timed the tensor-core tiles, and from the skinny kernel on (bench/results/h200-2026-12-06/run66,
# h100-2026-12-06/run74) the skinny kernel too on its decode rows, which this replay then prices as tiles
RECORDED_GEMM_KERNEL = "tiles"


def at_clock_us(h, target, mhz: float, kernel: str | None = None, schedule: str | None = None) -> float | None:
    """The calibrated GEMM time of ``heldout.gemm_config``'s kernel with the SM clock held at ``mhz``
    (the measured one) instead of the calibration's power-limited clock; None for the skinny kernel
    and without a calibration with the clock constants."""
    from nova.hwmodel.calibration import constants_for, load, time_at_clock
    cfg = heldout.gemm_config(h, target, kernel, schedule)
    if cfg.skinny:                  # its prediction uses the memory-bound families' constants, no clock model
        return None
    cal = load(cfg.target.name, cfg.schedule.mma.family)
    if cal is None or "f_model_mhz" not in cal["constants"]:
        return None
    return float(time_at_clock(cfg.prediction.terms_us, cfg.schedule.launch_split,
                               constants_for(cal["constants"], cfg.schedule), mhz, cfg.schedule.launches))


def kernels(kind: str, row: dict, target) -> list[dict]:
    """One entry per kernel of an ok row: label, measured, before (recorded), after (today's)."""
    if row.get("status") != "ok" or not row.get("predictions"):
        return []
    h = heldout.drawn(kind, row)
    base = {"describe": row["describe"], "klass": row["klass"], "dtype": row["dtype"], "odd": row["odd"],
            "layout": row.get("layout")}
    if kind == "gemm":
        (before, measured), = row["predictions"]
        ran = row.get("kernel", RECORDED_GEMM_KERNEL)
        now = heldout.gemm_prediction(h, target, kernel=ran, schedule=row.get("schedule"))
        out = [{**base, "kernel": "gemm", "measured": measured, "before": before, "after": now["predicted_us"],
                "model": now["model_us"]}]
        if row.get("nova_graph_sm_mhz"):
            out[0]["at_clock"] = at_clock_us(h, target, row["nova_graph_sm_mhz"], kernel=ran,
                                            schedule=row.get("schedule"))
        return out
    # the kernels the row ran: its recorded split counts, or (a row from before splits existed) unsplit
    ran = heldout.splits_ran(row)
    now = heldout.attention_prediction(h, target, options.current().replace(attention_split_kv=False)
                                       if ran is None else None, splits=ran)
    (fwd_before, fwd), (bwd_before, bwd) = row["predictions"]
    return [{**base, "kernel": "fwd", "measured": fwd, "before": fwd_before, "after": now["predicted_fwd_us"]},
            {**base, "kernel": "bwd", "measured": bwd, "before": bwd_before, "after": now["predicted_bwd_us"]}]


def within(entries: list[dict], key: str) -> float:
    """The fraction of ``entries`` whose ``key`` prediction is within the band of the measured time."""
    checks = [heldout.within_band(e.get(key), e["measured"]) for e in entries]
    checks = [c for c in checks if c is not None]
    return sum(checks) / len(checks) if checks else math.nan


def groups(entries: list[dict]) -> dict[str, list[dict]]:
    out = {"overall": entries}
    for key in ("klass", "layout", "dtype"):
        for value in dict.fromkeys(e[key] for e in entries if e.get(key)):
            out[f"{key.replace('klass', 'class')}={value}"] = [e for e in entries if e.get(key) == value]
    out["odd"] = [e for e in entries if e["odd"]]
    return out


def replay(path: str) -> dict:
    """{kind: {"entries": [...], "groups": {name: {"kernels", "before", "after"[, "at_clock"]}}}} for
    each results file in the folder ``path`` (or the one file ``path``)."""
    from nova.hwmodel import get_target
    from nova.runtime.matmul import preset_for_device_name
    files = [path] if path.endswith(".json") else [os.path.join(path, f"heldout_{k}.json") for k in heldout.KINDS]
    out = {}
    for file in files:
        if not os.path.exists(file):
            continue
        result = json.load(open(file))
        kind = result["settings"]["kind"]
        device = result["environment"].get("device", "")
        preset = preset_for_device_name(device)
        if preset is None:
            raise ValueError(f"{file}: no preset describes the run's device {device!r}")
        target = get_target(preset)
        entries = [e for row in result["rows"] for e in kernels(kind, row, target)]
        stats = {}
        for name, es in groups(entries).items():
            stats[name] = {"kernels": len(es), "before": within(es, "before"), "after": within(es, "after")}
            if any(e.get("at_clock") for e in es):
                stats[name]["at_clock"] = within([e for e in es if e.get("at_clock")], "at_clock")
        out[kind] = {"file": file, "entries": entries, "groups": stats}
    return out


def in_sample_note(path: str, kind: str) -> str:
    for (folder, k), where in IN_SAMPLE.items():
        if k == kind and folder in os.path.abspath(path):
            return f"in sample: {where} fitted on these rows"
    return "out of sample"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nova.bench.heldout_replay", description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a held-out results folder (heldout_gemm.json, heldout_attention.json) or one file")
    ap.add_argument("--rows", action="store_true", help="print every kernel")
    args = ap.parse_args(argv)
    try:
        result = replay(args.path)
    except (ValueError, OSError, KeyError) as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 1
    if not result:
        print(f"{ap.prog}: error: no heldout_<kind>.json under {args.path}", file=sys.stderr)
        return 1
    for kind, r in result.items():
        print(f"{kind}: {r['file']} ({in_sample_note(r['file'], kind)})")
        if args.rows:
            for e in r["entries"]:
                extra = f" at clock {e['at_clock']:8.1f}" if e.get("at_clock") else ""
                print(f"  {e['describe'][:52]:52s} {e['kernel']:4s} measured {e['measured']:8.1f} before "
                      f"{e['before']:8.1f} ({e['before'] / e['measured']:4.2f}) after {e['after']:8.1f} "
                      f"({e['after'] / e['measured']:4.2f}){extra}")
        for name, s in r["groups"].items():
            clock = f", at the measured clock {s['at_clock']:.0%}" if "at_clock" in s else ""
            print(f"  {name:16s} {s['kernels']:3d} kernels within +-{heldout.PREDICTION_BAND:.0%}: before "
                  f"{s['before']:.0%}, after {s['after']:.0%}{clock}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
