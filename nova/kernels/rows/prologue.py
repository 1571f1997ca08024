"""A reduction's fused pointwise producers: a small SSA program evaluated per element in FP32.

``Prologue(ops, reduce, store)``: ``ops[i] = (op, args)`` defines value ``%i`` with an IR pointwise
op name (``add``, ``mul``, ``rsqrt``, ...; ``cast_bf16``/``cast_f16``/``cast_f32`` round to a storage
type and back; ``pow`` only with a constant exponent); each argument is an operand name, ``%k`` (an
earlier value) or ``#<float>`` (a constant).  ``reduce`` lists ``(value, output)`` pairs the kernel
reduces, ``store`` the values it also writes (intermediates read by other kernels).  A prologue is
plain data (its dict is part of the kernel's cache key); ``nova/kernels/rows/emit.py`` spells it.
"""
from __future__ import annotations

from dataclasses import dataclass

UNARY = ("neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "tanh", "sigmoid", "relu", "silu",
         "cast_f32", "cast_bf16", "cast_f16")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow", "gelu_tanh_backward", "tanh_backward")
OPS = UNARY + BINARY


@dataclass(frozen=True)
class Prologue:
    ops: tuple                      # ((op, (arg, ...)), ...)
    reduce: tuple = ()              # ((value index, output name), ...)
    store: tuple = ()               # ((value index, output name), ...)

    def __post_init__(self):
        object.__setattr__(self, "ops", tuple((op, tuple(args)) for op, args in self.ops))
        object.__setattr__(self, "reduce", tuple((int(i), str(n)) for i, n in self.reduce))
        object.__setattr__(self, "store", tuple((int(i), str(n)) for i, n in self.store))

    def check(self, inputs: set) -> str:
        """Why the program is not well formed over operands ``inputs`` ('' when it is)."""
        for i, (op, args) in enumerate(self.ops):
            if op not in OPS:
                return f"prologue op {op!r} is not supported (supported: {', '.join(OPS)})"
            if len(args) != (1 if op in UNARY else 2):
                return f"prologue %{i} = {op} takes {1 if op in UNARY else 2} arguments, got {len(args)}"
            if op == "pow" and not str(args[1]).startswith("#"):
                return f"prologue %{i}: pow needs a constant exponent"
            for a in args:
                a = str(a)
                if a.startswith("%") and not (a[1:].isdigit() and int(a[1:]) < i):
                    return f"prologue %{i} reads {a}, which is not an earlier value"
                if a.startswith("#"):
                    try:
                        float(a[1:])
                    except ValueError:
                        return f"prologue %{i}: bad constant {a!r}"
                elif not a.startswith("%") and a not in inputs:
                    return f"prologue %{i} reads {a!r}, which is no input"
        for i, name in self.reduce + self.store:
            if not 0 <= i < len(self.ops):
                return f"prologue result {name} names value %{i}, which does not exist"
        return ""

    def used_inputs(self) -> list[str]:
        seen = []
        for _, args in self.ops:
            for a in args:
                if not a.startswith(("%", "#")) and a not in seen:
                    seen.append(a)
        return seen

    def describe(self) -> str:
        body = "; ".join(f"%{i}={op}({','.join(args)})" for i, (op, args) in enumerate(self.ops))
        red = ",".join(f"{n}<-%{i}" for i, n in self.reduce)
        st = ",".join(f"{n}<-%{i}" for i, n in self.store)
        return f"[{body}; reduce {red}" + (f"; store {st}" if st else "") + "]"

    def to_dict(self) -> dict:
        return {"ops": [[op, list(args)] for op, args in self.ops], "reduce": [list(x) for x in self.reduce],
                "store": [list(x) for x in self.store]}

    @classmethod
    def identity(cls, operand: str, output: str) -> "Prologue":
        """Reduce one operand as it is (``cast_f32`` of it: the value in FP32)."""
        return cls((("cast_f32", (operand,)),), ((0, output),))
