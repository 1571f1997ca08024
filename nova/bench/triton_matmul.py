"""Triton's matmul with Nova's one configuration vs Triton autotuned over a usual list vs cuBLAS
(needs a GPU, torch and triton; run on the device):

    python3 -m nova.bench.triton_matmul --suite bench/suites/perf.txt --dtype bf16,tf32 --out DIR

Per shape and dtype, three ways of getting ``C = A @ B`` (A [M, K], B [K, N] row-major, C in the
inputs' storage, FP32 accumulation):

* ``nova``: one Triton kernel launched with ``nova.integrations.triton.triton_config`` (the
  configurator's schedule mapped to ``BLOCK_M/N/K``, ``GROUP_M``, ``num_warps``, ``num_stages``);
* ``autotune``: the same kernel source under ``triton.autotune`` over ``USUAL_CONFIGS`` (keyed on
  M, N, K: each shape is tuned on its first call);
* ``cublas``: ``torch.matmul`` (TF32 allowed for tf32).

Measured: the time to the first result (wall seconds from the first call to a synchronised result:
Nova's configuration and Triton's compilation of one kernel; the autotuner's compilation and timing
of every config; cuBLAS's first call), each result's relative Frobenius error against a float64
reference on fresh random data (outputs NaN-poisoned first; a TF32 result also passes when it
reproduces the product of its TF32-rounded inputs, ``nova.bench.harness``), and the steady TFLOP/s
(CUDA-graph replay after ``--settle-s`` seconds of all three back to back).  Triton's kernel cache
starts empty (a fresh ``TRITON_CACHE_DIR``) so the first shape pays the compiles; the two Triton
variants are separate ``JITFunction``s of one source, so the autotuner's first compile of a config
Nova already compiled may hit Triton's disk cache.

Writes ``triton-matmul.json`` (rows and environment) and ``triton-matmul.md`` into ``--out`` after
every shape (a run cut short keeps what it measured); ``--budget-s`` stops before a shape that
would start after that many seconds.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

# (BLOCK_M, BLOCK_N, BLOCK_K for 16-bit inputs, num_warps, num_stages): an autotuning list of the
# kind Triton users start from (square and rectangular tiles, 2-8 warps, 3-5 stages), plus the
# large Hopper tiles; BLOCK_K is halved for FP32 inputs (the same bytes per stage)
USUAL_TILES = ((128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
               (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 2, 5), (32, 64, 32, 2, 5),
               (128, 256, 64, 8, 4), (256, 128, 64, 8, 3), (128, 128, 64, 8, 4))
USUAL_GROUP_M = 8


def usual_configs(dtype: str) -> list[dict]:
    """``USUAL_TILES`` as config dicts (``{"kwargs", "num_warps", "num_stages"}``) for ``dtype``."""
    out, seen = [], set()
    for bm, bn, bk, warps, stages in USUAL_TILES:
        bk = bk // 2 if dtype == "tf32" else bk
        key = (bm, bn, bk, warps, stages)
        if key not in seen:
            seen.add(key)
            out.append({"kwargs": {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": USUAL_GROUP_M},
                        "num_warps": warps, "num_stages": stages})
    return out


def _kernels(triton):
    """(plain kernel, autotuned kernels by dtype): JITFunctions of one kernel source."""
    import triton.language as tl

    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                      INPUT_PRECISION: tl.constexpr):
        # one C tile per program: tiles rasterized in groups of GROUP_M tile rows (L2 reuse), K walked
        # in BLOCK_K steps (masked at the edge), FP32 accumulation, C stored in its own element type
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(M, BLOCK_M)
        tiles_n = tl.cdiv(N, BLOCK_N)
        per_group = GROUP_M * tiles_n
        first_m = (pid // per_group) * GROUP_M
        rows_in_group = min(tiles_m - first_m, GROUP_M)
        tile_m = first_m + (pid % per_group) % rows_in_group
        tile_n = (pid % per_group) // rows_in_group
        rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
        ks = tl.arange(0, BLOCK_K)
        a_tile = a_ptr + (rows % M)[:, None] * stride_am + ks[None, :] * stride_ak
        b_tile = b_ptr + ks[:, None] * stride_bk + (cols % N)[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for step in range(0, tl.cdiv(K, BLOCK_K)):
            left = K - step * BLOCK_K
            a = tl.load(a_tile, mask=ks[None, :] < left, other=0.0)
            b = tl.load(b_tile, mask=ks[:, None] < left, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
            a_tile += BLOCK_K * stride_ak
            b_tile += BLOCK_K * stride_bk
        c_tile = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
        tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))

    plain = triton.jit(matmul_kernel)
    tuned = {}
    for dtype in ("tf32", "bf16", "fp16"):
        configs = [triton.Config(c["kwargs"], num_warps=c["num_warps"], num_stages=c["num_stages"])
                   for c in usual_configs(dtype)]
        tuned[dtype] = triton.autotune(configs=configs, key=["M", "N", "K"])(triton.jit(matmul_kernel))
    return plain, tuned


def _config_text(kwargs: dict, warps, stages) -> str:
    return f"{kwargs['BLOCK_M']}x{kwargs['BLOCK_N']}x{kwargs['BLOCK_K']} g{kwargs['GROUP_M']} w{warps} s{stages}"


def bench_shape(torch, triton, kernels, M, N, K, dtype, target, *, seed: int, settle_s: float, graph_s: float) -> dict:
    from nova.bench.harness import graph_replay, nan_output, random_operands, reference, rel_fro, settle, tf32_round
    from nova.dtypes import ELEMENT_TYPES, MODES
    from nova.integrations.triton import distance, triton_config
    plain, tuned = kernels[0], kernels[1][dtype]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b = random_operands(torch, M, N, K, dtype, gen)
    outs = {name: nan_output(torch, M, N, MODES[dtype].storage) for name in ("nova", "autotune", "cublas")}
    precision = "tf32" if dtype == "tf32" else None
    flops = 2 * M * N * K
    row = {"M": M, "N": N, "K": K, "dtype": dtype, "target": target}

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    args = lambda c: (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))  # noqa: E731
    config = {}

    def nova_fn(i=0):
        if not config:
            c = triton_config(M, N, K, dtype, target)
            config.update(kwargs=c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages, object=c)
        plain[grid](*args(outs["nova"]), **config["kwargs"], INPUT_PRECISION=precision,
                    num_warps=config["num_warps"], num_stages=config["num_stages"])

    def autotune_fn(i=0):
        tuned[grid](*args(outs["autotune"]), INPUT_PRECISION=precision)

    def cublas_fn(i=0):
        torch.matmul(a, b, out=outs["cublas"])

    fns = {"nova": nova_fn, "autotune": autotune_fn, "cublas": cublas_fn}
    ref = reference(torch, a, b)
    ref_q = reference(torch, tf32_round(torch, a), tf32_round(torch, b)) if dtype == "tf32" else ref
    tolerance, exact = MODES[dtype].tolerance, ELEMENT_TYPES[MODES[dtype].storage].exact_tolerance
    working = {}
    for name, fn in fns.items():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as e:       # recorded, not hidden (a config Triton cannot build, say)
            row[f"{name}_failure"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            continue
        row[f"{name}_first_result_s"] = round(time.perf_counter() - t0, 4)
        nan_count = int(torch.isnan(outs[name]).sum().item())
        err = rel_fro(outs[name], ref) if not nan_count else math.nan
        err_q = rel_fro(outs[name], ref_q) if not nan_count else math.nan
        row[f"{name}_error"] = err
        row[f"{name}_ok"] = bool(not nan_count and (err <= tolerance or err_q <= exact))
        working[name] = fn
    if config:
        row["nova_config"] = _config_text(config["kwargs"], config["num_warps"], config["num_stages"])
        row["nova_notes"] = list(config["object"].notes)
    best = getattr(tuned, "best_config", None)
    if best is not None:
        row["autotune_config"] = _config_text(best.kwargs, best.num_warps, best.num_stages)
        if config:
            row["autotune_distance_from_nova"] = round(distance(best, config["object"]), 3)
    del ref, ref_q
    settle(torch, list(working.values()), settle_s)
    for name, fn in working.items():
        reps = max(1, min(200, int(2e-3 / max(flops / 500e12, 1e-7))))    # ~2 ms of work per graph replay
        us, _ = graph_replay(torch, fn, reps, min_seconds=graph_s)
        row[f"{name}_us"] = round(us, 2)
        row[f"{name}_tflops"] = round(flops / us / 1e6, 1)
    return row


def markdown(rows: list[dict], env: dict) -> str:
    lines = [f"# Triton matmul: Nova's config vs autotuned vs cuBLAS ({env.get('device', '?')}, triton "
             f"{env.get('triton', '?')}, {env.get('date', '')})", "",
             "| shape | dtype | Nova config | autotuned pick | first result s (nova / autotune / cuBLAS) | "
             "TFLOP/s nova | TFLOP/s autotune | TFLOP/s cuBLAS | nova / autotune | all ok |",
             "|---|---|---|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        first = " / ".join(f"{r.get(f'{n}_first_result_s', math.nan):.2f}" for n in ("nova", "autotune", "cublas"))
        tf = [r.get(f"{n}_tflops", math.nan) for n in ("nova", "autotune", "cublas")]
        ratio = tf[0] / tf[1] if tf[1] and not math.isnan(tf[1]) else math.nan
        ok = all(r.get(f"{n}_ok", False) for n in ("nova", "autotune", "cublas"))
        lines.append(f"| {r['M']}x{r['N']}x{r['K']} | {r['dtype']} | {r.get('nova_config', r.get('nova_failure', '-'))} "
                     f"| {r.get('autotune_config', r.get('autotune_failure', '-'))} | {first} | {tf[0]:.1f} | "
                     f"{tf[1]:.1f} | {tf[2]:.1f} | {ratio:.3f} | {'yes' if ok else 'NO'} |")
    from nova.bench.harness import geomean
    for dtype in sorted({r["dtype"] for r in rows}):
        sub = [r for r in rows if r["dtype"] == dtype]
        ratios = [r.get("nova_tflops", math.nan) / r["autotune_tflops"] for r in sub if r.get("autotune_tflops")]
        vs_cublas = [r.get("nova_tflops", math.nan) / r["cublas_tflops"] for r in sub if r.get("cublas_tflops")]
        first = [(r.get("nova_first_result_s", math.nan), r.get("autotune_first_result_s", math.nan)) for r in sub]
        lines += ["", f"{dtype}: Nova's config at {geomean(ratios):.3f}x the autotuned pick's TFLOP/s and "
                      f"{geomean(vs_cublas):.3f}x cuBLAS's (geometric means over {len(sub)} shapes); time to first "
                      f"result {sum(f[0] for f in first if not math.isnan(f[0])):.1f} s with Nova's config, "
                      f"{sum(f[1] for f in first if not math.isnan(f[1])):.1f} s autotuning"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nova.bench.triton_matmul", description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="bench/suites/perf.txt", help="shape suite (default bench/suites/perf.txt)")
    ap.add_argument("--shapes", default=None, help="comma-separated MxNxK shapes instead of --suite")
    ap.add_argument("--dtype", default="bf16,tf32", help="comma-separated: tf32, bf16, fp16 (default bf16,tf32)")
    ap.add_argument("--target", default=None, help="Nova's target (default: the GPU's preset, NOVA_TARGET)")
    ap.add_argument("--out", default="bench/results/triton-matmul", help="output directory")
    ap.add_argument("--settle-s", type=float, default=0.5, help="seconds of all three back to back before timing")
    ap.add_argument("--graph-s", type=float, default=0.2, help="seconds of CUDA-graph replay per method")
    ap.add_argument("--budget-s", type=float, default=540.0, help="start no shape after this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="nova-triton-cache-"))
    from nova.bench.harness import environment, require_torch
    from nova.cli.shapes import parse_shape_list, read_suite
    torch = require_torch()
    import triton
    from nova.runtime.matmul import resolve_target
    target = resolve_target(args.target).name
    shapes = parse_shape_list(args.shapes) if args.shapes else read_suite(args.suite)
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    env = {**environment(), "triton": triton.__version__, "target": target,
           "triton_cache_dir": os.environ["TRITON_CACHE_DIR"]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kernels = _kernels(triton)
    rows, start = [], time.perf_counter()
    for dtype in dtypes:
        for M, N, K in shapes:
            if time.perf_counter() - start > args.budget_s:
                print(f"budget of {args.budget_s:.0f} s spent: stopping before {M}x{N}x{K} {dtype}", flush=True)
                break
            row = bench_shape(torch, triton, kernels, M, N, K, dtype, target, seed=args.seed,
                              settle_s=args.settle_s, graph_s=args.graph_s)
            rows.append(row)
            print(json.dumps(row), flush=True)
            (out / "triton-matmul.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
            (out / "triton-matmul.md").write_text(markdown(rows, env))
    print(markdown(rows, env))
    return 0 if all(r.get(f"{n}_ok", False) for r in rows for n in ("nova", "autotune", "cublas")) else 1


if __name__ == "__main__":
    sys.exit(main())
