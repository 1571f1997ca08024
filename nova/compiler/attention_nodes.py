"""The attention problem of an IR ``attention``/``attention_backward`` node: what the executor runs on
Nova's fused kernels and what ``explain`` prices (one statement for both)."""
from __future__ import annotations

from nova.ir.graph import Node


def attention_problem(node: Node):
    """The AttentionProblem of an ``attention``/``attention_backward`` node, or None when Nova's
    attention kernels do not cover it (its dtype or head dimension)."""
    from nova.kernels.attention import AttentionProblem, AttentionProblemError
    from nova.kernels.attention.problem import score_precision_for
    q, k = (node.inputs[0], node.inputs[1]) if node.op == "attention" else (node.inputs[1], node.inputs[2])
    dtype = {"f32": "tf32", "bf16": "bf16", "f16": "fp16"}.get(q.dtype)
    if dtype is None:
        return None
    b, h, t_q, d = q.shape
    precision = score_precision_for(dtype)        # a bad NOVA_ATTENTION_PRECISION is the user's error, not "uncovered"
    try:
        return AttentionProblem(b, h, t_q, k.shape[2], d, causal=bool(node.attrs.get("causal")), dtype=dtype,
                                kv_heads=k.shape[1], scale=float(node.attrs["scale"]), score_precision=precision)
    except AttentionProblemError:
        return None
