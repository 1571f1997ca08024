"""Probe: the column stage's two kernels (``column``, ``column_final``) timed apart, for a few schedules
of GPT-42M's bias-gradient sums, to see where their time goes (step_kernels times the pair as one).

    python3 bench/probes/column_stage.py --build     # host: the variants' kernels into $NOVA_CACHE_DIR
    NOVA_OFFLINE=1 python3 bench/probes/column_stage.py --out DIR     # device: each kernel timed alone

Variants: the derived schedule, and the derivation re-run with other ``MIN_ROWS_PER_THREAD`` (splits)
and ``COLUMN_THREADS`` (the same pure derivation on both machines gives the same schedules).  Each
kernel: 20 warm-up launches, then 200 launches between two CUDA events (mean us), inputs random,
outputs NaN-poisoned and the sum checked against torch's in float64.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

SHAPES = ((16384, 512, False), (16384, 512, True), (16384, 2048, False))   # (rows, n, residual add fused)
VARIANTS = ({}, {"MIN_ROWS_PER_THREAD": 32}, {"MIN_ROWS_PER_THREAD": 64}, {"COLUMN_THREADS": 512},
            {"MIN_ROWS_PER_THREAD": 64, "COLUMN_THREADS": 512})


def problem(rows: int, n: int, fused: bool):
    from nova.kernels.rows.problem import Operand, RowsProblem
    from nova.kernels.rows.prologue import Prologue
    if fused:
        ins = (Operand("in0", "f32", "row", n), Operand("in1", "f32", "row", n))
        outs = (Operand("out", "f32", "col"), Operand("st0", "f32", "row", n))
        pro = Prologue((("add", ("in0", "in1")),), ((0, "out"),), ((0, "st0"),))
    else:
        ins, outs = (Operand("in0", "f32", "row", n),), (Operand("out", "f32", "col"),)
        pro = Prologue((("cast_f32", ("in0",)),), ((0, "out"),))
    return RowsProblem("column_reduce", rows, n, ins, outs, (("op", "sum"),), pro)


@contextlib.contextmanager
def constants(changes: dict):
    from nova.kernels.rows import derive
    saved = {k: getattr(derive, k) for k in changes}
    for k, v in changes.items():
        setattr(derive, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(derive, k, v)


def schedule(p, changes: dict):
    from nova.hwmodel import get_target
    from nova.kernels.rows.derive import configure_rows
    with constants(changes):
        return configure_rows(p, get_target("h200"))


def build() -> int:
    from nova.hwmodel import get_target
    from nova.kernels.rows.compile import get_or_compile
    gpu = get_target("h200")
    for shape in SHAPES:
        for changes in VARIANTS:
            p = problem(*shape)
            cfg = schedule(p, changes)
            for role in cfg.schedule.roles:
                _, key, status = get_or_compile(p, cfg.schedule, role, gpu, offline=False)
                print(shape, changes, role, key[:12], status)
    return 0


def measure(out_dir: str) -> int:
    import torch
    from nova.kernels.rows import abi
    from nova.kernels.rows.compile import get_or_compile, summary
    from nova.runtime import driver
    from nova.hwmodel import get_target
    gpu, device = get_target("h200"), driver.get_device(None)
    rows_out = []
    for shape in SHAPES:
        rows, n, fused = shape
        p = problem(*shape)
        x = torch.randn(rows, n, device="cuda")
        y = torch.randn(rows, n, device="cuda")
        want = (x.double() + (y.double() if fused else 0)).sum(0)
        for changes in VARIANTS:
            cfg = schedule(p, changes)
            s = cfg.schedule
            ws, nbytes = abi.workspace_layout(p, s)
            work = torch.empty(max(nbytes, 4) // 4 + 1, device="cuda")
            outs = {"out": torch.full((n,), float("nan"), device="cuda"),
                    "st0": torch.full((rows, n), float("nan"), device="cuda")}
            ptrs = {"in0": x.data_ptr(), "in1": y.data_ptr(), "out": outs["out"].data_ptr(),
                    "st0": outs["st0"].data_ptr()}
            launches = []
            for role in s.roles:
                art, key, _ = get_or_compile(p, s, role, gpu)
                kernel = driver.load_kernel(art, device, summary(p, role, gpu), key)
                args = tuple(work.data_ptr() + ws[what[3:]][0] if what.startswith("ws:") else ptrs[what]
                             for _, what in abi.params(p, s, role))
                launches.append((role, kernel, args))
            stream = torch.cuda.current_stream().cuda_stream
            for _, k, a in launches:
                k.launch(a, stream)
            torch.cuda.synchronize()
            err = float((outs["out"].double() - want).abs().max() / want.abs().max())
            times = {}
            for role, k, a in launches + [("pair", None, None)]:
                for _ in range(20):
                    for r2, k2, a2 in launches:
                        if role in (r2, "pair"):
                            k2.launch(a2, stream)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(200):
                    for r2, k2, a2 in launches:
                        if role in (r2, "pair"):
                            k2.launch(a2, stream)
                end.record()
                torch.cuda.synchronize()
                times[role] = start.elapsed_time(end) * 1e3 / 200
            c = s.column
            row = {"rows": rows, "n": n, "fused": fused, "changes": changes, "splits": c.splits,
                   "threads": [c.threads_cols, c.threads_rows], "unroll": c.unroll,
                   "final": [c.final_threads_cols, c.final_threads_rows, c.final_grid, c.final_unroll],
                   "times_us": {k: round(v, 2) for k, v in times.items()},
                   "predicted_us": {k: v["time_us"] for k, v in cfg.terms.items()}, "max_rel_error": err}
            nbytes_first = rows * n * 4 * (3 if fused else 1)
            row["first_tb_per_s"] = round(nbytes_first / times["column"] / 1e6, 2)
            rows_out.append(row)
            print(json.dumps(row))
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "column_stage.json"), "w") as f:
        json.dump(rows_out, f, indent=1)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    sys.exit(build() if a.build else measure(a.out))
