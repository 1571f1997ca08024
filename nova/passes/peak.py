"""What a memory plan holds at its peak: the busiest position of the arena, the values live there
by tensor class, and the record of one tensor class's decision under a budget.

A value's *tensor class* is its producer's op at its module path with layer indices as ``*``
(``gelu_tanh at transformer.h.*.mlp``; a matmul's bias add is ``matmul+bias``).  Positions count
an in-place result from the position after the last read of the input whose buffer it took (the
same position for a one-node launch; a fused group's nodes write at its first position and read at
its last, so a result written over an input inside such a group starts after the group).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


def format_size(nbytes: float) -> str:
    """``13.1 GiB``, ``800.0 MiB``, ``12.0 KiB``: binary units, one decimal."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} B"


@dataclass
class TensorClass:
    """One class of saved activations (same op at the same module path, layer index aside)."""
    name: str                  # "gelu_tanh at transformer.h.*.mlp"
    decision: str              # "recomputed", "kept", "chunked"
    count: int = 0             # tensors of the class
    nbytes: int = 0            # their bytes together
    recompute_us: float = 0.0  # predicted time to recompute them all (recomputed classes)
    why: str = ""


def busiest_position(memory) -> int:
    """The position where the arena's live bytes are largest (an in-place result counts from the
    position after the one where it took its input's buffer; a launch workspace over its group's
    positions); the first such position."""
    if not memory.order:
        return 0
    profile = live_profile(memory)
    return max(range(len(profile)), key=lambda t: (profile[t], -t))


def arena_live_bytes(memory, t: int) -> int:
    return sum(p.nbytes for p in memory.values.values() if live_at(memory, p, t)) + \
        sum(w.nbytes for w in getattr(memory, "workspaces", ()) if w.live[0] <= t <= w.live[1])


def counted_from(memory, p) -> int:
    """The first position a value's own bytes count at: where it is written, or for an in-place result
    the position after the last read of the input whose buffer it took (module docstring)."""
    if p.reuses is None:
        return p.live[0]
    taken = memory.values.get(p.reuses)
    last_read = taken.live[1] if taken is not None and taken.live is not None else p.live[0]
    return max(p.live[0], last_read) + 1


def live_at(memory, p, t: int) -> bool:
    if p.kind != "arena" or not p.nbytes or p.live is None:
        return False
    return counted_from(memory, p) <= t <= p.live[1]


def live_profile(memory) -> list[int]:
    """Arena bytes live at each position (same counting as ``busiest_position``)."""
    end = len(memory.order)
    delta = [0] * (end + 2)
    for p in memory.values.values():
        if p.kind == "arena" and p.nbytes and p.live is not None:
            first = max(counted_from(memory, p), 0)
            if first <= p.live[1]:
                delta[first] += p.nbytes
                delta[p.live[1] + 1] -= p.nbytes
    for w in getattr(memory, "workspaces", ()):
        delta[w.live[0]] += w.nbytes
        delta[w.live[1] + 1] -= w.nbytes
    out, live = [], 0
    for t in range(end + 1):
        live += delta[t]
        out.append(live)
    return out


def tensor_class(value) -> str:
    """A value's class: its producer's op at its module path with layer indices as ``*``; a value
    copied back from host memory (``offload.py``): the class of the value offloaded, ``(reloaded)``."""
    node = value.producer
    if node is None:
        return "input"
    if node.op == "reload":
        return f"{tensor_class(node.inputs[0].producer.inputs[0])} (reloaded)"
    where = node.origin.split(" (")[0]
    for tag in (" [backward]", " [recomputed]", " [offloaded]", " [reloaded]"):
        where = where.replace(tag, "")
    where = re.sub(r"\.\d+(?=\.|$)", ".*", where)
    op = node.op
    if node.op == "add" and node.inputs[0].producer is not None and node.inputs[0].producer.op == "matmul":
        op = "matmul+bias"
    return f"{op} at {where}" if where else op


def composition(planned, limit: int = 4) -> list[tuple[str, int]]:
    """What the plan's peak holds: the user-owned bytes by role, the program's allocations outside
    the arena (``MemoryPlan.outside``), then the arena's live bytes at the busiest position by tensor
    class (largest first, the rest summed; the launch workspaces placed there as one class), then the
    arena's slack."""
    mem = planned.memory
    parts = []
    external = {}
    for spec in planned.graph.inputs:
        role = {"param": "parameters", "opt_state": "optimizer state", "grad": "gradients"}.get(spec.role, "data")
        external[role] = external.get(role, 0) + spec.value.type.nbytes
    owned = external.get("parameters", 0) + external.get("optimizer state", 0)
    if owned:
        parts.append(("parameters+optimizer state", owned))
    if mem.outside_bytes:
        parts.append(("outside the arena", mem.outside_bytes))
    t = busiest_position(mem)
    by_class: dict[str, int] = {}
    for v, p in mem.values.items():
        if live_at(mem, p, t):
            name = "gradients" if p.category == "gradients" else tensor_class(v)
            by_class[name] = by_class.get(name, 0) + p.nbytes
    for w in getattr(mem, "workspaces", ()):
        if w.live[0] <= t <= w.live[1]:
            by_class["launch workspaces"] = by_class.get("launch workspaces", 0) + w.nbytes
    ranked = sorted(by_class.items(), key=lambda kv: -kv[1])
    parts += ranked[:limit]
    rest = sum(n for _, n in ranked[limit:]) + sum(n for k, n in external.items()
                                                    if k not in ("parameters", "optimizer state"))
    if rest:
        parts.append(("other", rest))
    slack = mem.peak_bytes - owned - mem.outside_bytes - sum(by_class.values()) - rest
    if slack > 0:
        parts.append(("arena fragmentation", slack))
    return parts
