"""The operands of each rows kind (names, layouts, which are optional) and the check of a problem against them.

``SIGNATURES[kind] = (inputs, outputs)``, each a tuple of ``(name, layout, required)``; the
generic reductions (``row_reduce``, ``column_reduce``) take any operands their prologue names.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from nova.kernels.rows.operands import COLUMN_REDUCE_OPS, FLOAT_DTYPES, INDEX_DTYPES, LOSSES, ROW_REDUCE_OPS

if TYPE_CHECKING:                                # annotations only: problem imports this module
    from nova.kernels.rows.problem import RowsProblem

R, C, P, S = "row", "col", "per_row", "scalar"
SIGNATURES = {
    "layer_norm": ((("x", R, 1), ("weight", C, 0), ("bias", C, 0)),
                   (("y", R, 1), ("mean", P, 0), ("rstd", P, 0))),
    "layer_norm_backward": ((("dy", R, 1), ("dy_1", R, 0), ("dy_2", R, 0), ("x", R, 1), ("mean", P, 1), ("rstd", P, 1), ("weight", C, 0),
                             ("residual", R, 0)),
                            (("dx", R, 0), ("dx_cast", R, 0), ("dweight", C, 0), ("dbias", C, 0), ("dxsum", C, 0))),
    "rms_norm": ((("x", R, 1), ("weight", C, 0)), (("y", R, 1), ("rstd", P, 0))),
    "rms_norm_backward": ((("dy", R, 1), ("dy_1", R, 0), ("dy_2", R, 0), ("x", R, 1), ("rstd", P, 1), ("weight", C, 0), ("residual", R, 0)),
                          (("dx", R, 0), ("dx_cast", R, 0), ("dweight", C, 0), ("dxsum", C, 0))),
    "softmax": ((("x", R, 1),), (("y", R, 1),)),
    "log_softmax": ((("x", R, 1),), (("y", R, 1),)),
    "softmax_backward": ((("dy", R, 1), ("y", R, 1)), (("dx", R, 1),)),
    "log_softmax_backward": ((("dy", R, 1), ("y", R, 1)), (("dx", R, 1),)),
    "cross_entropy": ((("logits", R, 1), ("target", P, 1)), (("loss", S, 1), ("lse", P, 0))),
    "cross_entropy_backward": ((("dloss", S, 1), ("logits", R, 1), ("target", P, 1), ("lse", P, 1)),
                               (("dlogits", R, 1),)),
    "cross_entropy_forward_backward": ((("dloss", S, 1), ("logits", R, 1), ("target", P, 1)),
                                       (("loss", S, 1), ("lse", P, 0), ("dlogits", R, 1))),
}
STAT_OUTPUTS = ("mean", "rstd", "lse")      # per-row statistics: always f32


def check_kind(p: RowsProblem) -> str:
    """Why ``p``'s operands and attributes do not fit its kind ('' when they do)."""
    if p.kind in ("row_reduce", "column_reduce"):
        return _check_reduce(p)
    ins, outs = SIGNATURES[p.kind]
    for given, spec, what in ((p.inputs, ins, "inputs"), (p.outputs, outs, "outputs")):
        names = [o.name for o in given]
        order = [name for name, _, _ in spec]
        if [n for n in order if n in names] != names:
            return f"{what} {names} are not a subsequence of {order}"
        for name, layout, required in spec:
            o = next((x for x in given if x.name == name), None)
            if o is None and required:
                return f"needs the {name} operand"
            if o is not None and o.layout != layout:
                return f"{name} must be a {layout} operand, not {o.layout}"
    for o in p.operands:
        if o.name == "target":
            if o.dtype not in INDEX_DTYPES:
                return f"targets must be i64 or i32, not {o.dtype}"
        elif o.dtype not in FLOAT_DTYPES:
            return f"{o.name} must be f32, bf16 or f16, not {o.dtype}"
        elif o.name in STAT_OUTPUTS and o.dtype != "f32":
            return f"{o.name} is an f32 row statistic, not {o.dtype}"
    if p.kind in ("layer_norm", "rms_norm"):
        eps = p.attr("eps")
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps < 0:
            return f"eps must be a non-negative number, got {eps!r}"
    if p.kind in LOSSES:
        if p.attr("reduction", "mean") not in ("mean", "sum"):
            return f"reduction must be mean or sum, got {p.attr('reduction')!r}"
        if not isinstance(p.attr("ignore_index", -100), int):
            return "ignore_index must be an integer"
    if p.kind == "layer_norm_backward" and p.has("dweight") != p.has("weight") and p.has("dweight"):
        return "dweight needs the weight's presence to match (the IR's has_weight)"
    if p.has("dy_2") and not p.has("dy_1"):
        return "dy_2 needs dy_1 (dy's parts are added in order)"
    return ""


def _check_reduce(p: RowsProblem) -> str:
    ops = ROW_REDUCE_OPS if p.kind == "row_reduce" else COLUMN_REDUCE_OPS
    if p.attr("op") not in ops:
        return f"op must be one of {', '.join(ops)}, got {p.attr('op')!r}"
    if p.prologue is None:
        return "needs a prologue (the reduced expression)"
    reduced = "per_row" if p.kind == "row_reduce" else "col"
    names = {o.name for o in p.inputs}
    why = p.prologue.check(names)
    if why:
        return why
    stored = {name for _, name in p.prologue.store}
    reduced_names = {name for _, name in p.prologue.reduce}
    for o in p.outputs:
        if o.name in reduced_names and o.layout != reduced:
            return f"the reduction result {o.name} must be a {reduced} operand"
        if o.name in stored and o.layout != "row":
            return f"the stored value {o.name} must be a row operand"
        if o.name not in stored | reduced_names:
            return f"output {o.name} is neither reduced nor stored by the prologue"
        if o.dtype not in FLOAT_DTYPES:
            return f"{o.name} must be f32, bf16 or f16"
    if p.kind == "row_reduce" and len(p.prologue.reduce) != 1:
        return "a row reduction has exactly one result"
    for o in p.inputs:
        if o.dtype not in FLOAT_DTYPES:
            return f"{o.name} must be f32, bf16 or f16, not {o.dtype}"
    return ""


