"""What one fused pointwise kernel computes, independent of any schedule.

A ``PointwiseProblem`` is a static iteration ``shape``, its ``inputs`` (element type, element strides
over the shape: 0 on broadcast axes, any other stride for a strided view read in place, and the byte
alignment its base pointer is known to have), an expression ``program`` in SSA form over the IR's
pointwise op names (``nova/ir/ops.py``), and its ``outputs`` (program values written in their IR
element type).  Value numbers: inputs ``0 .. n-1``, then one per instruction.  Outputs are written
contiguous unless ``stores`` says otherwise: then one ``Operand`` per output (its element strides over
the shape, never 0 on an axis of extent > 1 and never two elements on one address, and its base
alignment: the storage pass, ``nova/passes/storage.py``, has a kernel write its result in the layout
its readers need, e.g. into its slice of a concat's buffer).  A problem whose outputs are all
contiguous and 16-byte aligned has ``stores == ()``: its key and its code are those of a problem
stated before strided outputs existed.

Three ways an element's value depends on more than the operands at its own coordinates:

* ``iota`` (an instruction): ``start + step * ((e / inner) % extent)`` of the element's flat index
  ``e``, i.e. its coordinate along the axis of ``extent`` whose inner axes hold ``inner`` elements
  (a position id, a concat's slice test); the flat index survives coalescing, so does the value;
* a ``Window`` on an input: the input covers only ``[start, start + extent)`` of one iteration axis
  (a concat's input in its slice) and is read at its coordinate there, clamped into its extent, so
  every access stays inside the input (the program selects by ``iota`` where it is valid);
* ``gather`` (an instruction) of a table input (``Operand.table``): the table's element at a computed
  integer index, clamped into the table (an ``index_select`` of a one-axis table).

Each appears in a problem only where the problem uses it: problems without them keep their keys and
their code.

``shared_reads`` (a cost fact, no code): operands that read within one region of memory -- a value
read whole and again through windows of its slices (RoPE's rotate-half folded into the kernel that
reads it) -- as ``(elements, input indices)``: their reads move at most the region's elements from
DRAM, the repeats are served by the caches (each thread's shifted reads stay within its own rows).

The problem is canonical (``canonical.py``): axes of extent 1 are dropped and neighbouring axes that
every operand walks contiguously are merged; the program is rewritten to its named forms (the GELU,
SiLU and sigmoid patterns), constant-folded, deduplicated and numbered in one deterministic order, so
the same math fuses to the same problem and the same cache key however it was written.

A fusion group's problem is stated by ``nova.passes.pointwise_from_ir`` (``pointwise_problem``: the
group's nodes, the values it reads and writes, their strides; ``expression_problem``: the CLI's
``"gelu_tanh(x)+y"``), which builds the program and puts it in canonical form here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from nova.kernels.pointwise.types import ELEMENT_BYTES

ALIGN_MAX = 16                        # bytes: the widest global access (ld.global.v4.b32)


class PointwiseProblemError(ValueError):
    """A group or expression no pointwise kernel computes (one line naming why)."""


@dataclass(frozen=True)
class Window:
    """An input that covers ``[start, start + extent)`` of iteration axis ``axis`` only: read at
    coordinate ``min(max(c - start, 0), extent - 1)`` along it (never outside the input)."""
    axis: int
    start: int
    extent: int

    def to_dict(self) -> dict:
        return {"axis": self.axis, "start": self.start, "extent": self.extent}


@dataclass(frozen=True)
class Operand:
    """One input: element type, element strides over the problem's shape, base alignment in bytes;
    ``window``: the iteration axis range it covers (None: all of it); ``table``: ``(elements,
    stride)`` of a table read only by ``gather`` at computed indices (its strides are then all 0)."""
    dtype: str
    strides: tuple[int, ...]
    align: int = ALIGN_MAX
    window: Window | None = None
    table: tuple[int, int] = ()

    @property
    def itemsize(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    def extents(self, shape) -> tuple[int, ...]:
        """The extent of each iteration axis this operand covers (its window's on that axis)."""
        w = self.window
        return tuple(w.extent if w is not None and a == w.axis else d for a, d in enumerate(shape))

    def span(self, shape) -> int:
        """Elements from the first to one past the last one addressed."""
        if self.table:
            return 1 + (self.table[0] - 1) * self.table[1]
        return 1 + sum((d - 1) * s for d, s in zip(self.extents(shape), self.strides))

    def distinct(self, shape) -> int:
        """Elements read at least once (broadcast axes read one element; a table at most once per
        element of the shape)."""
        if self.table:
            return min(self.table[0], math.prod(shape))
        return math.prod(d for d, s in zip(self.extents(shape), self.strides) if s)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "strides": list(self.strides), "align": self.align,
                **({"window": self.window.to_dict()} if self.window is not None else {}),
                **({"table": list(self.table)} if self.table else {})}


@dataclass(frozen=True)
class Instr:
    """``value = op(args, attrs)`` with the IR result element type ``dtype``; ``constant`` carries
    ``value`` in attrs and no args."""
    op: str
    args: tuple[int, ...]
    attrs: tuple[tuple[str, object], ...]
    dtype: str

    def attr(self, name, default=None):
        return dict(self.attrs).get(name, default)

    def to_dict(self) -> dict:
        return {"op": self.op, "args": list(self.args), "attrs": {k: v for k, v in self.attrs}, "dtype": self.dtype}


@dataclass(frozen=True)
class PointwiseProblem:
    shape: tuple[int, ...]
    inputs: tuple[Operand, ...]
    program: tuple[Instr, ...]
    outputs: tuple[int, ...]             # program values written, in their IR types
    stores: tuple[Operand, ...] = ()     # where each output is written (strides, alignment); (): contiguous
    shared_reads: tuple[tuple[int, tuple[int, ...]], ...] = ()   # (elements, inputs reading within them)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def dtype_of(self, value: int) -> str:
        n = len(self.inputs)
        return self.inputs[value].dtype if value < n else self.program[value - n].dtype

    def output_dtypes(self) -> tuple[str, ...]:
        return tuple(self.dtype_of(v) for v in self.outputs)

    @property
    def contiguous_strides(self) -> tuple[int, ...]:
        out, inner = [], 1
        for d in reversed(self.shape):
            out.append(inner)
            inner *= d
        return tuple(reversed(out))

    def output_operands(self) -> tuple[Operand, ...]:
        """Where each output is written: ``stores``, or contiguous and 16-byte aligned."""
        if self.stores:
            return self.stores
        return tuple(Operand(d, self.contiguous_strides) for d in self.output_dtypes())

    def transposed_store_bytes(self) -> int:
        """Bytes written to outputs stored transposed: whose strides, over the axes of more than one
        element in the iteration order, are not in decreasing order (RoPE's gradient written back as
        [B, T, H, D] while the kernel walks [B, H, T, D])."""
        total = 0
        for o, dtype in zip(self.output_operands(), self.output_dtypes()):
            strides = [s for d, s in zip(self.shape, o.strides) if d > 1]
            if any(a < b for a, b in zip(strides, strides[1:])):
                total += self.numel * ELEMENT_BYTES[dtype]
        return total

    def bytes_moved(self) -> int:
        """Every distinct input element read once (the inputs of a ``shared_reads`` entry at most its
        region's elements together), every output element written once."""
        reads = sum(x.distinct(self.shape) * x.itemsize for x in self.inputs)
        for elements, members in self.shared_reads:
            together = sum(self.inputs[k].distinct(self.shape) * self.inputs[k].itemsize for k in members)
            reads -= together - min(together, elements * self.inputs[members[0]].itemsize)
        return reads + sum(self.numel * ELEMENT_BYTES[d] for d in self.output_dtypes())

    def expression(self) -> str:
        """The program as one line per output, e.g. ``out0 = add(gelu_tanh(in0), in1)``."""
        texts = [f"in{v}" for v in range(len(self.inputs))]      # in program order (no recursion: a
        for ins in self.program:                                  # chunked loss's sum runs deep)
            if ins.op == "constant":
                texts.append(f"{ins.attr('value'):g}")
                continue
            extra = [f"{k}={val}" for k, val in ins.attrs]
            texts.append(f"{ins.op}({', '.join([texts[a] for a in ins.args] + extra)})")
        return "; ".join(f"out{i} = {texts[v]}" for i, v in enumerate(self.outputs))

    def describe(self) -> str:
        dtypes = sorted({x.dtype for x in self.inputs} | set(self.output_dtypes()))
        ops = [i.op for i in self.program if i.op != "constant"]
        head = "+".join(dict.fromkeys(ops)) or "copy"
        return (f"pointwise {head} over {'x'.join(map(str, self.shape))} ({'/'.join(dtypes)}, "
                f"{len(self.inputs)} in, {len(self.outputs)} out)")

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "inputs": [x.to_dict() for x in self.inputs],
                "program": [i.to_dict() for i in self.program], "outputs": list(self.outputs),
                **({"stores": [x.to_dict() for x in self.stores]} if self.stores else {}),
                **({"shared_reads": [[e, list(m)] for e, m in self.shared_reads]} if self.shared_reads else {})}


def row_major(shape) -> tuple[int, ...]:
    out, inner = [], 1
    for d in reversed(shape):
        out.append(inner)
        inner *= d
    return tuple(reversed(out))


def iteration_shape(outputs) -> tuple[int, ...]:
    if not outputs:
        raise PointwiseProblemError("a pointwise kernel needs at least one output")
    shape = max((tuple(v.shape) for v in outputs), key=lambda s: (math.prod(s), len(s)))
    for v in outputs:
        if math.prod(v.shape) != math.prod(shape):
            raise PointwiseProblemError(f"outputs of different sizes ({v.type} and {list(shape)})")
    if math.prod(shape) == 0:
        raise PointwiseProblemError("an empty iteration shape")
    return shape


def broadcast_strides(shape, strides, target) -> tuple[int, ...]:
    """``strides`` of a ``shape`` operand read over ``target`` (NumPy broadcasting: trailing axes
    aligned, extent-1 and missing axes stride 0)."""
    pad = len(target) - len(shape)
    if pad < 0:
        raise PointwiseProblemError(f"an input of shape {list(shape)} does not broadcast to {list(target)}")
    out = [0] * pad
    for d, s, t in zip(shape, strides, target[pad:]):
        if d not in (1, t):
            raise PointwiseProblemError(f"an input of shape {list(shape)} does not broadcast to {list(target)}")
        out.append(0 if d == 1 else int(s))
    return tuple(out)


def windowed_operand(dtype: str, shape, strides, target, start: int, align: int = ALIGN_MAX,
                     axis: int | None = None) -> Operand:
    """The operand of a ``shape`` input at ``strides`` that covers ``[start, start + d)`` of the one
    axis where its extent ``d`` differs from ``target``'s (a concat's input in its slice), every other
    axis as the target's or broadcast over it: extent 1, or missing on the left (RoPE's table halves
    read per batch and head; strides of extent-1 axes 0).  ``axis``: the window's axis of ``target``
    where the caller knows it (a window of extent 1 looks like a broadcast)."""
    if len(shape) < len(target):
        pad = len(target) - len(shape)
        shape, strides = (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)
    if len(shape) != len(target):
        raise PointwiseProblemError(f"an input of shape {list(shape)} is not a slice of {list(target)}")
    axes = [axis] if axis is not None else [a for a, (d, t) in enumerate(zip(shape, target)) if d != t and d != 1]
    if len(axes) != 1 or any(d not in (1, t) for a, (d, t) in enumerate(zip(shape, target)) if a != axes[0]) \
            or not 0 <= start <= target[axes[0]] - shape[axes[0]]:
        raise PointwiseProblemError(f"an input of shape {list(shape)} at {start} is not a slice of {list(target)} "
                                    "along one axis")
    (axis,) = axes
    window = Window(axis, int(start), int(shape[axis]))
    return Operand(dtype, tuple(0 if d == 1 else int(s) for d, s in zip(shape, strides)), align, window)


def table_operand(dtype: str, shape, strides, target, align: int = ALIGN_MAX) -> Operand:
    """A one-axis table of ``shape`` at ``strides`` read by ``gather`` over an iteration of ``target``."""
    if len(shape) != 1:
        raise PointwiseProblemError(f"a gathered table of shape {list(shape)} has more than one axis")
    return Operand(dtype, (0,) * len(target), align, table=(int(shape[0]), int(strides[0]) if shape[0] > 1 else 1))


def overlap_reason(shape, strides) -> str:
    """Why writing ``shape`` at element ``strides`` would put two elements on one address ('' when it
    does not): sorted by stride, each axis of extent > 1 must step past everything the inner ones span
    (``s_i >= 1 + sum_(j inner) (d_j - 1) s_j``, a sufficient condition for an injective layout)."""
    span = 1
    for d, s in sorted(((d, s) for d, s in zip(shape, strides) if d != 1), key=lambda a: a[1]):
        if s < span:
            return f"strides {list(strides)} over {list(shape)} write two elements to one address"
        span += (d - 1) * s
    return ""


def alignment(offset_bytes: int) -> int:
    """The largest power of two up to ``ALIGN_MAX`` dividing the byte offset (allocations are 256-byte aligned)."""
    a = ALIGN_MAX
    while offset_bytes % a:
        a //= 2
    return a
