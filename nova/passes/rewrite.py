"""The one piece of machinery the rewriting passes share: build a new graph from an old one.

A pass never mutates its input.  It walks the old graph in program order and, for each node,
either copies it (``copy``), emits something else (``emit``), or maps its results onto values that
already exist in the new graph (``env[old] = new``).  Inputs are recreated first, in order and with
their names and roles, so input indices (the frontend's bindings) stay valid; ``finish`` maps the
outputs, keeping names, roles and ``updates``.
"""
from __future__ import annotations

from nova.ir.graph import Graph, Node, Value
from nova.ir.ops import infer


class Rewriter:
    def __init__(self, graph: Graph):
        self.old = graph
        self.new = Graph(graph.name)
        self.env: dict[Value, Value] = {}
        for spec in graph.inputs:
            self.env[spec.value] = self.new.input(spec.value.type, spec.name, spec.role)

    def get(self, value: Value) -> Value:
        """The new graph's value standing for ``value`` of the old graph."""
        return self.env[value]

    def emit(self, op: str, inputs, attrs: dict, origin: str = "") -> list[Value]:
        """Append ``op(inputs)`` (inputs are new-graph values) to the new graph; its results."""
        inputs = tuple(inputs)
        node = Node(op, inputs, attrs, infer(op, [v.type for v in inputs], attrs), origin)
        self.new.nodes.append(node)
        return node.outputs

    def copy(self, node: Node) -> list[Value]:
        """Copy ``node`` with its inputs mapped; maps and returns its results."""
        outs = self.emit(node.op, [self.env[v] for v in node.inputs], node.attrs, node.origin)
        for old, new in zip(node.outputs, outs):
            self.env[old] = new
        return outs

    def finish(self) -> Graph:
        for o in self.old.outputs:
            self.new.output(self.env[o.value], o.name, o.role, o.updates)
        return self.new


def producer_op(value: Value) -> str | None:
    """The op that produced ``value`` (None for graph inputs)."""
    return value.producer.op if value.producer is not None else None
