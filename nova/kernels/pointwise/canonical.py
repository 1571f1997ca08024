"""The canonical form of a pointwise problem: the same math, written any way, is one problem.

The program becomes an expression DAG of hash-consed nodes (``Expr``: equal subexpressions are one
node), built bottom-up; each node, as it is made, is

1. constant-folded (every argument a constant: evaluated in float64),
2. rewritten to its named form where it is one (``rewrites.py``: sigmoid ``1/(1+exp(-x))``, SiLU
   ``x*sigmoid(x)``, GELU-tanh ``0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x**3)))``, GELU-erf
   ``0.5*x*(1+erf(x/sqrt(2)))``: products and sums matched through their flattened factors and terms,
   constants with a relative tolerance),
3. its arguments sorted when the op is commutative (``add``, ``mul``, ``maximum`` ...),

then numbered in one deterministic post-order from the outputs (nodes no output reaches are dropped).
The iteration space is canonical too: axes of extent 1 dropped, neighbouring axes that every operand
(the strided outputs included) walks contiguously merged (``coalesce``; an axis an input's ``Window``
covers in part keeps its own extent, its index renumbered); outputs that end contiguous and 16-byte
aligned are stated as such (``stores == ()``).  An ``iota`` is a function of the flat index, which
coalescing keeps.
"""
from __future__ import annotations

from dataclasses import replace

from nova.kernels.pointwise.problem import ALIGN_MAX, Instr, Operand, PointwiseProblem, Window, row_major
from nova.kernels.pointwise.rewrites import fold, rewrite

COMMUTATIVE = frozenset("add mul maximum minimum eq ne logical_and logical_or".split())


class Expr:
    """One node of the expression DAG (made only by ``Builder.make``, so equal nodes are identical)."""
    __slots__ = ("op", "args", "attrs", "dtype", "key")

    def __init__(self, op, args, attrs, dtype, key):
        self.op, self.args, self.attrs, self.dtype, self.key = op, args, attrs, dtype, key

    @property
    def value(self) -> float:
        return dict(self.attrs)["value"]

    @property
    def is_const(self) -> bool:
        return self.op == "constant"


class Builder:
    """Hash-consing constructor: ``make`` folds, rewrites and orders, then returns the one node."""

    def __init__(self):
        self.nodes: dict[str, Expr] = {}

    def input(self, index: int, dtype: str) -> Expr:
        return self._intern("input", (), (("index", index),), dtype)

    def const(self, value: float, dtype: str) -> Expr:
        return self._intern("constant", (), (("value", float(value)),), dtype)

    def iota(self, start: int, step: int, extent: int, inner: int, dtype: str) -> Expr:
        """``start + step * ((e / inner) % extent)`` of the flat element index ``e`` (``problem.py``)."""
        return self._intern("iota", (), (("extent", int(extent)), ("inner", int(inner)), ("start", int(start)),
                                         ("step", int(step))), dtype)

    def make(self, op: str, args, attrs, dtype: str) -> Expr:
        args = tuple(args)
        attrs = tuple(sorted(attrs))
        folded = fold(self, op, args, attrs, dtype)
        if folded is not None:
            return folded
        named = rewrite(self, op, args, attrs, dtype)
        if named is not None:
            return named
        if op in COMMUTATIVE:
            args = tuple(sorted(args, key=lambda e: e.key))
        return self._intern(op, args, attrs, dtype)

    def _intern(self, op, args, attrs, dtype) -> Expr:
        key = f"{op}[{dtype}]{attrs!r}({','.join(a.key for a in args)})"
        node = self.nodes.get(key)
        if node is None:
            node = self.nodes[key] = Expr(op, args, attrs, dtype, key)
        return node


def coalesce(shape, operands) -> tuple[tuple[int, ...], tuple[Operand, ...]]:
    """Drop axes of extent 1; merge axis i into i+1 where every operand has s_i = s_(i+1) * d_(i+1)
    (contiguous outputs always do; strided ones are passed among ``operands``) and neither is an axis
    an input's window covers (its index follows the merges)."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    windowed = {x.window.axis for x in operands if x.window is not None}
    axes = list(keep)                              # the original axis each remaining one started as
    dims = [shape[i] for i in keep]
    strides = [[x.strides[i] for i in keep] for x in operands]
    i = len(dims) - 2
    while i >= 0:
        if axes[i] not in windowed and axes[i + 1] not in windowed and \
                all(s[i] == s[i + 1] * dims[i + 1] for s in strides):
            dims[i] *= dims.pop(i + 1)
            axes.pop(i + 1)
            for s in strides:
                s[i] = s.pop(i + 1)
        i -= 1
    if not dims:
        dims, strides = [1], [[0] for _ in operands]

    def window(x: Operand) -> Window | None:
        w = x.window
        return None if w is None or w.axis not in axes else replace(w, axis=axes.index(w.axis))
    return tuple(dims), tuple(replace(x, strides=tuple(s), window=window(x)) for x, s in zip(operands, strides))


def canonical_problem(shape, operands, built, stores=(), shared_reads=()) -> PointwiseProblem:
    """Number the DAG from the outputs (post-order, arguments in order) into a ``PointwiseProblem``;
    ``stores``: one ``Operand`` per output (its strides over ``shape``, its alignment), () contiguous;
    ``shared_reads``: the problem's (operand indices are kept)."""
    _, outs = built
    n = len(operands)
    number: dict[int, int] = {}
    program: list[Instr] = []

    def value(e: Expr) -> int:
        return dict(e.attrs)["index"] if e.op == "input" else number[id(e)]

    def visit(root: Expr) -> int:
        """Number ``root``'s expressions in post-order, arguments left to right (each once), on an
        explicit stack: a chunked loss's sum of many chunks is deeper than Python's recursion limit."""
        stack = [(root, False)]
        while stack:
            e, ready = stack.pop()
            if e.op == "input" or id(e) in number:
                continue
            if not ready:
                stack.append((e, True))
                stack.extend((a, False) for a in reversed(e.args))
                continue
            program.append(Instr(e.op, tuple(value(a) for a in e.args), e.attrs, e.dtype))
            number[id(e)] = n + len(program) - 1
        return value(root)

    out_values = tuple(visit(e) for e in outs)
    shape, merged = coalesce(tuple(shape), tuple(operands) + tuple(stores))
    operands, stores = merged[:n], merged[n:]
    dense = row_major(shape)
    if all(x.align == ALIGN_MAX and all(d == 1 or a == b for d, a, b in zip(shape, x.strides, dense)) for x in stores):
        stores = ()
    return PointwiseProblem(shape, operands, tuple(program), out_values, stores, tuple(shared_reads))
