"""Structural hash: the same computation gives the same hash whatever the value and input names.

The hash covers, in program order, each input's type and role, each node's op, attributes,
result types and the *positions* of the values it reads, and each output's position, role and
update target.  Names and origins (where the user wrote it) are left out.
"""
from __future__ import annotations

import hashlib
import json


def _canonical(value):
    if isinstance(value, float):
        return ["f", value.hex()]
    if isinstance(value, (tuple, list)):
        return [_canonical(v) for v in value]
    return value


def structure(graph) -> list:
    """The hashed content as plain JSON-able data (useful for diffing two graphs)."""
    number = {}
    items = []
    for i in graph.inputs:
        number[i.value] = len(number)
        items.append(["in", str(i.value.type), i.role])
    for node in graph.nodes:
        attrs = sorted((k, _canonical(v)) for k, v in node.attrs.items())
        items.append(["op", node.op, [number[v] for v in node.inputs], attrs,
                      [str(v.type) for v in node.outputs]])
        for v in node.outputs:
            number[v] = len(number)
    for o in graph.outputs:
        items.append(["out", number[o.value], o.role, o.updates])
    return items


def structural_hash(graph) -> str:
    """Hex SHA-256 of ``structure(graph)``."""
    text = json.dumps(structure(graph), separators=(",", ":"), sort_keys=False)
    return hashlib.sha256(text.encode()).hexdigest()
