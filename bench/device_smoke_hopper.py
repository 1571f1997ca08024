#!/usr/bin/env python3
"""Hopper (wgmma) path: build here, check and time on the H200.

  PYTHONPATH=. python3 bench/device_smoke_hopper.py --build   # host with MLIR: compile into bench/_hopper/
  PYTHONPATH=. python3 bench/device_smoke_hopper.py           # device: correctness + timing, compact table

Correctness: fresh random data, NaN-poisoned output, float64 reference (relative Frobenius
error).  Timing: CUDA events, back-to-back launches, median of 5 batches; Nova (prep + GEMM, and
the GEMM alone) vs torch.matmul (TF32 allowed).  Each group runs in its own subprocess with a
timeout, so a hung kernel (an mbarrier that never completes) costs one group, not the run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "_hopper")

# (group, name, M, N, K, dtype, extra problem fields, block_n, stages, tensor-map type override, time?)
# The override None takes the artifact's choice (TFLOAT32 for round-to-nearest TF32: the TMA unit
# rounds); "f32"/"tf32" force one (the experiment that found TMA rounding, run v0.2).
CHECK = [
    ("c0", "tiny-rna", 256, 256, 256, "tf32", {}, 256, 4, None, False),
    ("c0", "tiny-trunc-NT", 256, 256, 256, "tf32", {"trans_b": True, "tf32_rounding": "truncate"}, 256, 4, None, False),
    ("c0", "tiny-bf16", 256, 256, 256, "bf16", {}, 256, 4, None, False),
    ("c1", "ragged-rna-bias-relu", 1000, 999, 1001, "tf32", {"bias": True, "activation": "relu"}, 128, 6, None, False),
    ("c1", "ragged-fp16", 1000, 999, 1001, "fp16", {}, 256, 4, None, False),
    ("c1", "bf16-3000x5000x700", 3000, 5000, 700, "bf16", {}, 256, 4, None, False),
    ("c1", "tf32-odd-64x72x40", 65, 72, 40, "tf32", {}, 128, 6, None, False),
    ("c1", "tmap-TFLOAT32-NT", 1024, 1024, 1024, "tf32", {"trans_b": True, "tf32_rounding": "truncate"}, 256, 4, "tf32", False),
]
PERF = [
    ("p0", "4096 tf32 rna 128x256", 4096, 4096, 4096, "tf32", {}, 256, 4, None, True),
    ("p0", "4096 tf32 rna NT", 4096, 4096, 4096, "tf32", {"trans_b": True}, 256, 4, None, True),
    ("p0", "4096 tf32 rna 128x128", 4096, 4096, 4096, "tf32", {}, 128, 6, None, True),
    ("p0", "4096 tf32 fast NT", 4096, 4096, 4096, "tf32", {"trans_b": True, "tf32_rounding": "truncate"}, 256, 4, None, True),
    ("p0", "4096 bf16 NN", 4096, 4096, 4096, "bf16", {}, 256, 4, None, True),
    ("p0", "4096 bf16 NT", 4096, 4096, 4096, "bf16", {"trans_b": True}, 256, 4, None, True),
    ("p0", "4096 tf32 TMAtf32 NT", 4096, 4096, 4096, "tf32", {"trans_b": True, "tf32_rounding": "truncate"}, 256, 4, "tf32", True),
    ("p1", "8192 tf32 rna", 8192, 8192, 8192, "tf32", {}, 256, 4, None, True),
    ("p1", "8192 tf32 rna NT", 8192, 8192, 8192, "tf32", {"trans_b": True}, 256, 4, None, True),
    ("p1", "8192 tf32 fast NT", 8192, 8192, 8192, "tf32", {"trans_b": True, "tf32_rounding": "truncate"}, 256, 4, None, True),
    ("p1", "8192 bf16 NN", 8192, 8192, 8192, "bf16", {}, 256, 4, None, True),
    ("p1", "8192 bf16 NT", 8192, 8192, 8192, "bf16", {"trans_b": True}, 256, 4, None, True),
    ("p2", "8192x1536x512 tf32", 8192, 1536, 512, "tf32", {}, 128, 6, None, True),
    ("p2", "16384x2304x768 tf32", 16384, 2304, 768, "tf32", {}, 256, 4, None, True),
    ("p2", "1000^3 tf32", 1000, 1000, 1000, "tf32", {}, 128, 6, None, True),
    ("p2", "3000x5000x700 tf32", 3000, 5000, 700, "tf32", {}, 256, 4, None, True),
    ("p2", "128x4096x4096 tf32", 128, 4096, 4096, "tf32", {}, 128, 6, None, True),
    ("p2", "4096x4096x128 tf32", 4096, 4096, 128, "tf32", {}, 128, 6, None, True),
]
CASES = CHECK + PERF


def schedule_for(p, block_n, stages):
    """2 consumer warpgroups x wgmma N = ``block_n``, a ``stages``-deep ring, group-M 8, on the H200."""
    from nova.kernels.gemm.hopper import operand_plan, wgmma_schedule
    from nova.hwmodel import get_target
    return wgmma_schedule(p, get_target("h200"), operand_plan(p), wgs=2, n=block_n, split=1, stages=stages, group_m=8)


def build():
    from nova.kernels.gemm.emit_hopper import compile_hopper
    from nova.kernels.gemm.problem import GemmProblem
    os.makedirs(OUT, exist_ok=True)
    index = []
    for case in CASES:
        group, name, M, N, K, dt, extra, bn, st, tmt, timed = case
        p = GemmProblem(M, N, K, dt, **extra)
        s = schedule_for(p, bn, st)
        t0 = time.time()
        art = compile_hopper(p, s)
        r = art.resources
        fn = f"{len(index):02d}.json"
        with open(os.path.join(OUT, fn), "w") as f:
            json.dump(art.to_dict(), f)
        index.append({"group": group, "name": name, "problem": p.to_dict(), "file": fn, "tmap": tmt, "timed": timed})
        print(f"{name:28s} regs {r.get('registers')} spill {r.get('spill_store_bytes')} "
              f"preps {list(art.meta['prep_kernels'])} {time.time() - t0:.1f}s")
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f)


# ------------------------------------------------------------------------------- device side
def run_group(group):
    import torch
    from nova.runtime import driver
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = driver.get_device(0)
    with open(os.path.join(OUT, "index.json")) as f:
        index = [c for c in json.load(f) if c["group"] == group]
    tdt = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    odt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    for c in index:
        try:
            one_case(c, dev, tdt, odt)
        except Exception as e:
            print(f"{c['name']:28s} ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)


def one_case(c, dev, tdt, odt):
    import torch
    from nova.codegen.artifact import KernelArtifact
    from nova.kernels.gemm.problem import GemmProblem
    from nova.kernels.gemm.schedule import Schedule
    from nova.runtime.tma import HopperGemm
    if True:
        pd = dict(c["problem"])
        p = GemmProblem(**pd)
        with open(os.path.join(OUT, c["file"])) as f:
            art = KernelArtifact.from_dict(json.load(f))
        g = torch.Generator(device="cuda").manual_seed(hash(c["name"]) % 1000)
        A = torch.randn(p.M, p.K, device="cuda", generator=g).to(tdt[p.dtype])
        Bkn = torch.randn(p.K, p.N, device="cuda", generator=g).to(tdt[p.dtype])
        Bop = Bkn.t().contiguous() if p.trans_b else Bkn          # what the kernel reads
        C = torch.full((p.M, p.N), float("nan"), device="cuda", dtype=odt[p.out_dtype])
        bias = torch.randn(p.N, device="cuda", generator=g).to(torch.float32 if p.dtype == "tf32" else odt[p.out_dtype]) if p.bias else None
        k = HopperGemm(art, Schedule.from_dict(art.meta["schedule"]), dev, p.describe(), tmap_f32_type=c["tmap"])
        torch.cuda.synchronize()
        k.run(A.data_ptr(), Bop.data_ptr(), C.data_ptr(), None if bias is None else bias.data_ptr(),
              torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        ref = A.double() @ Bkn.double()
        if p.bias:
            ref = ref + bias.double()
        if p.activation == "relu":
            ref = torch.relu(ref)
        nan = int(torch.isnan(C.float()).sum())
        err = float((C.double() - ref).norm() / ref.norm())
        line = f"{c['name']:28s} {p.describe():44s} err {err:.3e} nan {nan:6d}"
        if c["timed"]:
            stream = torch.cuda.current_stream().cuda_stream

            def bench(fn, reps):
                """Median of 5 rounds of ``reps`` back-to-back calls (nova.bench.attention.event_time_us)."""
                from nova.bench.attention import event_time_us
                return sorted(event_time_us(fn, reps, warmup=1 if i == 0 else 0) for i in range(5))[2]
            reps = max(3, min(50, int(2e11 / p.flops)))
            args = (A.data_ptr(), Bop.data_ptr(), C.data_ptr(), None, stream)
            t_all = bench(lambda: k.run(*args), reps)
            t_main = bench(lambda: k.run(*args, skip_prep=True), reps)
            Bt = Bop.t() if p.trans_b else Bkn
            t_ref = bench(lambda: torch.matmul(A, Bt), reps)
            tf = lambda t: p.flops / t / 1e6
            line += (f" | nova {tf(t_all):6.1f} (gemm only {tf(t_main):6.1f}) cuBLAS {tf(t_ref):6.1f} TFLOP/s"
                     f" ratio {t_ref / t_all:.2f} ({t_all:.0f} us)")
        print(line, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--group")
    ap.add_argument("--groups", default="c0,c1,p0,p1,p2")
    ap.add_argument("--timeout", type=float, default=40)
    a = ap.parse_args()
    if a.build:
        return build()
    if a.group:
        return run_group(a.group)
    for g in a.groups.split(","):
        print(f"== group {g}", flush=True)
        try:
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--group", g], timeout=a.timeout)
            if r.returncode:
                print(f"== group {g}: exit {r.returncode}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"== group {g}: TIMEOUT after {a.timeout}s (hang?)", flush=True)


if __name__ == "__main__":
    main()
