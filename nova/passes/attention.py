"""Which attention nodes run on Nova's fused attention kernels (``nova/kernels/attention``): decided
once, here, for the fusion pass; the executor launches what the plan says and ``explain`` prices it.

An ``attention``/``attention_backward`` node gets ``kernel="nova"`` and its ``AttentionProblem``
(``Group.problem``) when the plan may use Nova's attention (``NOVA_ATTENTION=nova``, the default:
``nova.kernels.switch``), the kernels cover its dtype and head dimension, and a causal mask needs
no offset (T_q = T_k: the IR masks bottom-right, the kernels top-left).  Otherwise it stays on ATen
(the SDPA kernels, or the IR reference where those differ), its reason saying why.  The problem
states its operands dense; the executor's launch takes the strides of the arena views it binds
(``nova.kernels.attention.launch.plan_operands``).
"""
from __future__ import annotations

from nova.ir.graph import Node

ATTENTION_OPS = ("attention", "attention_backward")


def attention_problem(node: Node):
    """The AttentionProblem of an ``attention``/``attention_backward`` node, or None when Nova's
    attention kernels do not cover it (its dtype or head dimension).  A bias input (the attention mask)
    is stated as a contiguous tensor of its own shape."""
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


def select_attention(group, enabled: bool) -> str:
    """Give attention ``group`` (one node) Nova's kernels when they run it (module docstring): set
    ``kernel="nova"`` and ``problem``; return "" then, else why it stays on ATen."""
    node = group.nodes[0]
    if not enabled:
        return "NOVA_ATTENTION=aten"
    problem = attention_problem(node)
    if problem is None:
        q = node.inputs[0] if node.op == "attention" else node.inputs[1]
        return f"Nova's attention kernels do not cover {q.type} (dtype or head dimension)"
    if problem.causal and problem.seq_q != problem.seq_k:
        return "causal with T_q != T_k: the IR masks bottom-right, Nova's kernels top-left"
    group.kernel, group.problem = "nova", problem
    return ""
