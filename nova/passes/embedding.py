"""Which groups run on Nova's embedding kernels (``nova/kernels/embedding``): decided once, here, for the
fusion pass.

An ``index_select`` on axis 0 of a table whose rows are contiguous (the embedding lookup) and a
``scatter_add`` on axis 0 into a fresh ``[vocab, dim]`` table (its backward) get ``kernel="nova"``, their
``EmbeddingProblem`` (``Group.problem``: the index view's strides from the layout analysis, read in
place) and which value each operand is (``Group.bindings``).  Any other gather or scatter stays on ATen,
its reason saying why.
"""
from __future__ import annotations

import dataclasses
import math

EMBEDDING_OPS = ("index_select", "scatter_add")


def embedding_problem(node, layouts):
    """``(EmbeddingProblem, bindings, '')`` of an ``index_select``/``scatter_add`` node, or ``(None, {}, why)``."""
    from nova.kernels.embedding.problem import FLOAT_DTYPES, INDEX_DTYPES, EmbeddingProblem, EmbeddingProblemError
    rows_in, index = node.inputs
    out = node.outputs[0]
    forward = node.op == "index_select"
    table_type = rows_in.type if forward else out.type
    if node.attrs.get("axis", 0) % table_type.rank != 0:
        return None, {}, "the kernels gather and scatter along axis 0 only"
    if table_type.rank < 2:
        return None, {}, "the table has no row axis besides the indexed one"
    if out.dtype not in FLOAT_DTYPES or rows_in.dtype != out.dtype:
        return None, {}, f"rows of {rows_in.type} -> {out.type} (f32, bf16 or f16 rows)"
    if index.dtype not in INDEX_DTYPES:
        return None, {}, f"indices of {index.dtype}"
    dim = math.prod(table_type.shape[1:])
    lay, ilay = layouts[rows_in], layouts[index]
    count = index.type.numel
    # the row stack read (the table, or dy): each row contiguous, rows one stride apart
    stack = (table_type.shape[0],) if forward else index.shape
    if not lay.dense and not _rows_strided(lay, len(stack), dim):
        return None, {}, f"the rows read are not contiguous ({lay.describe()})"
    stride = dim if lay.dense else lay.strides[len(stack) - 1]
    align = _align(lay.offset * rows_in.type.itemsize)
    if layouts[out].offset * out.type.itemsize % 16 or not layouts[out].dense:
        return None, {}, f"the result is not a dense 16-byte aligned buffer ({layouts[out].describe()})"
    try:
        problem = EmbeddingProblem("forward" if forward else "backward", count, table_type.shape[0], dim, out.dtype,
                                   index.dtype, tuple(ilay.shape), tuple(ilay.strides), stride, align)
    except EmbeddingProblemError as e:
        return None, {}, str(e)
    bindings = {"idx": index, "table": rows_in, "out": out} if forward else {"idx": index, "dy": rows_in, "grad": out}
    return problem, bindings, ""


def _rows_strided(lay, stack_axes: int, dim: int) -> bool:
    """The stack's axes one stride apart (merged) and each row's ``dim`` elements contiguous."""
    inner = lay.shape[stack_axes:]
    if any(n != 1 and s != e for n, s, e in zip(inner, lay.strides[stack_axes:], _contiguous(inner))):
        return False
    span = None
    for n, s in reversed(list(zip(lay.shape[:stack_axes], lay.strides[:stack_axes]))):
        if n == 1:
            continue
        if span is not None and s != span:
            return False
        span = s * n
    return True


def _contiguous(shape) -> tuple:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


def _align(byte_offset: int) -> int:
    align = 16
    while align > 1 and byte_offset % align:
        align //= 2
    return align


def base_add(scatter, add):
    """The value ``add`` adds to ``scatter``'s result when the pair is a base the backward kernel adds as
    it writes each row: a ``[vocab, dim]`` of the result's type; else None."""
    grad = scatter.outputs[0]
    if scatter.op != "scatter_add" or add.op != "add" or grad not in add.inputs or add.inputs[0] is add.inputs[1]:
        return None
    other = add.inputs[1] if add.inputs[0] is grad else add.inputs[0]
    if other.type != grad.type or add.outputs[0].type != grad.type:
        return None
    return other


def select_embedding(group, layouts) -> str:
    """Make ``group`` a Nova embedding group where the family computes it; returns why not ('' when it does,
    or when the group is no candidate).  A backward group may end in the add of a base (``base_add``),
    which the kernel adds to each row's sum as it writes it."""
    head = group.head
    if group.kernel != "aten" or group.kind != "composite" or head.op not in EMBEDDING_OPS:
        return ""
    problem, bindings, why = embedding_problem(head, layouts)
    if problem is None:
        return why
    rest = [n for n in group.nodes if n is not head]       # the add of a base
    if rest:
        base = base_add(head, rest[0]) if len(rest) == 1 else None
        out = rest[-1].outputs[0]
        if base is None or not layouts[base].dense or layouts[base].offset * base.type.itemsize % 16 \
                or layouts[out].offset * out.type.itemsize % 16 or not layouts[out].dense:
            return "the nodes after the scatter-add are not the add of a dense, aligned base"
        problem = dataclasses.replace(problem, base=base.dtype)
        bindings = {**bindings, "base": base, "grad": out}
    group.kernel, group.problem, group.bindings = "nova", problem, bindings
    return ""


def embedding_reason(group, reason: str, why_not: str) -> str:
    """The group's reason with what runs it: the embedding problem, or why it stays on ATen."""
    if group.kernel == "nova" and group.problem is not None:
        how = "; one Nova gather kernel: " if group.problem.direction == "forward" else \
            "; Nova kernels (stable radix sort of the indices, rows added in index order: deterministic): "
        return reason + how + group.problem.describe()
    return f"{reason}; ATen (embedding kernels: {why_not})" if why_not else reason
