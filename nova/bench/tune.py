"""Exhaustive tuning (the oracle): precompile a schedule space, then time it on the device.

Host (MLIR, no GPU): ``precompile_space`` enumerates ``nova.kernels.gemm.space`` for each problem,
in one instruction family (default: the one the configurator picks, wgmma on Hopper), compiles every
candidate into the kernel cache (the cache key hashes the schedule, so every candidate has its own
entry) and returns a *manifest*: per problem, the family, each candidate's schedule, cache key,
predicted time (the family's cost model) and ptxas resources, and the bytes it adds to the cache.

Device (GPU, cache only): ``load_schedule`` loads the artifact of an *explicit* schedule from the
cache (``resolve_kernel`` without the configurator; a Hopper artifact launches through
``nova.runtime.tma.HopperGemm``); ``tune_problem`` checks every candidate against
float64 on fresh data with a NaN-poisoned output, then times it with CUDA events: ``warmup``
launches, then ``reps`` launches each bracketed by its own pair of events, queued behind a
``torch.cuda._sleep`` so host launch gaps never show; the median in microseconds.  Inputs rotate
over sets larger than L2 for small shapes, as ``nova.bench.benchmark`` does for Nova-vs-cuBLAS.

Oracle row per problem: the analytic pick's time, the best candidate's, ``ratio = best_us /
pick_us`` (1.0: the pick is the best; 0.5: the best is twice as fast), the pick's 1-based rank
among the correct candidates, and every candidate's time.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from nova.bench.harness import TOLERANCE, nan_output, random_bias, random_operands, reference, rel_fro
from nova.dtypes import torch_dtype
from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.gemm.schedule import Schedule

MANIFEST_FORMAT = "nova-tune-manifest/1"
ORACLE_FORMAT = "nova-oracle/1"
HOST_OVERHEAD_S = 0.05         # per candidate on the device: module load, fresh data, float64 check [EST]
MEASURED_OVER_PREDICTED = 1.7  # kernels take ~1.6x the prediction: measured on the H200, bench/results/h200-v0.1


# =========================================================================== host: precompile
def _compile_entry(job: tuple) -> dict:
    """Compile one candidate into the cache (runs in a worker process); returns its manifest entry."""
    from nova.kernels.gemm.space import label, predict_schedule
    from nova.hwmodel import get_target
    from nova.kernels.gemm.family import get_or_compile
    from nova.runtime.cache import KernelCache

    problem_d, schedule_d, target_name, cache_root, is_pick = job
    problem, schedule = GemmProblem(**problem_d), Schedule.from_dict(schedule_d)
    target = get_target(target_name)
    cache = KernelCache(cache_root)
    entry = {"label": label(schedule), "is_pick": is_pick, "schedule": schedule_d,
             "predicted_us": predict_schedule(problem, schedule, target).time_us}
    t0 = time.perf_counter()
    try:
        artifact, key, status = get_or_compile(problem, schedule, target, cache, offline=False)
    except Exception as e:       # one candidate that fails to compile is recorded, not fatal
        return {**entry, "status": "failed", "error": f"{type(e).__name__}: {e}"[:500]}
    res = artifact.resources or {}
    return {**entry, "status": status, "key": key, "compile_s": time.perf_counter() - t0,
            "registers": res.get("registers"), "spill_bytes": res.get("spill_store_bytes", 0),
            "ptx_bytes": len(artifact.ptx), "cubin_bytes": len(artifact.cubin or b""),
            "entry_bytes": cache.path_for(key).stat().st_size}


def precompile_space(problems: list[GemmProblem], target, cache_root: str, limit: int | None = None,
                     strategy: str = "mixed", jobs: int = 1, progress=None, family: str | None = None) -> dict:
    """Enumerate, subsample (``limit``) and compile every candidate of every problem; the manifest.
    ``family``: "wgmma" or "mma.sync"; None = the family the configurator picks for each problem."""
    from nova.kernels.gemm.space import analytic_pick, schedule_space, subsample
    from nova.hwmodel import get_target
    import nova

    gpu = get_target(target)
    plan = []
    for p in problems:
        pick = analytic_pick(p, gpu, family)
        full = schedule_space(p, gpu, pick)
        chosen = full if limit is None else subsample(p, gpu, full, pick, limit, strategy)
        plan.append((p, len(full), pick, chosen))
    jobs_list = [(p.to_dict(), s.to_dict(), gpu.name, str(cache_root), s == pick)
                 for p, _, pick, chosen in plan for s in chosen]
    if progress:
        progress.start(len(jobs_list))
    results = []
    if jobs > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for r in pool.map(_compile_entry, jobs_list, chunksize=4):
                results.append(r)
                progress and progress.advance(r)
    else:
        for j in jobs_list:
            results.append(_compile_entry(j))
            progress and progress.advance(results[-1])
    out, i = [], 0
    for p, size, pick, chosen in plan:
        cands = results[i:i + len(chosen)]
        i += len(chosen)
        out.append({"problem": p.to_dict(), "describe": p.describe(), "family": pick.mma.family,
                    "space_size": size, "candidates": cands})
    manifest = {"format": MANIFEST_FORMAT, "target": gpu.name, "arch": gpu.arch, "nova": nova.__version__,
                "created": time.strftime("%Y-%m-%d %H:%M:%S"), "family": family, "limit": limit,
                "strategy": strategy, "cache_dir": str(cache_root), "problems": out}
    manifest["summary"] = manifest_summary(manifest)
    return manifest


def manifest_summary(manifest: dict) -> dict:
    """Counts, bytes per kernel, and an estimate of the device run's duration."""
    cands = [c for p in manifest["problems"] for c in p["candidates"]]
    ok = [c for c in cands if c["status"] != "failed"]
    sizes = [c["entry_bytes"] for c in ok]
    return {"problems": len(manifest["problems"]), "candidates": len(cands), "failed": len(cands) - len(ok),
            "spilling": sum(1 for c in ok if c.get("spill_bytes")),
            "cache_bytes": sum(sizes), "entry_bytes_mean": statistics.mean(sizes) if sizes else 0,
            "ptx_bytes_mean": statistics.mean(c["ptx_bytes"] for c in ok) if ok else 0,
            "cubin_bytes_mean": statistics.mean(c["cubin_bytes"] for c in ok) if ok else 0,
            "device_seconds_estimate": estimate_device_seconds(manifest)}


def estimate_device_seconds(manifest: dict, reps: int = 20, warmup: int = 5) -> float:
    """sum over candidates of (warmup + reps + 1 check) x predicted time x 1.7 + 50 ms host work."""
    total = 0.0
    for p in manifest["problems"]:
        for c in p["candidates"]:
            if c["status"] != "failed":
                total += (warmup + reps + 1) * c["predicted_us"] * 1e-6 * MEASURED_OVER_PREDICTED + HOST_OVERHEAD_S
    return total


# =========================================================================== device: load and time
def load_schedule(problem: GemmProblem, schedule: Schedule, target, cache=None, device=None):
    """The kernel of ``problem`` with an explicit ``schedule``, from the cache (never compiles):
    ``nova.runtime.matmul.resolve_kernel`` without the configurator.  Returns a ``ResolvedKernel``."""
    from nova.runtime import driver
    from nova.kernels.gemm.family import get_or_compile
    from nova.runtime.matmul import load_resolved

    device = device or driver.get_device()
    artifact, key, status = get_or_compile(problem, schedule, target, cache, offline=True)
    return load_resolved(problem, target, schedule, artifact, key, status, device)


class _Data:
    """Input sets for timing (rotated past L2 for small shapes) and fresh data for the check."""

    def __init__(self, torch, problem: GemmProblem, seed: int = 0, l2_bytes: int | None = None):
        self.torch, self.p = torch, problem
        gen = torch.Generator(device="cuda").manual_seed(seed)
        l2 = l2_bytes or getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)
        p = problem
        set_bytes = (p.M * p.K + p.K * p.N) * p.in_bytes + p.M * p.N * p.out_bytes
        self.n_sets = max(1, min(8, math.ceil(3 * l2 / set_bytes)))
        self.sets = [(*random_operands(torch, p.M, p.N, p.K, p.dtype, gen, p.trans_a, p.trans_b),
                      problem_bias(torch, p, gen)) for _ in range(self.n_sets)]
        self.outs = [nan_output(torch, p.M, p.N, p.out_dtype) for _ in range(self.n_sets)]


def problem_bias(torch, problem: GemmProblem, gen):
    """``harness.random_bias`` for ``problem`` (None without a bias)."""
    return random_bias(torch, problem.N, torch_dtype(torch, problem.dtype), gen) if problem.bias else None


def _launch(resolved, a, b, bias, c, stream: int) -> None:
    resolved.run(a.data_ptr(), b.data_ptr(), c.data_ptr(), None if bias is None else bias.data_ptr(), stream)


def release_workspaces(resolved) -> None:
    """Free a Hopper candidate's operand-prep workspaces once it is timed (``HopperGemm.release``):
    hundreds of candidates cannot keep them for the process.  The caller synchronises first."""
    if resolved.hopper is not None:
        resolved.hopper.release()
    if resolved.skinny is not None:
        resolved.skinny.release()


def check_candidate(torch, resolved, problem: GemmProblem, seed: int) -> tuple[bool, float]:
    """Fresh random inputs, NaN-poisoned output, relative Frobenius error vs float64."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    p = problem
    a, b = random_operands(torch, p.M, p.N, p.K, p.dtype, gen, p.trans_a, p.trans_b)
    bias = problem_bias(torch, p, gen)
    out = nan_output(torch, p.M, p.N, p.out_dtype)
    _launch(resolved, a, b, bias, out, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    err = rel_fro(out, reference(torch, a, b, bias, p.activation))
    return (not math.isnan(err) and err <= TOLERANCE[p.dtype]), err


def time_candidate(torch, resolved, data: _Data, reps: int = 20, warmup: int = 5) -> float:
    """Median over ``reps`` launches of the event-bracketed GPU time, microseconds."""
    stream = torch.cuda.current_stream().cuda_stream
    n = data.n_sets
    for i in range(warmup):
        _launch(resolved, *data.sets[i % n], data.outs[i % n], stream)
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(2e6))        # ~1 ms of GPU spin: the host queues the launches meanwhile
    for i in range(reps):
        starts[i].record()
        _launch(resolved, *data.sets[i % n], data.outs[i % n], stream)
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def tune_problem(torch, entry: dict, target, cache, reps: int = 20, warmup: int = 5, advance=None,
                 rounds: int = 3) -> dict:
    """Check and time every candidate of one manifest entry; the oracle row.

    Timing runs in ``rounds`` passes over all candidates, each pass starting at a different
    candidate (rotated order), and keeps each candidate's fastest per-pass median: a candidate timed
    right after the problem's setup (the first of a pass) measured up to 2.7x slow in the first
    wgmma oracle (v0.5), whatever it was; rotating makes no candidate always first."""
    problem = GemmProblem(**entry["problem"])
    data = _Data(torch, problem)
    t0 = time.perf_counter()
    timed, loaded = [], {}
    for i, c in enumerate(entry["candidates"]):
        row = {"label": c["label"], "is_pick": c["is_pick"], "predicted_us": c["predicted_us"],
               "key": c.get("key"), "registers": c.get("registers"), "spill_bytes": c.get("spill_bytes"),
               "us": None, "us_rounds": []}
        if c["status"] == "failed":
            row.update(ok=False, error=None, failure="compile: " + c["error"])
        else:
            try:
                resolved = load_schedule(problem, Schedule.from_dict(c["schedule"]), target, cache)
                ok, err = check_candidate(torch, resolved, problem, seed=1000 + i)
                row.update(ok=ok, error=err, failure="" if ok else "wrong result")
                loaded[i] = resolved
            except Exception as e:   # recorded per candidate: the oracle must finish
                row.update(ok=False, error=None, failure=f"{type(e).__name__}: {e}"[:300])
        timed.append(row)
    order = sorted(loaded)
    for r in range(rounds):
        shift = (r * len(order)) // max(1, rounds)
        for i in order[shift:] + order[:shift]:
            try:
                timed[i]["us_rounds"].append(time_candidate(torch, loaded[i], data, reps, warmup))
            except Exception as e:
                timed[i].update(ok=False, failure=f"{type(e).__name__}: {e}"[:300])
    for i, resolved in loaded.items():
        if timed[i]["us_rounds"]:
            timed[i]["us"] = min(timed[i]["us_rounds"])
        release_workspaces(resolved)
    for _ in timed if advance else ():
        advance()
    del data
    return oracle_row(problem, entry, timed, time.perf_counter() - t0)


def oracle_row(problem: GemmProblem, entry: dict, timed: list[dict], tune_s: float) -> dict:
    """Summary of one problem: pick vs best among the correct candidates."""
    good = sorted((c for c in timed if c["ok"] and c["us"] is not None), key=lambda c: c["us"])
    pick = next((c for c in timed if c["is_pick"]), None)
    best = good[0] if good else None
    pick_ok = pick is not None and pick["ok"] and pick["us"] is not None
    rank = 1 + sum(1 for c in good if c["us"] < pick["us"]) if pick_ok else None
    return {"M": problem.M, "N": problem.N, "K": problem.K, "dtype": problem.dtype, "describe": problem.describe(),
            "family": entry.get("family", "mma.sync"), "space_size": entry.get("space_size"),
            "candidates": len(timed), "correct": len(good),
            "pick_schedule": pick["label"] if pick else None, "pick_us": pick["us"] if pick_ok else None,
            "pick_predicted_us": pick["predicted_us"] if pick else None,
            "best_schedule": best["label"] if best else None, "best_us": best["us"] if best else None,
            "ratio": best["us"] / pick["us"] if pick_ok and best else None, "pick_rank": rank,
            "tune_s": tune_s, "timed": timed}


def cpu_count() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


# =========================================================================== the `nova tune` command
def run_precompile_cli(problems, target, cache_root, limit, strategy, jobs, manifest_path, family=None) -> int:
    """``nova tune gemm ... --exhaustive``: precompile with a progress bar, write the manifest, summarise."""
    import json
    import sys
    from pathlib import Path
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    class _Bar:
        def __init__(self, bar):
            self.bar, self.task = bar, None

        def start(self, total):
            self.task = self.bar.add_task("compiling candidates", total=total)

        def advance(self, entry):
            self.bar.update(self.task, advance=1, description=f"{entry['label']:28s} {entry['status']:8s}")

    start = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=not sys.stdout.isatty()) as bar:
        manifest = precompile_space(problems, target, str(cache_root), limit, strategy, jobs, _Bar(bar), family)
    path = Path(manifest_path) if manifest_path else Path(cache_root) / "tune-manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=1))
    s = manifest["summary"]
    for entry in manifest["problems"]:
        failed = sum(1 for c in entry["candidates"] if c["status"] == "failed")
        print(f"{entry['describe']}: {len(entry['candidates'])} of {entry['space_size']} {entry['family']} schedules"
              + (f", {failed} FAILED" if failed else ""))
    print(f"{s['candidates']} candidates for {s['problems']} problems on {manifest['target']} in "
          f"{time.perf_counter() - start:.1f} s: {s['failed']} failed, {s['spilling']} spill; cache entries "
          f"{s['cache_bytes'] / 2**20:.1f} MB ({s['entry_bytes_mean'] / 1024:.1f} KB per kernel: PTX "
          f"{s['ptx_bytes_mean'] / 1024:.1f} KB + cubin {s['cubin_bytes_mean'] / 1024:.1f} KB, JSON/base64); "
          f"estimated device run {s['device_seconds_estimate']:.0f} s")
    print(f"manifest: {path}")
    return 1 if s["failed"] else 0
