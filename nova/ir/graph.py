"""The graph: values, nodes and one function-like ``Graph`` with typed inputs and outputs.

Value semantics: a node never mutates its inputs; every result is a new value.  State updates
(new parameters, new optimizer moments) are outputs that name the input they replace
(``Output.updates``); the memory planner turns them back into in-place writes (donation).

    g = Graph("step")
    x = g.input(TensorType((4, 8), "f32"), "x", role="data")
    w = g.input(TensorType((16, 8), "f32"), "w", role="param")
    y = g.op("matmul", x, w, transpose_b=True)          # f32[4,16]
    g.output(y, "y")
    print(g)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nova.ir.types import IRError, TensorType

# What an input of a graph is, for the planner and for binding results back to the user's objects.
INPUT_ROLES = ("param", "grad", "opt_state", "data", "const")
OUTPUT_ROLES = ("result", "param", "grad", "opt_state")


class Value:
    """One SSA value: its type, the node that produced it (None for graph inputs) and which of
    that node's results it is."""
    __slots__ = ("type", "producer", "index")

    def __init__(self, type: TensorType, producer: "Node | None" = None, index: int = 0):
        self.type = type
        self.producer = producer
        self.index = index

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __repr__(self) -> str:
        return f"Value({self.type})"


class Node:
    """One op application: ``outputs = op(inputs, attrs)``.  ``origin`` says where it came from
    (the user's module path and source line), for errors and ``explain``."""
    __slots__ = ("op", "inputs", "attrs", "outputs", "origin")

    def __init__(self, op: str, inputs: tuple[Value, ...], attrs: dict, output_types, origin: str = ""):
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs)
        self.outputs = [Value(t, self, i) for i, t in enumerate(output_types)]
        self.origin = origin

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise IRError(f"{self.op} has {len(self.outputs)} results; pick one of node.outputs")
        return self.outputs[0]

    def __repr__(self) -> str:
        return f"Node({self.op}, {len(self.inputs)} in, {len(self.outputs)} out)"


@dataclass
class Input:
    value: Value
    name: str                    # the user's name: "transformer.h.0.attn.c_attn.weight", "idx"
    role: str                    # one of INPUT_ROLES


@dataclass
class Output:
    value: Value
    name: str
    role: str = "result"         # one of OUTPUT_ROLES
    updates: int | None = None   # index of the graph input this output replaces (donation candidate)


@dataclass
class Graph:
    name: str = "graph"
    inputs: list[Input] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)

    # ---------------------------------------------------------------- building
    def input(self, type: TensorType, name: str, role: str = "data") -> Value:
        if role not in INPUT_ROLES:
            raise IRError(f"unknown input role {role!r}; one of {', '.join(INPUT_ROLES)}")
        value = Value(type)
        self.inputs.append(Input(value, name, role))
        return value

    def op(self, op: str, *inputs: Value, origin: str = "", **attrs):
        """Append ``op(inputs, attrs)`` with its result types inferred by the op's definition;
        returns the single result, or a tuple for ops with several."""
        from nova.ir.ops import infer
        node = Node(op, inputs, attrs, infer(op, [v.type for v in inputs], attrs), origin)
        self.nodes.append(node)
        return node.outputs[0] if len(node.outputs) == 1 else tuple(node.outputs)

    def output(self, value: Value, name: str, role: str = "result", updates: int | None = None) -> None:
        if role not in OUTPUT_ROLES:
            raise IRError(f"unknown output role {role!r}; one of {', '.join(OUTPUT_ROLES)}")
        self.outputs.append(Output(value, name, role, updates))

    # ---------------------------------------------------------------- queries
    def users(self) -> dict[Value, list[Node]]:
        """Each value -> the nodes that read it (in program order)."""
        users: dict[Value, list[Node]] = {}
        for node in self.nodes:
            for v in node.inputs:
                users.setdefault(v, []).append(node)
        return users

    def input_values(self) -> list[Value]:
        return [i.value for i in self.inputs]

    def output_values(self) -> list[Value]:
        return [o.value for o in self.outputs]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def __str__(self) -> str:
        from nova.ir.printer import format_graph
        return format_graph(self)
