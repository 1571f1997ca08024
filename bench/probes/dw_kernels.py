"""What cuBLAS, XLA and Nova launch for the BF16 weight-gradient GEMMs (A stored [K, M], K = 16384) and
GPT-144M's BF16 LM head: every kernel's name, grid, block, registers, shared memory and mean device
time (CUPTI through torch.profiler's trace), so the deep-K gap (Nova's dW time against cuBLAS's) can
be placed between the GEMM kernel, the split-K reduction and the launch structure.

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache NOVA_TARGET=h200 python3 bench/probes/dw_kernels.py OUT.json

With ``--ncu`` it runs one shape per library once (for ``ncu --clock-control none`` around it).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import torch

import nova
from nova.bench.harness import random_operands

SHAPES = [  # M, N, K, trans_a, trans_b
    (512, 512, 16384, True, False), (512, 2048, 16384, True, False), (2048, 512, 16384, True, False),
    (1536, 512, 16384, True, False), (768, 768, 16384, True, False), (768, 3072, 16384, True, False),
    (3072, 768, 16384, True, False), (2304, 768, 16384, True, False), (16384, 50304, 768, False, True),
]


def kernels_of(fn, reps: int) -> list[dict]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("cat") == "kernel"]
    by_name: dict[str, dict] = {}
    for e in events:
        a = e.get("args", {})
        row = by_name.setdefault(e["name"], {"name": e["name"], "calls": 0, "total_us": 0.0,
                                             "grid": a.get("grid"), "block": a.get("block"),
                                             "registers": a.get("registers per thread"),
                                             "smem": a.get("shared memory"),
                                             "blocks_per_sm": a.get("blocks per SM")})
        row["calls"] += 1
        row["total_us"] += e["dur"]
    for row in by_name.values():
        row["mean_us"] = row.pop("total_us") / reps
    return sorted(by_name.values(), key=lambda r: -r["mean_us"])


def xla_fn(M, N, K, ta, tb, a, b):
    import jax
    import jax.numpy as jnp
    from nova.bench.train_gemms import xla_gemm
    f = xla_gemm(jax, ta, tb)
    ja = jnp.asarray(a.T.contiguous().cpu().float().numpy() if ta else a.contiguous().cpu().float().numpy(), dtype=jnp.bfloat16)
    jb = jnp.asarray(b.T.contiguous().cpu().float().numpy() if tb else b.contiguous().cpu().float().numpy(), dtype=jnp.bfloat16)
    return lambda: f(ja, jb).block_until_ready()


def main() -> int:
    out_path = sys.argv[1]
    only = os.environ.get("DW_ONLY")           # "MxNxK": one shape
    libs = os.environ.get("DW_LIBS", "cublas,nova").split(",")
    reps = int(os.environ.get("DW_REPS", "20"))
    rows = []
    for M, N, K, ta, tb in SHAPES:
        if only and only != f"{M}x{N}x{K}":
            continue
        gen = torch.Generator(device="cuda").manual_seed(M + N + K)
        a, b = random_operands(torch, M, N, K, "bf16", gen, ta, tb)
        out = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
        fns = {"cublas": lambda: torch.matmul(a, b, out=out), "nova": lambda: nova.matmul(a, b, out=out)}
        if "xla" in libs:
            fns["xla"] = xla_fn(M, N, K, ta, tb, a, b)
        for lib in libs:
            if os.environ.get("DW_NCU"):       # one call each, for ncu
                fns[lib](); torch.cuda.synchronize(); continue
            ks = kernels_of(fns[lib], reps)
            total = sum(k["mean_us"] for k in ks)
            rows.append({"M": M, "N": N, "K": K, "trans_a": ta, "trans_b": tb, "lib": lib,
                         "total_us": total, "tflops": 2 * M * N * K / total / 1e6, "kernels": ks})
            print(f"{M}x{N}x{K} {lib:6s} {total:8.1f} us {2*M*N*K/total/1e6:6.0f} TFLOP/s  " +
                  " | ".join(f"{k['name'][:70]} g{k['grid']} b{k['block']} r{k['registers']} "
                             f"s{k['smem']} {k['mean_us']:.1f}" for k in ks), flush=True)
    json.dump(rows, open(out_path, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
