"""Common-subexpression elimination: one node per distinct computation.

Rule: two nodes are the same computation when they have the same op, the same input values
(after earlier merges) and equal attributes; the later one is dropped and its results read from
the first.  Attributes compare by type and exact value (1, 1.0 and True differ; floats by their
bits); a ``constant``'s value is first converted to its element type, so constants are
deduplicated by value, dtype and shape (1 and 1.0 in f32 merge, 0.0 and -0.0 do not).  Commutative binary ops
compare their inputs as a set, so ``add(a, b)`` and ``add(b, a)`` merge.  The opaque ``aten`` op is
never merged: the IR does not know whether it is deterministic (dropout, random numbers).
"""
from __future__ import annotations

from nova.ir.graph import Graph
from nova.ir.ops import kind
from nova.ir.types import FLOAT_TYPES
from nova.passes.rewrite import Rewriter

COMMUTATIVE = frozenset({"add", "mul", "maximum", "minimum", "eq", "ne", "logical_and", "logical_or"})


def attr_key(value):
    """A hashable key that tells apart values Python calls equal (1 == 1.0 == True)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, (tuple, list)):
        return ("seq", tuple(attr_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, attr_key(v)) for k, v in value.items())))
    return (type(value).__name__, value)


def constant_value(value, dtype: str):
    """A constant's value as its element type holds it: 1 and 1.0 fill an f32 tensor alike."""
    if dtype == "bool":
        return bool(value)
    if dtype in FLOAT_TYPES:
        return float(value)
    return int(value)


def node_key(op: str, inputs, attrs: dict):
    if op == "constant":
        attrs = dict(attrs, value=constant_value(attrs["value"], attrs["dtype"]), shape=tuple(attrs.get("shape", ())))
    ids = [id(v) for v in inputs]
    if op in COMMUTATIVE and len(ids) == 2:
        ids.sort()
    return op, tuple(ids), tuple(sorted((k, attr_key(v)) for k, v in attrs.items()))


def cse(graph: Graph) -> Graph:
    """A new graph where each distinct computation appears once."""
    rw = Rewriter(graph)
    seen: dict = {}
    for node in graph.nodes:
        inputs = [rw.get(v) for v in node.inputs]
        if kind(node.op) == "opaque":
            rw.copy(node)
            continue
        key = node_key(node.op, inputs, node.attrs)
        if key in seen:
            for old, new in zip(node.outputs, seen[key]):
                rw.env[old] = new
        else:
            seen[key] = rw.copy(node)
    return rw.finish()
