#!/usr/bin/env python3
"""Device smoke test of Nova's code generator (two halves, because MLIR and the GPU live apart).

    PYTHONPATH=. python3 bench/device_smoke_codegen.py build   # here (MLIR + ptxas): writes bench/_smoke/*.ptx + cases.json
    python3 bench/device_smoke_codegen.py run                  # on the GPU (cupy, numpy; torch for the timing baseline)

``run`` loads each PTX with ``cupy.RawModule``, launches it on fresh random data with C pre-filled
with NaN (zeros when the artifact asks for ``zero_output``) plus a NaN guard band after C that must
stay untouched, and compares against a float64 numpy reference: relative Frobenius error, PASS if
<= 5e-4 (tf32 with f32 output) or 1e-2 (bf16/fp16 inputs or outputs).  Then it times 4096^3 against ``torch.matmul``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "_smoke")
GUARD = 4096  # elements after C that must stay NaN


# ----------------------------------------------------------------------------------------------
# build (needs MLIR + ptxas)
# ----------------------------------------------------------------------------------------------
def _schedule(problem, arch="sm_90", bm=128, bn=128, bk=None, wm=2, wn=4, stages=3, va=None, vb=None,
              split_k=1, group_m=8):
    from nova.kernels.gemm.emit_ampere import smem_plan
    from nova.configurator.step import MmaInstr
    from nova.kernels.gemm.schedule import Schedule
    from nova.dtypes import mode
    eb, e = problem.in_bytes, mode(problem.dtype)
    mma, bk = MmaInstr("mma.sync", 16, 8, e.mma_k, e.name), bk or 128 // eb

    def vec(row_len, want):
        v = want or 16 // eb
        while v > 1 and row_len % v:
            v //= 2
        return v
    a_row = problem.M if problem.trans_a else problem.K
    b_row = problem.K if problem.trans_b else problem.N
    pad = 16 // eb
    s = Schedule(arch=arch, mma=mma, block_m=bm, block_n=bn, block_k=bk, warps_m=wm, warps_n=wn,
                 stages=stages, smem_layout="pad", smem_pad_a=pad, smem_pad_b=pad, smem_bytes=0,
                 vector_a=vec(a_row, va), vector_b=vec(b_row, vb), vector_c=2, split_k=split_k,
                 group_m=group_m, regs_per_thread=0, blocks_per_sm=1)
    return dataclasses.replace(s, smem_bytes=smem_plan(problem, s)["total"])


def build():
    from nova.kernels.gemm.compile import compile_gemm
    from nova.kernels.gemm.problem import GemmProblem as G

    cases = [
        ("tf32_256", G(256, 256, 256), {}),
        ("tf32_256_sm80ptx", G(256, 256, 256), {"arch": "sm_80"}),
        ("tf32_1000x33x7", G(1000, 33, 7), {}),
        ("tf32_127x4097x129", G(127, 4097, 129), {}),
        ("tf32_splitk2", G(512, 512, 4096), {"split_k": 2}),
        ("tf32_splitk3_ragged", G(1000, 1000, 1000), {"split_k": 3}),
        ("tf32_bias_relu", G(1000, 1000, 1000, bias=True, activation="relu"), {}),
        ("tf32_bias_gelu_bf16out", G(1000, 1000, 1000, bias=True, activation="gelu", out_dtype="bf16"), {}),
        ("tf32_TN", G(1000, 1000, 1000, trans_a=True), {}),
        ("tf32_NT", G(1000, 1000, 1000, trans_b=True), {}),
        ("tf32_4x2warps_2stage", G(1000, 1000, 1000), {"wm": 4, "wn": 2, "stages": 2, "group_m": 1}),
        ("tf32_4stage", G(1000, 1000, 1000), {"stages": 4}),
        ("bf16_1024", G(1024, 1024, 1024, dtype="bf16"), {}),
        ("fp16_1024", G(1024, 1024, 1024, dtype="fp16"), {}),
        ("bf16_1000x33x7", G(1000, 33, 7, dtype="bf16"), {}),
        ("fp16_1000x34x8", G(1000, 34, 8, dtype="fp16"), {}),
        ("fp16_bias_silu_odd", G(1000, 999, 1000, dtype="fp16", bias=True, activation="silu"), {}),
        ("bf16_splitk4_f32out", G(512, 512, 4096, dtype="bf16", out_dtype="f32"), {"split_k": 4}),
        ("fp16_splitk2", G(300, 200, 3000, dtype="fp16"), {"split_k": 2}),
        ("fp16_TN", G(1000, 1000, 1000, dtype="fp16", trans_a=True), {}),
        ("fp16_NT", G(1000, 1000, 1000, dtype="fp16", trans_b=True), {}),
        ("bf16_TT", G(1000, 1000, 1000, dtype="bf16", trans_a=True, trans_b=True), {}),
        ("tf32_4096", G(4096, 4096, 4096), {}),
        ("tf32_4096_4x2", G(4096, 4096, 4096), {"wm": 4, "wn": 2}),
        ("bf16_4096", G(4096, 4096, 4096, dtype="bf16"), {}),
    ]
    # schedule variants timed at 4096^3 (data for the configurator; also checked for correctness)
    timed = {"tf32_4096", "tf32_4096_4x2", "bf16_4096"}
    for dt, (bm, bn, bk, wm, wn, st) in [
            ("tf32", (128, 256, 32, 2, 4, 3)), ("tf32", (256, 128, 32, 4, 2, 3)),
            ("tf32", (128, 128, 32, 2, 2, 4)), ("tf32", (128, 128, 16, 2, 2, 4)),
            ("bf16", (128, 256, 32, 2, 4, 4)), ("bf16", (256, 128, 32, 4, 2, 4)),
            ("bf16", (128, 128, 32, 2, 2, 4)), ("bf16", (128, 256, 64, 2, 4, 3)),
            ("bf16", (128, 128, 64, 2, 2, 3)), ("fp16", (128, 256, 32, 2, 4, 4))]:
        name = f"perf_{dt}_{bm}x{bn}x{bk}_w{wm}x{wn}_s{st}"
        cases.append((name, G(4096, 4096, 4096, dtype=dt), dict(bm=bm, bn=bn, bk=bk, wm=wm, wn=wn, stages=st)))
        timed.add(name)
    # A/B: fragment prefetch across the K-tile barrier (more registers, less exposed latency)
    for name, p, kw in [("pf_tf32_4096", G(4096, 4096, 4096), {}),
                        ("pf_bf16_4096", G(4096, 4096, 4096, dtype="bf16"), {}),
                        ("pf_bf16_128x128x64_w2x2_s3", G(4096, 4096, 4096, dtype="bf16"),
                         dict(bm=128, bn=128, bk=64, wm=2, wn=2, stages=3)),
                        ("pf_tf32_128x128x32_w2x2_s4", G(4096, 4096, 4096), dict(wm=2, wn=2, stages=4)),
                        ("pf_fp16_bias_silu_odd", G(1000, 999, 1000, dtype="fp16", bias=True, activation="silu"), {}),
                        ("pf_tf32_127x4097x129", G(127, 4097, 129), {})]:
        cases.append((name, p, dict(kw, prefetch=True)))
        if p.M == p.N == p.K == 4096:
            timed.add(name)
    os.makedirs(OUT, exist_ok=True)
    manifest = []
    for name, p, kw in cases:
        kw = dict(kw)
        prefetch = kw.pop("prefetch", False)
        s = _schedule(p, **kw)
        art = compile_gemm(p, s)
        if prefetch:
            from nova.kernels.gemm.emit_ampere import build_gemm_module
            from nova.codegen.lower import to_ptx
            from nova.codegen.ptxas import assemble
            ptx = to_ptx(build_gemm_module(p, s, fragment_prefetch=True), s.arch)
            _, res = assemble(ptx, s.arch, kernel="nova_gemm")
            art = dataclasses.replace(art, ptx=ptx, resources=res)
        with open(os.path.join(OUT, name + ".ptx"), "w") as f:
            f.write(art.ptx)
        r = art.resources
        print(f"{name:26s} regs={r.get('registers')} spill={r.get('spill_store_bytes')}/{r.get('spill_load_bytes')} "
              f"stack={r.get('stack_bytes')} static_smem={r.get('smem_bytes')} dyn_smem={art.smem_bytes}")
        manifest.append({"name": name, "ptx": name + ".ptx", "problem": p.to_dict(), "grid": art.grid,
                         "block": art.block, "smem_bytes": art.smem_bytes, "zero_output": art.zero_output,
                         "params": art.params, "registers": r.get("registers"), "time": name in timed,
                         "schedule": s.to_dict()})
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(manifest)} cases to {OUT}")


# ----------------------------------------------------------------------------------------------
# run (on the GPU: cupy + numpy, torch for the baseline)
# ----------------------------------------------------------------------------------------------
def _bf16_bits(x):
    import numpy as np
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16          # round to nearest even
    return u.astype(np.uint16)


def _bf16_value(bits):
    import numpy as np
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _to_device(x, storage):
    """float32 numpy -> (cupy array in storage layout, float64 value actually stored)."""
    import cupy as cp
    import numpy as np
    if storage == "f32":
        return cp.asarray(x.astype(np.float32)), x.astype(np.float32).astype(np.float64)
    if storage == "f16":
        h = x.astype(np.float16)
        return cp.asarray(h), h.astype(np.float64)
    b = _bf16_bits(x)
    return cp.asarray(b), _bf16_value(b).astype(np.float64)


def _from_device(arr, storage):
    import numpy as np
    h = arr.get()
    if storage == "bf16":
        return _bf16_value(h).astype(np.float64)
    return h.astype(np.float64)


def _activation(x, act):
    import numpy as np
    if act == "relu":
        return np.maximum(x, 0)
    if act == "silu":
        return x / (1 + np.exp(-x))
    if act == "gelu":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return x


def _empty_out(n, storage, fill_nan):
    import cupy as cp
    import numpy as np
    if storage == "bf16":
        return cp.full(n, 0x7FC0 if fill_nan else 0, dtype=cp.uint16)
    dt = np.float32 if storage == "f32" else np.float16
    return cp.full(n, np.nan if fill_nan else 0, dtype=dt)


def _load(case):
    import cupy as cp
    mod = cp.RawModule(path=os.path.join(OUT, case["ptx"]))
    fn = mod.get_function("nova_gemm")
    if case["smem_bytes"] > 48 * 1024:   # opt in to large dynamic shared memory (the runtime's job)
        try:
            fn.max_dynamic_shared_size_bytes = case["smem_bytes"]
        except AttributeError:
            cp.cuda.driver.funcSetAttribute(fn.ptr, 8, case["smem_bytes"])  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    return mod, fn


def run_case(case, rng):
    import cupy as cp
    import numpy as np
    p = case["problem"]
    M, N, K = p["M"], p["N"], p["K"]
    storage = {"tf32": "f32", "bf16": "bf16", "fp16": "f16"}[p["dtype"]]
    out = p["out_dtype"]
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    a_dev, a_val = _to_device(np.ascontiguousarray(a.T) if p["trans_a"] else a, storage)
    b_dev, b_val = _to_device(np.ascontiguousarray(b.T) if p["trans_b"] else b, storage)
    if p["trans_a"]:
        a_val = a_val.T
    if p["trans_b"]:
        b_val = b_val.T
    ref = (cp.asarray(a_val) @ cp.asarray(b_val)).get()   # float64 on the GPU (fast for 4096^3)
    args = [a_dev, b_dev]
    c = _empty_out(M * N + GUARD, out, fill_nan=not case["zero_output"])
    if case["zero_output"]:
        c[M * N:] = _empty_out(GUARD, out, True)
    args.append(c)
    if p["bias"]:
        bias_storage = "f32" if p["dtype"] == "tf32" else out
        bias = rng.standard_normal(N, dtype=np.float32)
        bias_dev, bias_val = _to_device(bias, bias_storage)
        args.append(bias_dev)
        ref = ref + bias_val
    ref = _activation(ref, p["activation"])
    _mod, fn = _load(case)
    fn(tuple(case["grid"]), tuple(case["block"]), tuple(args), shared_mem=case["smem_bytes"])
    cp.cuda.runtime.deviceSynchronize()
    got_all = _from_device(c, out)
    got, guard = got_all[:M * N].reshape(M, N), got_all[M * N:]
    nan = int(np.isnan(got).sum())
    guard_ok = bool(np.isnan(guard).all())
    err = float(np.linalg.norm(np.nan_to_num(got - ref, nan=1e30)) / np.linalg.norm(ref))
    # tf32 -> f32 must stay within TF32 rounding; a 16-bit input or output alone costs ~2e-3
    tol = 5e-4 if (p["dtype"] == "tf32" and out == "f32") else 1e-2
    ok = err <= tol and nan == 0 and guard_ok
    print(f"{'PASS' if ok else 'FAIL'} {case['name']:26s} {M}x{N}x{K} rel_fro_err={err:.3e} (tol {tol:g}) "
          f"nan={nan} guard_ok={guard_ok} regs={case['registers']}", flush=True)
    return ok


_TORCH_MS: dict = {}


def time_case(case, rng, iters=20):
    import cupy as cp
    import numpy as np
    import torch
    p = case["problem"]
    M, N, K = p["M"], p["N"], p["K"]
    storage = {"tf32": "f32", "bf16": "bf16", "fp16": "f16"}[p["dtype"]]
    a_dev, _ = _to_device(rng.standard_normal((M, K), dtype=np.float32), storage)
    b_dev, _ = _to_device(rng.standard_normal((K, N), dtype=np.float32), storage)
    c = _empty_out(M * N, p["out_dtype"], False)
    _mod, fn = _load(case)
    launch = lambda: fn(tuple(case["grid"]), tuple(case["block"]), (a_dev, b_dev, c), shared_mem=case["smem_bytes"])
    for _ in range(3):
        launch()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record()
    for _ in range(iters):
        launch()
    e1.record()
    e1.synchronize()
    ms = cp.cuda.get_elapsed_time(e0, e1) / iters
    key = (M, N, K, storage)
    if key not in _TORCH_MS:
        torch.backends.cuda.matmul.allow_tf32 = True
        tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[storage]
        ta = torch.randn(M, K, device="cuda", dtype=tdt)
        tb = torch.randn(K, N, device="cuda", dtype=tdt)
        for _ in range(3):
            torch.matmul(ta, tb)
        s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s0.record()
        for _ in range(iters):
            torch.matmul(ta, tb)
        s1.record()
        torch.cuda.synchronize()
        _TORCH_MS[key] = s0.elapsed_time(s1) / iters
    tms = _TORCH_MS[key]
    fl = 2.0 * M * N * K
    print(f"TIME {case['name']:30s} regs={case['registers']:3d} nova {ms:.3f} ms ({fl / ms / 1e9:.1f} TFLOP/s)   torch.matmul {tms:.3f} ms "
          f"({fl / tms / 1e9:.1f} TFLOP/s)   nova/torch = {ms / tms:.2f}x", flush=True)


def run(only=None, exact=None):
    import subprocess
    import numpy as np
    with open(os.path.join(OUT, "cases.json")) as f:
        cases = json.load(f)
    rng = np.random.default_rng(int(time.time()))
    fails = 0
    isolate = False   # after a CUDA error the context is dead: run the rest in subprocesses
    for case in cases:
        if (only and only not in case["name"]) or (exact and exact != case["name"]):
            continue
        if isolate:
            r = subprocess.run([sys.executable, __file__, "run", "--case", case["name"]], timeout=120)
            fails += r.returncode != 0
            continue
        try:
            fails += not run_case(case, rng)
        except Exception as e:  # keep going: one bad kernel should not hide the others
            fails += 1
            print(f"FAIL {case['name']}: {type(e).__name__}: {e}", flush=True)
            isolate = not exact
    if exact:
        return fails
    for case in cases:
        if case.get("time") and not case["problem"]["bias"] and (not only or only in case["name"]):
            try:
                time_case(case, rng)
            except Exception as e:
                print(f"TIME {case['name']} failed: {type(e).__name__}: {e}", flush=True)
    print(f"{len(cases) - fails}/{len(cases)} passed" if not only else f"{fails} failures")
    return fails


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("build", "run"))
    ap.add_argument("--only", help="substring of case names to run")
    ap.add_argument("--case", help="exact case name to run (no timing)")
    args = ap.parse_args()
    if args.mode == "build":
        build()
    else:
        sys.exit(1 if run(args.only, args.case) else 0)
