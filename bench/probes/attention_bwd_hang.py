"""Where the Hopper attention backward waits (bench/NOTES.md, the Hopper backward: the first H200 run hung).

Host (MLIR + ptxas):  ``python3 bench/probes/attention_bwd_hang.py build DIR [--watchdog-ms 2000]``
Device:               ``python3 bench/probes/attention_bwd_hang.py run DIR [--device-buffer] [--timeout 60]``

``build`` configures each problem with ``NOVA_ATTENTION_HOPPER=force NOVA_ATTENTION_HOPPER_BWD=1`` and
compiles, without the kernel cache, its forward (the Hopper one), ``bwd_pre`` and the *watchdog builds* of
the wgmma dK/dV and dQ kernels (``build_hopper_bwd(..., watchdog_ms=N)``: every mbarrier wait bounded by
%globaltimer; a thread whose wait runs out writes (block, thread, role, barrier, slot, parity, iteration,
tries, trip count) into a 32-word int32 buffer, first writer wins, and exits; heartbeat words count the
warps past setmaxnreg, the kept-tile wait and the loops).  Case ``abi6-B2H2T200D64`` is the first problem
with ABI 6's setmaxnreg targets (32 / 240: 65536 registers wanted, 384 x 168 = 64512 held), which this
branch's derivation no longer produces: on the device it should show the suspected hang (no consumer warp
past setmaxnreg.inc, the producer timing out on ``empty``) while the others finish with small errors.

``run`` runs each case in a subprocess with a timeout: random q, k, v, dO; forward, bwd_pre, then the
debug dK/dV and dQ kernels, each launch followed by a wait; prints the watchdog's report and heartbeats,
or the max error of dQ, dK, dV (and O, LSE) against float64 torch.  The watchdog buffer is pinned host
memory (mapped: readable while a kernel still runs, so a hang outside an mbarrier wait still shows its
heartbeats) unless ``--device-buffer``.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# (label, B, H, T, D, causal, setmaxnreg override for the backward kernels)
CASES = [
    ("B2H2T200D64", 2, 2, 200, 64, False, None),      # the GPU tests' first BF16 case (hung)
    ("B1H2T128D64", 1, 2, 128, 64, False, None),      # exactly one kept block, one dQ tile
    ("B32H8T512D64-causal", 32, 8, 512, 64, True, None),   # the benchmark's problem (hung)
    ("abi6-B2H2T200D64", 2, 2, 200, 64, False, (32, 240)),  # the hung run's register split (reproduction)
]
ROLES = ("fwd", "bwd_pre", "bwd_dkv", "bwd_dq")


def build(out: Path, watchdog_ms: int) -> None:
    os.environ["NOVA_ATTENTION_HOPPER"] = "force"
    os.environ["NOVA_ATTENTION_HOPPER_BWD"] = "1"
    from dataclasses import replace

    import nova.kernels.attention.build_hopper_bwd as hb
    from nova.hwmodel import get_target
    from nova.kernels.attention.compile import compile_kernel
    from nova.kernels.attention.derive import configure_attention
    from nova.kernels.attention.problem import AttentionProblem
    out.mkdir(parents=True, exist_ok=True)
    gpu = get_target("h200")
    for label, B, H, T, D, causal, regs in CASES:
        p = AttentionProblem(B, H, T, T, D, causal=causal, dtype="bf16")
        s = configure_attention(p, gpu).schedule
        assert s.tma and s.bwd_dkv.hopper and s.bwd_dq.hopper, label
        checked = hb.check_supported
        if regs:                   # reproduce ABI 6: the builder's register check would refuse it
            s = replace(s, bwd_dkv=replace(s.bwd_dkv, producer_regs=regs[0], consumer_regs=regs[1]),
                        bwd_dq=replace(s.bwd_dq, producer_regs=regs[0], consumer_regs=regs[1]))
            hb.check_supported = lambda *a: None
        try:
            arts = {r: compile_kernel(p, s, r, watchdog_ms=watchdog_ms if r in ("bwd_dkv", "bwd_dq") else None)
                    for r in ROLES}
        finally:
            hb.check_supported = checked
        for r in ("bwd_dkv", "bwd_dq"):
            k, res = s.kernel(r), arts[r].resources
            print(f"built {label} {r}: tile {k.block_rows}x{k.block_cols}, {k.stages} stages, setmaxnreg "
                  f"{k.producer_regs}/{k.consumer_regs}, {res['registers']} registers, spills "
                  f"{res['spill_store_bytes']}/{res['spill_load_bytes']} B")
        (out / f"{label}.json").write_text(json.dumps({
            "label": label, "problem": p.to_dict(), "schedule": s.to_dict(), "watchdog_ms": watchdog_ms,
            "artifacts": {r: a.to_dict() for r, a in arts.items()}}))


def run(out: Path, timeout: float, device_buffer: bool) -> None:
    files = sorted(out.glob("*.json"))
    if not files:
        sys.exit(f"no cases in {out}: run 'build {out}' on the host first")
    for f in files:
        print(f"== {f.stem}", flush=True)
        cmd = [sys.executable, __file__, "run-one", str(f)] + (["--device-buffer"] if device_buffer else [])
        try:
            r = subprocess.run(cmd, timeout=timeout, capture_output=True, text=True)
            print(r.stdout + r.stderr[-4000:], end="", flush=True)
            if r.returncode:
                print(f"   (exit status {r.returncode})")
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            print(text + f"   TIMEOUT: killed after {timeout:.0f} s (the watchdog itself did not end the kernel)",
                  flush=True)


def reference(torch, q, k, v, do, causal, scale):
    """float64 O, LSE, dQ, dK, dV (GQA: each key head serves H / Hkv query heads)."""
    qd, kd, vd, dd = (t.double().detach().requires_grad_(True) for t in (q, k, v, do))
    g = q.shape[1] // k.shape[1]
    ke, ve = kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1)
    s = (qd @ ke.transpose(-1, -2)) * scale
    if causal:
        T = q.shape[2]
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ ve
    dq, dk, dv = torch.autograd.grad(o, (qd, kd, vd), dd.double())
    return o.detach(), lse.detach(), dq, dk, dv


def run_one(path: Path, device_buffer: bool) -> None:
    import torch

    from nova.codegen.artifact import KernelArtifact
    from nova.kernels.attention.build_hopper_bwd import (WATCHDOG_BARRIERS, WATCHDOG_FIELDS, WATCHDOG_HEARTBEATS,
                                                         WATCHDOG_ROLES, WATCHDOG_TIMED_OUT, WATCHDOG_WORDS)
    from nova.kernels.attention.launch import _Resolved, hopper_bwd_maps, hopper_maps
    from nova.kernels.attention.problem import AttentionProblem
    from nova.kernels.attention.schedule import AttentionSchedule
    from nova.runtime import driver

    d = json.loads(path.read_text())
    p, s = AttentionProblem(**d["problem"]), AttentionSchedule.from_dict(d["schedule"])
    device = driver.get_device(torch.cuda.current_device())
    kernels = {r: driver.load_kernel(KernelArtifact.from_dict(a), device, f"probe {d['label']} {r}",
                                     key=f"probe:{d['label']}:{r}") for r, a in d["artifacts"].items()}
    r = _Resolved(p, s, kernels)
    for role in ("bwd_dkv", "bwd_dq"):
        k = s.kernel(role)
        print(f"   {role}: grid {k.grid[0]}x{k.grid[1]}, tile {k.block_rows}x{k.block_cols}, {k.stages} stages, "
              f"setmaxnreg {k.producer_regs}/{k.consumer_regs} (block holds {k.threads} x {k.regs_per_thread})")
    gen = torch.Generator(device="cuda").manual_seed(1234)
    B, H, Hkv, T, D = p.batch, p.heads, p.kv_heads, p.seq_q, p.head_dim
    q, do = (torch.randn(B, H, T, D, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
    k_, v = (torch.randn(B, Hkv, T, D, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
    o = torch.empty_like(q)
    lse = torch.empty(B, H, T, device="cuda", dtype=torch.float32)
    delta = torch.empty_like(lse)
    dq, dk, dv = torch.full_like(q, float("nan")), torch.full_like(k_, float("nan")), torch.full_like(v, float("nan"))
    stream = torch.cuda.current_stream().cuda_stream
    fwd_args = (hopper_maps(r, q, k_, v) if s.tma else (q.data_ptr(), k_.data_ptr(), v.data_ptr()))
    kernels["fwd"].launch(fwd_args + (o.data_ptr(), lse.data_ptr()), stream)
    torch.cuda.synchronize()
    kernels["bwd_pre"].launch((o.data_ptr(), do.data_ptr(), delta.data_ptr()), stream)
    torch.cuda.synchronize()
    print("   fwd, bwd_pre done", flush=True)
    budget = d["watchdog_ms"] / 1000 * 3 + 5
    for role, outs in (("bwd_dkv", (dk, dv)), ("bwd_dq", (dq,))):
        wd = torch.zeros(WATCHDOG_WORDS, dtype=torch.int32, **({"device": "cuda"} if device_buffer else
                                                                {"pin_memory": True}))
        ins = hopper_bwd_maps(r, role, q, k_, v, do)
        kernels[role].launch(ins + (lse.data_ptr(), delta.data_ptr()) + tuple(t.data_ptr() for t in outs)
                             + (wd.data_ptr(),), stream)
        done, t0 = torch.cuda.Event(), time.time()
        done.record()
        while not done.query() and time.time() - t0 < budget and not device_buffer:
            time.sleep(0.05)
        finished = done.query() if not device_buffer else (torch.cuda.synchronize() or True)
        w = wd.tolist()
        k = s.kernel(role)
        blocks, cw = k.grid[0] * k.grid[1], 4 * k.consumer_warpgroups
        beats = ", ".join(f"{WATCHDOG_HEARTBEATS[i]} {w[i]}" for i in sorted(WATCHDOG_HEARTBEATS))
        print(f"   {role}: {'finished' if finished else f'STILL RUNNING after {budget:.0f} s'} in "
              f"{time.time() - t0:.2f} s; {blocks} blocks (x 4 producer warps, x {cw} consumer warps); {beats}")
        if w[0]:
            f = dict(zip(WATCHDOG_FIELDS, w))
            print(f"   {role} WATCHDOG ({w[WATCHDOG_TIMED_OUT]} threads timed out); first: block ({f['bx']}, {f['by']}) "
                  f"thread {f['tid']} (warpgroup {f['tid'] // 128}, warp {f['tid'] // 32}), "
                  f"{WATCHDOG_ROLES[f['role']]} waiting on {WATCHDOG_BARRIERS[f['barrier']]}[{f['slot']}] parity "
                  f"{f['parity']} at iteration {f['iteration']} of {f['n_it']} after {f['tries']} tries "
                  f"(state {f['state']})", flush=True)
        if not finished:
            print("   the kernel is still running: exiting without cleanup", flush=True)
            os._exit(3)
    torch.cuda.synchronize()
    ro, rl, rdq, rdk, rdv = reference(torch, q, k_, v, do, p.causal, p.scale)
    for name, x, ref in (("O", o, ro), ("LSE", lse, rl), ("dQ", dq, rdq), ("dK", dk, rdk), ("dV", dv, rdv)):
        err = float((x.double() - ref).abs().nan_to_num(float("inf")).max())
        scale = float(ref.abs().max())
        print(f"   {name}: max |error| {err:.3e} (max |ref| {scale:.3e}), NaN {int(torch.isnan(x).sum())}"
              + ("" if err <= 2e-2 * max(scale, 1.0) else "  <-- WRONG"))


def main(argv) -> None:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("build", "run", "run-one"))
    ap.add_argument("path", type=Path)
    ap.add_argument("--watchdog-ms", type=int, default=2000, help="build: bound of each mbarrier wait")
    ap.add_argument("--timeout", type=float, default=60, help="run: seconds per case (subprocess)")
    ap.add_argument("--device-buffer", action="store_true", help="run: the watchdog buffer in device memory")
    a = ap.parse_args(argv)
    if a.what == "build":
        build(a.path, a.watchdog_ms)
    elif a.what == "run":
        run(a.path, a.timeout, a.device_buffer)
    else:
        run_one(a.path, a.device_buffer)


if __name__ == "__main__":
    main(sys.argv[1:])
