"""Dead-code elimination: keep a node only if one of its results reaches a graph output.

Rule: the outputs are the roots; walk the nodes backwards, and a node is live when any of its
results is read by a live node or is an output.  IR ops are value-semantic (no side effects, the
opaque ``aten`` op included), so nothing else keeps a node alive.  Graph inputs always stay (the
frontend's bindings index them) even when nothing reads them.
"""
from __future__ import annotations

from nova.ir.graph import Graph
from nova.passes.rewrite import Rewriter


def live_nodes(graph: Graph) -> list:
    """The nodes that reach an output, in program order."""
    needed = set(graph.output_values())
    live = []
    for node in reversed(graph.nodes):
        if any(v in needed for v in node.outputs):
            live.append(node)
            needed.update(node.inputs)
    live.reverse()
    return live


def dce(graph: Graph) -> Graph:
    """A new graph without the nodes whose results no output needs."""
    rw = Rewriter(graph)
    for node in live_nodes(graph):
        rw.copy(node)
    return rw.finish()
