"""Bucketing: the all-reduces of a step (DDP's gradient averaging, a step's own ``dist.all_reduce``
of each gradient) grouped into buckets, one collective per bucket over one flat buffer, placed as
soon as its last input is produced; the optimizer updates right after the reductions they read.

Rule, in the order the all-reduces' inputs are produced (the order backward produces gradients):
an all-reduce joins the open bucket of its (reduction, group, world size, element type) unless
its input depends on a member's result (joining would make a cycle); a bucket closes when it
holds ``bucket_bytes`` (``nova.hwmodel.interconnect.gradient_bucket_size``: the closed-form size
at which latency is <= 10 % of transfer time).  A bucket of several tensors becomes

    flat = concat(reshape(x_i, [-1]) ...);  r = all_reduce(flat);  y_i = reshape(slice(r, off_i, off_i + n_i))

(an all-reduce is elementwise across ranks, so the values are those of the separate all-reduces).

Placement: the rewritten graph is a topological order in which every node keeps its program
position, except that a bucket comes right after the last producer of its inputs and an
optimizer update (adamw, sgd) right after the last producer of its inputs: a bucket's reduction
overlaps the rest of the backward, and its parameters' updates follow it, not the whole backward.
``Bucket`` records what was decided, for ``explain``.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from nova.ir.graph import Graph, Node, Value
from nova.passes.rewrite import Rewriter

EARLY_OPS = ("adamw", "sgd")          # placed as soon as their inputs exist
EARLY_STEP = 1e-3                     # an early unit's priority above its last producer's (before the next node)


@dataclass(eq=False)
class Bucket:
    reduce_op: str
    group: str
    world_size: int
    dtype: str
    members: list[Node] = field(default_factory=list)      # the old graph's all_reduce nodes
    nbytes: int = 0

    @property
    def key(self) -> tuple:
        return (self.reduce_op, self.group, self.world_size, self.dtype)


def _position(graph: Graph) -> dict[Node, int]:
    return {n: i for i, n in enumerate(graph.nodes)}


def _produced_at(value: Value, position: dict) -> int:
    return -1 if value.producer is None else position[value.producer]


def plan_buckets(graph: Graph, bucket_bytes: int | None) -> list[Bucket]:
    """The buckets of ``graph``'s all-reduces (module docstring); ``bucket_bytes`` None: one
    bucket per compatible, independent run (no size limit)."""
    position = _position(graph)
    reduces = [n for n in graph.nodes if n.op == "all_reduce"]
    if not reduces:
        return []
    index = {n: i for i, n in enumerate(reduces)}
    # the all-reduces each value depends on, as a bit set over ``reduces``
    depends: dict[Value, int] = {spec.value: 0 for spec in graph.inputs}
    for node in graph.nodes:
        mask = 0
        for v in node.inputs:
            mask |= depends.get(v, 0)
        if node in index:
            mask |= 1 << index[node]
        for v in node.outputs:
            depends[v] = mask
    order = sorted(reduces, key=lambda n: (_produced_at(n.inputs[0], position), position[n]))
    buckets: list[Bucket] = []
    open_buckets: dict[tuple, tuple[Bucket, int]] = {}        # key -> (bucket, bit set of its members)
    for node in order:
        x = node.inputs[0]
        key = (node.attrs["reduce_op"], node.attrs["group"], node.attrs["world_size"], x.dtype)
        current = open_buckets.get(key)
        if current is not None and depends[x] & current[1]:
            current = None                                   # depends on a member: start a new bucket
        if current is None:
            bucket = Bucket(*key)
            buckets.append(bucket)
            current = (bucket, 0)
        bucket, members = current
        bucket.members.append(node)
        bucket.nbytes += x.type.nbytes
        members |= 1 << index[node]
        if bucket_bytes is not None and bucket.nbytes >= bucket_bytes:
            open_buckets.pop(key, None)
        else:
            open_buckets[key] = (bucket, members)
    return buckets


def bucket_all_reduces(graph: Graph, bucket_bytes: int | None) -> tuple[Graph, list[Bucket]]:
    """``graph`` with its all-reduces bucketed and placed early (module docstring), and the buckets."""
    buckets = plan_buckets(graph, bucket_bytes)
    if not buckets:
        return graph, []
    position = _position(graph)
    bucket_of = {m: b for b in buckets for m in b.members}
    # units: a node, or a bucket (emitted where its first member was)
    units: list = []
    unit_of: dict = {}
    for node in graph.nodes:
        b = bucket_of.get(node)
        if b is None:
            unit_of[node] = len(units)
            units.append(node)
        elif b not in unit_of:
            unit_of[b] = len(units)
            units.append(b)
        if b is not None:
            unit_of[node] = unit_of[b]

    def unit_inputs(unit) -> list[Value]:
        return [m.inputs[0] for m in unit.members] if isinstance(unit, Bucket) else list(unit.inputs)

    preds = [set() for _ in units]
    succs = [set() for _ in units]
    for i, unit in enumerate(units):
        for v in unit_inputs(unit):
            if v.producer is not None:
                j = unit_of[v.producer]
                if j != i:
                    preds[i].add(j)
                    succs[j].add(i)
    priority = [0.0] * len(units)
    for i, unit in enumerate(units):            # units are in program order: producers first
        early = isinstance(unit, Bucket) or unit.op in EARLY_OPS
        priority[i] = (max((priority[j] for j in preds[i]), default=-1.0) + EARLY_STEP) if early \
            else float(position[unit])
    waiting = [len(p) for p in preds]
    ready = [(priority[i], i) for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    rw = Rewriter(graph)
    emitted = 0
    while ready:
        _, i = heapq.heappop(ready)
        emitted += 1
        unit = units[i]
        if isinstance(unit, Bucket):
            _emit_bucket(rw, unit)
        else:
            rw.copy(unit)
        for s in succs[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (priority[s], s))
    if emitted != len(units):
        raise ValueError("bucketing the all-reduces made a cycle")
    return rw.finish(), buckets


def _emit_bucket(rw: Rewriter, bucket: Bucket) -> None:
    attrs = {"reduce_op": bucket.reduce_op, "group": bucket.group, "world_size": bucket.world_size}
    members = bucket.members
    if len(members) == 1:
        rw.copy(members[0])
        return
    origin = f"gradient bucket of {len(members)} tensors"
    flats = []
    for m in members:
        x = rw.get(m.inputs[0])
        flats.append(x if x.type.rank == 1 else rw.emit("reshape", [x], {"shape": (x.type.numel,)}, origin)[0])
    flat = rw.emit("concat", flats, {"axis": 0}, origin)[0]
    (reduced,) = rw.emit("all_reduce", [flat], attrs, origin)
    offset = 0
    for m in members:
        out = m.outputs[0]
        n = out.type.numel
        piece = rw.emit("slice", [reduced], {"axis": 0, "start": offset, "end": offset + n, "step": 1}, origin)[0]
        if out.type.shape != (n,):
            piece = rw.emit("reshape", [piece], {"shape": out.type.shape}, origin)[0]
        rw.env[out] = piece
        offset += n


def average_gradients(graph: Graph, world_size: int, group: str) -> Graph:
    """``graph`` as DistributedDataParallel would capture it over ``world_size`` ranks: the gradient
    each optimizer update reads (adamw, sgd: their second operand) replaced, for every reader, by its
    ``all_reduce`` (avg) over ``group``, placed right after the gradient is produced.  What
    ``nova-config explain train --gpus`` plans; a step captured through DDP has these nodes already."""
    gradients = {n.inputs[1] for n in graph.nodes if n.op in EARLY_OPS}
    rw = Rewriter(graph)
    attrs = {"reduce_op": "avg", "group": group, "world_size": world_size}

    def reduce(old: Value) -> None:
        (rw.env[old],) = rw.emit("all_reduce", [rw.env[old]], attrs, "data-parallel gradient average")
    for spec in graph.inputs:
        if spec.value in gradients:
            reduce(spec.value)
    for node in graph.nodes:
        rw.copy(node)
        for v in node.outputs:
            if v in gradients:
                reduce(v)
    return rw.finish()
