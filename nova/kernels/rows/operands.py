"""What every rows kernel operand and kind is made of: element types, layouts, the kinds, and
``Operand`` (one pointer argument of a rows kernel).  ``problem`` builds on it."""
from __future__ import annotations

from dataclasses import dataclass

FLOAT_DTYPES = {"f32": 4, "bf16": 2, "f16": 2}
INDEX_DTYPES = {"i64": 8, "i32": 4}
LAYOUTS = ("row", "col", "per_row", "scalar")
NORMS = ("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward")
SOFTMAXES = ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward")
LOSSES = ("cross_entropy", "cross_entropy_backward", "cross_entropy_forward_backward")
REDUCES = ("row_reduce", "column_reduce")
KINDS = NORMS + SOFTMAXES + LOSSES + REDUCES
ROW_REDUCE_OPS = ("sum", "mean", "max", "min")
COLUMN_REDUCE_OPS = ("sum", "mean")


class RowsProblemError(ValueError):
    """A problem statement no rows kernel computes."""


def dtype_bytes(dtype: str) -> int:
    return FLOAT_DTYPES.get(dtype) or INDEX_DTYPES[dtype]


@dataclass(frozen=True)
class Operand:
    name: str
    dtype: str                      # IR element type: f32, bf16, f16 (targets: i64, i32)
    layout: str                     # one of LAYOUTS
    stride: int = 0                 # row: elements between consecutive rows
    align: int = 16                 # byte alignment of the base address (capped at 16)

    def to_dict(self) -> dict:
        d = {"name": self.name, "dtype": self.dtype, "layout": self.layout}
        if self.layout == "row":
            d["stride"] = self.stride
        if self.align != 16:
            d["align"] = self.align
        return d

    @property
    def elem_bytes(self) -> int:
        return dtype_bytes(self.dtype)
