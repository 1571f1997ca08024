"""The problem statement of a fused pointwise kernel from the IR: a fusion group's nodes (or the CLI's
expression, parsed into a graph by ``nova.passes.pointwise_expression``) as the canonical ``PointwiseProblem``
of ``nova/kernels/pointwise`` (program built and canonicalised there, ``canonical.py``).

    pointwise_problem(group.nodes, group.inputs, group.outputs, strides_of, offset_of)   # outputs too
    expression_problem("gelu_tanh(x)+y", (16384, 2048), "bf16")
"""
from __future__ import annotations

from nova.ir.ops import kind
from nova.kernels.pointwise.canonical import Builder, canonical_problem
from nova.kernels.pointwise.problem import (Operand, PointwiseProblem, PointwiseProblemError, alignment,
                                            broadcast_strides, iteration_shape, overlap_reason,
                                            row_major)
from nova.kernels.pointwise.types import FLOAT_TYPES


def program_of(nodes, inputs, outputs):
    """The expression DAG of a fusion group: ``(builder, [Expr of each output])``."""
    b = Builder()
    env = {v: b.input(k, v.dtype) for k, v in enumerate(inputs)}
    for node in nodes:
        out = node.outputs[0]
        if node.op == "constant":
            env[out] = b.const(node.attrs["value"], out.dtype)
        elif node.op == "iota":
            if node.attrs["length"] != 1:
                raise PointwiseProblemError("an iota fill longer than one element (its value depends on the index)")
            env[out] = b.const(node.attrs.get("start", 0), out.dtype)
        elif kind(node.op) == "pointwise":
            missing = [v for v in node.inputs if v not in env]
            if missing:
                raise PointwiseProblemError(f"{node.op} reads {missing[0].type}, which is neither an input nor "
                                            "computed in the group")
            env[out] = b.make(node.op, [env[v] for v in node.inputs], node.attrs.items(), out.dtype)
        else:
            raise PointwiseProblemError(f"{node.op} is not a pointwise op")
    return b, [env[v] for v in outputs]


def literal_inputs(inputs) -> list:
    """The ``inputs`` a kernel reads as literals, not operands: one-element ``constant`` fills (a
    value CSE shares between groups, such as GELU's 0.044715 in the forward and in its recomputed
    backward).  Folded into the program they reach the canonical rewrites (``pow(x, 3)`` as ``x*x*x``,
    GELU written op by op as ``gelu_tanh``) and cost no load.  The problem statement and the
    executor's binding both take them from here."""
    return [v for v in inputs if v.producer is not None and v.producer.op == "constant" and v.type.numel == 1]


def pointwise_problem(nodes, inputs, outputs, strides_of, offset_of=None, written_at=None) -> PointwiseProblem:
    """The problem of a fusion group: ``nodes`` (pointwise ops and constant fills, program order), the
    values it reads (``inputs``, that order is the kernel's argument order) and writes (``outputs``);
    ``strides_of(value)`` gives an input's element strides as the kernel will see it, ``offset_of(value)``
    its storage offset in elements (for the base alignment; default 0); ``written_at(value)`` an
    output's ``(strides, offset)`` where the kernel writes it (its slice of a concat's buffer, its axes
    in another order: ``nova/passes/storage.py``), None (or no ``written_at``) for contiguous.  The
    ``literal_inputs`` are folded into the program, the others are the kernel's operands in order.  Raises
    ``PointwiseProblemError`` naming what no kernel of this family does."""
    literals = literal_inputs(inputs)
    nodes = [v.producer for v in literals] + list(nodes)
    inputs = [v for v in inputs if v not in literals]
    shape = iteration_shape(outputs)

    def operand(v, strides, offset) -> Operand:
        return Operand(v.dtype, broadcast_strides(v.shape, tuple(strides), shape), alignment(offset * v.type.itemsize))
    stores = []
    for v in outputs:
        at = written_at(v) if written_at is not None else None
        if at is None:
            stores.append(Operand(v.dtype, row_major(shape)))
            continue
        if tuple(v.shape) != tuple(shape):
            raise PointwiseProblemError(f"output {v.type} is written strided over the iteration shape {list(shape)}")
        store = operand(v, *at)
        why = overlap_reason(shape, store.strides)
        if why:
            raise PointwiseProblemError(f"output {v.type}: {why}")
        stores.append(store)
    offset_of = offset_of if offset_of is not None else (lambda v: 0)
    return canonical_problem(shape, tuple(operand(v, strides_of(v), offset_of(v)) for v in inputs),
                             program_of(nodes, inputs, outputs), tuple(stores))


def expression_problem(text: str, shape, dtype: str = "f32") -> PointwiseProblem:
    """The problem of ``text`` (``"gelu_tanh(x)+y"``: names are inputs of ``shape`` and ``dtype``, in
    order of first appearance, contiguous; functions are IR op names; numbers are constants; ``**``,
    ``*``, ``/``, ``+``, ``-`` and parentheses)."""
    from nova.passes.pointwise_expression import parse
    if dtype not in FLOAT_TYPES:
        raise PointwiseProblemError(f"dtype must be one of {', '.join(FLOAT_TYPES)}, got {dtype!r}")
    graph, names, result = parse(text, tuple(int(d) for d in shape), dtype)
    contiguous = {v: row_major(v.shape) for v in names}
    return pointwise_problem(graph.nodes, names, [result], contiguous.__getitem__)
