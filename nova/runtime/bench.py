"""Device measurements: correctness sweep and Nova-vs-cuBLAS timing (needs torch and a GPU).

Method (bench/NOTES.md, DEVELOPERS.md): fresh random inputs for every check (never zeros), the
output poisoned with NaN before Nova runs, relative Frobenius error against a float64 reference;
timing with CUDA events after warm-up, median of many runs, rotating input sets larger than L2 for
small shapes; per-call (synchronised, launch latency included), back-to-back (launch-overlapped) and
CUDA-graph replay (device time per call: the host's issue rate no longer bounds short kernels)
timing, and the host-side cost of one ``nova.matmul`` call.

Every shape is timed under sustained load: the H200 leaves idle at its 1980 MHz boost clock and
takes a second or so to settle where its 700 W cap holds it (~1400-1500 MHz for heavy GEMMs, up to
1980 MHz for light ones), so a shape timed right after a pause measured up to ~25% faster than the
same kernel timed later (bench/NOTES.md, v0.6).  Each shape first runs both libraries back to back
for ``settle_s`` seconds.
"""
from __future__ import annotations

import math
import platform
import statistics
import time

TOLERANCE = {"tf32": 5e-4, "bf16": 1e-2, "fp16": 1e-2}
TORCH_DTYPE = {"tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _torch():
    from nova.runtime.driver import NoGPUError
    try:
        import torch
    except ImportError:
        raise NoGPUError("benchmarks compare against torch.matmul, and torch is not installed") from None
    if not torch.cuda.is_available():
        raise NoGPUError("torch sees no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = True     # cuBLAS TF32, the reference point
    torch.backends.cudnn.allow_tf32 = True
    return torch


def environment() -> dict:
    torch = _torch()
    import nova
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "nova": nova.__version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d")}


def rel_fro(c, ref) -> float:
    torch = _torch()
    c64 = c.to(torch.float64)
    if torch.isnan(c64).any():
        return math.nan
    den = torch.linalg.norm(ref).item()
    num = torch.linalg.norm(c64 - ref).item()
    return num / den if den > 0 else num


def _inputs(torch, M, N, K, dtype, gen, trans_a=False, trans_b=False):
    tdt = getattr(torch, TORCH_DTYPE[dtype])
    a = torch.randn((K, M) if trans_a else (M, K), device="cuda", generator=gen).to(tdt)
    b = torch.randn((N, K) if trans_b else (K, N), device="cuda", generator=gen).to(tdt)
    return (a.T if trans_a else a), (b.T if trans_b else b)


def check_case(M, N, K, dtype, *, seed, bias=False, activation="none", trans_a=False, trans_b=False) -> dict:
    """One correctness check: fresh random data, NaN-poisoned output, float64 reference."""
    import nova
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b = _inputs(torch, M, N, K, dtype, gen, trans_a, trans_b)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=a.dtype)
    bias_t = torch.randn(N, device="cuda", generator=gen).to(a.dtype) if bias else None
    row = {"M": M, "N": N, "K": K, "dtype": dtype, "trans_a": trans_a, "trans_b": trans_b, "bias": bias,
           "activation": activation}
    try:
        nova.matmul(a, b, out=out, bias=bias_t, activation=activation)
        torch.cuda.synchronize()
    except Exception as e:   # recorded, not hidden: the sweep fails on any error
        return {**row, "error": math.nan, "nan_count": -1, "ok": False, "failure": f"{type(e).__name__}: {e}"}
    ref = a.to(torch.float64) @ b.to(torch.float64)
    if bias:
        ref = ref + bias_t.to(torch.float64)
    ref = _activation(torch, ref, activation)
    nan_count = int(torch.isnan(out).sum().item())
    err = rel_fro(out, ref) if nan_count == 0 else math.nan
    # The same product on the inputs as the tensor cores see them (TF32 round-to-nearest; bf16/fp16
    # inputs are exact): what is left is accumulation and output rounding only.
    qa, qb = (tf32_round(torch, a), tf32_round(torch, b)) if dtype == "tf32" else (a, b)
    ref_q = qa.to(torch.float64) @ qb.to(torch.float64)
    if bias:
        ref_q = ref_q + bias_t.to(torch.float64)
    err_q = rel_fro(out, _activation(torch, ref_q, activation)) if nan_count == 0 else math.nan
    ok = nan_count == 0 and (err <= TOLERANCE[dtype] or err_q <= EXACT_INPUT_TOLERANCE[problem_out(dtype)])
    if nan_count:
        failure = f"{nan_count} outputs never written (NaN)"
    elif ok:
        failure = "" if err <= TOLERANCE[dtype] else "accepted: cancellation (error is the inputs' TF32 rounding)"
    else:
        failure = "error above tolerance"
    return {**row, "error": err, "error_vs_rounded_inputs": err_q, "nan_count": nan_count, "ok": ok,
            "failure": failure}


# An error above TOLERANCE passes only if the kernel reproduces the exact product of its rounded
# inputs this closely (happens for tiny outputs with cancellation, e.g. 1x1x127: |c| << ||a||*||b||).
EXACT_INPUT_TOLERANCE = {"f32": 1e-4, "bf16": 1e-2, "f16": 2e-3}


def problem_out(dtype: str) -> str:
    return {"tf32": "f32", "bf16": "bf16", "fp16": "f16"}[dtype]


def tf32_round(torch, x):
    """cvt.rna.tf32.f32 emulation: round the 13 low mantissa bits to nearest, ties away from zero."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32).reshape(x.shape)


def _activation(torch, x, name):
    if name == "relu":
        return torch.relu(x)
    if name == "gelu":
        return torch.nn.functional.gelu(x, approximate="tanh")
    if name == "silu":
        return torch.nn.functional.silu(x)
    return x


# ------------------------------------------------------------------------------ timing
def _median_events(torch, fn, reps: int) -> float:
    """Per-call: each call synchronised and bracketed by events (includes launch latency). Median, us."""
    times = []
    for i in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def _back_to_back(torch, fn, reps: int, rounds: int = 5) -> float:
    """Launch-overlapped: ``reps`` calls queued between two events; median over rounds of the mean, us."""
    means = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(reps):
            fn(i)
        end.record()
        end.synchronize()
        means.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(means)


def _graph_replay(torch, fn, reps: int, rounds: int = 5, min_seconds: float = 0.0) -> tuple[float, tuple]:
    """Device time per call: ``reps`` calls captured in one CUDA graph, replayed back to back (~50 ms
    of replays, at most 16, queued between synchronisations) until at least ``rounds`` replays and ``min_seconds``
    of wall time; the median over replays of the mean per call, us, and the (start, end) wall-clock
    window of the timed replays (to join with clock samples).  The calls are warmed up on the
    capture stream first (Nova keeps per-stream plans and per-pointer tensor maps; capture must
    not allocate)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(reps):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(reps):
            fn(i)
    t_replay = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    t_replay = time.perf_counter() - t_replay
    chunk = max(1, min(16, int(0.05 / max(t_replay, 1e-6))))    # ~50 ms queued per synchronisation
    means, t0 = [], time.time()
    while len(means) < rounds or time.time() - t0 < min_seconds:
        events = []
        for _ in range(chunk):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            events.append((start, end))
        events[-1][1].synchronize()
        means += [a.elapsed_time(b) * 1e3 / reps for a, b in events]
    window = (t0, time.time())
    del graph
    return statistics.median(means), window


def _settle(torch, fns, seconds: float) -> int:
    """Run ``fns`` round-robin, back to back, for ``seconds`` of wall time (synchronising every few
    milliseconds so the queue stays short): the GPU reaches the clock it holds under sustained load
    before anything is timed.  Returns the number of calls."""
    torch.cuda.synchronize()
    t_end, calls = time.perf_counter() + seconds, 0
    while time.perf_counter() < t_end:
        for _ in range(8):
            for fn in fns:
                fn(calls)
            calls += 1
        torch.cuda.synchronize()
    return calls


def _host_overhead(torch, fn, reps: int = 200) -> float:
    """Host-side microseconds per call (no synchronisation inside the loop)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(reps):
        fn(i)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / reps * 1e6


def bench_case(M, N, K, dtype, *, reps=50, warmup=10, seed=0, l2_bytes=None, settle_s: float = 0.5,
               graph_s: float = 0.3) -> dict:
    """Nova and cuBLAS (torch.matmul) on the same shapes in one process, after ``settle_s`` seconds
    of both back to back (power steady state); graph replay first, while the clock is settled, for
    at least ``graph_s`` seconds each (long enough for the clock samples to see it)."""
    import nova
    from nova.configurator import GemmProblem, configure
    from nova.runtime.matmul import resolve_target
    torch = _torch()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    props = torch.cuda.get_device_properties(0)
    l2_bytes = l2_bytes or getattr(props, "L2_cache_size", 50 * 2**20)
    elt = {"tf32": 4, "bf16": 2, "fp16": 2}[dtype]
    set_bytes = (M * K + K * N + M * N) * elt
    n_sets = max(1, min(16, math.ceil(3 * l2_bytes / set_bytes)))     # rotate past L2 for small shapes
    sets = [_inputs(torch, M, N, K, dtype, gen) for _ in range(n_sets)]
    outs = [torch.full((M, N), float("nan"), device="cuda", dtype=sets[0][0].dtype) for _ in range(n_sets)]

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
    ref = sets[0][0].to(torch.float64) @ sets[0][1].to(torch.float64)
    nova_err = rel_fro(outs[0], ref)
    torch_fn(0)
    torch.cuda.synchronize()
    torch_err = rel_fro(outs[0], ref)

    for i in range(warmup):
        nova_fn(i)
        torch_fn(i)
    torch.cuda.synchronize()
    row = {"M": M, "N": N, "K": K, "dtype": dtype, "input_sets": n_sets, "t_start": time.time()}
    row["settle_calls"] = _settle(torch, (nova_fn, torch_fn), settle_s)
    for name, fn in (("nova", nova_fn), ("cublas", torch_fn)):
        row[f"{name}_graph_us"], row[f"{name}_graph_window"] = _graph_replay(torch, fn, reps, min_seconds=graph_s)
    for name, fn in (("nova", nova_fn), ("cublas", torch_fn)):
        row[f"{name}_b2b_us"] = _back_to_back(torch, fn, reps)
    for name, fn in (("nova", nova_fn), ("cublas", torch_fn)):
        row[f"{name}_us"] = _median_events(torch, fn, reps)
        row[f"{name}_host_us"] = _host_overhead(torch, fn, min(reps * 4, 400))
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
    from nova.configurator.space import label
    row["schedule"] = label(s)
    row["family"] = s.mma.family
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
