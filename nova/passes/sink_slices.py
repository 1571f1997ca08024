"""Slices sink through pointwise ops: ``slice(f(a, b))`` becomes ``f(slice(a), slice(b))``.

RoPE's backward computes ``dq * sin`` and then reads it only as two halves (rotate-half's
transpose, ``cat(g2, -g1)``).  When every reader of a pointwise result is a ``slice`` (step 1), the
result need not exist: each slice computes its own elements from slices of the op's operands -- the
same operations on the same elements (the slices are along one axis and do not overlap: nothing is
computed twice) -- and an operand that broadcasts along the sliced axis (extent 1 there, or an axis it lacks) is read
whole.  The fusion pass can then fold the concat of the halves into the kernel that reads it
(``storage.py``, rule -1): RoPE's backward becomes one kernel over ``dq`` where it was three.

A slice of a ``cast`` sinks through it whatever else reads the cast's result: the slice casts its own
elements again (one conversion an element, in the kernel that reads them) and reads the source, not
the cast's result -- under autocast RoPE's backward casts the bf16 ``dq`` to FP32 and reads it whole
(``dq * cos``) and by halves, so the halves are read from ``dq`` itself and the FP32 copy is never
written.

Applied until no such slice is left (a chain sinks one op a round).  Pointwise ops only: fills and
``iota`` (whose values depend on the coordinate) stay where they are.
"""
from __future__ import annotations

from nova.ir.graph import Graph, Node
from nova.ir.ops import kind
from nova.passes.dce import dce
from nova.passes.rewrite import Rewriter


def _sinkable(node: Node, users, outputs) -> bool:
    """``node`` is a step-1 slice of a pointwise result that only such slices read, along one axis and
    over disjoint ranges (each element computed once, as before)."""
    if node.op != "slice" or node.attrs.get("step", 1) != 1:
        return False
    (v,) = node.inputs
    p = v.producer
    readers = users.get(v, ())
    if p is not None and p.op == "cast" and v not in outputs:
        return True                                  # computed again for the slice, whoever else reads it
    if p is None or kind(p.op) != "pointwise" or len(p.outputs) != 1 or v in outputs or \
            not all(u.op == "slice" and u.attrs.get("step", 1) == 1 for u in readers):
        return False
    rank = v.type.rank
    if len({u.attrs["axis"] % rank for u in readers}) != 1:
        return False
    ranges = sorted((u.attrs["start"], u.attrs["end"]) for u in dict.fromkeys(readers))
    return all(a_end <= b_start for (_, a_end), (b_start, _) in zip(ranges, ranges[1:]))


def _sink_once(graph: Graph) -> Graph:
    users = graph.users()
    outputs = set(graph.output_values())
    sinking = [n for n in graph.nodes if _sinkable(n, users, outputs)]
    if not sinking:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node not in sinking:
            rw.copy(node)
            continue
        p = node.inputs[0].producer
        rank = node.outputs[0].type.rank
        axis = node.attrs["axis"] % rank
        args = []
        for a in p.inputs:
            x = rw.get(a)
            own = axis - (rank - a.type.rank)           # the operand's axis under NumPy broadcasting
            if own >= 0 and a.shape[own] != 1:
                (x,) = rw.emit("slice", [x], {"axis": own, "start": node.attrs["start"], "end": node.attrs["end"],
                                              "step": 1}, node.origin)
            args.append(x)
        (rw.env[node.outputs[0]],) = rw.emit(p.op, args, p.attrs, p.origin)
    return dce(rw.finish())


def sink_slices(graph: Graph) -> Graph:
    """``graph`` with every slice of a pointwise result that only slices read sunk through that op
    (module docstring); ``graph`` itself when there is none."""
    while True:
        sunk = _sink_once(graph)
        if sunk is graph:
            return graph
        graph = sunk
