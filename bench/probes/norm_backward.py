"""Where a norm backward's time goes: LayerNorm's (GPT) and RMSNorm's (Llama) backward at 16384 x 512,
the weight/bias gradients summed in the row kernel's pass, each kernel timed by its CUPTI duration
(the row kernel and ``partials_final`` apart), with the configured schedule and with variants of its
partial sums: the final sum over more CTAs (one f32 a lane: 64 CTAs where the configured 16-byte
lanes give 16), the row kernel with half the partial rows (two CTAs an SM, each walking twice the
row groups) and with two and four times them (as many waves of CTAs, each walking a part of the row groups: a CTA that
finishes early makes room for another, where one wave's SMs wait for the slowest).  Beside it, for reference, the read-only bias sum of a [16384, 1536] f32 (GPT-42M's QKV
bias gradient), and ATen's copy of the row bytes.

    python3 bench/probes/norm_backward.py build            # host: the variants' kernels into the cache
    python3 bench/probes/norm_backward.py run OUT.json     # device (NOVA_OFFLINE=1)
    ncu ... python3 bench/probes/norm_backward.py once     # device: each configured kernel once, for Nsight Compute
"""
import dataclasses
import json
import sys


def problems():
    from nova.kernels.rows import cli_problem
    from nova.kernels.rows.operands import Operand
    from nova.kernels.rows.problem import RowsProblem
    from nova.kernels.rows.prologue import Prologue
    row = lambda name: Operand(name, "f32", "row", 1536)  # noqa: E731
    cast_sum = RowsProblem("column_reduce", 16384, 1536, (row("in0"),), (Operand("out", "f32", "col"),),
                           {"op": "sum"}, Prologue((("cast_f32", ("in0",)),), ((0, "out"),)))
    return [cli_problem("layer_norm", 16384, 512, "f32", backward=True),
            cli_problem("rms_norm", 16384, 512, "f32", backward=True), cast_sum]


def variants(gpu):
    """[(problem, schedule, what varies)]: each problem's configured schedule, then the norms' variants."""
    from nova.configurator.derivation import Derivation
    from nova.kernels.rows.derive import configure_rows, partials_tile
    out = []
    for p in problems():
        s = configure_rows(p, gpu).schedule
        out.append((p, s, "configured"))
        pt = s.partials
        if pt is None:
            continue
        tc = pt.final_threads_cols
        wide = dataclasses.replace(pt, final_vec=1, final_grid=p.n // tc)
        out.append((p, dataclasses.replace(s, partials=wide), f"final over {p.n // tc} CTAs, one f32 a lane"))
        half = pt.partials // 2
        tr = max(1, pt.final_threads_rows // 2)
        fewer = dataclasses.replace(pt, partials=half, groups_per_cta=-(-p.rows // s.row.rows_per_cta // half),
                                    final_threads_rows=tr)
        row = dataclasses.replace(s.row, grid=half)
        out.append((p, dataclasses.replace(s, partials=fewer, row=row), f"{half} partial rows (2 CTAs an SM)"))
        for waves in (2, 4):
            many = waves * pt.partials
            more = partials_tile(p, many, s.row.rows_per_cta, Derivation(), gpu)
            more = dataclasses.replace(more, groups_per_cta=-(-p.rows // s.row.rows_per_cta // many))
            out.append((p, dataclasses.replace(s, partials=more, row=dataclasses.replace(s.row, grid=many)),
                        f"{many} partial rows ({waves} waves of CTAs)"))
    return out


def build():
    from nova.hwmodel import get_target
    from nova.kernels.rows.compile import get_or_compile
    gpu = get_target("h200")
    for p, s, what in variants(gpu):
        for role in s.roles:
            art, _, status = get_or_compile(p, s, role, gpu, offline=False)
            print(p.describe()[:50], "|", what, "|", role, status, art.resources)


def _launchable(p, s):
    from rows_launch import launchable, random_operands
    t = random_operands(p)
    return launchable(p, s, t), t


def run(out_path):
    import torch
    from rows_launch import kernel_times
    from nova.hwmodel import get_target
    from nova.kernels.rows.derive import configure_rows
    gpu = get_target("h200")
    rows = []
    src = torch.randn(16384, 1536, device="cuda")
    dst = torch.empty_like(src)
    for p, s, what in variants(gpu):
        once, _ = _launchable(p, s)
        per = {}
        for name, us in kernel_times(lambda: (once(), dst.copy_(src))).items():
            name = name if name.startswith("nova_rows") else "aten_copy_16384x1536"
            per[name] = per.get(name, 0.0) + us
        ours = sum(v for k, v in per.items() if k.startswith("nova_rows"))
        predicted = configure_rows(p, gpu).prediction.time_us if what == "configured" else None
        rows.append({"problem": p.describe(), "variant": what, "kernels_us": {k: round(v, 2) for k, v in per.items()},
                     "us": round(ours, 2), "predicted_us": predicted,
                     "tb_per_s": round(p.bytes_moved / ours / 1e6, 3)})
        print(json.dumps(rows[-1]))
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)


def once_each():
    import torch
    from nova.hwmodel import get_target
    for p, s, what in variants(get_target("h200")):
        if what == "configured":
            once, _ = _launchable(p, s)
            once()
            once()
    torch.cuda.synchronize()


if __name__ == "__main__":
    {"build": lambda: build(), "run": lambda: run(sys.argv[2]), "once": lambda: once_each()}[sys.argv[1]]()
