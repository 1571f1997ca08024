"""The verifier: a graph is well formed when every value is defined before use, every node's
result types are what its op infers from its inputs, and outputs name real inputs they update."""
from __future__ import annotations

from nova.ir.ops import infer
from nova.ir.types import IRError


def verify(graph) -> None:
    """Raise ``IRError`` naming the first problem (node index, op and origin)."""
    defined = {i.value for i in graph.inputs}
    if len(defined) != len(graph.inputs):
        raise IRError(f"graph {graph.name}: an input value is listed twice")
    for index, node in enumerate(graph.nodes):
        where = f"node {index} ({node.op}{', ' + node.origin if node.origin else ''})"
        for v in node.inputs:
            if v not in defined:
                raise IRError(f"{where} reads a value defined later or not in this graph: {v}")
        try:
            expected = infer(node.op, [v.type for v in node.inputs], node.attrs)
        except IRError as e:
            raise IRError(f"{where}: {e}") from None
        actual = [v.type for v in node.outputs]
        if expected != actual:
            raise IRError(f"{where}: result types {', '.join(map(str, actual))} but the op infers "
                          f"{', '.join(map(str, expected))}")
        for i, v in enumerate(node.outputs):
            if v.producer is not node or v.index != i:
                raise IRError(f"{where}: result {i} does not point back to its node")
            defined.add(v)
    for o in graph.outputs:
        if o.value not in defined:
            raise IRError(f"graph {graph.name}: output {o.name!r} is not defined in the graph")
        if o.updates is not None:
            if not 0 <= o.updates < len(graph.inputs):
                raise IRError(f"graph {graph.name}: output {o.name!r} updates input {o.updates}, which does not exist")
            target = graph.inputs[o.updates].value.type
            if target != o.value.type:
                raise IRError(f"graph {graph.name}: output {o.name!r} ({o.value.type}) updates input "
                              f"{graph.inputs[o.updates].name!r} of another type ({target})")
