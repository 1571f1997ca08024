"""Which groups run on Nova's rows kernels (``nova/kernels/rows``): decided once, here, for the fusion pass.

A composite group (layer_norm(+backward), rms_norm(+backward), softmax / log_softmax (+backward), cross_entropy(+backward))
or a ``reduction`` group whose nodes ``nova.passes.rows_from_ir.from_group`` states as one
``RowsProblem`` gets ``kernel="nova"``, the problem (``Group.problem``) and which value each of its
operands is (``Group.bindings``); any other composite or reduction group stays on ATen, its reason
saying why.  (nll_loss alone stays on ATen: the cross-entropy pass fuses it with its log_softmax.)
"""
from __future__ import annotations

ROWS_COMPOSITES = ("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward", "softmax", "log_softmax", "softmax_backward",
                   "log_softmax_backward", "cross_entropy", "cross_entropy_backward")


def select_rows(group, layouts) -> str:
    """Make ``group`` a Nova rows group where the family computes it; returns why not ('' when it does,
    or when the group is no candidate)."""
    if group.kernel != "aten" or group.kind not in ("composite", "reduction"):
        return ""
    if group.kind == "composite" and group.head.op not in ROWS_COMPOSITES:
        return ""
    from nova.passes.rows_from_ir import from_group
    problem, bindings, why = from_group(group.nodes, group.inputs, group.outputs, layouts)
    if problem is None:
        return why
    group.kernel, group.problem, group.bindings = "nova", problem, bindings
    return ""


def rows_reason(group, reason: str, why_not: str) -> str:
    """The group's reason with what runs it: the rows problem, or why it stays on ATen."""
    if group.kernel == "nova" and group.problem is not None and group.kind != "gemm":
        return f"{reason}; one Nova rows kernel: {group.problem.describe()}"
    if why_not:
        return f"{reason}; ATen (rows kernels: {why_not})"
    return reason
