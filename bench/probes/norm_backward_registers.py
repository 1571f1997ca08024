"""A norm backward's residency and its residual's load, timed: the training steps' LayerNorm (GPT-42M)
and RMSNorm (Llama-42M) backward kernels at 16384 x 512, each under

- ``uncapped``: the schedule as it was before the register cap (``max_regs`` 255, the residual loaded
  in the writing sweep): ptxas took 105-141 registers where the plan counted 88-120, so fewer CTAs
  were resident than the grid of weight-gradient partials assumed (1.25-1.33 waves);
- ``configured``: the derivation's schedule (the register cap of its residency; early loads where
  they cost no resident CTA);
- the other side of the early-load rule: ``early, one CTA fewer`` where the configured schedule keeps
  the residual late (the residual loaded with the row, a CTA an SM fewer, the partials re-tiled to the
  new wave), or ``late`` where it loads it early.

Each kernel's CUPTI duration (the row kernel and ``partials_final`` apart) over 30 launches, inputs
random and outputs NaN-poisoned, dx checked against the configured schedule's to the bit.

    python3 bench/probes/norm_backward_registers.py build          # host: the variants into $NOVA_CACHE_DIR
    python3 bench/probes/norm_backward_registers.py run OUT.json   # device (NOVA_OFFLINE=1)
"""
import dataclasses
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

TARGET = os.environ.get("NOVA_TARGET", "h100")


def problems():
    from nova.kernels.rows import cli_problem
    return [("GPT-42M ln_2: dx_sum", cli_problem("layernorm", 16384, 512, "f32", backward=True, dx_sum=True)),
            ("GPT-42M ln_1: residual, dx_sum",
             cli_problem("layernorm", 16384, 512, "f32", backward=True, residual=True, dx_sum=True)),
            ("GPT-42M ln_f: residual", cli_problem("layernorm", 16384, 512, "f32", backward=True, residual=True)),
            ("Llama-42M: residual", cli_problem("rmsnorm", 16384, 512, "f32", backward=True, residual=True))]


def with_residency(p, s, bps: int, early: tuple, gpu):
    """``s`` with ``bps`` resident CTAs (its register cap, its partials' wave re-tiled) and ``early``."""
    from nova.configurator.derivation import Derivation
    from nova.kernels.rows.derive import partials_tile
    step = int(gpu.reg_alloc_unit) // 32
    cap = min(int(gpu.max_regs_per_thread), int(gpu.regs_per_sm) // (s.row.threads * bps) // step * step)
    grid = bps * gpu.sm_count
    per_cta = -(-(-(-p.rows // s.row.rows_per_cta)) // grid)
    row = dataclasses.replace(s.row, blocks_per_sm=bps, max_regs=cap, grid=grid, early=early)
    return dataclasses.replace(s, row=row, partials=partials_tile(p, grid, per_cta, Derivation(), gpu))


def variants(gpu):
    from nova.kernels.rows.derive import LATE, configure_rows
    out = []
    for label, p in problems():
        s = configure_rows(p, gpu).schedule
        late = tuple(n for n in LATE[p.kind] if p.has(n))
        out.append((label, p, s, "configured"))
        out.append((label, p, dataclasses.replace(s, row=dataclasses.replace(s.row, max_regs=255, early=())),
                    "uncapped"))
        if late and not s.row.early:
            out.append((label, p, with_residency(p, s, s.row.blocks_per_sm - 1, late, gpu), "early, one CTA fewer"))
        elif late:
            out.append((label, p, dataclasses.replace(s, row=dataclasses.replace(s.row, early=())), "late"))
    return out


def build():
    from rows_launch import build_variants
    build_variants(variants, TARGET)


def run(out_path):
    import torch
    from norm_backward import _launchable
    from rows_launch import kernel_times
    from nova.hwmodel import get_target
    from nova.kernels.rows.derive import configure_rows
    gpu = get_target(TARGET)
    rows, reference = [], {}
    for label, p, s, what in variants(gpu):
        torch.manual_seed(0)
        once, t = _launchable(p, s)
        for o in p.outputs:
            t[o.name].fill_(float("nan"))
        once()
        torch.cuda.synchronize()
        dx = t["dx"].clone()
        ok = bool(torch.isfinite(dx).all())
        if what == "configured":
            reference[label] = dx
        per = {k: us for k, us in kernel_times(once).items() if k.startswith("nova_rows")}
        total = sum(per.values())
        rows.append({"problem": label, "describe": p.describe(), "variant": what,
                     "row": {k: getattr(s.row, k) for k in ("blocks_per_sm", "grid", "max_regs", "early")},
                     "kernels_us": {k: round(v, 2) for k, v in per.items()}, "us": round(total, 2),
                     "predicted_us": configure_rows(p, gpu).prediction.time_us if what == "configured" else None,
                     "tb_per_s": round(p.bytes_moved / total / 1e6, 3), "finite": ok,
                     "same_as_configured": None if label not in reference else bool(torch.equal(dx, reference[label]))})
        print(json.dumps(rows[-1]), flush=True)
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    {"build": lambda: build(), "run": lambda: run(sys.argv[2])}[sys.argv[1]]()
