"""The attention problem of an IR ``attention``/``attention_backward`` node: what the executor runs on
Nova's fused kernels and what ``explain`` prices (one statement for both)."""
from __future__ import annotations

from nova.ir.graph import Node


def attention_problem(node: Node):
    """The AttentionProblem of an ``attention``/``attention_backward`` node, or None when Nova's
    attention kernels do not cover it (its dtype or head dimension).  A bias input (the attention mask)
    is stated as a contiguous tensor of its own shape; the executor's launch takes the arena view's
    strides (``launch.plan_operands``)."""
    from nova.dtypes import MODE_OF_STORAGE
    from nova.kernels.attention import AttentionProblem, AttentionProblemError
    from nova.kernels.attention.problem import score_precision_for
    q, k = (node.inputs[0], node.inputs[1]) if node.op == "attention" else (node.inputs[1], node.inputs[2])
    dtype = MODE_OF_STORAGE.get(q.dtype)
    if dtype is None:
        return None
    b, h, t_q, d = q.shape
    precision = score_precision_for(dtype)        # a bad NOVA_ATTENTION_PRECISION is the user's error, not "uncovered"
    bias = node.inputs[3] if node.op == "attention" and len(node.inputs) == 4 else \
        node.inputs[6] if node.op == "attention_backward" and len(node.inputs) == 7 else None
    try:
        return AttentionProblem(b, h, t_q, k.shape[2], d, causal=bool(node.attrs.get("causal")), dtype=dtype,
                                kv_heads=k.shape[1], scale=float(node.attrs["scale"]), score_precision=precision,
                                bias=() if bias is None else dense_bias_strides(bias.shape))
    except AttentionProblemError:
        return None


def dense_bias_strides(shape) -> tuple[int, ...]:
    """Element strides of a contiguous ``[B|1, H|1, Tq|1, Tk]`` bias, 0 on its size-1 (broadcast) axes."""
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step if n > 1 else 0)
        step *= n
    return tuple(reversed(out))
