"""Fused attention: the problems the device run needs, their precompilation, and the benchmark.

    python -m nova.bench.attention --precompile --target h200      # host with MLIR: fill $NOVA_CACHE_DIR
    python -m nova.bench.attention --out bench/results/attn          # GPU: Nova fwd+bwd vs torch SDPA backends

Timing: each candidate runs forward + backward; after warm-up, ``--iters`` calls are timed with CUDA
events, and Nova is also timed by CUDA-graph replay (its launcher allocates nothing it cannot
capture): fwd+bwd and each of forward and backward alone (``*_graph_us``), the GPU's time without the
Python launch path, which back-to-back event timing includes when it is slower than the kernels
(on the H200 a T512 forward "takes" 75-144 us by events, by replay far less: bench/results/h200-2026-12-01/c).  torch backends are tried one by one with ``torch.nn.attention.sdpa_kernel`` in the same
process; a backend that refuses a dtype is reported as unsupported.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from unittest import mock

from nova.kernels.attention.problem import AttentionProblem, score_precision_for

# (B, H, T, D) of the benchmark, all causal
BENCH_SHAPES = ((32, 8, 512, 64), (16, 12, 1024, 64), (8, 16, 2048, 128),
                (16, 16, 1024, 128))      # the GPT-42M and GPT-144M shapes, two D128 ones
BENCH_DTYPES = ("tf32", "bf16", "fp16")

# tests/test_attention_gpu.py: (B, H, Hkv, Tq, Tk, D, causal, dtype); T never a multiple of a tile
GPU_TEST_CASES = (
    (2, 3, 3, 77, 77, 64, True, "tf32"),
    (1, 2, 2, 130, 130, 128, False, "tf32"),
    (1, 2, 2, 1, 1, 64, False, "tf32"),
    (2, 2, 2, 200, 200, 64, False, "bf16"),
    (1, 4, 2, 150, 150, 64, True, "bf16"),        # GQA
    (1, 2, 2, 1, 1, 128, True, "bf16"),
    (2, 2, 2, 1, 1, 64, True, "fp16"),
    (1, 3, 1, 300, 300, 128, True, "fp16"),       # GQA (multi-query)
    (1, 2, 2, 50, 190, 64, True, "fp16"),         # Tq != Tk
    (1, 2, 2, 190, 50, 128, False, "bf16"),
    (3, 16, 4, 700, 1000, 64, True, "bf16"),      # GQA, Tq != Tk, 288 work tiles: the persistent forward
    (2, 4, 2, 333, 333, 128, True, "tf32"),       # GQA, D128 TF32: dK/dV with one consumer warpgroup
    (1, 4, 2, 3105, 3105, 64, False, "bf16"),     # the Hopper forward not persistent, D64, a 3-deep ring
    (2, 2, 2, 3, 5632, 128, False, "bf16"),       # decode: forward and dQ split over the keys (split KV)
    (1, 4, 4, 10, 1999, 64, False, "tf32"),       # split KV, the last split's last key tile ragged
    (1, 8, 2, 1, 4100, 64, False, "fp16"),        # split KV, GQA, one query row
    (1, 4, 4, 1700, 1700, 128, False, "tf32"),    # few query tiles: the Hopper forward split over its keys
    (2, 2, 2, 1000, 3001, 64, False, "bf16"),     # the Hopper forward split, its last key tile ragged
    (1, 6, 3, 700, 2100, 128, False, "fp16"),     # the Hopper forward split, GQA
)
MEMORY_CASE = (1, 2, 2, 2048, 2048, 64, True, "bf16")
# 16-bit problems on which the GPU tests compare Nova's error with torch's flash kernel's (Nova's within
# a small multiple of it), sized so that on the H200 the wgmma forward (D128) and dK/dV and dQ run
FLASH_CASES = ((2, 4, 4, 1000, 1000, 64, True, "bf16"), (1, 8, 8, 777, 777, 128, True, "bf16"),
               (2, 4, 4, 1000, 1000, 64, False, "fp16"),
               # more query tiles than SMs: the persistent Hopper forward, ~4 and ~2.5 work tiles per CTA
               (4, 16, 16, 1000, 1000, 64, True, "bf16"), (2, 24, 24, 777, 777, 64, False, "fp16"))
# tests/test_attention_gpu.py's 3xtf32-score cases (B, H, Hkv, Tq, Tk, D, causal): each runs with
# score_precision "tf32" and "3xtf32" on the same large-logit data
SPLIT_SCORE_GPU_CASES = (
    (2, 3, 3, 77, 77, 64, True),
    (1, 4, 2, 130, 130, 128, False),        # GQA
)

# tests/test_attention_gpu.py's strided operands: (B, H, Hkv, Tq, Tk, D, causal, dtype, layout), the
# layouts of ``strided_operands``; T never a multiple of a tile
STRIDED_GPU_CASES = (
    (2, 3, 3, 77, 77, 64, True, "tf32", "fused"),
    (2, 4, 4, 200, 200, 64, False, "bf16", "fused"),
    (1, 4, 2, 150, 150, 64, True, "bf16", "fused"),       # GQA
    (1, 2, 2, 130, 130, 128, False, "tf32", "fused"),
    (2, 2, 2, 100, 100, 128, True, "fp16", "fused"),
    (1, 4, 2, 50, 190, 64, True, "tf32", "separate"),    # GQA, Tq != Tk
    (1, 3, 3, 70, 70, 64, False, "bf16", "padded"),       # strides the kernels cannot address: copies
    (4, 12, 12, 600, 600, 64, True, "bf16", "fused"),     # 240 work tiles: the persistent forward, in place
)
TORCH_DTYPE = {"tf32": "float32", "3xtf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def score_precision(name: str):
    """Within the block, FP32 attention problems state ``name`` (``$NOVA_ATTENTION_PRECISION``, which
    ``nova.attention`` reads): the benchmark's "3xtf32" rows time the split score product."""
    return mock.patch.dict(os.environ, {"NOVA_ATTENTION_PRECISION": name})


def problem_of(case, stated: bool = False) -> AttentionProblem:
    """The problem of a case as ``nova.attention`` states it (TF32: the default score precision,
    ``score_precision_for``), or, ``stated``, as its dtype label says: "tf32" single-TF32 scores,
    "3xtf32" the split score product (the benchmark's rows), "fp32" every product split."""
    b, h, hkv, tq, tk, d, causal, dtype = case[:8]
    if dtype in ("3xtf32", "fp32"):
        dtype, precision = "tf32", dtype
    else:
        precision = "tf32" if stated else score_precision_for(dtype)
    return AttentionProblem(b, h, tq, tk, d, causal=causal, dtype=dtype, kv_heads=hkv, score_precision=precision)


def strided_operands(case, torch, device="meta", generator=None) -> dict:
    """The operands of a strided case as views: q, k, v, dout (random unless on the meta device) and
    out, dq, dk, dv (uninitialised), with ``buffers``: every tensor they view.  Layouts:

    * ``fused``: q, k, v head-transposed views of one projection ``[B, T, H + 2*Hkv, D]`` (a GPT's qkv,
      Tq = Tk); dout of ``[B, Tq, H*D]`` (the output projection's gradient); out of ``[B, Tq, H, D]``; dq,
      dk, dv of one gradient ``[B, T, H + 2*Hkv, D]``.
    * ``separate``: q (and dout, out, dq) of ``[B, Tq, H, D]``, k and v (dk and dv) of one ``[B, Tk, 2, Hkv, D]``.
    * ``padded``: each operand the ``[..., :D]`` slice of its own ``[B, H|Hkv, T, D + 1]``: a row of D + 1
      elements is no multiple of 16 bytes, so the launcher copies every operand (and back for outputs)."""
    b, h, hkv, tq, tk, d, _, dtype, layout = case
    dt = getattr(torch, TORCH_DTYPE[dtype])

    def new(*shape, random=False):
        if random and device != "meta":
            return torch.randn(*shape, device=device, dtype=dt, generator=generator)
        return torch.empty(*shape, device=device, dtype=dt)

    bufs = []

    def keep(x):
        bufs.append(x)
        return x

    out = {}
    for grads in (False, True):
        names = ("dq", "dk", "dv") if grads else ("q", "k", "v")
        if layout == "fused":
            x = keep(new(b, tq, h + 2 * hkv, d, random=not grads))
            parts = (x[:, :, :h], x[:, :, h:h + hkv], x[:, :, h + hkv:])
        elif layout == "separate":
            kv = keep(new(b, tk, 2, hkv, d, random=not grads))
            parts = (keep(new(b, tq, h, d, random=not grads)), kv[:, :, 0], kv[:, :, 1])
        else:
            parts = [keep(new(b, n, t, d + 1, random=not grads))[..., :d].transpose(1, 2)
                     for t, n in ((tq, h), (tk, hkv), (tk, hkv))]
        out.update({n: x.transpose(1, 2) for n, x in zip(names, parts)})
    for name, random in (("dout", True), ("out", False)):
        if layout == "fused" and name == "dout":
            out[name] = keep(new(b, tq, h * d, random=True)).view(b, tq, h, d).transpose(1, 2)
        elif layout == "padded":
            out[name] = keep(new(b, h, tq, d + 1, random=random))[..., :d]
        else:
            out[name] = keep(new(b, tq, h, d, random=random)).transpose(1, 2)
    out["buffers"] = bufs
    return out


def strided_kernels(case) -> list:
    """``(AttentionProblem, roles)`` the launcher resolves for a strided case (its forward, its backward)."""
    import torch
    from nova.kernels.attention.launch import plan_operands
    t = strided_operands(case, torch)
    causal = case[6]
    fwd, _ = plan_operands(t["q"], t["k"], t["v"], causal, out=t["out"])
    bwd, _ = plan_operands(t["q"], t["k"], t["v"], causal, **{n: t[n] for n in ("out", "dout", "dq", "dk", "dv")})
    return [(fwd, ("fwd",)), (bwd, ("bwd_pre", "bwd_dkv", "bwd_dq"))]


def bench_problems(dtypes=BENCH_DTYPES + ("3xtf32",)):
    return [problem_of((b, h, h, t, t, d, True, dt), stated=True) for (b, h, t, d) in BENCH_SHAPES for dt in dtypes]


def all_problems():
    split = [problem_of(c + (dt,), stated=True) for c in SPLIT_SCORE_GPU_CASES for dt in ("tf32", "3xtf32", "fp32")]
    return bench_problems() + [problem_of(c) for c in GPU_TEST_CASES + (MEMORY_CASE,) + FLASH_CASES] + split


def all_kernels() -> list:
    """``(problem, roles)`` of every kernel the device run needs: the benchmark's and the GPU tests'."""
    from nova.kernels.attention.schedule import ROLES
    out = [(p, ROLES) for p in all_problems()] + [e for c in STRIDED_GPU_CASES for e in strided_kernels(c)]
    return list(dict.fromkeys(out))


def hopper_mode(mode: str):
    """Within the block, ``$NOVA_ATTENTION_HOPPER`` = ``mode`` ("auto", "off", "force"): which forward
    ``nova.attention`` configures on sm_90 (``NOVA_ATTENTION_HOPPER``)."""
    return mock.patch.dict(os.environ, {"NOVA_ATTENTION_HOPPER": mode})


def hopper_cases() -> list:
    """tests/test_attention_gpu.py's cases run again with the Hopper forward forced (the model leaves
    small problems such as T = 1 on mma.sync): (case, strided).  TF32 included: its kernels transpose
    the B operands of the register-A products in shared memory (V^T; K^T; Q^T and dO^T)."""
    return [(c, False) for c in GPU_TEST_CASES] + [(c, True) for c in STRIDED_GPU_CASES]


def mode_kernels() -> list:
    """``(problem, roles, mode)`` the device run needs under another ``$NOVA_ATTENTION_HOPPER``: every
    kernel of the forced-Hopper GPU tests ("force": the schedule, so every key, differs), the
    benchmark's mma.sync kernels ("off": the forward and backward A/B of ``_time_nova``) and its TF32
    kernels forced onto wgmma (bench/probes/attention_kernel_times.py under "force")."""
    from nova.kernels.attention.schedule import ROLES
    out = []
    for case, strided in hopper_cases():
        entries = strided_kernels(case) if strided else [(problem_of(case), ROLES)]
        out += [(p, roles, "force") for p, roles in entries]
    out += [(p, ROLES, "off") for p in bench_problems(("tf32", "bf16", "fp16"))]     # forward and backward A/B
    out += [(p, ROLES, "force") for p in bench_problems(("tf32",))]     # TF32's kernel times with every kernel on wgmma
    return list(dict.fromkeys(out))


def precompile(target: str, jobs: int = 2) -> int:
    """Compile every kernel the device run needs into the kernel cache ($NOVA_CACHE_DIR); print resources."""
    from concurrent.futures import ProcessPoolExecutor
    entries = [(p, roles, None) for p, roles in all_kernels()] + mode_kernels()
    with ProcessPoolExecutor(jobs) as ex:
        results = list(ex.map(_precompile_one, [(p, roles, target, mode) for p, roles, mode in entries]))
    bad = 0
    for (p, _, mode), rows in zip(entries, results):
        for role, key, status, res in rows:
            spill = res.get("spill_store_bytes", 0) + res.get("spill_load_bytes", 0)
            bad += spill > 0
            print(f"{status:8s} {key[:10]} {p.for_role(role).describe()} [{role}{f' hopper={mode}' if mode else ''}] regs {res.get('registers')} spill {spill} "
                  f"smem {res.get('smem_bytes')}", flush=True)
    print(f"{sum(len(r) for r in results)} kernels, {bad} with spills")
    return 1 if bad else 0


def _precompile_one(args):
    p, roles, target, mode = args
    from nova.hwmodel import get_target
    from nova.kernels.attention.compile import get_or_compile
    from nova.kernels.attention.derive import configure_attention
    gpu = get_target(target)
    if mode is None:
        s = configure_attention(p, gpu).schedule
    else:
        with hopper_mode(mode):
            s = configure_attention(p, gpu).schedule
    out = []
    for role in s.with_combines(roles):           # a split kernel's combine too
        art, key, status = get_or_compile(p, s, role, gpu, offline=False)
        out.append((role, key, status, {k: v for k, v in art.resources.items() if k != "ptxas_info"}))
    return out


# ---------------------------------------------------------------------------------------- timing


def event_time_us(fn, iters, warmup=3):
    """Microseconds per call of ``fn``: ``warmup`` calls, then ``iters`` back to back between two CUDA events."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3 / iters


def _time_graph(fn, iters):
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return event_time_us(g.replay, iters)


def bench_one(B, H, T, D, dtype, iters):
    import torch
    torch.manual_seed(0)
    dt = getattr(torch, TORCH_DTYPE[dtype])
    q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt) for _ in range(4))
    torch.backends.cuda.matmul.allow_tf32 = False
    row = {"shape": f"B{B}.H{H}.T{T}.D{D}", "dtype": dtype, "causal": True}
    with score_precision("3xtf32" if dtype == "3xtf32" else "tf32"):
        _time_nova(row, q, k, v, do, iters)
    _time_torch(row, q, k, v, do, iters)
    return row


def _time_nova(row, q, k, v, do, iters):
    import torch
    import torch.nn.functional as F
    import nova
    out, lse = nova.attention(q, k, v, causal=True)
    buf = {}

    def nova_step():
        o, l_ = nova.attention(q, k, v, causal=True)
        buf["g"] = nova.attention_backward(do, q, k, v, o, l_, causal=True)
    fwd = lambda: nova.attention(q, k, v, causal=True)
    bwd = lambda: nova.attention_backward(do, q, k, v, out, lse, causal=True)

    def both(tag):
        row[f"nova_fwd{tag}_us"] = event_time_us(fwd, iters)
        row[f"nova_bwd{tag}_us"] = event_time_us(bwd, iters)
        for name, fn in (("fwd", fwd), ("bwd", bwd)):
            try:
                row[f"nova_{name}{tag}_graph_us"] = _time_graph(fn, iters)
            except Exception as e:                           # report, do not hide
                row[f"nova_{name}{tag}_graph_error"] = f"{type(e).__name__}: {e}"[:200]
    both("")
    if not (q.dtype == torch.float32 and score_precision_for("tf32") == "3xtf32"):   # 3xtf32: mma.sync only
        with hopper_mode("off"):         # the A/B: the mma.sync kernels of the same problem
            nova.attention(q, k, v, causal=True)
            both("_mma_sync")
    row["nova_us"] = event_time_us(nova_step, iters)
    try:
        row["nova_graph_us"] = _time_graph(nova_step, iters)
    except Exception as e:                                   # report, do not hide
        row["nova_graph_error"] = f"{type(e).__name__}: {e}"[:200]
    qr, kr, vr = (x.detach().clone().requires_grad_() for x in (q, k, v))
    ref = F.scaled_dot_product_attention(qr, kr, vr, is_causal=True)
    ref.backward(do)
    gn = buf["g"]
    row["max_err_out"] = float((out.float() - ref.float()).abs().max())
    row["max_err_dq"] = float((gn[0].float() - qr.grad.float()).abs().max())
    if q.dtype == torch.float32:         # the score product's accuracy: LSE against float64
        s = (q.double() @ k.double().transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), float("-inf"))
        row["max_err_lse"] = float((lse.double() - torch.logsumexp(s, dim=-1)).abs().max())
        del s


def _time_torch(row, q, k, v, do, iters):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)):
        qa, ka, va = (x.detach().clone().requires_grad_() for x in (q, k, v))

        def step():
            o = F.scaled_dot_product_attention(qa, ka, va, is_causal=True)
            o.backward(do)
        try:
            with sdpa_kernel([be]):
                row[f"torch_{name}_us"] = event_time_us(step, max(3, iters // 4) if name == "math" else iters)
        except Exception as e:
            row[f"torch_{name}_us"] = None
            row[f"torch_{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    torch_times = [row[f"torch_{n}_us"] for n in ("flash", "cudnn", "efficient", "math") if row.get(f"torch_{n}_us")]
    best = min(torch_times) if torch_times else None
    nova_best = min(x for x in (row["nova_us"], row.get("nova_graph_us")) if x)
    row["speedup_vs_best_torch"] = best / nova_best if best else None


def run(out_dir: str, dtypes, iters: int) -> int:
    import torch
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    for (B, H, T, D) in BENCH_SHAPES:
        for dt in dtypes:
            t0 = time.time()
            r = bench_one(B, H, T, D, dt, iters)
            rows.append(r)
            ts = "  ".join(f"{n} {r.get(f'torch_{n}_us') or float('nan'):.0f}" for n in ("flash", "cudnn", "efficient", "math"))
            g = lambda key: r.get(key) or float("nan")
            print(f"{r['shape']:18s} {dt:5s} nova fwd {g('nova_fwd_graph_us'):.0f} bwd {g('nova_bwd_graph_us'):.0f} "
                  f"(mma.sync {g('nova_fwd_mma_sync_graph_us'):.0f} / {g('nova_bwd_mma_sync_graph_us'):.0f}; graph "
                  f"replay) fwd+bwd {r['nova_us']:.0f} "
                  f"(graph {r.get('nova_graph_us') or float('nan'):.0f}) us | torch {ts} | x{r['speedup_vs_best_torch'] or 0:.2f} "
                  f"vs best | err out {r['max_err_out']:.2e} dq {r['max_err_dq']:.2e} ({time.time() - t0:.0f}s)", flush=True)
    with open(os.path.join(out_dir, "attention_bench.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 0


def arguments(prog: str, jobs: int) -> argparse.ArgumentParser:
    """The options of the attention benchmarks (this one and ``attention_variants``): the host
    precompiles with ``jobs`` processes, the device times ``--iters`` calls into ``--out``."""
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--precompile", action="store_true", help="host: compile every needed kernel into the cache")
    ap.add_argument("--jobs", type=int, default=jobs)
    ap.add_argument("--out", default="bench/results/attention")
    ap.add_argument("--iters", type=int, default=20)
    return ap


def main(argv=None) -> int:
    ap = arguments("python -m nova.bench.attention", jobs=2)
    ap.add_argument("--target", default="h200")
    ap.add_argument("--dtypes", default="tf32,bf16")
    a = ap.parse_args(argv)
    if a.precompile:
        return precompile(a.target, a.jobs)
    return run(a.out, a.dtypes.split(","), a.iters)


if __name__ == "__main__":
    sys.exit(main())
