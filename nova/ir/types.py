"""Tensor types of the graph IR: a shape and an element type, nothing else (no strides, no device).

Element types are the IR's own short names; ``TORCH_NAMES`` maps them to torch dtypes' names so
the frontend and the interpreter convert without a table of their own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# IR element type -> (bytes per element, torch dtype attribute name)
ELEMENT_TYPES = {
    "f64": (8, "float64"),
    "f32": (4, "float32"),
    "bf16": (2, "bfloat16"),
    "f16": (2, "float16"),
    "i64": (8, "int64"),
    "i32": (4, "int32"),
    "bool": (1, "bool"),
}
FLOAT_TYPES = ("f64", "f32", "bf16", "f16")
TORCH_NAMES = {name: torch_name for name, (_, torch_name) in ELEMENT_TYPES.items()}
FROM_TORCH_NAMES = {torch_name: name for name, torch_name in TORCH_NAMES.items()}


class IRError(ValueError):
    """A graph, op or type that breaks the IR's rules (one line naming what and where)."""


@dataclass(frozen=True)
class TensorType:
    """``f32[32,512]``: the static shape and element type of one value."""
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        if self.dtype not in ELEMENT_TYPES:
            raise IRError(f"unknown element type {self.dtype!r}; the IR has {', '.join(ELEMENT_TYPES)}")
        shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in shape):
            raise IRError(f"negative dimension in shape {list(shape)}")
        object.__setattr__(self, "shape", shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return ELEMENT_TYPES[self.dtype][0]

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_TYPES

    def with_shape(self, shape) -> "TensorType":
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: str) -> "TensorType":
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting: align trailing dimensions; each pair equal or one of them 1."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(rank):
        dims = {s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0} - {1}
        if len(dims) > 1:
            raise IRError(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def promote(*dtypes: str) -> str:
    """The result type of a pointwise op on mixed element types (torch's category order)."""
    order = ("bool", "i32", "i64", "f16", "bf16", "f32", "f64")
    if {"f16", "bf16"} <= set(dtypes):
        return "f32"
    return max(dtypes, key=order.index)


def _category(dtype: str) -> int:
    return 0 if dtype == "bool" else 1 if dtype in ("i32", "i64") else 2


def promote_operands(types) -> str:
    """torch's rule for tensors: the highest category (bool < integer < float) wins; within it,
    operands with dimensions outrank 0-d ones (``f32[4] + f64[]`` is f32)."""
    top = max(_category(t.dtype) for t in types)
    in_top = [t for t in types if _category(t.dtype) == top]
    dimensioned = [t for t in in_top if t.rank > 0]
    return promote(*(t.dtype for t in (dimensioned or in_top)))
