"""What an embedding kernel computes, independent of any schedule: ``EmbeddingProblem``.

    forward    out[i, :] = table[idx[i], :]                    for i < count      (index_select, axis 0)
    backward   grad[v, :] = sum of dy[i, :] over i with idx[i] == v, i ascending  (scatter_add, axis 0)
               every row of grad written (rows no index names are zero)
               [+ base[v, :]: with ``base`` (its element type), a contiguous ``[vocab, dim]`` added to
               each row's sum as it is written -- a tied embedding's gradient, the LM head's weight
               gradient plus the lookup's]

``table`` / ``grad`` are ``[vocab, dim]`` and contiguous; ``out`` is ``[count, dim]`` and contiguous;
``dy`` is ``[count, dim]`` with rows ``stride`` elements apart (a slice of a wider tensor is read in
place; the forward's table rows are ``stride`` apart too).  ``idx`` holds ``count`` i32 or i64 indices
laid out as ``index_shape`` with element ``index_strides`` (a strided view is read in place; axes that
are contiguous with each other are merged, so a dense index tensor is ``(count,), (1,)``).  ``align`` is
the byte alignment of the float operands' base addresses (16 when unknown: fresh buffers and arena
slots are 256-byte aligned); the vector width is derived from it, the row length and the stride.

An index outside ``[0, vocab)`` is the caller's error (torch raises); the kernels clamp it into the
table so that no access leaves it.  The backward sums in FP32 and rounds once to the storage type.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

DIRECTIONS = ("forward", "backward")
FLOAT_DTYPES = {"f32": 4, "bf16": 2, "f16": 2}
INDEX_DTYPES = {"i32": 4, "i64": 8}


class EmbeddingProblemError(ValueError):
    """A problem statement no embedding kernel computes."""


def merge_index_axes(shape, strides) -> tuple[tuple, tuple]:
    """``(shape, strides)`` with extent-1 axes dropped and each axis merged into the one before it
    where ``stride[a] == stride[a + 1] * shape[a + 1]`` (the flat order is unchanged)."""
    axes = [(int(n), int(s)) for n, s in zip(shape, strides) if n != 1]
    merged: list[list[int]] = []
    for n, s in axes:
        if merged and merged[-1][1] == s * n:
            merged[-1] = [merged[-1][0] * n, s]
        else:
            merged.append([n, s])
    if not merged:
        return (1,), (1,)
    return tuple(n for n, _ in merged), tuple(s for _, s in merged)


@dataclass(frozen=True)
class EmbeddingProblem:
    direction: str                  # "forward" (gather) or "backward" (scatter-add)
    count: int                      # indices: rows gathered, or gradient rows added
    vocab: int                      # table rows
    dim: int                        # elements per row
    dtype: str = "f32"              # storage of the table, out, dy and grad
    index_dtype: str = "i64"
    index_shape: tuple = ()         # the index view (merged axes; () means (count,) contiguous)
    index_strides: tuple = ()
    stride: int = 0                 # elements between rows of the row stack read (0: dim)
    align: int = 16                 # byte alignment of the float operands' bases (capped at 16)
    base: str | None = None         # backward: the element type of a [vocab, dim] added to the sums

    def __post_init__(self):
        if self.direction not in DIRECTIONS:
            raise EmbeddingProblemError(f"unknown embedding direction {self.direction!r}; one of {', '.join(DIRECTIONS)}")
        for name in ("count", "vocab", "dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise EmbeddingProblemError(f"embedding: {name} must be a positive integer, got {v!r}")
        if self.dtype not in FLOAT_DTYPES:
            raise EmbeddingProblemError(f"embedding: rows of {self.dtype} are not one of {', '.join(FLOAT_DTYPES)}")
        if self.index_dtype not in INDEX_DTYPES:
            raise EmbeddingProblemError(f"embedding: indices of {self.index_dtype} are not one of "
                                        f"{', '.join(INDEX_DTYPES)}")
        if self.index_dtype == "i32" and self.vocab > 2**31:
            raise EmbeddingProblemError(f"embedding: {self.vocab} table rows cannot be numbered by i32 indices "
                                        f"(at most 2^31); use i64")
        shape, strides = self.index_shape or (self.count,), self.index_strides or (1,)
        if len(shape) != len(strides) or math.prod(shape) != self.count or min(strides) < 0:
            raise EmbeddingProblemError(f"embedding: index view {list(shape)} with strides {list(strides)} does not "
                                        f"hold {self.count} indices")
        shape, strides = merge_index_axes(shape, strides)
        object.__setattr__(self, "index_shape", shape)
        object.__setattr__(self, "index_strides", strides)
        object.__setattr__(self, "stride", self.stride or self.dim)
        if self.stride < self.dim:
            raise EmbeddingProblemError(f"embedding: row stride {self.stride} is shorter than the row ({self.dim})")
        e = FLOAT_DTYPES[self.dtype]
        if self.align < e or self.align & (self.align - 1):
            raise EmbeddingProblemError(f"embedding: base alignment {self.align} B is not a power of two multiple "
                                        f"of the {e}-byte elements")
        object.__setattr__(self, "align", min(self.align, 16))
        if self.base is not None and (self.direction != "backward" or self.base not in FLOAT_DTYPES):
            raise EmbeddingProblemError(f"embedding: a base ({self.base}) is a float [vocab, dim] added to a backward's "
                                        "sums")

    # ---------------------------------------------------------------- reading
    @property
    def elem_bytes(self) -> int:
        return FLOAT_DTYPES[self.dtype]

    @property
    def index_bytes(self) -> int:
        return INDEX_DTYPES[self.index_dtype]

    @property
    def index_extent(self) -> int:
        """Elements of the index view's span: 1 + sum((n - 1) * stride)."""
        return 1 + sum((n - 1) * s for n, s in zip(self.index_shape, self.index_strides))

    @property
    def contiguous_indices(self) -> bool:
        return self.index_strides == (1,)

    @property
    def source_rows(self) -> int:
        """Rows of the row stack read with ``stride``: the table (forward) or dy (backward)."""
        return self.vocab if self.direction == "forward" else self.count

    @property
    def key_bits(self) -> int:
        """Bits of a table row number: the radix sort's key width."""
        return max(1, (self.vocab - 1).bit_length())

    @property
    def bytes_moved(self) -> int:
        """Compulsory DRAM traffic: the indices once, the rows read once, the result written once."""
        rows = self.count * self.dim * self.elem_bytes
        written = rows if self.direction == "forward" else self.vocab * self.dim * self.elem_bytes
        base = self.vocab * self.dim * FLOAT_DTYPES[self.base] if self.base else 0
        return self.count * self.index_bytes + rows + written + base

    def describe(self) -> str:
        what = "gather" if self.direction == "forward" else "scatter-add"
        extra = "" if self.contiguous_indices else f" indices{list(self.index_shape)} strides{list(self.index_strides)}"
        if self.stride != self.dim:
            extra += f" row stride {self.stride}"
        if self.base:
            extra += f" + {self.base} base"
        return f"embedding {what} {self.count}x{self.dim} of {self.vocab} rows {self.dtype}/{self.index_dtype}{extra}"

    def to_dict(self) -> dict:
        d = {"direction": self.direction, "count": self.count, "vocab": self.vocab, "dim": self.dim,
             "dtype": self.dtype, "index_dtype": self.index_dtype, "index_shape": list(self.index_shape),
             "index_strides": list(self.index_strides), "stride": self.stride}
        if self.align != 16:
            d["align"] = self.align
        if self.base:
            d["base"] = self.base
        return d


def parse_embedding_shape(text: str) -> tuple[int, int]:
    """``COUNTxDIM`` (or ``AxBxDIM``: every axis but the last indexes): (indices, row length)."""
    parts = [p.strip() for p in text.lower().replace(",", "x").split("x") if p.strip()]
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise EmbeddingProblemError(f"shape {text!r}: expected COUNTxDIM with integers, e.g. 16384x512") from None
    if len(dims) < 2 or min(dims) < 1:
        raise EmbeddingProblemError(f"shape {text!r}: expected COUNTxDIM with positive integers, e.g. 16384x512")
    return math.prod(dims[:-1]), dims[-1]
