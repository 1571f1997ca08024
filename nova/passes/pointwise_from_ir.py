"""The problem statement of a fused pointwise kernel from the IR: a fusion group's nodes (or the CLI's
expression, parsed into a graph by ``nova.passes.pointwise_expression``) as the canonical ``PointwiseProblem``
of ``nova/kernels/pointwise`` (program built and canonicalised there, ``canonical.py``).

    pointwise_problem(group.nodes, group.inputs, group.outputs, strides_of, offset_of)   # outputs too
    concat_problem(node, strides_of, offset_of)       # a concat no kernel assembled in place: one kernel
    copy_problem(node, layout)                        # a reshape that is not a view: one copy kernel
    expression_problem("gelu_tanh(x)+y", (16384, 2048), "bf16")
    kernel_operands(group.nodes, group.inputs)        # the values such a kernel takes, argument order

Besides the pointwise ops and fills, a group may hold ``iota`` fills along its last axis (the value is
the element's index) and ``index_select`` of a one-axis table (``is_table_gather``: a ``gather`` of a
table input at an index computed in the group, the masks' vmapped indexing).
"""
from __future__ import annotations

import math

from nova.ir.ops import kind
from nova.kernels.pointwise.canonical import Builder, canonical_problem
from nova.kernels.pointwise.problem import (Operand, PointwiseProblem, PointwiseProblemError, alignment,
                                            broadcast_strides, iteration_shape, overlap_reason,
                                            row_major, table_operand, windowed_operand)
from nova.kernels.pointwise.types import FLOAT_TYPES


def is_table_gather(node) -> bool:
    """An ``index_select`` of a one-axis table: ``out[i...] = table[index[i...]]``, element by element
    over the index (a gather in a pointwise kernel; tables with rows are the embedding family's)."""
    return node.op == "index_select" and node.inputs[0].type.rank == 1


def is_fill(v) -> bool:
    """A value filled with one constant (any shape)."""
    return v.producer is not None and v.producer.op == "constant"


def piece_contexts(nodes) -> dict:
    """``{node: (concat, piece index)}`` for the nodes of a group that compute an input of a concat
    folded into the group (``storage.py``, rule -1): each is evaluated at its piece's coordinates,
    its inputs read through windows; the others (``None``) at the group's own.  Constant fills are
    the same everywhere (no context)."""
    produced = {v: n for n in nodes for v in n.outputs}
    contexts: dict = {}
    for c in nodes:
        if c.op != "concat":
            continue
        for i, (x, _) in enumerate(concat_pieces(c)):
            stack = [x]
            while stack:
                n = produced.get(stack.pop())
                if n is None or n.op == "constant":
                    continue
                if n in contexts and contexts[n] != (c, i):
                    raise PointwiseProblemError(f"{n.op} computes parts of two pieces of a concat")
                if n not in contexts:
                    contexts[n] = (c, i)
                    stack.extend(n.inputs)
    return contexts


def operand_uses(nodes, inputs) -> list:
    """``(value, context)`` of each operand a group's kernel reads, in argument order: each of the
    ``inputs`` (literals aside) where the group's own coordinates read it (``None``), then at each
    folded concat's pieces (``(concat, piece index)``: read through the piece's window) -- the same
    value twice where it is read both ways.  The problem statement and the executor's binding
    (``kernel_operands``) both take them from here."""
    literals = set(literal_inputs(inputs))
    external = set(inputs)
    contexts = piece_contexts(nodes)
    uses: dict = {}                 # (value, context) in first-read order

    def use(v, context):
        if v in external and v not in literals and not is_fill_in(v, nodes):
            uses.setdefault((v, context), None)
    for n in nodes:
        if n.op == "concat" and len(nodes) > 1:
            for i, (x, _) in enumerate(concat_pieces(n)):
                use(x, (n, i))
            continue
        for v in n.inputs:
            use(v, contexts.get(n))
    return list(uses)


def is_fill_in(v, nodes) -> bool:
    """``v`` is a constant fill computed by one of ``nodes`` (a literal of the program)."""
    return v.producer is not None and v.producer.op == "constant" and v.producer in nodes


def program_of(nodes, inputs, outputs, shape=None):
    """The expression DAG of a fusion group over the iteration ``shape``: ``(builder, [Expr of each
    output])``.  ``inputs``: the kernel's operands in order, each a value or a ``(value, context)``
    of ``operand_uses``; a folded concat selects, by an ``iota`` along its axis, the value of the
    piece whose slice holds the element, each piece computed in its own context."""
    b = Builder()
    uses = [u if isinstance(u, tuple) else (u, None) for u in inputs]
    env = {(v, context): b.input(k, v.dtype) for k, (v, context) in enumerate(uses)}
    contexts = piece_contexts(nodes)

    def read(v, context, node):
        for key in ((v, context), (v, None)):
            if key in env and (key[1] == context or is_fill(v)):
                return env[key]
        raise PointwiseProblemError(f"{node.op} reads {v.type}, which is neither an input nor computed in the group")
    for node in nodes:
        out = node.outputs[0]
        context = contexts.get(node)
        if context is not None and (node.op in ("iota", "concat") or is_table_gather(node)):
            raise PointwiseProblemError(f"{node.op} computes a piece of a concat (its coordinates are the concat's)")
        if node.op == "constant":
            value = b.const(node.attrs["value"], out.dtype)
        elif node.op == "iota":
            length, start, step = node.attrs["length"], node.attrs.get("start", 0), node.attrs.get("step", 1)
            if length == 1:
                value = b.const(start, out.dtype)
            elif shape is None or not shape or shape[-1] != length:
                raise PointwiseProblemError(f"an iota fill of {length} elements does not run along the last "
                                            f"axis of the iteration shape {list(shape or ())}")
            else:
                value = b.iota(start, step, length, 1, out.dtype)
        elif is_table_gather(node):
            table, index = node.inputs
            if (table, None) not in env:
                raise PointwiseProblemError(f"index_select gathers from {table.type}, which is computed in the group")
            value = b.make("gather", [env[(table, None)], read(index, None, node)], (), out.dtype)
        elif node.op == "concat":
            if shape is None or tuple(out.shape) != tuple(shape):
                raise PointwiseProblemError(f"a concat of {out.type} in a kernel over {list(shape or ())}")
            value = _select_pieces(b, node, [(start, read(x, (node, i), node))
                                             for i, (x, start) in enumerate(concat_pieces(node))])
        elif kind(node.op) == "pointwise":
            value = b.make(node.op, [read(v, context, node) for v in node.inputs], node.attrs.items(), out.dtype)
        else:
            raise PointwiseProblemError(f"{node.op} is not a pointwise op")
        env[(out, context)] = value
    for v in outputs:
        if (v, None) not in env:
            raise PointwiseProblemError(f"{v.type} is written but computed only as a piece of a concat")
    return b, [env[(v, None)] for v in outputs]


def _select_pieces(b, node, pieces):
    """``where(c < end_0, piece_0, where(c < end_1, piece_1, ...))`` along the concat's axis: ``pieces``
    are ``(start, Expr)``."""
    out = node.outputs[0]
    shape = tuple(out.shape)
    axis = node.attrs["axis"] % len(shape)
    position = b.iota(0, 1, shape[axis], math.prod(shape[axis + 1:]), "i64")
    value = pieces[-1][1]
    for (_, piece), (end, _) in reversed(list(zip(pieces, pieces[1:]))):
        inside = b.make("lt", [position, b.const(end, "i64")], (), "bool")
        value = b.make("where", [inside, piece, value], (), out.dtype)
    return value


def literal_inputs(inputs) -> list:
    """The ``inputs`` a kernel reads as literals, not operands: one-element ``constant`` fills (a
    value CSE shares between groups, such as GELU's 0.044715 in the forward and in its recomputed
    backward).  Folded into the program they reach the canonical rewrites (``pow(x, 3)`` as ``x*x*x``,
    GELU written op by op as ``gelu_tanh``) and cost no load.  The problem statement and the
    executor's binding both take them from here."""
    return [v for v in inputs if v.producer is not None and v.producer.op == "constant" and v.type.numel == 1]


def pointwise_problem(nodes, inputs, outputs, strides_of, offset_of=None, written_at=None,
                      root_of=None) -> PointwiseProblem:
    """The problem of a fusion group: ``nodes`` (pointwise ops and constant fills, program order; a
    folded concat with the nodes of its pieces), the values it reads (``inputs``) and writes
    (``outputs``); ``strides_of(value)`` gives an input's element strides as the kernel will see it,
    ``offset_of(value)`` its storage offset in elements (for the base alignment; default 0);
    ``written_at(value)`` an output's ``(strides, offset)`` where the kernel writes it (its slice of a
    concat's buffer, its axes in another order: ``nova/passes/storage.py``), None (or no
    ``written_at``) for contiguous; ``root_of(value)`` the value whose storage it views (for
    ``shared_reads``: the operands of one root read its region's elements at most once; default: none
    shared).  The ``literal_inputs`` are folded into the program, the others are the kernel's operands
    in the order of ``operand_uses``.  Raises ``PointwiseProblemError`` naming what no kernel of this
    family does."""
    uses = operand_uses(nodes, inputs)
    literals = literal_inputs(inputs)
    nodes = [v.producer for v in literals] + list(nodes)
    shape = iteration_shape(outputs)
    tables = {n.inputs[0] for n in nodes if is_table_gather(n)}
    elementwise = {v for n in nodes for v in (n.inputs[1:] if is_table_gather(n) else n.inputs)}
    for v in tables & elementwise:
        raise PointwiseProblemError(f"{v.type} is read both as a gathered table and element by element")
    offset_of = offset_of if offset_of is not None else (lambda v: 0)

    def operand(v, strides, offset, context=None) -> Operand:
        align = alignment(offset * v.type.itemsize)
        if v in tables:
            return table_operand(v.dtype, v.shape, tuple(strides), shape, align)
        if context is None:
            return Operand(v.dtype, broadcast_strides(v.shape, tuple(strides), shape), align)
        concat, i = context
        piece, start = concat_pieces(concat)[i]
        strides = broadcast_strides(v.shape, tuple(strides), piece.shape)
        if tuple(piece.shape) == tuple(shape):
            return Operand(v.dtype, strides, align)
        return windowed_operand(v.dtype, piece.shape, strides, shape, start, align,
                                axis=concat.attrs["axis"] % concat.outputs[0].type.rank)
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
    operands = tuple(operand(v, strides_of(v), offset_of(v), context) for v, context in uses)
    return canonical_problem(shape, operands, program_of(nodes, uses, outputs, shape), tuple(stores),
                             shared_reads(uses, operands, shape, root_of, offset_of))


def shared_reads(uses, operands, shape, root_of, offset_of) -> tuple:
    """``PointwiseProblem.shared_reads``: for each root read by several operands, one of them through
    a window, ``(elements, operand indices)`` with the elements the union of their spans covers."""
    if root_of is None:
        return ()
    by_root: dict = {}
    for k, (v, _) in enumerate(uses):
        by_root.setdefault(root_of(v), []).append(k)
    found = []
    for members in by_root.values():
        if len(members) < 2 or all(operands[k].window is None for k in members):
            continue
        spans = sorted((offset_of(uses[k][0]), offset_of(uses[k][0]) + operands[k].span(shape)) for k in members)
        covered, end = 0, None
        for lo, hi in spans:
            if end is None or lo >= end:
                covered += hi - lo
                end = hi
            elif hi > end:
                covered += hi - end
                end = hi
        found.append((covered, tuple(members)))
    return tuple(found)


def concat_pieces(node) -> list:
    """``(value, start)`` of each input of a ``concat`` that covers part of its axis (empty ones aside)."""
    axis = node.attrs["axis"] % node.outputs[0].type.rank
    pieces, start = [], 0
    for x in node.inputs:
        if x.shape[axis]:
            pieces.append((x, start))
        start += x.shape[axis]
    return pieces


def kernel_operands(nodes, inputs) -> list:
    """The values a group's Nova pointwise kernel takes as its inputs, in argument order: a concat
    kernel's inputs one per occurrence (constant fills aside: literals), else the values of
    ``operand_uses`` (the group's ``inputs`` less the ``literal_inputs``, a value read through a folded
    concat's window again).  The problem statements and the executor's binding both read it."""
    if len(nodes) == 1 and nodes[0].op == "concat":
        return [x for x, _ in concat_pieces(nodes[0]) if not is_fill(x)]
    return [v for v, _ in operand_uses(nodes, inputs)]


def concat_problem(node, strides_of, offset_of=None) -> PointwiseProblem:
    """A ``concat`` as one kernel over its result: each input an operand ``Window``ed to its slice of
    the axis (read in place at ``strides_of(x)``, ``offset_of(x)`` elements into its buffer), constant
    fills literals, and each element selected from the input whose slice holds it by an ``iota``
    along the axis (``where(c < end_0, in0, where(c < end_1, in1, ...))``); written contiguous."""
    out = node.outputs[0]
    shape = tuple(out.shape)
    if not math.prod(shape):
        raise PointwiseProblemError("an empty concat")
    axis = node.attrs["axis"] % len(shape)
    offset_of = offset_of if offset_of is not None else (lambda v: 0)
    b = Builder()
    operands, pieces = [], []
    for x, start in concat_pieces(node):
        if is_fill(x):
            pieces.append((start, b.const(x.producer.attrs["value"], x.dtype)))
            continue
        align = alignment(offset_of(x) * x.type.itemsize)
        if x.shape[axis] == shape[axis]:
            operand = Operand(x.dtype, broadcast_strides(x.shape, tuple(strides_of(x)), shape), align)
        else:
            operand = windowed_operand(x.dtype, x.shape, strides_of(x), shape, start, align, axis=axis)
        pieces.append((start, b.input(len(operands), x.dtype)))
        operands.append(operand)
    return canonical_problem(shape, tuple(operands), (b, [_select_pieces(b, node, pieces)]))


def copy_problem(node, layout) -> PointwiseProblem:
    """A ``reshape`` whose input (at ``layout``: shape, strides, offset) is no strided view of its
    result: one kernel over the input's shape that reads it in place and writes it contiguous, the
    result's own row-major order."""
    x = node.inputs[0]
    b = Builder()
    operand = Operand(x.dtype, broadcast_strides(layout.shape, tuple(layout.strides), tuple(layout.shape)),
                      alignment(layout.offset * x.type.itemsize))
    shape = tuple(layout.shape)
    if not math.prod(shape):
        raise PointwiseProblemError("an empty copy")
    return canonical_problem(shape, (operand,), (b, [b.input(0, x.dtype)]))


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
