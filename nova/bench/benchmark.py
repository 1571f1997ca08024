"""Nova vs cuBLAS (``torch.matmul``, TF32 on) in one process: ``nova bench gemm`` (needs torch and a GPU).

Per shape: correctness of both on the first input set (poisoned output, float64 reference), then
``settle_s`` seconds of both back to back (power steady state), then CUDA-graph replay (device time
per call: what the cost model predicts), back-to-back and per-call medians and the host cost per
call (``nova.bench.harness``); the configurator's prediction and its error against the graph time.
Writes ``<tag>.csv``, ``<tag>.md`` and ``<tag>.json``.
"""
from __future__ import annotations

import math
import time

from nova.bench.harness import (back_to_back, environment, graph_replay, host_overhead, median_events, nan_output,
                                random_operands, reference, rel_fro, require_torch, settle)
from nova.dtypes import MODES

def bench_case(M, N, K, dtype, *, reps=50, warmup=10, seed=0, l2_bytes=None, settle_s: float = 0.5,
               graph_s: float = 0.3) -> dict:
    """Nova and cuBLAS (torch.matmul) on the same shapes in one process, after ``settle_s`` seconds
    of both back to back (power steady state); graph replay first, while the clock is settled, for
    at least ``graph_s`` seconds each (long enough for the clock samples to see it)."""
    import nova
    from nova.configurator import GemmProblem, configure
    from nova.runtime.matmul import resolve_target
    torch = require_torch()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    props = torch.cuda.get_device_properties(0)
    l2_bytes = l2_bytes or getattr(props, "L2_cache_size", 50 * 2**20)
    set_bytes = (M * K + K * N + M * N) * MODES[dtype].bytes
    n_sets = max(1, min(16, math.ceil(3 * l2_bytes / set_bytes)))     # rotate past L2 for small shapes
    sets = [random_operands(torch, M, N, K, dtype, gen) for _ in range(n_sets)]
    outs = [nan_output(torch, M, N, MODES[dtype].storage) for _ in range(n_sets)]

    def nova_fn(i):
        a, b = sets[i % n_sets]
        nova.matmul(a, b, out=outs[i % n_sets])

    def torch_fn(i):
        a, b = sets[i % n_sets]
        torch.matmul(a, b, out=outs[i % n_sets])

    # correctness on the first set (poisoned output, float64 reference)
    outs[0].fill_(float("nan"))
    nova_fn(0)
    torch.cuda.synchronize()
    ref = reference(torch, *sets[0])
    nova_err = rel_fro(outs[0], ref)
    torch_fn(0)
    torch.cuda.synchronize()
    torch_err = rel_fro(outs[0], ref)

    for i in range(warmup):
        nova_fn(i)
        torch_fn(i)
    torch.cuda.synchronize()
    row = {"M": M, "N": N, "K": K, "dtype": dtype, "input_sets": n_sets, "t_start": time.time()}
    row["settle_calls"] = settle(torch, (nova_fn, torch_fn), settle_s)
    for name, fn in (("nova", nova_fn), ("cublas", torch_fn)):
        row[f"{name}_graph_us"], row[f"{name}_graph_window"] = graph_replay(torch, fn, reps, min_seconds=graph_s)
    for name, fn in (("nova", nova_fn), ("cublas", torch_fn)):
        row[f"{name}_b2b_us"] = back_to_back(torch, fn, reps)
    for name, fn in (("nova", nova_fn), ("cublas", torch_fn)):
        row[f"{name}_us"] = median_events(torch, fn, reps)
        row[f"{name}_host_us"] = host_overhead(torch, fn, min(reps * 4, 400))
    row["t_end"] = time.time()
    flops = 2 * M * N * K
    for name in ("nova", "cublas"):
        row[f"{name}_tflops"] = flops / row[f"{name}_b2b_us"] / 1e6
    row["ratio_vs_cublas"] = row["cublas_b2b_us"] / row["nova_b2b_us"]
    row["graph_ratio_vs_cublas"] = row["cublas_graph_us"] / row["nova_graph_us"]
    cfg = configure(GemmProblem(M, N, K, dtype), resolve_target())
    row["predicted_us"] = cfg.prediction.time_us
    row["predicted_bound"] = cfg.prediction.bound
    row["prediction_error"] = cfg.prediction.time_us / row["nova_graph_us"] - 1     # the model predicts device time
    s = cfg.schedule
    from nova.kernels.gemm.space import label
    row["schedule"] = label(s)
    row["family"] = s.mma.family if s.kernel == "tiles" else s.kernel
    row["nova_error"] = nova_err
    row["cublas_error"] = torch_err
    return row


# ------------------------------------------------------------------------------ suites
BENCH_COLUMNS = ["M", "N", "K", "dtype", "schedule", "nova_us", "cublas_us", "nova_b2b_us", "cublas_b2b_us",
                 "nova_graph_us", "cublas_graph_us", "nova_tflops", "cublas_tflops", "ratio_vs_cublas",
                 "graph_ratio_vs_cublas", "predicted_us", "prediction_error",
                 "nova_host_us", "cublas_host_us", "nova_error", "cublas_error"]


def run_benchmark(shapes, dtypes, *, reps: int = 50, out: str = ".", tag: str = "bench", log=print,
                  settle_s: float = 0.5, graph_s: float = 0.3) -> dict:
    """Benchmark every shape x dtype; write ``<tag>.csv``, ``<tag>.md`` and ``<tag>.json`` under ``out``.
    Returns ``{"environment", "geomean_ratio", "rows"}``."""
    import json
    import os

    import numpy as np
    import pandas as pd
    env = environment()
    rows = []
    first = True
    for dt in dtypes:
        for (m, n, k) in shapes:
            try:     # the first shape settles 4x longer: the GPU comes out of idle at its boost clock
                r = bench_case(m, n, k, dt, reps=reps, settle_s=settle_s * (4 if first else 1), graph_s=graph_s)
                first = False
            except Exception as e:     # reported, and the shape is missing from the table
                log(f"ERROR {m}x{n}x{k} {dt}: {type(e).__name__}: {e}")
                continue
            rows.append(r)
            log(f"{m}x{n}x{k} {dt}: nova {r['nova_tflops']:.1f} TFLOP/s, cuBLAS {r['cublas_tflops']:.1f}, "
                f"ratio {r['ratio_vs_cublas']:.2f}, err {r['nova_error']:.2e}, pred {r['predicted_us']:.1f} us "
                f"vs {r['nova_b2b_us']:.1f} us, host {r['nova_host_us']:.1f} us")
    df = pd.DataFrame(rows, columns=BENCH_COLUMNS) if rows else pd.DataFrame(columns=BENCH_COLUMNS)
    os.makedirs(out, exist_ok=True)
    df.to_csv(os.path.join(out, f"{tag}.csv"), index=False)
    geo = {dt: float(np.exp(np.log(g["ratio_vs_cublas"].astype(float)).mean())) for dt, g in df.groupby("dtype")}
    header = (f"# Nova vs cuBLAS GEMM\n\n{env['device']} ({env['sms']} SMs), torch {env['torch']} (CUDA {env['cuda']}), "
              f"Nova {env['nova']}, {env['date']}. Times in microseconds: median of {reps} runs after warm-up; "
              f"`_us` per call (synchronised), `_b2b_us` back-to-back, `_graph_us` CUDA-graph replay (device time "
              f"per call); each shape timed after {settle_s:g} s of both back to back (power steady state); "
              "TFLOP/s and `ratio_vs_cublas` from back-to-back; `prediction_error` against graph replay. "
              "Geomean Nova/cuBLAS: " + ", ".join(f"{k} {v:.3f}" for k, v in geo.items()) + "\n\n")
    with open(os.path.join(out, f"{tag}.md"), "w") as f:
        f.write(header + df.to_markdown(index=False, floatfmt=".4g") + "\n")
    result = {"environment": env, "geomean_ratio": geo, "rows": rows}
    with open(os.path.join(out, f"{tag}.json"), "w") as f:
        json.dump(result, f, indent=1)
    log(header)
    log(df[["M", "N", "K", "dtype", "nova_tflops", "cublas_tflops", "ratio_vs_cublas", "prediction_error",
            "nova_host_us", "nova_error"]].to_string(index=False))
    return result
