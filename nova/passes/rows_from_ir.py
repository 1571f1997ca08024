"""Rows problems from the planner's groups: ``from_group(nodes, inputs, outputs, layouts)``.

Composite groups (one node: layer_norm(+backward), rms_norm(+backward) over the last axis, softmax / log_softmax (+backward) over the last
axis, cross_entropy(+backward); or a cross_entropy with the backward of its loss, ``cross_entropy_forward_backward``)
map their operands by position, with the casts fused into them
(``nova/passes/rows_casts.py``): a cast feeding a row input (``ROW_INPUTS``) binds that operand to the
cast's source, read in its own type; a cast of the row result (``ROW_OUTPUTS``) binds the result to the
cast's value, written in its type; a norm's backward with the ``add`` of its dx and another value
(``residual_add``: the residual stream's gradient, ``NORM_RESIDUAL``) reads that value as its
``residual`` operand and writes the sum as dx, its dy made by a left-to-right sum of 2 or 3 values
(``dy_parts``: autocast's widened gradients of the projections that read the norm's output) reads those
values as ``dy``, ``dy_1``, ``dy_2``, a cast of the dx it writes to a 16-bit type read
outside the group beside dx (``dx_cast_of``: autocast's FP32 residual stream and the next GEMM's bf16
input) is its ``dx_cast`` output, and a ``sum`` of the dx it writes (of that cast's value, where there
is one) over every row axis (``dx_column_sum``: a linear layer's bias gradient) is its ``dxsum`` output;
a ``reduction`` group (pointwise
producers, then one sum/mean/max/min) becomes ``row_reduce`` when it reduces the trailing axes and
``column_reduce`` (sum/mean) when it reduces the leading ones, its producers a ``Prologue``: every value
read from outside the group is an operand (``in0``, ``in1``, ... in first-read order) classified by
its shape against the reduced input's (``row``, ``per_row``, ``col``, ``scalar``), constants are inlined,
and the values other kernels read are stored.  The operands written are exactly the group's outputs
(the memory plan gives the others no buffer).  Each returns ``(problem, {operand: Value}, why_not)``:
the problem, or None and one line saying why the group stays on ATen.
"""
from __future__ import annotations

import math

from nova.kernels.rows.problem import FLOAT_DTYPES, Operand, RowsProblem, RowsProblemError
from nova.kernels.rows.prologue import OPS, Prologue
from nova.passes.cross_entropy import loss_attrs, same_loss_attrs
from nova.passes.layout import contiguous_strides, merged_batch_stride
from nova.passes.storage import same_place

COMPOSITES = ("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward", "softmax", "log_softmax", "softmax_backward",
              "log_softmax_backward", "cross_entropy", "cross_entropy_backward")
REDUCE_OPS = ("sum", "mean", "max", "min")
# the prologue ops an IR node of the same name computes (the prologue's casts come from ``cast`` nodes)
IR_OPS = frozenset(op for op in OPS if not op.startswith("cast_"))


# The row operands a cast can join, by position: the inputs a widening cast may feed and the output a
# cast may read (the kernels read every operand in its own storage type and write each in its own).
ROW_INPUTS = {"layer_norm": (0,), "layer_norm_backward": (0, 1), "rms_norm": (0,), "rms_norm_backward": (0, 1),
              "softmax": (0,), "log_softmax": (0,), "softmax_backward": (0, 1), "log_softmax_backward": (0, 1),
              "cross_entropy": (0,), "cross_entropy_backward": (1,)}
ROW_OUTPUTS = {"layer_norm": 0, "layer_norm_backward": 0, "rms_norm": 0, "rms_norm_backward": 0, "softmax": 0,
               "log_softmax": 0, "softmax_backward": 0, "log_softmax_backward": 0, "cross_entropy_backward": 0}


class NotRows(Exception):
    """Why a group is not a rows problem (one line)."""


NORM_RESIDUAL = ("layer_norm_backward", "rms_norm_backward")    # kinds that add a residual to dx as they write it


def dy_parts(node, nodes):
    """``(the adds, [the parts])`` when ``nodes`` hold the sum that makes the norm backward ``node``'s
    dy, added left to right (``(a + b) + c``: the order the kernel adds ``dy``, ``dy_1``, ``dy_2`` in), of
    2 or 3 parts; None when dy is not computed in ``nodes``; ``NotRows`` for more parts."""
    if node.op not in NORM_RESIDUAL:
        return None
    inside, v, adds, parts = set(nodes), node.inputs[0], [], []
    while v.producer in inside and v.producer.op == "add":
        adds.append(v.producer)
        v, part = v.producer.inputs
        parts.append(part)
    if not adds:
        return None
    parts.append(v)
    if len(parts) > 3:
        raise NotRows(f"the {node.op} kernel adds dy from at most 3 parts, not {len(parts)}")
    return adds[::-1], parts[::-1]


def residual_add(node, nodes):
    """``(the add, the value added)`` when ``nodes`` hold an ``add`` of the norm backward ``node``'s dx
    and a value of dx's type computed outside ``nodes``; None when they hold no add; ``NotRows`` when an
    add is there but is not that."""
    adds = [n for n in nodes if n.op == "add"]
    if not adds:
        return None
    dx = node.outputs[0]
    produced = {v for n in nodes for v in n.outputs}
    if node.op in NORM_RESIDUAL and len(adds) == 1 and dx in adds[0].inputs:
        (add,) = adds
        other = add.inputs[1] if add.inputs[0] is dx else add.inputs[0]
        if other is not dx and other.type == dx.type and other not in produced:
            return add, other
    raise NotRows(f"an add is not a residual the {node.op} kernel adds to its dx")


def written_dx(node, added):
    """The dx the norm backward ``node``'s kernel writes: the residual add's result when ``added``."""
    return added[0].outputs[0] if added is not None else node.outputs[0]


def dx_cast_of(node, nodes, added):
    """``(the cast, its value)`` when ``nodes`` hold a cast of the dx the norm backward ``node``'s kernel
    writes to a 16-bit type (``writes_through_cast``), the kernel writing both; None when they hold none."""
    dx = written_dx(node, added)
    casts = [n for n in nodes if n.op == "cast" and n.inputs[0] is dx and writes_through_cast(n)]
    if node.op not in NORM_RESIDUAL or not casts:
        return None
    if len(casts) > 1:
        raise NotRows(f"two casts of the {node.op} kernel's dx")
    return casts[0], casts[0].outputs[0]


def dx_column_sum(node, nodes, added, cast=None):
    """``(the sum, its result)`` when ``nodes`` hold a ``sum`` over every row axis of the dx the norm
    backward ``node``'s kernel writes (the residual add's result when ``added``; the value of its cast
    ``cast`` when there is one): the bias gradient of the linear layer before the norm, summed as the
    kernel writes dx; None when they hold no reduction; ``NotRows`` when one is there but is not that."""
    reductions = [n for n in nodes if n.op in REDUCE_OPS]
    if not reductions:
        return None
    written = cast[1] if cast is not None else written_dx(node, added)
    k = len(node.attrs["normalized_shape"]) if node.op == "layer_norm_backward" else 1
    lead = written.type.rank - k
    if node.op in NORM_RESIDUAL and len(reductions) == 1:
        (total,) = reductions
        if total.op == "sum" and total.inputs[0] is written and \
                tuple(sorted(a % written.type.rank for a in total.attrs["axes"])) == tuple(range(lead)):
            return total, total.outputs[0]
    raise NotRows(f"a {reductions[0].op} is not the column sum of the {node.op} kernel's dx")


def _align(layout, itemsize: int) -> int:
    off = layout.offset * itemsize
    return 16 if off % 16 == 0 else off & -off


def _row_stride(layout, lead: int, name: str) -> tuple[str, int]:
    """(layout kind, row stride) of a value viewed as rows = its first ``lead`` axes: the rest must be
    contiguous; the row axes one stride apart ('col' when that stride is 0: a broadcast row)."""
    shape, strides = layout.shape, layout.strides
    inner, expect = shape[lead:], contiguous_strides(shape[lead:])
    if any(d != 1 and s != e for d, s, e in zip(inner, strides[lead:], expect)):
        raise NotRows(f"{name}'s rows are not contiguous ({layout.describe()})")
    n, rows = math.prod(inner), math.prod(shape[:lead])
    s = merged_batch_stride(shape[:lead], strides[:lead])
    if s is None:
        raise NotRows(f"{name}'s rows are not evenly spaced ({layout.describe()})")
    if rows <= 1:
        return "row", n
    if s == 0:
        return "col", 0
    if s < n:
        raise NotRows(f"{name}'s rows overlap ({layout.describe()})")
    return "row", s


def _float(v, name) -> str:
    if v.dtype not in FLOAT_DTYPES:
        raise NotRows(f"{name} is {v.dtype} (rows kernels take f32, bf16, f16)")
    return v.dtype


def _dense(v, layouts, name):
    if not layouts[v].dense:
        raise NotRows(f"{name} is not dense ({layouts[v].describe()})")
    return _align(layouts[v], v.type.itemsize)


def _row(v, lead, layouts, name) -> Operand:
    kind, stride = _row_stride(layouts[v], lead, name)
    if kind != "row":
        raise NotRows(f"{name} is broadcast over the rows")
    return Operand(name, _float(v, name), "row", stride, _align(layouts[v], v.type.itemsize))


def _vec(v, layout, layouts, name) -> Operand:
    dtype = v.dtype if name == "target" else _float(v, name)
    return Operand(name, dtype, layout, 0, _dense(v, layouts, name))


def from_group(nodes, inputs, outputs, layouts) -> tuple[RowsProblem | None, dict, str]:
    try:
        composites = [n for n in nodes if n.op in COMPOSITES]
        others_cast = all(n.op == "cast" for n in nodes if n not in composites)
        one = composites[0] if len(composites) == 1 else None
        chain, parts = (dy_parts(one, nodes) if one is not None else None) or ([], None)
        added = residual_add(one, [n for n in nodes if n not in chain]) if one is not None else None
        rounded = dx_cast_of(one, nodes, added) if one is not None else None
        summed = dx_column_sum(one, nodes, added, rounded) if one is not None else None
        extra = chain + [x[0] for x in (added, rounded, summed) if x is not None]
        rest = [n for n in nodes if n not in composites and n not in extra]
        if [n.op for n in composites] == ["cross_entropy", "cross_entropy_backward"] and others_cast:
            problem, names = _forward_backward(*composites, nodes, outputs, layouts)
        elif one is not None and extra and all(n.op == "cast" for n in rest):
            widened = [c for c in rest if parts and c.outputs[0] in parts and reads_through_cast(c)]
            sources, results = fused_casts(one, [c for c in rest if c not in widened])
            sources.update({c.outputs[0]: c.inputs[0] for c in widened})    # a part read in its own type
            problem, names = _composite(one, outputs, layouts, sources, results, residual=added, dx_sum=summed,
                                        dx_cast=rounded, dy_parts=parts)
        elif len(composites) == 1 and others_cast:
            problem, names = _composite(composites[0], outputs, layouts, *fused_casts(composites[0], nodes))
        elif nodes[-1].op in REDUCE_OPS:
            problem, names = _reduction(nodes, inputs, outputs, layouts)
        else:
            raise NotRows(f"{'+'.join(n.op for n in nodes)} is not a rows kind")
    except (NotRows, RowsProblemError) as e:
        return None, {}, str(e)
    return problem, names, ""


def over_last_axes(node) -> bool:
    """A composite over the last axes (the rows kernels' softmaxes take no other axis)."""
    if node.op in ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward"):
        x = node.inputs[0] if node.op in ("softmax", "log_softmax") else node.inputs[1]
        return node.attrs["axis"] % x.type.rank == x.type.rank - 1
    return node.op in COMPOSITES


def reads_through_cast(cast) -> bool:
    """A cast a rows kernel may take as its prologue: to f32 from a float storage type (exact: the kernel
    reads the source in its own type and widens it to FP32 as it loads, what the cast computes)."""
    return cast.op == "cast" and cast.attrs["dtype"] == "f32" and cast.inputs[0].dtype in FLOAT_DTYPES


def writes_through_cast(cast) -> bool:
    """A cast a rows kernel may take as its epilogue: of an f32 result (the kernel's arithmetic type) to a
    float storage type (the kernel rounds its FP32 value once, to nearest even, as the cast does)."""
    return cast.op == "cast" and cast.inputs[0].dtype == "f32" and cast.attrs["dtype"] in FLOAT_DTYPES


def fused_casts(node, nodes) -> tuple[dict, dict]:
    """``({composite input: the cast's source}, {composite result: the cast's value})`` of the casts in
    ``nodes`` beside the composite ``node``: each a widening cast feeding one of its row inputs or a
    cast of its row result; anything else is ``NotRows``."""
    sources, results = {}, {}
    row_inputs = [node.inputs[i] for i in ROW_INPUTS.get(node.op, ())]
    row_output = node.outputs[ROW_OUTPUTS[node.op]] if node.op in ROW_OUTPUTS else None
    for cast in nodes:
        if cast is node:
            continue
        x, y = cast.inputs[0], cast.outputs[0]
        if y in row_inputs and reads_through_cast(cast):
            sources[y] = x
        elif x is row_output and x not in results and writes_through_cast(cast):
            results[x] = y
        else:
            raise NotRows(f"a cast of {x.type} to {y.dtype} is neither read nor written by the {node.op} kernel")
    return sources, results


def _composite(node, outputs, layouts, sources=None, results=None, residual=None, dx_sum=None, dx_cast=None,
               dy_parts=None):
    """``residual``: ``(add, value)`` of ``residual_add``: the value read as the ``residual`` operand,
    the add's result written as dx; ``dx_sum``: ``(sum, value)`` of ``dx_column_sum``: the value written
    as the ``dxsum`` operand; ``dx_cast``: ``(cast, value)`` of ``dx_cast_of``: the value written as the
    ``dx_cast`` operand; ``dy_parts``: the values of ``dy_parts``, read as ``dy``, ``dy_1``, ``dy_2``."""
    op, a = node.op, node.attrs
    sources, results = sources or {}, dict(results or {})
    if residual is not None:
        results[node.outputs[0]] = residual[0].outputs[0]
    outs = set(outputs)
    if op in ("layer_norm", "layer_norm_backward"):
        x = node.inputs[0] if op == "layer_norm" else node.inputs[1]
        k = len(a["normalized_shape"])
    elif op in ("cross_entropy", "cross_entropy_backward", "rms_norm", "rms_norm_backward"):
        x, k = (node.inputs[0] if op in ("cross_entropy", "rms_norm") else node.inputs[1]), 1
    else:
        x, k = node.inputs[0] if op in ("softmax", "log_softmax") else node.inputs[1], 1
        if a["axis"] % x.type.rank != x.type.rank - 1:
            raise NotRows(f"{op} over axis {a['axis']} of {x.type}, not the last axis")
    lead = x.type.rank - k
    rows, n = math.prod(x.shape[:lead]), math.prod(x.shape[lead:])
    names: dict[str, object] = {}
    ins, res = [], []

    def row(name, v):
        v = sources.get(v, results.get(v, v))       # a fused cast's source or value, in its own type
        names[name] = v
        return _row(v, lead, layouts, name)

    def vec(name, v, layout):
        names[name] = v
        return _vec(v, layout, layouts, name)

    def dy_rows(dy):
        return [row(name, v) for name, v in zip(("dy", "dy_1", "dy_2"), dy_parts or [dy])]
    w, b = a.get("has_weight", True), a.get("has_bias", True)
    attrs = {}
    if op == "layer_norm":
        affine = [nm for nm, present in (("weight", w), ("bias", b)) if present]
        ins = [row("x", x)] + [vec(nm, v, "col") for nm, v in zip(affine, node.inputs[1:])]
        res = [(nm, v) for nm, v in zip(("y", "mean", "rstd"), node.outputs)]
        attrs = {"eps": float(a["eps"])}
    elif op == "layer_norm_backward":
        dy, _, mean, rstd = node.inputs[:4]
        ins = dy_rows(dy) + [row("x", x), vec("mean", mean, "per_row"), vec("rstd", rstd, "per_row")]
        if w:
            ins.append(vec("weight", node.inputs[4], "col"))
        if residual is not None:
            ins.append(row("residual", residual[1]))
        res = list(zip(["dx"] + (["dweight"] if w else []) + (["dbias"] if b else []), node.outputs))
        res[1:1] = [("dx_cast", dx_cast[1])] if dx_cast is not None else []
        res += [("dxsum", dx_sum[1])] if dx_sum is not None else []
    elif op == "rms_norm":
        ins = [row("x", x)] + ([vec("weight", node.inputs[1], "col")] if w else [])
        res = [("y", node.outputs[0]), ("rstd", node.outputs[1])]
        attrs = {"eps": float(a["eps"])}
    elif op == "rms_norm_backward":
        dy, _, rstd = node.inputs[:3]
        ins = dy_rows(dy) + [row("x", x), vec("rstd", rstd, "per_row")]
        if w:
            ins.append(vec("weight", node.inputs[3], "col"))
        if residual is not None:
            ins.append(row("residual", residual[1]))
        res = list(zip(["dx"] + (["dweight"] if w and a.get("weight_grad", True) else []), node.outputs))
        res[1:1] = [("dx_cast", dx_cast[1])] if dx_cast is not None else []
        res += [("dxsum", dx_sum[1])] if dx_sum is not None else []
    elif op in ("softmax", "log_softmax"):
        ins, res = [row("x", x)], [("y", node.outputs[0])]
    elif op in ("softmax_backward", "log_softmax_backward"):
        ins, res = [row("dy", node.inputs[0]), row("y", node.inputs[1])], [("dx", node.outputs[0])]
    elif op == "cross_entropy":
        ins = [row("logits", x), vec("target", node.inputs[1], "per_row")]
        res = [("loss", node.outputs[0]), ("lse", node.outputs[1])]
        attrs = loss_attrs(node)
        if node.outputs[0] not in outs:
            raise NotRows("the loss is read by nothing")
    else:
        dloss, _, target, lse = node.inputs
        ins = [vec("dloss", dloss, "scalar"), row("logits", x), vec("target", target, "per_row"),
               vec("lse", lse, "per_row")]
        res = [("dlogits", node.outputs[0])]
        attrs = loss_attrs(node)
    written = []
    for name, v in res:
        if results.get(v, v) not in outs:
            continue
        layout = {"y": "row", "dx": "row", "dx_cast": "row", "dlogits": "row", "loss": "scalar", "dweight": "col",
                  "dbias": "col", "dxsum": "col"}.get(name, "per_row")
        written.append(row(name, v) if layout == "row" else vec(name, v, layout))
    if any(o.name == "target" and o.dtype not in ("i64", "i32") for o in ins):
        raise NotRows("targets are not i64 or i32")
    unwritten = [v for v in outputs if v not in names.values()]
    if unwritten:
        raise NotRows(f"{unwritten[0].type} is read outside the group and the kernel does not write it")
    return RowsProblem(op, rows, n, tuple(ins), tuple(written), attrs), names


def _forward_backward(forward, backward, nodes, outputs, layouts):
    """A cross-entropy forward and the backward of the same loss in one group (``fusion.py``): one
    ``cross_entropy_forward_backward`` problem, the logits read once and the row statistics (lse) kept
    in the kernel unless read outside the group.  Each node's casts bind as ``fused_casts`` says."""
    casts = [n for n in nodes if n.op == "cast"]
    mine = [c for c in casts if c.outputs[0] is forward.inputs[0]]
    sources, _ = fused_casts(forward, [forward] + mine)
    back_sources, results = fused_casts(backward, [backward] + [c for c in casts if c not in mine])
    x, target = forward.inputs
    dloss, x_back, target_back, lse = backward.inputs
    logits = sources.get(x, x)
    if not _same_view(back_sources.get(x_back, x_back), logits, layouts):
        raise NotRows("the backward reads other logits than its forward")
    if target_back is not target or lse is not forward.outputs[1] or not same_loss_attrs(forward, backward):
        raise NotRows("the backward is not of this forward's loss (target, lse or attributes differ)")
    lead = x.type.rank - 1
    rows, n = math.prod(x.shape[:lead]), x.shape[-1]
    outs = set(outputs)
    if forward.outputs[0] not in outs:
        raise NotRows("the loss is read by nothing")
    names = {"dloss": dloss, "logits": logits, "target": target, "loss": forward.outputs[0]}
    ins = (_vec(dloss, "scalar", layouts, "dloss"), _row(logits, lead, layouts, "logits"),
           _vec(target, "per_row", layouts, "target"))
    if target.dtype not in ("i64", "i32"):
        raise NotRows("targets are not i64 or i32")
    written = [_vec(forward.outputs[0], "scalar", layouts, "loss")]
    if lse in outs:
        names["lse"] = lse
        written.append(_vec(lse, "per_row", layouts, "lse"))
    dlogits = results.get(backward.outputs[0], backward.outputs[0])
    names["dlogits"] = dlogits
    written.append(_row(dlogits, lead, layouts, "dlogits"))
    unwritten = [v for v in outputs if v not in names.values()]
    if unwritten:
        raise NotRows(f"{unwritten[0].type} is read outside the group and the kernel does not write it")
    return RowsProblem("cross_entropy_forward_backward", rows, n, ins, tuple(written), loss_attrs(forward)), names


def _same_view(a, b, layouts) -> bool:
    """``a`` and ``b`` are one value or two views of the same elements of one buffer (the casts of a
    mixed-precision step read the logits each through a reshape of its own)."""
    return a is b or (layouts[a].root is layouts[b].root and same_place(layouts[a], layouts[b]))


def _reduction(nodes, inputs, outputs, layouts):
    red = nodes[-1]
    x = red.inputs[0]
    shape, rank = x.shape, x.type.rank
    axes = sorted({ax % rank for ax in red.attrs["axes"]}) if rank else []
    k = len(axes)
    if not axes:
        raise NotRows("a reduction over no axes is a copy")
    if axes == list(range(rank - k, rank)):
        kind, lead = "row_reduce", rank - k
    elif axes == list(range(k)) and red.op in ("sum", "mean"):
        kind, lead = "column_reduce", k
    else:
        raise NotRows(f"{red.op} over axes {tuple(axes)} of {x.type}: neither the trailing nor the leading axes")
    rows, n = math.prod(shape[:lead]), math.prod(shape[lead:])
    if kind == "column_reduce":
        rows, n = math.prod(shape[:k]), math.prod(shape[k:])
    names: dict[str, object] = {}
    operands: list[Operand] = []
    arg: dict = {}
    for v in inputs:
        const = _constant(v)
        if const is not None:
            arg[v] = f"#{const!r}"
            continue
        name = f"in{len(operands)}"
        operands.append(_classify(v, shape, lead, kind, layouts, name))
        names[name] = v
        arg[v] = name
    ops: list = []
    for node in nodes[:-1]:
        if node.op == "constant":
            value = node.attrs["value"]
            arg[node.outputs[0]] = f"#{float(value)!r}"
            continue
        arg[node.outputs[0]] = _prologue_op(node, arg, ops)
    index = _index_of(arg[x], ops)
    stored = []
    outs = []
    for v in outputs:
        if v is red.outputs[0]:
            names["out"] = v
            outs.append(Operand("out", _float(v, "out"), "per_row" if kind == "row_reduce" else "col", 0,
                                _dense(v, layouts, "out")))
            continue
        if v.shape != shape:
            raise NotRows(f"an intermediate of shape {list(v.shape)} is read outside the group")
        name = f"st{len(stored)}"
        names[name] = v
        stored.append((_index_of(arg[v], ops), name))
        outs.append(_row(v, lead, layouts, name))
    if "out" not in names:
        raise NotRows("the reduction's result is read by nothing")
    prologue = Prologue(tuple(ops), ((index, "out"),), tuple(stored))
    return RowsProblem(kind, rows, n, tuple(operands), tuple(outs), {"op": red.op}, prologue), names


def _constant(v):
    """The value of a one-element constant (a ``constant`` node's result), else None."""
    p = v.producer
    if p is not None and p.op == "constant" and math.prod(v.shape) == 1:
        return float(p.attrs["value"])
    return None


def _classify(v, shape, lead, kind, layouts, name) -> Operand:
    rank = len(shape)
    padded = (1,) * (rank - len(v.shape)) + tuple(v.shape)
    if math.prod(padded) == 1:
        return _vec(v, "scalar", layouts, name)
    if padded == tuple(shape):
        kind_, stride = _row_stride(layouts[v], max(0, lead + len(v.shape) - rank), name)
        if kind_ == "col":
            return Operand(name, _float(v, name), "col", 0, _align(layouts[v], v.type.itemsize))
        return Operand(name, _float(v, name), "row", stride, _align(layouts[v], v.type.itemsize))
    rows_part, cols_part = padded[:lead], padded[lead:]
    if rows_part == tuple(shape[:lead]) and all(d == 1 for d in cols_part):
        return _vec(v, "per_row", layouts, name)
    if all(d == 1 for d in rows_part) and cols_part == tuple(shape[lead:]):
        return _vec(v, "col", layouts, name)
    raise NotRows(f"{name} of shape {list(v.shape)} broadcasts over {list(shape)} in a way the rows kernels "
                  "do not read")


def is_prologue_op(node) -> bool:
    """``node`` can be a prologue op of a rows reduction (what ``_prologue_op`` states): a float cast,
    or a pointwise op the prologue computes (a ``pow`` with a constant exponent)."""
    if node.op == "cast":
        return node.attrs["dtype"] in FLOAT_DTYPES
    if node.op not in IR_OPS or node.outputs[0].dtype not in FLOAT_DTYPES:
        return False
    return node.op != "pow" or (node.inputs[1].producer is not None and node.inputs[1].producer.op == "constant")


def _prologue_op(node, arg, ops) -> str:
    """Append ``node`` as prologue ops (rounded to its storage type where that is 16-bit); its value's name."""
    op = node.op
    args = [arg.get(v) for v in node.inputs]
    if any(a is None for a in args):
        raise NotRows(f"{op} reads a value the prologue does not have")
    if op == "cast":
        dtype = node.attrs["dtype"]
        if dtype not in FLOAT_DTYPES:
            raise NotRows(f"cast to {dtype} inside the reduction")
        return _op_value(ops, f"cast_{dtype}", (args[0],))
    if op not in IR_OPS:
        raise NotRows(f"{op} is not a prologue op of the rows kernels")
    if op == "pow" and not args[1].startswith("#"):
        raise NotRows("pow with a tensor exponent")
    dtype = node.outputs[0].dtype
    if dtype not in FLOAT_DTYPES:
        raise NotRows(f"{op} gives {dtype} values")
    value = _op_value(ops, op, tuple(args))
    return _op_value(ops, f"cast_{dtype}", (value,)) if dtype != "f32" else value


def _op_value(ops, op: str, args: tuple) -> str:
    """The prologue value of ``op(args)``: an earlier op's when the same op already reads the same
    arguments (the ops are pure: a backward's recomputation of its forward's terms is computed once),
    else a new op appended."""
    if (op, args) not in ops:
        ops.append((op, args))
    return f"%{ops.index((op, args))}"


def _index_of(a: str, ops) -> int:
    """The prologue value of argument ``a``: an operand or constant read as it is gets its own op."""
    if a.startswith("%"):
        return int(a[1:])
    ops.append(("cast_f32", (a,)))
    return len(ops) - 1
