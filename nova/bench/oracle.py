"""The oracle on the device: time every precompiled candidate schedule, compare the analytic pick.

Host (MLIR, no GPU), e.g. the suite with 16 candidates per problem of the family the configurator
picks (wgmma on the H200; ``--family mma.sync`` for the Ampere-class kernel):

    nova tune gemm --suite bench/suites/oracle.txt --target h200 --dtype tf32,bf16 --exhaustive \
        --limit 16 --jobs 2 --cache-dir .nova-cache --manifest .nova-cache/tune-manifest.json

Device (GPU, offline from the carried cache):

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m nova.bench.oracle \
        --manifest .nova-cache/tune-manifest.json --out $OUT

Per candidate: correctness on fresh data with a NaN-poisoned output vs float64, then the median of
``--reps`` event-timed launches after ``--warmup`` (``nova.bench.tune``).  Writes ``oracle.json``
(environment, method, per-problem rows with every candidate's time) and ``oracle.csv`` (one row per
problem), prints the geomean of best/pick per dtype and the worst shape.  ``--budget-s`` stops
before a problem that would start past the budget (skipped problems are listed, not hidden).
``--inductor N`` also measures torch.compile(mode="max-autotune") on the first N problems: its
compile+autotune time and its kernel time, against Nova's configuration time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from nova import options
from nova.bench.harness import environment, geomean, random_operands, require_torch
from nova.bench.tune import ORACLE_FORMAT, tune_problem

CSV_COLUMNS = ["M", "N", "K", "dtype", "family", "space_size", "candidates", "correct", "pick_schedule", "pick_us",
               "pick_predicted_us", "best_schedule", "best_us", "ratio", "pick_rank", "config_ms", "tune_s",
               "inductor_compile_s", "inductor_us"]


def config_ms(problem, target, family: str) -> float:
    """Nova's configuration time for ``problem`` in ``family``: median of 5 ``configure`` calls, ms."""
    from nova.configurator import configure
    return statistics.median(configure(problem, target, family=family).config_time_ms for _ in range(5))


def inductor(torch, problem, reps: int = 20) -> tuple[float, float]:
    """torch.compile(mode="max-autotune") on ``a @ b``: (compile + autotune seconds, kernel us)."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    a, b = random_operands(torch, problem.M, problem.N, problem.K, problem.dtype, gen)
    torch._dynamo.reset()
    fn = torch.compile(lambda x, y: x @ y, mode="max-autotune", dynamic=False)
    t0 = time.perf_counter()
    fn(a, b)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(a, b)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return compile_s, statistics.median(times)


class _PlainBar:
    """Stand-in for rich's progress bar where rich is not installed (a bare torch image)."""

    class console:
        print = staticmethod(lambda *a, **k: print(*a, flush=True))

    def __init__(self):
        self.done, self.total = 0, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def add_task(self, description, total):
        self.total = total
        return 0

    def update(self, task, advance=0, description=None):
        self.done += advance
        if description:
            print(f"[{self.done}/{self.total}] {description}", flush=True)


def progress_bar():
    try:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    except ImportError:
        return _PlainBar()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default=os.path.join(options.current().cache_dir or ".nova-cache",
                                                       "tune-manifest.json"))
    ap.add_argument("--reps", type=int, default=20, help="timed launches per candidate (median; >= 20)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="timing passes over the candidates in rotated order "
                                                          "(each candidate keeps its fastest pass)")
    ap.add_argument("--budget-s", type=float, default=170.0, help="do not start a problem after this many seconds")
    ap.add_argument("--inductor", type=int, default=0, help="also time Inductor max-autotune on the first N problems")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tag", default="oracle")
    args = ap.parse_args(argv)
    if args.reps < 20:
        ap.error("--reps must be at least 20")

    import pandas as pd
    from nova.kernels.gemm.problem import GemmProblem
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache

    manifest = json.load(open(args.manifest))
    target = get_target(manifest["target"])
    cache = KernelCache(options.current().cache_dir or manifest.get("cache_dir"))
    torch = require_torch()
    env = environment()
    total = sum(len(p["candidates"]) for p in manifest["problems"])
    rows, skipped = [], []
    start = time.perf_counter()
    with progress_bar() as bar:
        task = bar.add_task("oracle", total=total)
        for i, entry in enumerate(manifest["problems"]):
            if time.perf_counter() - start > args.budget_s:
                skipped.append(entry["describe"])
                bar.update(task, advance=len(entry["candidates"]))
                continue
            bar.update(task, description=entry["describe"])
            problem = GemmProblem(**entry["problem"])
            row = tune_problem(torch, entry, target, cache, args.reps, args.warmup,
                               advance=lambda: bar.update(task, advance=1), rounds=args.rounds)
            row["config_ms"] = config_ms(problem, target, row["family"])
            row["inductor_compile_s"] = row["inductor_us"] = None
            if i < args.inductor:
                try:
                    row["inductor_compile_s"], row["inductor_us"] = inductor(torch, problem)
                except Exception as e:      # recorded: Inductor may be unavailable for a dtype
                    row["inductor_error"] = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
            r = row
            bar.console.print(f"{r['describe']}: pick {r['pick_schedule']} {r['pick_us'] or float('nan'):.1f} us, "
                              f"best {r['best_schedule']} {r['best_us'] or float('nan'):.1f} us, "
                              f"ratio {r['ratio'] or float('nan'):.3f}, rank {r['pick_rank']}/{r['correct']}")
    by_dtype = {}
    for r in rows:
        by_dtype.setdefault(r["dtype"], []).append(r["ratio"])
    valid = [r for r in rows if r["ratio"] is not None]
    worst = min(valid, key=lambda r: r["ratio"]) if valid else None
    summary = {"geomean_ratio": {dt: geomean(v) for dt, v in by_dtype.items()},
               "geomean_ratio_all": geomean(r["ratio"] for r in rows),
               "worst": {k: worst[k] for k in ("describe", "ratio", "pick_schedule", "best_schedule", "pick_us",
                                               "best_us")} if worst else None,
               "problems": len(rows), "skipped": skipped, "wall_s": time.perf_counter() - start}
    method = {"reps": args.reps, "warmup": args.warmup, "rounds": args.rounds,
              "timing": "median of per-launch CUDA event pairs, launches queued behind torch.cuda._sleep, inputs "
              "rotated past L2; each candidate keeps its fastest of `rounds` passes (candidate order rotated per pass)",
              "check": "fresh randn data per candidate, NaN-poisoned output, rel. Frobenius error vs float64",
              "ratio": "best_us / pick_us (1 = the analytic pick is the fastest candidate)",
              "manifest": {k: manifest.get(k) for k in ("family", "limit", "strategy", "created", "nova")}}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{args.tag}.json"), "w") as f:
        json.dump({"format": ORACLE_FORMAT, "environment": env, "target": target.name, "method": method,
                   "summary": summary, "rows": rows}, f, indent=1)
    df = pd.DataFrame(rows).reindex(columns=CSV_COLUMNS)
    df.to_csv(os.path.join(args.out, f"{args.tag}.csv"), index=False)
    print(df[["M", "N", "K", "dtype", "pick_us", "best_us", "ratio", "pick_rank", "candidates"]].to_string(index=False))
    print("geomean best/pick: " + ", ".join(f"{k} {v:.3f}" for k, v in summary["geomean_ratio"].items())
          + (f"; worst {worst['describe']} {worst['ratio']:.3f} (pick {worst['pick_schedule']}, best "
             f"{worst['best_schedule']})" if worst else "") + (f"; SKIPPED {len(skipped)} (budget)" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
