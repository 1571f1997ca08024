"""Long rows kept in registers by a lone CTA, timed against the schedule that leaves room for two: the
rows kernels whose row, kept in a thread's registers, lets only one CTA an SM be resident (a CTA of
512 threads per 16384-wide f32 or 32768-wide bf16 row; 256 threads at 255 registers for a bf16 norm
backward at 8192), under

- ``min_resident 1``: the row in registers wherever one CTA's registers hold it (the rule as it was);
- ``min_resident 2``: the row in registers only where two CTAs an SM hold it; else the kind's passes,
  each re-reading the row (from L2), and a norm backward's weight/bias gradients in the column stage.

With one CTA an SM nothing overlaps a CTA's phases: its loads, its reductions (shuffles, shared
memory, barriers), its exponentials and its stores run back to back.  The bf16 cross-entropy of the
HF GPT-2 step (16384 x 32768, loss and gradient in one kernel) ran 1172 us against 655 predicted on
the H100, where the f32 one of GPT-42M (8192 x 32768, the same bytes, two passes) ran 727
(bench/results/h100-2026-12-05/run60).

The HF loss keeps one schedule now (its 16-bit dlogits counted, the kept row passes one 512-thread
CTA's registers too: passes either way); run 60's step measured its old in-register side.

Each kernel's CUPTI duration over 30 launches, inputs random, outputs NaN-poisoned; the outputs of
the two sides compared (largest difference relative to the largest magnitude).

    python3 bench/probes/rows_residency.py build          # host: both sides into $NOVA_CACHE_DIR
    python3 bench/probes/rows_residency.py run OUT.json   # device (NOVA_OFFLINE=1)
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

TARGET = os.environ.get("NOVA_TARGET", "h100")


def problems():
    from nova.kernels.rows import cli_problem
    return [("HF GPT-2 loss (bf16)", cli_problem("cross_entropy", 16384, 32768, "bf16", forward_backward=True)),
            ("cross-entropy f32 16384", cli_problem("cross_entropy", 8192, 16384, "f32", forward_backward=True)),
            ("softmax f32 16384", cli_problem("softmax", 8192, 16384, "f32")),
            ("log_softmax backward bf16 16384", cli_problem("log_softmax", 8192, 16384, "bf16", backward=True)),
            ("layernorm bf16 32768", cli_problem("layernorm", 8192, 32768, "bf16")),
            ("rmsnorm f32 16384", cli_problem("rmsnorm", 8192, 16384, "f32")),
            ("layernorm backward f32 16384", cli_problem("layernorm", 8192, 16384, "f32", backward=True)),
            ("layernorm backward bf16 8192", cli_problem("layernorm", 8192, 8192, "bf16", backward=True))]


def variants(gpu):
    from nova.kernels.rows.derive import configure_rows
    out = []
    for label, p in problems():
        seen = []
        for least in (1, 2):
            s = configure_rows(p, gpu, min_resident=least).schedule
            if s not in seen:
                seen.append(s)
                out.append((label, p, s, f"min_resident {least}"))
    return out


def build():
    from rows_launch import build_variants
    build_variants(variants, TARGET)


def run(out_path):
    import torch
    from rows_launch import kernel_times, launchable, random_operands
    from nova.hwmodel import get_target
    from nova.kernels.rows.derive import configure_rows
    from nova.runtime.cache import NotPrecompiledError
    gpu = get_target(TARGET)
    rows, first = [], {}
    for label, p, s, what in variants(gpu):
        t = random_operands(p)
        try:
            once = launchable(p, s, t)
        except NotPrecompiledError as e:           # a variant built on other code: the others still run
            print(f"{label} {what}: skipped, {str(e).split(';')[0]}", flush=True)
            continue
        once()
        torch.cuda.synchronize()
        outs = {o.name: t[o.name].float().clone() for o in p.outputs}
        finite = all(bool(torch.isfinite(v).all()) for v in outs.values())
        diff = None
        if label in first:
            diff = max(float((outs[k] - v).abs().max() / v.abs().max().clamp_min(1e-30)) for k, v in first[label].items())
        else:
            first[label] = outs
        per = {k: us for k, us in kernel_times(once).items() if k.startswith("nova_rows")}
        total = sum(per.values())
        least = int(what.split()[-1])
        rows.append({"problem": label, "describe": p.describe(), "variant": what,
                     "row": {k: getattr(s.row, k) for k in ("threads", "in_registers", "blocks_per_sm", "grid",
                                                              "max_regs", "early")},
                     "roles": list(s.roles), "kernels_us": {k: round(v, 2) for k, v in per.items()},
                     "us": round(total, 2), "predicted_us": configure_rows(p, gpu, min_resident=least).prediction.time_us,
                     "tb_per_s": round(p.bytes_moved / total / 1e6, 3), "finite": finite, "rel_diff_vs_first": diff})
        print(json.dumps(rows[-1]), flush=True)
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    {"build": lambda: build(), "run": lambda: run(sys.argv[2])}[sys.argv[1]]()
