"""Which attention problems run and match float64 (device), each in its own process so an illegal
address in one does not poison the next: ``build`` (host, MLIR) compiles the cases' kernels into
$NOVA_CACHE_DIR; ``run`` (device, NOVA_OFFLINE=1) prints per case ok / the error, and the relative
errors of O, dQ, dK, dV.  The first case is the one that localises the wgmma dK/dV kernel's illegal
address (B2 H4 T1000 D64 FP16, non-causal)."""
import math
import subprocess
import sys

CASES = [  # (B, H, Hkv, Tq, Tk, D, causal, dtype)
    (2, 4, 4, 1000, 1000, 64, False, "fp16"),
    (2, 4, 4, 1000, 1000, 64, False, "bf16"),
    (2, 4, 4, 1000, 1000, 64, True, "fp16"),
    (2, 4, 4, 1024, 1024, 64, False, "fp16"),
    (1, 1, 1, 1000, 1000, 64, False, "fp16"),
    (2, 2, 2, 200, 200, 64, False, "fp16"),
    (2, 4, 4, 600, 600, 64, False, "bf16"),
    (2, 4, 4, 1000, 1000, 128, False, "bf16"),
]


def build():
    from nova.bench.attention import _precompile_one, problem_of
    from nova.kernels.attention.schedule import ROLES
    for c in CASES:
        rows = _precompile_one((problem_of(c), ROLES, "h200", None))
        print(c, [(r, st, res.get("registers")) for r, _, st, res in rows], flush=True)


def one(i):
    import torch
    import nova
    B, H, Hkv, Tq, Tk, D, causal, dtype = CASES[i]
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    g = torch.Generator(device="cuda").manual_seed(3)
    q, k, v, do = (torch.randn(B, h, T, D, device="cuda", dtype=dt, generator=g)
                   for h, T in ((H, Tq), (Hkv, Tk), (Hkv, Tk), (H, Tq)))
    out, lse = nova.attention(q, k, v, causal=causal)
    torch.cuda.synchronize()
    dq, dk, dv = nova.attention_backward(do, q, k, v, out, lse, causal=causal)
    torch.cuda.synchronize()
    qd, kd, vd = (x.double().requires_grad_() for x in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, scale=1 / math.sqrt(D))
    ref.backward(do.double())
    rel = lambda a, b: float((a.double() - b).norm() / b.norm())
    print("ok", {n: f"{rel(a, b):.2e}" for n, a, b in (("out", out, ref), ("dq", dq, qd.grad), ("dk", dk, kd.grad),
                                                     ("dv", dv, vd.grad))})


def run():
    for i, c in enumerate(CASES):
        r = subprocess.run([sys.executable, __file__, "one", str(i)], capture_output=True, text=True, timeout=60)
        last = (r.stdout.strip().splitlines() or [""])[-1]
        err = [ln for ln in r.stderr.splitlines() if "Error" in ln][-1:] 
        print(c, last if r.returncode == 0 else f"FAILED {err}", flush=True)


if __name__ == "__main__":
    {"build": build, "run": run, "one": lambda: one(int(sys.argv[2]))}[sys.argv[1]]()
