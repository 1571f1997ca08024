"""A formula written once as a sympy expression, shown symbolically and evaluated fast.

``Formula("peak", "sm_count * clock_hz * tc_flops_per_clk")`` keeps the expression for display
(``--symbolic``) and a lambdified numeric function for evaluation, so derivations stay both
explainable and well under a millisecond.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import sympy


@dataclass(frozen=True)
class Formula:
    name: str
    text: str
    expr: sympy.Expr = field(init=False, repr=False, compare=False)
    params: tuple[str, ...] = field(init=False, repr=False, compare=False)
    fn: object = field(init=False, repr=False, compare=False)
    shown: str = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        local = {"ceil": sympy.ceiling, "floor": sympy.floor, "sqrt": sympy.sqrt, "log": sympy.log,
                 "Min": sympy.Min, "Max": sympy.Max}
        # every other identifier is a symbol (so names like N, E or S never mean sympy objects)
        for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", self.text):
            local.setdefault(name, sympy.Symbol(name))
        expr = sympy.sympify(self.text, locals=local)
        params = tuple(sorted(str(s) for s in expr.free_symbols))
        fn = sympy.lambdify([sympy.Symbol(p) for p in params], expr,
                            modules=[{"ceiling": math.ceil, "floor": math.floor, "Min": min, "Max": max}, "math"])
        object.__setattr__(self, "expr", expr)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "shown", sympy.sstr(expr))

    def __call__(self, **values) -> float:
        missing = [p for p in self.params if p not in values]
        if missing:
            raise KeyError(f"formula {self.name}: missing values for {', '.join(missing)}")
        return self.fn(*(values[p] for p in self.params))

    def symbolic(self) -> str:
        return f"{self.name} = {self.shown}"

    def substituted(self, **values) -> str:
        """The formula with numbers in place of the symbols, e.g. ``128*64/(128+64)``."""
        return _SYMBOL.sub(lambda mt: fmt_number(values[mt.group(0)]) if mt.group(0) in self.params
                           else mt.group(0), self.shown)


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def fmt_number(v) -> str:
    """A number as the derivations print it: integers whole, others (and anything >= 1e7) to 4 significant digits."""
    if isinstance(v, bool):
        return str(v)
    if abs(v) >= 1e7:
        return f"{v:.4g}"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return str(int(v))
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
