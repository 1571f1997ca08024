"""Text form of a graph, readable like a jaxpr:

    graph step(%0: f32[4,8] data "x", %1: f32[16,8] param "w") {
      %2 = matmul(%0, %1) {transpose_b=True} : f32[4,16]
      return %2 "y"
    }
"""
from __future__ import annotations


def format_attr(value) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(format_attr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value) if isinstance(value, str) else str(value)


def value_names(graph) -> dict:
    """Each value -> ``%n`` in order of definition (inputs first)."""
    names = {}
    for i in graph.inputs:
        names[i.value] = f"%{len(names)}"
    for node in graph.nodes:
        for v in node.outputs:
            names[v] = f"%{len(names)}"
    return names


def format_node(node, names: dict, origins: bool = True) -> str:
    results = ", ".join(names.get(v, "%?") for v in node.outputs)
    args = ", ".join(names.get(v, "%<undefined>") for v in node.inputs)
    attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(node.attrs.items()))
    types = ", ".join(str(v.type) for v in node.outputs)
    line = f"{results} = {node.op}({args})" + (f" {{{attrs}}}" if attrs else "") + f" : {types}"
    if origins and node.origin:
        line += f"    # {node.origin}"
    return line


def format_graph(graph, origins: bool = True) -> str:
    names = value_names(graph)
    params = ", ".join(f"{names[i.value]}: {i.value.type} {i.role} {i.name!r}" for i in graph.inputs)
    lines = [f"graph {graph.name}({params}) {{"]
    lines += ["  " + format_node(n, names, origins) for n in graph.nodes]
    outs = []
    for o in graph.outputs:
        text = f"{names.get(o.value, '%?')} {o.name!r}"
        if o.role != "result":
            text += f" {o.role}"
        if o.updates is not None:
            text += f" updates {names[graph.inputs[o.updates].value]}"
        outs.append(text)
    lines.append("  return " + ", ".join(outs))
    lines.append("}")
    return "\n".join(lines)
