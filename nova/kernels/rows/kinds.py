"""The rows problems as the CLI and the derivation state them (contiguous rows, every gradient)."""
from __future__ import annotations

from nova.kernels.rows.operands import FLOAT_DTYPES, Operand
from nova.kernels.rows.problem import RowsProblem


# ---------------------------------------------------------------- problems as the CLI states them
def cli_problem(kind: str, rows: int, n: int, dtype: str = "f32", *, backward: bool = False, eps: float = 1e-5,
                affine: bool = True, forward_backward: bool = False, residual: bool = False,
                dx_sum: bool = False, dx_cast: str | None = None, dy_parts: int = 1) -> RowsProblem:
    """The problem of ``nova-config explain layernorm|rmsnorm|softmax|log_softmax|cross_entropy ROWSxN``:
    contiguous rows of ``dtype``, statistics in f32, LayerNorm with weight and bias (RMSNorm with a
    weight) unless ``affine`` is False, the backward with every gradient; ``forward_backward``
    (cross_entropy only): the loss and dlogits in one kernel; ``residual`` (a norm's backward only):
    dx written as dx + residual (the residual stream's gradient added in the kernel); ``dx_sum`` (a
    norm's backward only): dx also summed over the rows (a linear layer's bias gradient); ``dx_cast`` (a
    norm's backward only): dx also written in that 16-bit type (autocast's input of the next GEMM beside
    the FP32 residual stream), the sum then adding the rounded values; ``dy_parts`` (a norm's backward
    only, 1 to 3): dy read as that many row inputs added in order (``dy``, ``dy_1``, ``dy_2``: autocast's
    gradients of the projections that read the norm's output)."""
    from nova.kernels.rows.problem import RowsProblemError
    if dtype not in FLOAT_DTYPES:
        raise RowsProblemError(f"unsupported dtype {dtype!r}; choose one of {', '.join(FLOAT_DTYPES)}")

    def row(name, dt=dtype):
        return Operand(name, dt, "row", n)

    def col(name):
        return Operand(name, dtype, "col")

    def stat(name):
        return Operand(name, "f32", "per_row")
    kind = {"layernorm": "layer_norm", "rmsnorm": "rms_norm", "crossentropy": "cross_entropy"}.get(kind, kind)
    if forward_backward and kind != "cross_entropy":
        raise RowsProblemError(f"--forward-backward is for cross_entropy, not {kind}")
    if forward_backward and backward:
        raise RowsProblemError("--forward-backward is the loss and its gradient in one kernel; --backward the "
                               "gradient alone: give one of them")
    if dx_cast is not None and dx_cast not in ("bf16", "f16"):
        raise RowsProblemError(f"--dx-cast takes bf16 or f16, not {dx_cast!r}")
    if dy_parts not in (1, 2, 3):
        raise RowsProblemError(f"--dy-parts takes 1, 2 or 3, not {dy_parts!r}")
    for flag, given in (("--residual", residual), ("--dx-sum", dx_sum), ("--dx-cast", dx_cast),
                        ("--dy-parts", dy_parts > 1)):
        if given and not (backward and kind in ("layer_norm", "rms_norm")):
            raise RowsProblemError(f"{flag} is for the backward of layernorm or rmsnorm (with --backward)")
    extra = (row("residual"),) if residual else ()
    summed = (col("dxsum"),) if dx_sum else ()
    rounded = (row("dx_cast", dx_cast),) if dx_cast else ()
    dy = (row("dy"),) + tuple(row(f"dy_{k}") for k in range(1, dy_parts))
    if kind == "layer_norm" and not backward:
        ins = (row("x"),) + ((col("weight"), col("bias")) if affine else ())
        return RowsProblem("layer_norm", rows, n, ins, (row("y"), stat("mean"), stat("rstd")), {"eps": eps})
    if kind == "layer_norm":
        ins = dy + (row("x"), stat("mean"), stat("rstd")) + ((col("weight"),) if affine else ()) + extra
        outs = (row("dx"),) + rounded + ((col("dweight"), col("dbias")) if affine else ()) + summed
        return RowsProblem("layer_norm_backward", rows, n, ins, outs)
    if kind == "rms_norm" and not backward:
        ins = (row("x"),) + ((col("weight"),) if affine else ())
        return RowsProblem("rms_norm", rows, n, ins, (row("y"), stat("rstd")), {"eps": eps})
    if kind == "rms_norm":
        ins = dy + (row("x"), stat("rstd")) + ((col("weight"),) if affine else ()) + extra
        return RowsProblem("rms_norm_backward", rows, n, ins,
                           (row("dx"),) + rounded + ((col("dweight"),) if affine else ()) + summed)
    if kind in ("softmax", "log_softmax"):
        if backward:
            return RowsProblem(f"{kind}_backward", rows, n, (row("dy"), row("y")), (row("dx"),))
        return RowsProblem(kind, rows, n, (row("x"),), (row("y"),))
    if kind == "cross_entropy":
        target = Operand("target", "i64", "per_row")
        if forward_backward:
            return RowsProblem("cross_entropy_forward_backward", rows, n,
                               (Operand("dloss", dtype, "scalar"), row("logits"), target),
                               (Operand("loss", dtype, "scalar"), row("dlogits")),
                               {"reduction": "mean", "ignore_index": -100})
        if backward:
            return RowsProblem("cross_entropy_backward", rows, n,
                               (Operand("dloss", dtype, "scalar"), row("logits"), target, stat("lse")),
                               (row("dlogits"),), {"reduction": "mean", "ignore_index": -100})
        return RowsProblem("cross_entropy", rows, n, (row("logits"), target),
                           (Operand("loss", dtype, "scalar"), stat("lse")), {"reduction": "mean", "ignore_index": -100})
    raise RowsProblemError(f"unknown rows operation {kind!r}; choose layernorm, rmsnorm, softmax, log_softmax "
                           "or cross_entropy")


def column_problem(p: RowsProblem) -> RowsProblem | None:
    """The weight (and bias) gradients of a norm backward as a column reduction over the rows:
    LayerNorm dweight = sum_rows dy * (x - mean) * rstd, dbias = sum_rows dy (dy the sum of its parts
    where it arrives in parts); RMSNorm dweight =
    sum_rows dy * x * rstd; ``dxsum`` = sum_rows dx (``dx_cast`` where it is written), read back from
    the row kernel's output (the column stage runs after it).  A ``column_reduce`` problem passed through as itself; None otherwise."""
    from nova.kernels.rows.prologue import Prologue
    if p.kind == "column_reduce":
        return p
    if p.kind not in ("layer_norm_backward", "rms_norm_backward"):
        return None
    outs = tuple(o for o in p.outputs if o.layout == "col")
    if not outs:
        return None
    parts = tuple(name for name in ("dy_1", "dy_2") if p.has(name))
    ops = tuple(("add", ("dy" if k == 0 else f"%{k - 1}", part)) for k, part in enumerate(parts))  # dy's parts, in order
    dy = f"%{len(ops) - 1}" if ops else "dy"
    at = len(ops)
    if p.kind == "layer_norm_backward":
        ops += (("sub", ("x", "mean")), ("mul", (f"%{at}", "rstd")), ("mul", (dy, f"%{at + 1}")), ("cast_f32", (dy,)))
        index = {"dweight": at + 2, "dbias": at + 3}
        ins = ("dy",) + parts + ("x", "mean", "rstd")
    else:
        ops += (("mul", ("x", "rstd")), ("mul", (dy, f"%{at}")))
        index = {"dweight": at + 1}
        ins = ("dy",) + parts + ("x", "rstd")
    if any(o.name == "dxsum" for o in outs):
        written = "dx_cast" if p.has("dx_cast") else "dx"     # the values the sum adds (problem docstring)
        index["dxsum"] = len(ops)
        ops += (("cast_f32", (written,)),)
        ins += (written,)
    prologue = Prologue(ops, tuple((index[o.name], o.name) for o in outs))
    return RowsProblem("column_reduce", p.rows, p.n, tuple(p.operand(n) for n in ins), outs, {"op": "sum"}, prologue)
