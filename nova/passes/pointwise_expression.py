"""A small parser of pointwise expressions (``nova-config explain pointwise``): ``"gelu_tanh(x) + 0.5*y**2"``.

Names are inputs (in order of first appearance), a name followed by ``(`` is an IR pointwise op
(``nova/ir/ops.py``; its arity is checked), numbers are constants, and ``**`` (right-associative,
binding tighter than unary minus), ``*``, ``/``, ``+``, ``-`` and parentheses work as in Python.
The result is an IR graph, so the expression becomes its problem through the same statement as a
fusion group (``nova.passes.pointwise_from_ir.expression_problem``).
"""
from __future__ import annotations

import math
import re
import struct

from nova.ir.graph import Graph
from nova.ir.ops import OPS, kind
from nova.ir.types import IRError, TensorType
from nova.kernels.pointwise.problem import PointwiseProblemError

_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*)|(\*\*|[-+*/(),]))")
_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "div", "**": "pow"}
_LARGEST = {"f32": 3.4028234663852886e38, "f64": 1.7976931348623157e308}   # the largest finite values


def tokenize(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise PointwiseProblemError(f"cannot read {text[pos:].strip()!r} in {text!r}")
        number, name, symbol = m.groups()
        out.append(("number", number) if number else ("name", name) if name else ("symbol", symbol))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str, shape, dtype: str):
        self.text, self.tokens, self.pos = text, tokenize(text), 0
        self.graph = Graph("expression")
        self.shape, self.dtype = shape, dtype
        self.names: dict[str, object] = {}
        self.math = "f64" if dtype == "f64" else "f32"

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")

    def take(self, symbol: str | None = None):
        tok = self.peek()
        if symbol is not None and tok != ("symbol", symbol):
            raise PointwiseProblemError(f"expected {symbol!r} at {tok[1] or 'the end'!r} in {self.text!r}")
        self.pos += 1
        return tok

    def op(self, name, *args, **attrs):
        try:
            return self.graph.op(name, *args, **attrs)
        except IRError as e:
            raise PointwiseProblemError(f"{e} in {self.text!r}") from None

    def expr(self):
        left = self.term()
        while self.peek() in (("symbol", "+"), ("symbol", "-")):
            left = self.op(_BINARY[self.take()[1]], left, self.term())
        return left

    def term(self):
        left = self.unary()
        while self.peek() in (("symbol", "*"), ("symbol", "/")):
            left = self.op(_BINARY[self.take()[1]], left, self.unary())
        return left

    def unary(self):
        if self.peek() == ("symbol", "-"):
            self.take()
            return self.op("neg", self.unary())
        if self.peek() == ("symbol", "+"):
            self.take()
            return self.unary()
        base = self.atom()
        if self.peek() == ("symbol", "**"):
            self.take()
            return self.op("pow", base, self.unary())
        return base

    def atom(self):
        kind_, text = self.take()
        if kind_ == "number":
            return self.op("constant", value=self.constant(text), dtype=self.math)
        if kind_ == "symbol" and text == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if kind_ != "name":
            raise PointwiseProblemError(f"unexpected {text or 'end'!r} in {self.text!r}")
        if self.peek() == ("symbol", "("):
            return self.call(text)
        if text not in self.names:
            self.names[text] = self.graph.input(TensorType(self.shape, self.dtype), text)
        return self.names[text]

    def constant(self, text: str) -> float:
        """The literal ``text`` as the expression's math type computes it; one that type cannot hold
        (beyond its largest finite value: it would be infinity) is refused."""
        value = float(text)
        try:
            finite = math.isfinite(value) and (self.math != "f32" or bool(struct.pack("<f", value)))
        except OverflowError:           # rounds to infinity in f32
            finite = False
        if not finite:
            raise PointwiseProblemError(f"the constant {text} overflows {self.math} (largest finite value "
                                        f"{_LARGEST[self.math]:.8g}) in {self.text!r}")
        return value

    def call(self, name: str):
        if name not in OPS or kind(name) != "pointwise":
            raise PointwiseProblemError(f"{name!r} is not an IR pointwise op in {self.text!r}")
        self.take("(")
        args = [self.expr()]
        while self.peek() == ("symbol", ","):
            self.take()
            args.append(self.expr())
        self.take(")")
        return self.op(name, *args)


def parse(text: str, shape, dtype: str):
    """``(graph, [input values], result value)`` of ``text`` over inputs of ``shape`` and ``dtype``."""
    p = _Parser(text, tuple(shape), dtype)
    result = p.expr()
    if p.peek()[0] != "end":
        raise PointwiseProblemError(f"unexpected {p.peek()[1]!r} in {text!r}")
    if not p.names:
        raise PointwiseProblemError(f"{text!r} reads no input")
    if result.shape != tuple(shape):
        result = p.op("expand", result, shape=tuple(shape))
    return p.graph, list(p.names.values()), result
