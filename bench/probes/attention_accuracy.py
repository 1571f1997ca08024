"""How far Nova's TF32 attention is from float64, beside the attentions a PyTorch user has: the SDPA
kernel on f32 (FP32 arithmetic) and attention written with TF32 matmuls (``allow_tf32``: the
rounding TF32 itself costs).  Per output (O, dQ, dK, dV): the relative Frobenius error and the
relative bias <x - ref, ref> / <ref, ref> (a kernel that shrinks or grows a result shows a bias;
rounding noise averages out).

    python3 bench/probes/attention_accuracy.py build      # host (MLIR): the cases' kernels into $NOVA_CACHE_DIR
    python3 bench/probes/attention_accuracy.py run tf32   # device, NOVA_OFFLINE=1: the TF32 cases
    NOVA_ATTENTION_PRECISION=3xtf32 python3 bench/probes/attention_accuracy.py run 3xtf32
    NOVA_ATTENTION_PRECISION=fp32 python3 bench/probes/attention_accuracy.py run fp32
"""
import math
import sys

# (B, H, Hkv, Tq, Tk, D, causal, dtype): GPT-144M's attention per sequence group (T 1024, D 64),
# GPT-42M's (T 512), and the FP32-accurate score variant
CASES = [(2, 12, 12, 1024, 1024, 64, True, "tf32"), (2, 8, 8, 512, 512, 64, True, "tf32"),
         (2, 12, 12, 1024, 1024, 64, True, "3xtf32"), (2, 12, 12, 1024, 1024, 64, True, "fp32")]


def build():
    from nova.bench.attention import _precompile_one, problem_of
    from nova.kernels.attention.schedule import ROLES
    for c in CASES:
        print(c, [(r, st) for r, _, st, _ in _precompile_one((problem_of(c), ROLES, "h200", None))], flush=True)


def errors(got: dict, ref: dict) -> dict:
    out = {}
    for name, r in ref.items():
        d = got[name].double() - r
        out[name] = (float(d.norm() / r.norm()), float((d * r).sum() / (r * r).sum()))
    return out


def run(wanted: str):
    import torch
    import torch.nn.functional as F
    import nova
    for c in CASES:
        B, H, Hkv, Tq, Tk, D, causal, label = c
        if label != wanted:
            continue
        g = torch.Generator(device="cuda").manual_seed(7)
        q, k, v, do = (torch.randn(B, H, T, D, device="cuda", generator=g) for T in (Tq, Tk, Tk, Tq))
        scale = 1 / math.sqrt(D)
        # float64 reference
        qd, kd, vd = (x.double().requires_grad_() for x in (q, k, v))
        o64 = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, scale=scale)
        o64.backward(do.double())
        ref = {"out": o64.detach(), "dq": qd.grad, "dk": kd.grad, "dv": vd.grad}
        rows = {}
        # Nova (the score precision NOVA_ATTENTION_PRECISION says: run the 3xtf32 case with it set)
        out, lse = nova.attention(q, k, v, causal=causal, scale=scale)
        dq, dk, dv = nova.attention_backward(do, q, k, v, out, lse, causal=causal, scale=scale)
        torch.cuda.synchronize()
        rows["nova " + label] = errors({"out": out, "dq": dq, "dk": dk, "dv": dv}, ref)
        if label == "tf32":
            for name, tf32 in (("sdpa f32 (FP32)", False), ("matmuls, allow_tf32", True)):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                qf, kf, vf = (x.clone().requires_grad_() for x in (q, k, v))
                if tf32:
                    s = (qf @ kf.transpose(-1, -2)) * scale
                    if causal:
                        s = s.masked_fill(torch.ones(Tq, Tk, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
                    o = torch.softmax(s, dim=-1) @ vf
                else:
                    o = F.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
                o.backward(do)
                torch.cuda.synchronize()
                rows[name] = errors({"out": o.detach(), "dq": qf.grad, "dk": kf.grad, "dv": vf.grad}, ref)
            torch.backends.cuda.matmul.allow_tf32 = False
        print(f"B{B} H{H} T{Tq} D{D} causal={causal}: relative error / relative bias against float64")
        for name, e in rows.items():
            print(f"  {name:22s} " + "  ".join(f"{k} {err:.2e}/{bias:+.1e}" for k, (err, bias) in e.items()),
                  flush=True)


if __name__ == "__main__":
    build() if sys.argv[1] == "build" else run(sys.argv[2])
