"""A formula written once: evaluated in plain Python, shown as a sympy expression on demand.

``Formula("peak", "sm_count * clock_hz * tc_flops_per_clk")`` compiles its text into a Python
function of its symbols (every name except ``ceil``, ``floor``, ``sqrt``, ``log``, ``Min`` and
``Max``, which are the math functions), so deciding a schedule never imports sympy.  The sympy
expression is built the first time the formula is shown (``shown``, ``symbolic()``,
``substituted()``), so a derivation still prints every formula in sympy's form.

The text is evaluated exactly as written, so it is written in the operation order of sympy's
printed form (``lambdify``'s): tests/test_hwmodel.py checks that both give bit-identical numbers.

A module's formulas are written as one text table, one ``name = expression`` a line, and read by
name: ``F = formulas(table)``, then ``F.stages(...)`` (``formulas`` below).
"""
from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, field
from functools import cached_property
from types import SimpleNamespace

FUNCTIONS = {"ceil": math.ceil, "floor": math.floor, "sqrt": math.sqrt, "log": math.log, "Min": min, "Max": max}


@dataclass(frozen=True)
class Formula:
    name: str
    text: str
    params: tuple[str, ...] = field(init=False, repr=False, compare=False)
    fn: object = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        names = compile(self.text, f"<formula {self.name}>", "eval").co_names
        params = tuple(sorted(set(names) - set(FUNCTIONS)))
        fn = eval(f"lambda {', '.join(params)}: {self.text}", {"__builtins__": {}, **FUNCTIONS})
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "fn", fn)

    def __call__(self, **values) -> float:
        try:
            return self.fn(**values)
        except TypeError:
            missing = [p for p in self.params if p not in values]
            if missing:
                raise KeyError(f"formula {self.name}: missing values for {', '.join(missing)}") from None
            raise

    @cached_property
    def expr(self):
        """The sympy expression (imports sympy on first use)."""
        import sympy
        local = {"ceil": sympy.ceiling, "floor": sympy.floor, "sqrt": sympy.sqrt, "log": sympy.log,
                 "Min": sympy.Min, "Max": sympy.Max}
        local.update({p: sympy.Symbol(p) for p in self.params})   # so names like N, E or S never mean sympy objects
        return sympy.sympify(self.text, locals=local)

    @cached_property
    def shown(self) -> str:
        """The expression as sympy prints it."""
        import sympy
        return sympy.sstr(self.expr)

    def symbolic(self) -> str:
        return f"{self.name} = {self.shown}"

    def substituted(self, **values) -> str:
        """The formula with numbers in place of the symbols, e.g. ``128*64/(128+64)``."""
        return _SYMBOL.sub(lambda mt: fmt_number(values[mt.group(0)]) if mt.group(0) in self.params
                           else mt.group(0), self.shown)


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def formulas(table: str) -> SimpleNamespace:
    """The ``Formula`` of every line of a text table, as attributes named after them.

    ``formulas("tiles = ceil(M / block_m) * ceil(N / block_n)").tiles`` is
    ``Formula("tiles", "ceil(M / block_m) * ceil(N / block_n)")``.  One ``name = expression`` a line;
    a line indented deeper than the table continues the expression above it (the pieces joined by one
    space); blank lines and ``#`` comments are skipped.  A name may stand only once in a table."""
    texts: dict[str, str] = {}
    name = None
    for line in textwrap.dedent(table).splitlines():
        line = line.split("#", 1)[0].rstrip()
        if not line:
            continue
        if line[0].isspace() and name is not None:          # continuation of the formula above
            texts[name] += " " + line.strip()
            continue
        name, eq, text = (part.strip() for part in line.partition("="))
        if not eq or not name.isidentifier() or not text:
            raise ValueError(f"formula table: {line.strip()!r} is not 'name = expression'")
        if name in texts:
            raise ValueError(f"formula table: {name} is defined twice")
        texts[name] = text
    return SimpleNamespace(**{n: Formula(n, t) for n, t in texts.items()})


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
