"""Grouped-query attention: ``attention`` and its backward read K and V at their own heads.

Llama-style models (the built-in ``Llama``, Hugging Face's ``repeat_kv``) repeat each of the ``Hkv``
K/V heads ``G`` times before scaled-dot-product attention.  The capture records the repeat as views,
and autograd's backward of it as a sum over the group axis:

    kr = reshape(expand(reshape(k, [B, Hkv, 1, T, D]), [B, Hkv, G, T, D]), [B, Hkv G, T, D])
                                                   kr[b, h] = k[b, h // G]   (likewise vr from v)
    out, lse = attention(q, kr, vr[, bias])
    dq, dkr, dvr = attention_backward(dout, q, kr, vr, out, lse[, bias])
    dk = reshape(sum(reshape(dkr, [B, Hkv, G, T, D]), axes=(2,), keepdim), [B, Hkv, T, D])
                                                   dk[b, j] = sum_g dkr[b, j G + g]   (likewise dv)

``h // G`` is torch's ``repeat_interleave(G, dim=1)``, the order of ``repeat_kv``.  The IR's attention
ops are grouped-query attention already (``nova/ir/ops.py``): with K/V of ``Hkv`` heads, query head
h reads K/V head h // (H / Hkv), and ``attention_backward``'s dK, dV have K/V's heads, each the sum
of its group's query heads.  So, exactly (the same map, the same sum):

    out, lse = attention(q, k, v[, bias])
    dq, dk, dv = attention_backward(dout, q, k, v, out, lse[, bias])

Why: kr is no strided view of k (the merged head axis would need stride 0 inside a group and the
K/V head stride across groups), so the plan copies it into a buffer of G times k's bytes, kept for
the backward, and the backward's sum reads G times dk's bytes through a reduction over a middle axis,
which runs on ATen.  The attention kernels read K/V head h // G where they are (``kv_heads``) and the
dK/dV kernel accumulates its group's query heads in registers: no copy, no sum, nothing saved twice.
A bias is added to the scores ``[B|1, H|1, Tq|1, Tk]`` of the query heads, which the rewrite leaves
as they were, so a mask (per head or not) stays as it is.

**Autocast** casts the repeats to the attention's type after repeating them (the built-in Llama's
RoPE multiplies bf16 K by FP32 tables, so K is FP32 until the attention casts it):

    out, lse = attention(q, cast(kr, bf16), vr)          dk = sum(reshape(cast(dkr, f32), ...))

An elementwise cast commutes with the repeat: the rewrite casts the ``[B, Hkv, T, D]`` K (half the
elements) and the attention reads it at its own heads, ``cast(dk, f32)`` standing for the cast group
sum.  The forward is exact.  In a 16-bit backward (autocast's, cast or not) the dK/dV kernel sums
each group's heads in FP32 and rounds the sum once to the 16-bit type, where eager rounds each head's
gradient to it first and then adds them: the two differ by at most one 16-bit rounding of dK and dV.

Only an exact match is rewritten; anything else is left as it was:

- the repeat is this order: the unit axis inserted after the head axis.  A tile
  (``k.repeat(1, G, 1, 1)``: the unit axis before the head axis, head h reads h % Hkv) is another map;
- kr and vr are repeats of K and V of the same ``[B, Hkv, T]``, read only as the K and V of
  ``attention`` / ``attention_backward`` nodes (no other reader, no graph output);
- each such backward's dkr (dvr) is dead, or read only by its group sum: a reshape to
  ``[B, Hkv, G, T, D]``, a sum over axis 2 in its own type, and (keepdim) a reshape to ``[B, Hkv, T, D]``,
  none of them a graph output or read by anything else.
"""
from __future__ import annotations

from dataclasses import dataclass

from nova.ir.graph import Graph, Node, Value
from nova.passes.dce import dce
from nova.passes.rewrite import Rewriter

# where K and V are among each attention op's inputs
KV_INPUTS = {"attention": (1, 2), "attention_backward": (2, 3)}


@dataclass(frozen=True)
class Repeat:
    """``repeated`` ``[B, Hkv G, T, D]`` = ``unit`` ``[B, Hkv, 1, T, D]`` expanded over its axis 2,
    that axis merged into the head axis: head h is K/V head h // G."""
    repeated: Value
    unit: Value
    groups: int
    cast: str | None = None             # the element type ``repeated`` is the repeat cast to (autocast)

    @property
    def kv_shape(self) -> tuple[int, ...]:
        b, kv_heads, _, t, d = self.unit.shape
        return (b, kv_heads, t, d)


@dataclass(frozen=True)
class GroupSum:
    """The nodes that sum a repeated head gradient over each group, and the value that is the sum;
    ``cast``: the element type the gradient is cast to before the sum (autocast's cast back), or None."""
    nodes: tuple[Node, ...]
    result: Value
    cast: str | None = None


@dataclass
class Backward:
    node: Node
    dk: GroupSum | None                # None: dK is dead
    dv: GroupSum | None


@dataclass
class Match:
    k: Repeat
    v: Repeat
    forwards: list[Node]
    backwards: list[Backward]


def head_repeat(value: Value) -> Repeat | None:
    """The repeat ``value`` is (module docstring: head h reads h // G, G > 1), or a cast of one, or None."""
    node = value.producer
    if node is not None and node.op == "cast":
        inner = head_repeat(node.inputs[0])
        return None if inner is None or inner.cast else Repeat(value, inner.unit, inner.groups, node.attrs["dtype"])
    if node is None or node.op != "reshape" or value.type.rank != 4:
        return None
    expanded = node.inputs[0]
    if expanded.producer is None or expanded.producer.op != "expand" or expanded.type.rank != 5:
        return None
    unit = expanded.producer.inputs[0]
    b, kv_heads, groups, t, d = expanded.shape
    if groups < 2 or tuple(unit.shape) != (b, kv_heads, 1, t, d) or \
            tuple(value.shape) != (b, kv_heads * groups, t, d):
        return None
    return Repeat(value, unit, groups)


def group_sum(grad: Value, groups: int, users, outputs) -> GroupSum | None:
    """The sum of ``grad`` ``[B, H, T, D]`` over each group of ``groups`` consecutive heads, when that is
    its only reader (module docstring), or None."""
    b, heads, t, d = grad.shape
    cast = None
    split = _only_reader(grad, users, outputs)
    if split is not None and split.op == "cast":            # autocast: the gradient cast back first
        cast, grad = split, split.output
        split = _only_reader(grad, users, outputs)
    if split is None or split.op != "reshape" or tuple(split.output.shape) != (b, heads // groups, groups, t, d):
        return None
    total = _only_reader(split.output, users, outputs)
    if total is None or total.op != "sum" or total.output.dtype != grad.dtype or \
            tuple(a % 5 for a in total.attrs["axes"]) != (2,):
        return None
    nodes, result = (split, total), total.output
    if cast is not None:
        nodes = (cast,) + nodes
    if total.attrs.get("keepdim"):
        last = _only_reader(result, users, outputs)
        if last is not None and last.op == "reshape" and tuple(last.output.shape) == (b, heads // groups, t, d):
            nodes, result = nodes + (last,), last.output
    return GroupSum(nodes, result, cast.attrs["dtype"] if cast is not None else None)


def _only_reader(value: Value, users, outputs) -> Node | None:
    readers = users.get(value, [])
    if value in outputs or len(readers) != 1 or readers[0].inputs.count(value) != 1:
        return None
    return readers[0]


def _positions(node: Node, value: Value) -> list[int]:
    return [i for i, x in enumerate(node.inputs) if x is value]


def match_repeats(kr: Value, vr: Value, users, outputs) -> Match | None:
    """The attention ops reading the K/V repeats ``kr``, ``vr`` when every rule of the module
    docstring holds, or None."""
    k, v = head_repeat(kr), head_repeat(vr)
    if k is None or v is None or kr is vr or kr in outputs or vr in outputs:
        return None
    if k.kv_shape[:3] != v.kv_shape[:3] or k.groups != v.groups:
        return None
    readers = list(dict.fromkeys(users.get(kr, []) + users.get(vr, [])))
    forwards, backwards = [], []
    for node in readers:
        at = KV_INPUTS.get(node.op)
        if at is None or _positions(node, kr) != [at[0]] or _positions(node, vr) != [at[1]]:
            return None
        if node.op == "attention":
            forwards.append(node)
            continue
        sums = []
        for grad in node.outputs[1:]:
            if grad not in outputs and not users.get(grad):
                sums.append(None)
                continue
            found = group_sum(grad, k.groups, users, outputs)
            if found is None:
                return None
            sums.append(found)
        backwards.append(Backward(node, *sums))
    return Match(k, v, forwards, backwards)


def find(graph: Graph) -> list[Match]:
    """Every K/V repeat pair of ``graph`` that the rewrite applies to, in program order."""
    users = graph.users()
    outputs = set(graph.output_values())
    seen, matches = set(), []
    for node in graph.nodes:
        at = KV_INPUTS.get(node.op)
        if at is None:
            continue
        pair = (node.inputs[at[0]], node.inputs[at[1]])
        if pair in seen:
            continue
        seen.add(pair)
        m = match_repeats(*pair, users, outputs)
        if m is not None:
            matches.append(m)
    return matches


def read_kv_heads(graph: Graph) -> Graph:
    """A new graph whose attention ops read the un-repeated K and V (module docstring), dead repeats and
    group sums removed; ``graph`` itself is left unchanged (and returned when nothing matches)."""
    matches = find(graph)
    if not matches:
        return graph
    at = {n: m for m in matches for n in m.forwards + [b.node for b in m.backwards]}
    backward = {b.node: b for m in matches for b in m.backwards}
    skipped = {n for b in backward.values() for s in (b.dk, b.dv) if s is not None for n in s.nodes}
    rw = Rewriter(graph)
    sources: dict = {}
    for node in graph.nodes:
        if node in skipped:
            continue
        m = at.get(node)
        if m is None:
            rw.copy(node)
            continue
        k, v = _source(rw, m.k, sources), _source(rw, m.v, sources)
        first, _ = KV_INPUTS[node.op]
        ins = [rw.get(x) for x in node.inputs[:first]] + [k, v] + [rw.get(x) for x in node.inputs[first + 2:]]
        outs = rw.emit(node.op, ins, node.attrs, node.origin)
        rw.env[node.outputs[0]] = outs[0]
        if node.op == "attention":
            rw.env[node.outputs[1]] = outs[1]
            continue
        for new, summed in zip(outs[1:], (backward[node].dk, backward[node].dv)):
            if summed is not None:
                if summed.cast is not None:
                    new = rw.emit("cast", [new], {"dtype": summed.cast}, node.origin)[0]
                rw.env[summed.result] = new if tuple(new.shape) == tuple(summed.result.shape) else \
                    rw.emit("reshape", [new], {"shape": tuple(summed.result.shape)}, node.origin)[0]
    return dce(rw.finish())


def _source(rw: Rewriter, repeat: Repeat, sources: dict) -> Value:
    """The new graph's ``[B, Hkv, T, D]`` K (or V) that ``repeat`` repeats, cast as the repeat is."""
    if repeat.unit not in sources:
        producer = repeat.unit.producer
        if producer is not None and producer.op == "reshape" and tuple(producer.inputs[0].shape) == repeat.kv_shape:
            sources[repeat.unit] = rw.get(producer.inputs[0])
        else:
            sources[repeat.unit] = rw.emit("reshape", [rw.get(repeat.unit)], {"shape": repeat.kv_shape})[0]
    if repeat.cast is None:
        return sources[repeat.unit]
    key = (repeat.unit, repeat.cast)
    if key not in sources:
        origin = repeat.repeated.producer.origin
        sources[key] = rw.emit("cast", [sources[repeat.unit]], {"dtype": repeat.cast}, origin)[0]
    return sources[key]
