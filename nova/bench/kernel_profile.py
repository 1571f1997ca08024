"""Per-kernel device time of ``nova.matmul`` calls (CUPTI through torch.profiler), next to the cost
model's terms: where a call's time goes when it launches several kernels (operand-prep passes,
split-K's memset) or when the model misses it.

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m nova.bench.kernel_profile \
        --shapes 2047x2049x511,3000x5000x700:NT --dtypes bf16 --out $OUT

A shape may carry its layout, ``:NN`` (the default), ``:NT`` (B transposed) or ``:TN`` (A transposed),
as the held-out draws state it (``nova.bench.heldout.LAYOUTS``).

Each shape runs ``--reps`` calls back to back after a warm-up (fresh random inputs); the table
lists every kernel the profiler saw during those calls (name, calls, mean device microseconds)
and the model's prediction for the call.  ``--flush-l2 MB`` writes a buffer of that many MB before
every call (its fill kernel is listed too): the operands come from DRAM, as a layer's weights do in
a step, instead of from the L2 the previous call left them in.  Writes ``kernel_profile.json``
(``kernel_profile-flush.json`` with ``--flush-l2``) under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from nova.bench.harness import random_operands, require_torch


LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False)}    # name: (trans_a, trans_b)


def parse_shape(text: str) -> tuple[int, int, int, bool, bool]:
    """``"MxNxK[:NN|NT|TN]"`` -> (M, N, K, trans_a, trans_b); ValueError naming the text otherwise."""
    dims, _, layout = text.strip().partition(":")
    try:
        M, N, K = (int(x) for x in dims.lower().split("x"))
    except ValueError:
        raise ValueError(f"shape {text!r}: expected MxNxK[:NN|NT|TN]") from None
    layout = layout.upper() or "NN"
    if layout not in LAYOUTS:
        raise ValueError(f"shape {text!r}: layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    return (M, N, K, *LAYOUTS[layout])


def profile_shape(torch, M, N, K, dtype, reps: int, trans_a: bool = False, trans_b: bool = False,
                  flush_mb: int = 0) -> dict:
    import nova
    from nova.configurator import GemmProblem, configure
    from nova.kernels.gemm.space import label
    from nova.runtime.matmul import resolve_target
    gen = torch.Generator(device="cuda").manual_seed(M * 31 + N * 7 + K)
    a, b = random_operands(torch, M, N, K, dtype, gen, trans_a, trans_b)
    out = torch.empty((M, N), device="cuda", dtype=a.dtype)
    scratch = torch.empty(flush_mb << 20, device="cuda", dtype=torch.uint8) if flush_mb else None
    for _ in range(5):
        nova.matmul(a, b, out=out)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            if scratch is not None:
                scratch.fill_(1)
            nova.matmul(a, b, out=out)
        torch.cuda.synchronize()
    kernels = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        if e.count and us:
            kernels.append({"name": e.key[:80], "calls": e.count, "mean_us": us / e.count})
    cfg = configure(GemmProblem(M, N, K, dtype, trans_a, trans_b), resolve_target())
    return {"M": M, "N": N, "K": K, "dtype": dtype, "trans_a": trans_a, "trans_b": trans_b, "flush_mb": flush_mb,
            "schedule": label(cfg.schedule),
            "predicted_us": cfg.prediction.time_us, "calibrated_us": cfg.calibrated_time_us,
            "terms_us": cfg.prediction.terms_us, "kernels": kernels}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True, help="comma-separated MxNxK[:NN|NT|TN]")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--flush-l2", type=int, default=0, metavar="MB",
                    help="write a buffer of MB megabytes before every call (operands from DRAM, not L2); 0: off")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args(argv)
    if args.flush_l2 < 0:
        ap.error(f"--flush-l2 {args.flush_l2}: megabytes to write before every call, 0 or more")
    try:
        shapes = [(text, parse_shape(text)) for text in args.shapes.split(",")]
    except ValueError as e:
        ap.error(str(e))
    torch = require_torch()
    rows = []
    for dt in args.dtypes.split(","):
        for shape, (M, N, K, trans_a, trans_b) in shapes:
            try:
                r = profile_shape(torch, M, N, K, dt, args.reps, trans_a, trans_b, args.flush_l2)
            except Exception as e:     # reported; the other shapes still run
                print(f"ERROR {shape} {dt}: {type(e).__name__}: {e}", flush=True)
                continue
            rows.append(r)
            cal = f"{r['calibrated_us']:.1f}" if r["calibrated_us"] else "-"
            print(f"{shape} {dt} {r['schedule']}: model {r['predicted_us']:.1f} us, calibrated {cal} us; terms "
                  + ", ".join(f"{k} {v:.1f}" for k, v in r["terms_us"].items() if v), flush=True)
            for k in r["kernels"]:
                print(f"    {k['mean_us']:9.2f} us x{k['calls']:<4d} {k['name']}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    name = f"kernel_profile{'-flush' if args.flush_l2 else ''}.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
