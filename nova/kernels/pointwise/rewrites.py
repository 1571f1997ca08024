"""Constant folding and the pattern rewrites of ``canonical.py`` (named forms of common formulas).

A product is read through its flattened factors (``mul``, ``neg``, division by a constant: a
constant coefficient and the other factors), a sum through its flattened terms (``add``, ``sub``:
a constant and coefficient-weighted terms).  With those, each pattern is one check:

    sigmoid(x)    1 / (1 + exp(z)),  z = -x                      (or reciprocal(1 + exp(-x)))
    silu(x)       a product with the factors x and sigmoid(x)
    gelu_tanh(x)  a product with the factors x and 1 + tanh(u), coefficient 0.5 (times the rest),
                  u = sqrt(2/pi) x + sqrt(2/pi) 0.044715 x^3     (PyTorch's ``approximate="tanh"``)
    gelu_erf(x)   the same with 1 + erf(u), u = x / sqrt(2)      (PyTorch's exact GELU)

Constants match with a relative tolerance of 1e-4 (``is_close``).  The rewritten product
keeps its other factors: ``2*x*sigmoid(x)`` becomes ``2*silu(x)``.
"""
from __future__ import annotations

import math

from nova.kernels.pointwise.types import FLOAT_TYPES

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715


def is_close(a: float, b: float, rel: float = 1e-4) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


FOLD = {
    "neg": lambda x: -x, "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x),
    "reciprocal": lambda x: 1 / x, "abs": abs, "tanh": math.tanh, "erf": math.erf, "sin": math.sin,
    "cos": math.cos, "sigmoid": _sigmoid, "relu": lambda x: max(x, 0.0), "cast": lambda x: x,
    "silu": lambda x: x * _sigmoid(x),
    "gelu_tanh": lambda x: 0.5 * x * (1 + math.tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * x ** 3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + math.erf(x / math.sqrt(2))),
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "pow": lambda a, b: a ** b, "maximum": max, "minimum": min,
}


def fold(b, op, args, attrs, dtype):
    """A constant node when every argument is a float constant and ``op`` evaluates here."""
    if not args or op not in FOLD or dtype not in FLOAT_TYPES or not all(a.is_const for a in args):
        return None
    try:
        value = FOLD[op](*(a.value for a in args))
    except (ArithmeticError, ValueError):
        return None
    return b.const(value, dtype) if isinstance(value, float) or isinstance(value, int) else None


def factors(e):
    """``(coefficient, [factors])`` of a product: e = coefficient * prod(factors)."""
    if e.is_const:
        return e.value, []
    if e.op == "mul":
        (ca, fa), (cb, fb) = factors(e.args[0]), factors(e.args[1])
        return ca * cb, fa + fb
    if e.op == "neg":
        c, f = factors(e.args[0])
        return -c, f
    if e.op == "div" and e.args[1].is_const and e.args[1].value != 0:
        c, f = factors(e.args[0])
        return c / e.args[1].value, f
    return 1.0, [e]


def terms(e):
    """``(constant, [(coefficient, term)])`` of a sum: e = constant + sum(coefficient * term)."""
    if e.is_const:
        return e.value, []
    if e.op in ("add", "sub"):
        (ca, ta), (cb, tb) = terms(e.args[0]), terms(e.args[1])
        sign = 1.0 if e.op == "add" else -1.0
        return ca + sign * cb, ta + [(sign * k, t) for k, t in tb]
    c, f = factors(e)
    if len(f) == 1:
        return 0.0, [(c, f[0])]
    return 0.0, [(1.0, e)]


def polynomial(e, x) -> dict | None:
    """``{degree: coefficient}`` of ``e`` as a polynomial in ``x`` (monomials: products of x and
    pow(x, integer constant)), or None."""
    c, fs = factors(e)
    if len(fs) == 1 and fs[0].op in ("add", "sub"):
        const, ts = terms(fs[0])
        poly = {0: c * const} if const else {}
        for k, t in ts:
            mono = _monomial(t, x)
            if mono is None:
                return None
            poly[mono[1]] = poly.get(mono[1], 0.0) + c * k * mono[0]
        return poly
    mono = _monomial(e, x)
    return None if mono is None else {mono[1]: mono[0]}


def _monomial(e, x) -> tuple[float, int] | None:
    """``(coefficient, degree)`` of a product of x and integer powers of x."""
    c, fs = factors(e)
    degree = 0
    for f in fs:
        if f is x:
            degree += 1
        elif f.op == "pow" and f.args[0] is x and f.args[1].is_const and float(f.args[1].value).is_integer():
            degree += int(f.args[1].value)
        else:
            return None
    return c, degree


def _poly_is(poly, expected: dict) -> bool:
    if poly is None or set(d for d, c in poly.items() if c) != set(expected):
        return False
    return all(is_close(poly[d], c) for d, c in expected.items())


def _one_plus(e, fn: str):
    """u where ``e`` is 1 + fn(u), else None."""
    const, ts = terms(e)
    if is_close(const, 1.0) and len(ts) == 1 and is_close(ts[0][0], 1.0) and ts[0][1].op == fn:
        return ts[0][1].args[0]
    return None


def _merge_constants(b, args, dtype):
    """c1 * (c2 * y) = (c1 c2) * y and 1 * y = y (constants meet however the product was grouped)."""
    consts = [a for a in args if a.is_const]
    if len(consts) != 1:
        return None
    c, (y,) = consts[0], [a for a in args if not a.is_const]
    if c.value == 1.0 and y.dtype == dtype:
        return y
    if y.op == "mul" and any(a.is_const for a in y.args):
        inner = next(a for a in y.args if a.is_const)
        rest = next(a for a in y.args if a is not inner)
        return b.make("mul", (b.const(c.value * inner.value, c.dtype), rest), (), dtype)
    return None


GELU_ARGUMENTS = {"gelu_tanh": ("tanh", {1: SQRT_2_OVER_PI, 3: SQRT_2_OVER_PI * GELU_CUBIC}),
                  "gelu_erf": ("erf", {1: 1 / math.sqrt(2.0)})}


def rewrite(b, op, args, attrs, dtype):
    """The named form of ``op(args)``, or None."""
    if dtype not in FLOAT_TYPES:
        return None
    if op == "div" and args[1].is_const and args[1].value != 0:     # y / c = (1/c) * y
        return b.make("mul", (b.const(1.0 / args[1].value, args[1].dtype), args[0]), (), dtype)
    if op in ("div", "reciprocal"):               # a / (1 + exp(-x)) = a * sigmoid(x)
        z = _one_plus(args[-1], "exp")
        c, fs = factors(z) if z is not None else (0.0, [])
        if c != -1.0 or len(fs) != 1 or fs[0].dtype != dtype:
            return None
        sigmoid = b.make("sigmoid", (fs[0],), (), dtype)
        if op == "reciprocal" or (args[0].is_const and args[0].value == 1.0):
            return sigmoid
        return b.make("mul", (args[0], sigmoid), (), dtype)
    if op != "mul":
        return None
    merged = _merge_constants(b, args, dtype)
    if merged is not None:
        return merged
    c, fs = factors(b._intern("mul", args, attrs, dtype))
    for i, x in enumerate(fs):
        if x.dtype != dtype:
            continue
        for j, other in enumerate(fs):
            if j == i:
                continue
            named, scale = None, 1.0
            if other.op == "sigmoid" and other.args[0] is x:
                named = "silu"
            for name, (fn, expected) in GELU_ARGUMENTS.items():
                u = _one_plus(other, fn)
                if u is not None and _poly_is(polynomial(u, x), expected):
                    named, scale = name, 0.5
            if named is None:
                continue
            rest = [f for k, f in enumerate(fs) if k not in (i, j)]
            out = b.make(named, (x,), (), dtype)
            for f in rest:
                out = b.make("mul", (out, f), (), dtype)
            coefficient = c / scale
            if is_close(coefficient, 1.0, 1e-9):
                return out
            return b.make("mul", (b.const(coefficient, "f64" if dtype == "f64" else "f32"), out), (), dtype)
    return None
