"""View and layout canonicalization, and folding of trivial constants.

Rules (each keeps the value semantics; a rewritten node's old copy is left dead and removed):

* identity views vanish: ``reshape`` to the same shape, the identity ``permute``, a full ``slice``,
  ``expand`` to the same shape;
* chains fold: reshape∘reshape -> reshape, permute∘permute -> one permute (the identity vanishes),
  expand∘expand -> expand, slice∘slice on one axis -> one slice;
* transposes are absorbed into GEMM operand layouts: ``matmul(permute(x, swap last two), b)`` ->
  ``matmul(x, b, transpose_a=True)`` (likewise b, and a flag already set toggles back); an operand
  ``reshape(permute(y, swap last two))`` whose reshape only regroups the batch axes becomes
  ``reshape(y)`` with the flag toggled (the reshape of ``y`` stays a plain view);
* the transpose of a GEMM's result is a GEMM with swapped operands: ``permute(matmul(a, b, ta, tb),
  swap last two)`` -> ``matmul(b, a, not tb, not ta)`` when the permute is the product's only
  reader ((AB)ᵀ = BᵀAᵀ) — what autograd's ``t(mm(t(dy), x))`` for a weight gradient becomes;
* constants fold: a pointwise op or a view whose inputs are all ``constant`` fills is a ``constant``
  fill itself (computed by the op's reference on one element), and ``x * 1``, ``x / 1`` are ``x``
  when the type does not change, and so are ``x + 0``, ``0 + x``, ``x - 0`` of integers (position
  ids offset by a cache length of 0: the ``iota`` is left a constant of the step);
* reductions read through a flattening: ``sum``/``mean`` over the leading axes of a ``reshape`` that
  only regroups leading axes (the trailing ones kept) is the same reduction of the reshape's input
  over its leading axes: autograd's bias gradient ``sum(reshape(dy, [B*T, C]), 0)`` reads ``dy``
  itself, so the fusion pass sees the reduction beside ``dy``'s pointwise producer (one kernel);
* pads and shifts: a ``slice`` along a concat's axis, when every reader of the concat is such a
  slice, is the concat of its inputs' overlapping slices (one input's slice alone when it holds
  the range): the loss's ``cat(labels, -100)[:, 1:]`` becomes ``cat(labels[:, 1:], -100)``, whose
  flattening is a view; ``concat(a, 0) + concat(0, b)`` with the same split is ``concat(a, b)``
  (each sum of a piece and a zero fill is the piece; a float's sign of zero aside): autograd's
  gradient of two slices (each a zero-padded ``slice_backward``) is the concat of the two gradients.

Why: after this pass a matmul reads its operands in place (no transpose copies), the fusion pass
sees pointwise chains without identity views in between, and the memory planner sees fewer views.
The sweep repeats until the graph stops changing.
"""
from __future__ import annotations

import math

from nova.ir.graph import Graph, Value
from nova.ir.hashing import structural_hash
from nova.ir.ops import infer, kind, opdef
from nova.ir.types import TORCH_NAMES
from nova.passes.dce import dce
from nova.passes.rewrite import Rewriter, producer_op

MAX_SWEEPS = 8


def canonicalize(graph: Graph) -> Graph:
    """A new graph with views and GEMM layouts in canonical form (see the module docstring)."""
    current = graph
    before = structural_hash(graph)
    for _ in range(MAX_SWEEPS):
        current = dce(_sweep(current))
        after = structural_hash(current)
        if after == before:
            break
        before = after
    return current


def swaps_last_two(perm, rank: int) -> bool:
    return rank >= 2 and tuple(perm) == tuple(range(rank - 2)) + (rank - 1, rank - 2)


def _sweep(graph: Graph) -> Graph:
    users = graph.users()
    outputs = set(graph.output_values())
    c = _Canonicalizer(Rewriter(graph))
    for node in graph.nodes:
        if node.op == "concat" and node.outputs[0] not in outputs and _sliced_only(node, users):
            c.sliced_only.add(node)
        ins = [c.rw.get(v) for v in node.inputs]
        result = None
        if node.op == "permute" and _is_private_matmul(node.inputs[0], users, outputs) \
                and swaps_last_two(node.attrs["perm"], len(node.attrs["perm"])) and producer_op(ins[0]) == "matmul":
            mm = ins[0].producer                       # the copy of the product in the new graph
            a, b = mm.inputs
            attrs = dict(mm.attrs, transpose_a=not mm.attrs.get("transpose_b", False),
                         transpose_b=not mm.attrs.get("transpose_a", False))
            result = c.build("matmul", [b, a], attrs, node.origin)
        if result is None:
            result = c.build(node.op, ins, node.attrs, node.origin)
        for old, new in zip(node.outputs, result):
            c.rw.env[old] = new
    return c.rw.finish()


def _is_private_matmul(value: Value, users, outputs) -> bool:
    return producer_op(value) == "matmul" and len(users.get(value, ())) == 1 and value not in outputs


def _sliced_only(concat, users) -> bool:
    """Every reader of ``concat``'s result is a ``slice`` of step 1 along its axis."""
    axis = concat.attrs["axis"] % concat.outputs[0].type.rank
    readers = users.get(concat.outputs[0], ())
    return bool(readers) and all(u.op == "slice" and u.attrs["axis"] % concat.outputs[0].type.rank == axis
                                 and u.attrs.get("step", 1) == 1 for u in readers)


def _is_zero_fill(v: Value) -> bool:
    p = v.producer
    return p is not None and p.op == "constant" and not isinstance(p.attrs["value"], bool) and p.attrs["value"] == 0


class _Canonicalizer:
    def __init__(self, rw: Rewriter):
        self.rw = rw
        self.sliced_only: set = set()          # concat nodes of the old graph read only by slices along their axis

    def build(self, op: str, ins: list[Value], attrs: dict, origin: str = "") -> list[Value]:
        """``op(ins)`` in canonical form: an existing value, a simpler node, or the node itself."""
        rule = getattr(self, "_" + op, None)
        simplified = rule(ins, attrs, origin) if rule is not None else None
        if simplified is None and kind(op) == "pointwise":
            simplified = self._pointwise(op, ins, attrs, origin)
        if simplified is not None:
            return simplified
        return self.rw.emit(op, ins, attrs, origin)

    # ------------------------------------------------------------ views
    def _shape_view(self, op, ins, attrs, origin):
        """reshape/expand: a no-op to the same shape vanishes, a chain of the same op collapses to one."""
        (x,) = ins
        shape = tuple(attrs["shape"])
        if shape == x.shape:
            return [x]
        p = x.producer
        if p is not None and p.op == op:
            return self.build(op, [p.inputs[0]], {"shape": shape}, origin)
        return self._refill(x, shape, origin)

    def _reshape(self, ins, attrs, origin):
        return self._shape_view("reshape", ins, attrs, origin)

    def _sum(self, ins, attrs, origin):
        return self._reduce_through_reshape("sum", ins, attrs, origin)

    def _mean(self, ins, attrs, origin):
        return self._reduce_through_reshape("mean", ins, attrs, origin)

    def _reduce_through_reshape(self, op, ins, attrs, origin):
        """``op`` over the leading axes of ``reshape(y)`` -> ``op`` over ``y``'s leading axes, when the
        reshape keeps the trailing axes the reduction keeps (the reduced elements and their count are
        the same); with ``keepdim`` the result is reshaped to the original's kept shape (a view)."""
        (x,) = ins
        p = x.producer
        if p is None or p.op != "reshape":
            return None
        rank = x.type.rank
        axes = sorted({a % rank for a in attrs["axes"]}) if rank else []
        if not axes or axes != list(range(len(axes))):
            return None
        kept = tuple(x.shape[len(axes):])
        y = p.inputs[0]
        lead = y.type.rank - len(kept)
        if lead < 1 or tuple(y.shape[lead:]) != kept:
            return None
        (out,) = self.build(op, [y], {**attrs, "axes": tuple(range(lead))}, origin)
        if attrs.get("keepdim"):            # [1] * lead + kept -> [1] * len(axes) + kept: a view
            return self.build("reshape", [out], {"shape": (1,) * len(axes) + kept}, origin)
        return [out]

    def _permute(self, ins, attrs, origin):
        (x,) = ins
        perm = tuple(attrs["perm"])
        if perm == tuple(range(len(perm))):
            return [x]
        p = x.producer
        if p is not None and p.op == "permute":
            inner = tuple(p.attrs["perm"])
            return self.build("permute", [p.inputs[0]], {"perm": tuple(inner[i] for i in perm)}, origin)
        return self._refill(x, tuple(x.shape[i] for i in perm), origin)

    def _expand(self, ins, attrs, origin):
        return self._shape_view("expand", ins, attrs, origin)

    def _slice(self, ins, attrs, origin):
        (x,) = ins
        axis = attrs["axis"] % x.type.rank
        start, end, step = attrs["start"], attrs["end"], attrs.get("step", 1)
        if start == 0 and step == 1 and end == x.shape[axis]:
            return [x]
        p = x.producer
        if p is not None and p.op == "concat" and step == 1 and p.attrs["axis"] % x.type.rank == axis \
                and self._from_sliced_only(x):
            return self._slice_of_concat(p, axis, start, end, origin)
        if p is not None and p.op == "slice" and p.attrs["axis"] % x.type.rank == axis:
            s1, st1 = p.attrs["start"], p.attrs.get("step", 1)
            count = len(range(start, end, step))
            new_start = s1 + start * st1
            new_step = st1 * step
            new_end = new_start + (count - 1) * new_step + 1 if count else new_start
            return self.build("slice", [p.inputs[0]],
                            {"axis": axis, "start": new_start, "end": new_end, "step": new_step}, origin)
        out_shape = infer("slice", [x.type], attrs)[0].shape
        return self._refill(x, out_shape, origin)

    def _from_sliced_only(self, x: Value) -> bool:
        """``x`` is the new graph's copy of a concat every reader of which slices it along its axis."""
        return any(self.rw.env.get(old.outputs[0]) is x for old in self.sliced_only)

    def _slice_of_concat(self, concat, axis: int, start: int, end: int, origin):
        """``concat(xs)[start:end]`` along its axis: the overlapping slices of the inputs, concatenated."""
        pieces, offset = [], 0
        for piece in concat.inputs:
            n = piece.shape[axis]
            lo, hi = max(start, offset), min(end, offset + n)
            if lo < hi:
                (v,) = self.build("slice", [piece], {"axis": axis, "start": lo - offset, "end": hi - offset,
                                                      "step": 1}, origin)
                pieces.append(v)
            offset += n
        if len(pieces) == 1:
            return pieces
        return self.build("concat", pieces, {"axis": concat.attrs["axis"]}, origin)

    def _add(self, ins, attrs, origin):
        """``concat(a, 0) + concat(0, b)`` (the same split along the same axis) -> ``concat(a, b)``."""
        a, b = ins
        if producer_op(a) != "concat" or producer_op(b) != "concat" or a.shape != b.shape:
            return None
        pa, pb = a.producer, b.producer
        axis = pa.attrs["axis"] % a.type.rank
        if pb.attrs["axis"] % b.type.rank != axis or \
                [x.shape[axis] for x in pa.inputs] != [y.shape[axis] for y in pb.inputs]:
            return None
        (out,) = infer("add", [a.type, b.type], attrs)
        pieces = []
        for x, y in zip(pa.inputs, pb.inputs):
            keep = x if _is_zero_fill(y) else y if _is_zero_fill(x) else None
            if keep is None or keep.dtype != out.dtype:
                return None
            pieces.append(keep)
        return self.build("concat", pieces, {"axis": pa.attrs["axis"]}, origin)

    def _refill(self, x: Value, shape, origin):
        """A view of a constant fill is a constant fill of the view's shape."""
        p = x.producer
        if p is not None and p.op == "constant":
            return self.rw.emit("constant", [], dict(p.attrs, shape=tuple(shape)), origin)
        return None

    # ------------------------------------------------------------ GEMM layouts
    def _matmul(self, ins, attrs, origin):
        a, b = ins
        ta, tb = bool(attrs.get("transpose_a")), bool(attrs.get("transpose_b"))
        a2, ta2 = self._absorb_transpose(a, ta, origin)
        b2, tb2 = self._absorb_transpose(b, tb, origin)
        clean = {k: v for k, v in attrs.items() if k not in ("transpose_a", "transpose_b")
                 and not (k == "out_dtype" and v is None)}
        if ta2:
            clean["transpose_a"] = True
        if tb2:
            clean["transpose_b"] = True
        if (a2, b2) == (a, b) and clean == attrs:
            return None
        return self.rw.emit("matmul", [a2, b2], clean, origin)

    def _absorb_transpose(self, x: Value, flag: bool, origin):
        p = x.producer
        if p is None:
            return x, flag
        if p.op == "permute" and swaps_last_two(p.attrs["perm"], x.type.rank):
            return p.inputs[0], not flag
        if p.op == "reshape" and p.inputs[0].producer is not None:
            q = p.inputs[0].producer
            inner = p.inputs[0]
            if q.op == "permute" and swaps_last_two(q.attrs["perm"], inner.type.rank) \
                    and x.type.rank >= 2 and x.shape[-2:] == inner.shape[-2:]:
                y = q.inputs[0]
                (base,) = self.build("reshape", [y], {"shape": x.shape[:-2] + y.shape[-2:]}, origin)
                return base, not flag
        return x, flag

    # ------------------------------------------------------------ constants
    def _pointwise(self, op, ins, attrs, origin):
        if ins and all(producer_op(v) == "constant" for v in ins):
            return self._fold(op, ins, attrs, origin)
        if op in ("add", "sub") and len(ins) == 2:
            (out_type,) = infer(op, [v.type for v in ins], attrs)
            x, zero = ins
            candidates = [(x, zero), (zero, x)] if op == "add" else [(x, zero)]
            for keep, fill in candidates:
                if out_type.dtype in ("i64", "i32") and _is_zero_fill(fill) and keep.type == out_type:
                    return [keep]
        if op in ("mul", "div") and len(ins) == 2:
            (out_type,) = infer(op, [v.type for v in ins], attrs)
            x, one = ins
            candidates = [(x, one), (one, x)] if op == "mul" else [(x, one)]
            for keep, unit in candidates:
                if producer_op(unit) == "constant" and unit.producer.attrs["value"] == 1 \
                        and not isinstance(unit.producer.attrs["value"], bool) and keep.type == out_type:
                    return [keep]
        return None

    def _fold(self, op, ins, attrs, origin):
        import torch

        def scalar(v):
            a = v.producer.attrs
            return torch.tensor(a["value"], dtype=getattr(torch, TORCH_NAMES[a["dtype"]]))
        (out_type,) = infer(op, [v.type for v in ins], attrs)
        result = opdef(op).reference(torch, *[scalar(v) for v in ins], **attrs)
        result = result.to(getattr(torch, TORCH_NAMES[out_type.dtype])).item()
        if out_type.dtype == "bool":
            value = bool(result)
        elif out_type.is_float:
            value = float(result)
        else:
            value = int(result)
        if isinstance(value, float) and math.isnan(value):
            value = float("nan")
        return self.rw.emit("constant", [], {"value": value, "dtype": out_type.dtype, "shape": out_type.shape}, origin)
