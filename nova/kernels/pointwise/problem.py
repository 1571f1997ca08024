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
class Operand:
    """One input: element type, element strides over the problem's shape, base alignment in bytes."""
    dtype: str
    strides: tuple[int, ...]
    align: int = ALIGN_MAX

    @property
    def itemsize(self) -> int:
        return ELEMENT_BYTES[self.dtype]

    def span(self, shape) -> int:
        """Elements from the first to one past the last one addressed."""
        return 1 + sum((d - 1) * s for d, s in zip(shape, self.strides))

    def distinct(self, shape) -> int:
        """Elements read at least once (broadcast axes read one element)."""
        return math.prod(d for d, s in zip(shape, self.strides) if s)

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "strides": list(self.strides), "align": self.align}


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

    def bytes_moved(self) -> int:
        """Every distinct input element read once, every output element written once."""
        reads = sum(x.distinct(self.shape) * x.itemsize for x in self.inputs)
        return reads + sum(self.numel * ELEMENT_BYTES[d] for d in self.output_dtypes())

    def expression(self) -> str:
        """The program as one line per output, e.g. ``out0 = add(gelu_tanh(in0), in1)``."""
        n = len(self.inputs)

        def text(v: int) -> str:
            if v < n:
                return f"in{v}"
            ins = self.program[v - n]
            if ins.op == "constant":
                return f"{ins.attr('value'):g}"
            extra = [f"{k}={val}" for k, val in ins.attrs]
            return f"{ins.op}({', '.join([text(a) for a in ins.args] + extra)})"
        return "; ".join(f"out{i} = {text(v)}" for i, v in enumerate(self.outputs))

    def describe(self) -> str:
        dtypes = sorted({x.dtype for x in self.inputs} | set(self.output_dtypes()))
        ops = [i.op for i in self.program if i.op != "constant"]
        head = "+".join(dict.fromkeys(ops)) or "copy"
        return (f"pointwise {head} over {'x'.join(map(str, self.shape))} ({'/'.join(dtypes)}, "
                f"{len(self.inputs)} in, {len(self.outputs)} out)")

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "inputs": [x.to_dict() for x in self.inputs],
                "program": [i.to_dict() for i in self.program], "outputs": list(self.outputs),
                **({"stores": [x.to_dict() for x in self.stores]} if self.stores else {})}


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
