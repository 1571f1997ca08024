"""Run fused attention on torch tensors: ``attention(q, k, v) -> (out, lse)`` and
``attention_backward(dout, q, k, v, out, lse) -> (dq, dk, dv)``.

Runtime only: no MLIR import.  The first call for a problem configures it (``derive.py``), looks its
kernels up in Nova's kernel cache by structural key (compiling on a miss unless offline:
``NOVA_OFFLINE=1`` raises ``NotPrecompiledError`` instead) and loads them; later calls reuse the
memoised kernels and only launch.  Kernels run on torch's current stream; nothing synchronises.

Layout: q ``[B, H, Tq, D]``, k and v ``[B, Hkv, Tk, D]`` (Hkv divides H: grouped-query attention),
torch float32 (TF32 tensor cores, round-to-nearest), bfloat16 or float16.  ``lse`` is
``[B, H, Tq]`` float32, natural log.  Non-contiguous inputs are made contiguous (a copy).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from nova.kernels.attention.problem import AttentionProblem

_DTYPES = {"torch.float32": "tf32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


@dataclass
class _Resolved:
    problem: AttentionProblem
    schedule: object
    kernels: dict            # role -> LoadedKernel


_memo: dict[tuple, _Resolved] = {}
_lock = threading.RLock()


def _resolve(problem: AttentionProblem, device_index, target, roles) -> _Resolved:
    from nova.runtime import driver
    from nova.runtime.matmul import resolve_target
    device = driver.get_device(device_index)
    model = resolve_target(target, device)
    memo = (problem, model.name, device.ordinal)
    hit = _memo.get(memo)
    if hit is not None and all(r in hit.kernels for r in roles):
        return hit
    with _lock:
        from nova.kernels.attention.compile import get_or_compile, summary
        from nova.kernels.attention.derive import configure_attention
        hit = _memo.get(memo)
        if hit is None:
            hit = _memo[memo] = _Resolved(problem, configure_attention(problem, model).schedule, {})
        for role in roles:
            if role not in hit.kernels:
                art, key, _ = get_or_compile(problem, hit.schedule, role, model)
                hit.kernels[role] = driver.load_kernel(art, device, summary(problem, role, model), key)
        return hit


def _problem(q, k, v, causal, scale) -> AttentionProblem:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be [B, H, T, D], got shape {list(t.shape)}")
        if not t.is_cuda:
            raise ValueError(f"{name} must be a CUDA tensor")
    if q.dtype != k.dtype or q.dtype != v.dtype or str(q.dtype) not in _DTYPES:
        raise ValueError(f"q, k, v must share one dtype of float32/bfloat16/float16, got {q.dtype}, {k.dtype}, {v.dtype}")
    B, H, Tq, D = q.shape
    Bk, Hkv, Tk, Dk = k.shape
    if tuple(v.shape) != tuple(k.shape) or Bk != B or Dk != D:
        raise ValueError(f"k and v must be [B, Hkv, Tk, D] matching q {list(q.shape)}: got {list(k.shape)}, {list(v.shape)}")
    return AttentionProblem(B, H, Tq, Tk, D, causal=bool(causal), dtype=_DTYPES[str(q.dtype)], kv_heads=Hkv,
                            scale=scale)


def _stream(t):
    import torch
    return torch.cuda.current_stream(t.device).cuda_stream


def _check_out(name, t, shape, dtype):
    if t is not None and (tuple(t.shape) != tuple(shape) or t.dtype != dtype or not t.is_contiguous()):
        raise ValueError(f"{name} must be a contiguous {dtype} tensor of shape {list(shape)}")
    return t


def _aligned(*ts):
    """cp.async and the paired stores need 16-byte aligned bases: copy a misaligned view."""
    return tuple(t if t.data_ptr() % 16 == 0 else t.clone() for t in ts)


def attention(q, k, v, causal: bool = False, scale: float | None = None, *, out=None, lse=None, target=None):
    """Fused attention forward; returns ``(out, lse)`` (written into ``out``/``lse`` when given)."""
    import torch
    p = _problem(q, k, v, causal, scale)
    q, k, v = _aligned(q.contiguous(), k.contiguous(), v.contiguous())
    r = _resolve(p, q.device.index, target, ("fwd",))
    out = _check_out("out", out, q.shape, q.dtype)
    lse = _check_out("lse", lse, (p.batch, p.heads, p.seq_q), torch.float32)
    out = torch.empty_like(q) if out is None else out
    lse = torch.empty((p.batch, p.heads, p.seq_q), dtype=torch.float32, device=q.device) if lse is None else lse
    r.kernels["fwd"].launch((q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr()), _stream(q))
    return out, lse


def attention_backward(dout, q, k, v, out, lse, causal: bool = False, scale: float | None = None, *,
                       dq=None, dk=None, dv=None, target=None):
    """Gradients of ``attention``: returns ``(dq, dk, dv)``.  Extra memory: one FP32 value per query row (D)."""
    import torch
    p = _problem(q, k, v, causal, scale)
    if tuple(dout.shape) != tuple(q.shape) or tuple(out.shape) != tuple(q.shape) or dout.dtype != q.dtype \
            or out.dtype != q.dtype:
        raise ValueError("dout and out must have q's shape and dtype")
    if tuple(lse.shape) != (p.batch, p.heads, p.seq_q) or lse.dtype != torch.float32:
        raise ValueError(f"lse must be float32 [B, H, Tq] = {[p.batch, p.heads, p.seq_q]}")
    q, k, v, dout, out, lse = _aligned(*(t.contiguous() for t in (q, k, v, dout, out, lse)))
    r = _resolve(p, q.device.index, target, ("bwd_pre", "bwd_dkv", "bwd_dq"))
    s = _stream(q)
    delta = torch.empty((p.batch, p.heads, p.seq_q), dtype=torch.float32, device=q.device)
    dq = torch.empty_like(q) if _check_out("dq", dq, q.shape, q.dtype) is None else dq
    dk = torch.empty_like(k) if _check_out("dk", dk, k.shape, k.dtype) is None else dk
    dv = torch.empty_like(v) if _check_out("dv", dv, v.shape, v.dtype) is None else dv
    r.kernels["bwd_pre"].launch((out.data_ptr(), dout.data_ptr(), delta.data_ptr()), s)
    qp, kp, vp, dop, lp, dp = q.data_ptr(), k.data_ptr(), v.data_ptr(), dout.data_ptr(), lse.data_ptr(), delta.data_ptr()
    r.kernels["bwd_dkv"].launch((qp, kp, vp, dop, lp, dp, dk.data_ptr(), dv.data_ptr()), s)
    r.kernels["bwd_dq"].launch((qp, kp, vp, dop, lp, dp, dq.data_ptr()), s)
    return dq, dk, dv


def reset() -> None:
    with _lock:
        _memo.clear()
