"""What a rows kernel computes, independent of any schedule: ``RowsProblem``.

Every kind works on ``rows`` rows of ``n`` elements (a column reduction: ``rows`` rows of ``n``
columns) and names its operands.  An operand is one of four layouts over that ``[rows, n]`` space:

    row        [rows, n], each row contiguous, consecutive rows ``stride`` elements apart (>= n):
               a non-contiguous row stack (a slice of a wider tensor) is read in place
    col        [n], broadcast over the rows (a LayerNorm weight, a bias gradient)
    per_row    [rows], one value per row, contiguous (mean, rstd, lse, targets)
    scalar     one element (a loss, its gradient, a scalar factor)

``align`` is the byte alignment of the operand's base address (16 when unknown: fresh buffers and
arena slots are 256-byte aligned); the vector width is derived from it, the row length and the strides.

Kinds and their operands (``?``: present when the attribute or the plan says so):

    layer_norm             x, weight?, bias?  -> y, mean?, rstd?          attrs eps
    layer_norm_backward    dy, dy_1?, dy_2?, x, mean, rstd, weight?, residual? -> dx?, dx_cast?, dweight?, dbias?, dxsum?
    rms_norm               x, weight? -> y, rstd?                         attrs eps
    rms_norm_backward      dy, dy_1?, dy_2?, x, rstd, weight?, residual? -> dx?, dx_cast?, dweight?, dxsum?
                           (``dy_1``, ``dy_2``: the output gradient arrives in parts, added in FP32 in
                           order, ``(dy + dy_1) + dy_2`` -- autocast's 16-bit gradients of the
                           projections that read the norm's output, each widened as it is read;
                           ``residual``: dx is written as dx + residual, the residual stream's gradient
                           added as the kernel writes it; ``dx_cast``: the same dx written a second time
                           in its own (16-bit) type, rounded as a cast of dx rounds it -- autocast's FP32
                           residual stream beside the bf16 input of the next GEMM; ``dxsum``: the written
                           dx summed over the rows, the bias gradient of the linear layer that dx is the
                           output gradient of -- the rounded values of ``dx_cast`` when it is written,
                           as a sum of the cast's result adds them)
    softmax, log_softmax   x -> y
    softmax_backward       dy, y -> dx        (y = softmax(x))
    log_softmax_backward   dy, y -> dx        (y = log_softmax(x))
    cross_entropy          logits, target -> loss, lse?                   attrs reduction, ignore_index
    cross_entropy_backward dloss, logits, target, lse -> dlogits          attrs reduction, ignore_index
    cross_entropy_forward_backward  dloss, logits, target -> loss, lse?, dlogits   (both in one pass over the
                           logits: a training step's loss whose dloss is known before its forward runs)
    row_reduce             any operands -> out (per_row) + stored values  attrs op sum|mean|max|min
    column_reduce          any operands -> out* (col) + stored values     attrs op sum|mean

``row_reduce`` and ``column_reduce`` carry a ``prologue`` (``nova/kernels/rows/prologue.py``): the
fused pointwise producers as a small SSA program over IR pointwise op names, evaluated per element
in FP32; its ``reduce`` entries are reduced (over the row, or over the rows per column) and its
``store`` entries written (intermediates that other kernels read).  All arithmetic is FP32 for
f32/bf16/f16 storage; per-row statistics (mean, rstd, lse) are f32.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from nova.kernels.rows.operands import FLOAT_DTYPES, INDEX_DTYPES, KINDS, LAYOUTS, Operand, RowsProblemError
from nova.kernels.rows.signatures import check_kind


@dataclass(frozen=True)
class RowsProblem:
    kind: str
    rows: int
    n: int
    inputs: tuple = ()              # Operand, in the kernel's parameter order
    outputs: tuple = ()             # Operand, in the kernel's parameter order
    attrs: tuple = ()               # sorted (name, value) pairs
    prologue: object = None         # row_reduce / column_reduce: a prologue.Prologue

    def __post_init__(self):
        if self.kind not in KINDS:
            raise RowsProblemError(f"unknown rows kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        for name in ("rows", "n"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise RowsProblemError(f"{self.kind}: {name} must be a positive integer, got {v!r}")
        attrs = self.attrs.items() if isinstance(self.attrs, dict) else self.attrs
        object.__setattr__(self, "attrs", tuple(sorted((str(k), v) for k, v in attrs)))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        names = [o.name for o in self.inputs + self.outputs]
        if len(set(names)) != len(names):
            raise RowsProblemError(f"{self.kind}: operand names repeat: {names}")
        for o in self.inputs + self.outputs:
            self._check_operand(o)
        why = check_kind(self)
        if why:
            raise RowsProblemError(f"{self.kind} {self.rows}x{self.n}: {why}")

    def _check_operand(self, o: Operand) -> None:
        if o.layout not in LAYOUTS:
            raise RowsProblemError(f"operand {o.name}: unknown layout {o.layout!r}; layouts: {', '.join(LAYOUTS)}")
        if o.dtype not in FLOAT_DTYPES and o.dtype not in INDEX_DTYPES:
            raise RowsProblemError(f"operand {o.name}: element type {o.dtype} is not one of "
                                   f"{', '.join(list(FLOAT_DTYPES) + list(INDEX_DTYPES))}")
        if o.layout == "row" and (not isinstance(o.stride, int) or o.stride < self.n):
            raise RowsProblemError(f"operand {o.name}: row stride {o.stride} is shorter than the row ({self.n})")
        if o.align < 1 or o.align & (o.align - 1) or o.align % min(o.elem_bytes, 16):
            raise RowsProblemError(f"operand {o.name}: base alignment {o.align} B is not a power of two multiple "
                                   f"of its {o.elem_bytes}-byte elements")

    # ---------------------------------------------------------------- reading
    def attr(self, name: str, default=None):
        return dict(self.attrs).get(name, default)

    def operand(self, name: str) -> Operand | None:
        return next((o for o in self.inputs + self.outputs if o.name == name), None)

    def has(self, name: str) -> bool:
        return self.operand(name) is not None

    @property
    def operands(self) -> tuple:
        return self.inputs + self.outputs

    @property
    def dtype(self) -> str:
        """The storage type of the rows (the first row operand's)."""
        return next((o.dtype for o in self.operands if o.layout == "row"), "f32")

    def nbytes(self, o: Operand) -> int:
        """Bytes of operand ``o`` that cross memory once."""
        count = {"row": self.rows * self.n, "col": self.n, "per_row": self.rows, "scalar": 1}[o.layout]
        return count * o.elem_bytes

    @property
    def bytes_moved(self) -> int:
        """Compulsory DRAM traffic: every input read once, every output written once."""
        return sum(self.nbytes(o) for o in self.operands)

    def describe(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.attrs)
        strided = [f"{o.name}[stride {o.stride}]" for o in self.operands if o.layout == "row" and o.stride != self.n]
        pro = f" prologue {self.prologue.describe()}" if self.prologue is not None else ""
        dtypes = sorted({o.dtype for o in self.operands if o.dtype in FLOAT_DTYPES})
        return (f"{self.kind} {self.rows}x{self.n} {'/'.join(dtypes)}" + (f" {extra}" if extra else "")
                + ("".join(" " + s for s in strided)) + pro)

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "rows": self.rows, "n": self.n,
             "inputs": [o.to_dict() for o in self.inputs], "outputs": [o.to_dict() for o in self.outputs],
             "attrs": {k: v for k, v in self.attrs}}
        if self.prologue is not None:
            d["prologue"] = self.prologue.to_dict()
        return d

    def with_rows(self, rows: int) -> "RowsProblem":
        return replace(self, rows=rows)


def parse_rows_shape(text: str) -> tuple[int, int]:
    """``ROWSxN`` (or ``B,T,N``-style products ``AxBxN``: every axis but the last is a row axis)."""
    parts = [p.strip() for p in text.lower().replace(",", "x").split("x") if p.strip()]
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise RowsProblemError(f"shape {text!r}: expected ROWSxN with integers, e.g. 16384x4096") from None
    if len(dims) < 2 or min(dims) < 1:
        raise RowsProblemError(f"shape {text!r}: expected ROWSxN with positive integers, e.g. 16384x4096")
    return math.prod(dims[:-1]), dims[-1]
