"""Fused attention (FlashAttention-2 style) on the mma.sync + cp.async path, and on sm_90 a BF16/FP16
forward and backward on TMA + wgmma (``build_hopper``, ``build_hopper_bwd``, FlashAttention-3 style): the
problem, the schedule, the configurator's derivation, the MLIR builders, compilation and the launcher.

    from nova.kernels.attention import AttentionProblem, configure_attention
    cfg = configure_attention(AttentionProblem(32, 8, 512, 512, 64, causal=True, dtype="bf16"), "h200")
    out, lse = nova.attention(q, k, v, causal=True)          # on a GPU machine
    dq, dk, dv = nova.attention_backward(dout, q, k, v, out, lse, causal=True)

Importing this package imports neither MLIR nor the CUDA driver.
"""
from nova.kernels.attention.problem import ATTN_DTYPES, HEAD_DIMS, AttentionProblem, AttentionProblemError
from nova.kernels.attention.schedule import ROLES, AttentionConfig, AttentionSchedule, KernelTile


def __getattr__(name):
    if name in ("configure_attention", "check_attention_schedule"):
        from nova.kernels.attention import derive
        return getattr(derive, name)
    if name in ("attention", "attention_backward"):
        from nova.kernels.attention import launch
        return getattr(launch, name)
    if name in ("compile_kernel", "precompile_attention", "attention_key"):
        from nova.kernels.attention import compile as _c
        return getattr(_c, name)
    raise AttributeError(f"module 'nova.kernels.attention' has no attribute {name!r}")


__all__ = ["AttentionProblem", "AttentionProblemError", "AttentionSchedule", "AttentionConfig", "KernelTile",
           "ATTN_DTYPES", "HEAD_DIMS", "ROLES", "configure_attention", "check_attention_schedule", "attention",
           "attention_backward", "compile_kernel", "precompile_attention", "attention_key"]
