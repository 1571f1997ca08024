"""Activations with composite formulas, spelled once for every kernel family that computes them (the
pointwise kernels' ``composed`` ops, the rows kernels' prologues) over a small arithmetic interface:
``add(a, b)``, ``sub(a, b)``, ``mul(a, b)``, ``tanh(a)`` and ``const(value)``, each returning an SSA name
of the family's IR (``Arith``).  The formulas:

    gelu_tanh(x)              = 0.5 x (1 + t),  t = tanh(u),  u = sqrt(2/pi) (x + 0.044715 x^3)
    gelu_tanh_backward(dy, x) = dy (0.5 (1 + t) + 0.5 x (1 - t^2) du),  du = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    tanh_backward(dy, y)      = dy (1 - y^2)    (y = tanh x: autograd's form, an op-by-op GELU's backward)

(Hendrycks & Gimpel's tanh approximation: torch's ``gelu(approximate="tanh")`` and its backward.)
"""
from __future__ import annotations

import math
from typing import Protocol

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715


class Arith(Protocol):
    def add(self, a: str, b: str) -> str: ...
    def sub(self, a: str, b: str) -> str: ...
    def mul(self, a: str, b: str) -> str: ...
    def tanh(self, a: str) -> str: ...
    def const(self, value: float) -> str: ...


def gelu_tanh_parts(m: Arith, x: str) -> tuple[str, str]:
    """(tanh(u), du/dx) with u = sqrt(2/pi) (x + 0.044715 x^3)."""
    x2 = m.mul(x, x)
    inner = m.add(m.const(1.0), m.mul(m.const(GELU_CUBIC), x2))
    u = m.mul(m.const(SQRT_2_OVER_PI), m.mul(x, inner))
    du = m.mul(m.const(SQRT_2_OVER_PI), m.add(m.const(1.0), m.mul(m.const(3 * GELU_CUBIC), x2)))
    return m.tanh(u), du


def gelu_tanh(m: Arith, x: str) -> str:
    t, _ = gelu_tanh_parts(m, x)
    return m.mul(m.mul(m.const(0.5), x), m.add(m.const(1.0), t))


def gelu_tanh_backward(m: Arith, dy: str, x: str) -> str:
    t, du = gelu_tanh_parts(m, x)
    left = m.mul(m.const(0.5), m.add(m.const(1.0), t))
    sech2 = m.sub(m.const(1.0), m.mul(t, t))
    right = m.mul(m.mul(m.const(0.5), x), m.mul(sech2, du))
    return m.mul(dy, m.add(left, right))


def tanh_backward(m: Arith, dy: str, y: str) -> str:
    return m.mul(dy, m.sub(m.const(1.0), m.mul(y, y)))
