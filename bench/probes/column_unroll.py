"""The column stage's loads in flight: the bias-gradient column reductions of the GPT-42M step run with
the configurator's unroll (rows a thread loads before adding them) and with others, and with the row
splits of 1, 2 or 4 waves of CTAs (``COLUMN_WAVES``: the configurator fills one), each variant's
kernels timed by their CUPTI durations, beside ATen's ``add`` over the same [rows, n] operands (two
reads and a write: the copy-like ceiling for those bytes).

    python3 bench/probes/column_unroll.py build              # host: the variants' kernels into the cache
    python3 bench/probes/column_unroll.py run OUT.json       # device (NOVA_OFFLINE=1)
"""
import dataclasses
import json
import sys

UNROLLS = (1, 2, 4, 8)
WAVES = (2, 4)              # row splits for this many waves of CTAs, at the configured unroll


class _MoreSMs:
    """``gpu`` with ``waves`` x its SMs: the column stage's split formula then fills that many waves."""

    def __init__(self, gpu, waves):
        self._gpu, self.sm_count = gpu, gpu.sm_count * waves

    def __getattr__(self, name):
        return getattr(self._gpu, name)


def problems():
    """The GPT-42M step's column reductions: GELU's backward with its bias gradient, a cast's sum."""
    from nova.kernels.rows.operands import Operand
    from nova.kernels.rows.problem import RowsProblem
    from nova.kernels.rows.prologue import Prologue
    out = []
    for n, op in ((2048, "gelu_tanh_backward"), (1536, None), (512, None)):
        row = lambda name, n=n: Operand(name, "f32", "row", n)  # noqa: E731
        if op:
            pro = Prologue(((op, ("in0", "in1")),), ((0, "out"),), ((0, "st0"),))
            out.append(RowsProblem("column_reduce", 16384, n, (row("in0"), row("in1")),
                                   (Operand("out", "f32", "col"), row("st0")), {"op": "sum"}, pro))
        else:
            pro = Prologue((("cast_f32", ("in0",)),), ((0, "out"),))
            out.append(RowsProblem("column_reduce", 16384, n, (row("in0"),), (Operand("out", "f32", "col"),),
                                   {"op": "sum"}, pro))
    return out


def variants(gpu):
    """[(problem, schedule, what varies, the configurator's choice)] for every problem and unroll that
    divides its rows a thread adds, then its splits for 2 and 4 waves."""
    from nova.configurator.derivation import Derivation
    from nova.kernels.rows.derive import column_tile, configure_rows
    out = []
    for p in problems():
        s = configure_rows(p, gpu).schedule
        rows_a_thread = -(-s.column.rows_per_split // s.column.threads_rows)
        for u in UNROLLS:
            if rows_a_thread % u == 0:
                out.append((p, dataclasses.replace(s, column=dataclasses.replace(s.column, unroll=u)), f"unroll {u}",
                            u == s.column.unroll))
        for w in WAVES:
            out.append((p, dataclasses.replace(s, column=column_tile(p, _MoreSMs(gpu, w), Derivation())),
                        f"{w} waves", False))
    return out


def build():
    from nova.hwmodel import get_target
    from nova.kernels.rows.compile import get_or_compile
    gpu = get_target("h200")
    for p, s, u, _ in variants(gpu):
        for role in s.roles:
            print(p.describe()[:60], u, role, get_or_compile(p, s, role, gpu, offline=False)[2])


def run(out_path):
    import torch
    from torch.profiler import ProfilerActivity, profile
    from nova.hwmodel import get_target
    from rows_launch import launchable
    gpu = get_target("h200")
    rows = []
    for p, s, u, chosen in variants(gpu):
        t = {o.name: torch.randn(p.rows, p.n, device="cuda") if o.layout == "row" else torch.zeros(p.n, device="cuda")
             for o in p.inputs + p.outputs}
        once = launchable(p, s, t)
        ref = [torch.randn(p.rows, p.n, device="cuda") for _ in range(len(p.inputs) + 1)]
        copy = (lambda: torch.add(ref[0], ref[1], out=ref[2])) if len(p.inputs) == 2 else (lambda: ref[1].copy_(ref[0]))
        for _ in range(5):
            once(), copy()
        torch.cuda.synchronize()
        iters = 30
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                once()
                copy()
            torch.cuda.synchronize()
        ours, aten = 0.0, 0.0
        for e in prof.events():
            if e.device_type.name != "CUDA":
                continue
            if e.name.startswith("nova_rows"):
                ours += e.device_time
            else:
                aten += e.device_time
        nbytes = p.bytes_moved
        rows.append({"problem": p.describe(), "variant": u, "splits": s.column.splits, "configured": chosen, "us": round(ours / iters, 2),
                     "aten_same_rows_us": round(aten / iters, 2), "tb_per_s": round(nbytes / (ours / iters) / 1e6, 3)})
        print(json.dumps(rows[-1]))
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build()
    else:
        run(sys.argv[2])
