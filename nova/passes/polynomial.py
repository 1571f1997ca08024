"""A graph's values as polynomials over atoms: to recognise a computation by its math, not by the
ops or the order a library wrote it in.

``evaluate(graph) -> {Value: Poly}``.  A ``Poly`` is a sum of monomials, each a coefficient times a
product of atoms raised to real powers; it is plain data (nested tuples, coefficients rounded to 10
significant digits, a difference that cancels to within 1e-9 of its terms dropped) so equal math
compares and hashes equal however its constants were folded.  Atoms:

    ("v", i)        value i of the graph, taken as it is (a graph input, or a result the algebra does
                    not interpret: a matmul, an exp, a sum over other axes ...)
    ("sqrt", P)     sqrt(P) of a polynomial with several terms; rsqrt(P) is ("sqrt", P) ** -1
    ("R", P)        P summed over the last axis, kept as a broadcastable axis (keepdim)
    ("C", P)        P summed over every axis but the last (a column sum)

Interpreted: add, sub, mul, div, neg, pow with a constant exponent, sqrt, rsqrt, reciprocal, scalar
constants, float casts (as the identity: a fused kernel computes in FP32 and rounds once), expand
(the same values broadcast), reshapes that keep the last axis, and sum/mean over the last axis or
over all the leading ones.  A result with more than MAX_TERMS monomials is an atom of its own.

A value that is a sum of several terms and is read by several nodes (a residual stream, a gradient
accumulated from two paths) is its readers' atom: it is materialized anyway, and a pattern reads it
as one operand.  Its own polynomial (what ``evaluate`` returns for it) is still the expanded one.
"""
from __future__ import annotations

import math

from nova.ir.types import FLOAT_TYPES

MAX_TERMS = 16
Poly = tuple          # ((monomial, coefficient), ...), monomial = ((atom, power), ...), both sorted


def _round(c: float) -> float:
    return float(f"{c:.10g}")


def make(terms: dict) -> Poly | None:
    """The canonical polynomial of ``{monomial: coefficient}`` (None past MAX_TERMS)."""
    kept = [(m, _round(c)) for m, c in terms.items() if c != 0]
    if len(kept) > MAX_TERMS:
        return None
    return tuple(sorted(kept, key=lambda mc: repr(mc[0])))


def const(c: float) -> Poly:
    return make({(): c})


def atom(a) -> Poly:
    return (((a, 1.0),), 1.0),


def as_const(p: Poly) -> float | None:
    if p == ():
        return 0.0
    if len(p) == 1 and p[0][0] == ():
        return p[0][1]
    return None


def _mono_mul(a: tuple, b: tuple) -> tuple:
    powers = dict(a)
    for atom_, k in b:
        powers[atom_] = _round(powers.get(atom_, 0.0) + k)
    return tuple(sorted(((x, k) for x, k in powers.items() if k != 0), key=repr))


def add(p: Poly, q: Poly, sign: float = 1.0) -> Poly | None:
    terms = dict(p)
    for m, c in q:
        a = terms.get(m, 0.0)
        total = a + sign * c
        terms[m] = 0.0 if abs(total) <= 1e-9 * (abs(a) + abs(c)) else total
    return make(terms)


def mul(p: Poly, q: Poly) -> Poly | None:
    terms: dict = {}
    for ma, ca in p:
        for mb, cb in q:
            m = _mono_mul(ma, mb)
            terms[m] = terms.get(m, 0.0) + ca * cb
    return make(terms)


def scale(p: Poly, c: float) -> Poly | None:
    return mul(p, const(c))


def power(p: Poly, e: float) -> Poly | None:
    """p ** e: a monomial's powers times e; a sum only to a small positive integer power."""
    if len(p) == 1:
        (mono, c), = p
        if c < 0 and not float(e).is_integer():
            return None
        return make({tuple((x, _round(k * e)) for x, k in mono): c ** e})
    if float(e).is_integer() and 1 <= e <= 3:
        out = p
        for _ in range(int(e) - 1):
            out = mul(out, p)
            if out is None:
                return None
        return out
    return None


def sqrt_of(p: Poly, e: float) -> Poly | None:
    """sqrt(p) ** e (e = 1: sqrt, -1: rsqrt): a monomial's half powers, else the atom ("sqrt", p)."""
    if len(p) == 1:
        return power(p, 0.5 * e)
    return power(atom(("sqrt", p)), e)


def top_atoms(p: Poly) -> set:
    """The atoms the monomials of ``p`` multiply (not those nested in other atoms)."""
    return {a for mono, _ in p for a, _ in mono}


def evaluate(graph) -> tuple[dict, list]:
    """``({Value: Poly}, values)``: every value of ``graph`` as a polynomial, and the values by atom index."""
    values: list = []
    index: dict = {}
    polys: dict = {}
    seen: dict = {}                 # what a value's readers see (a shared sum: its atom)
    readers = {v: len(nodes) for v, nodes in graph.users().items()}

    def of(v) -> Poly:
        if v in seen:
            return seen[v]
        if v in polys:
            p = polys[v]
            shared = readers.get(v, 0) > 1 and len(p) > 1
            seen[v] = value_atom(v) if shared else p
            return seen[v]
        return value_atom(v)

    def value_atom(v) -> Poly:
        if v not in index:
            index[v] = len(values)
            values.append(v)
        return atom(("v", index[v]))
    for spec in graph.inputs:
        polys[spec.value] = value_atom(spec.value)
    for node in graph.nodes:
        got = _interpret(node, of) if len(node.outputs) == 1 else None
        for o in node.outputs:
            polys[o] = got if got is not None else value_atom(o)
    return polys, values


def _interpret(node, of) -> Poly | None:
    op, out = node.op, node.outputs[0]
    if out.dtype not in FLOAT_TYPES:
        return None
    ins = [of(v) for v in node.inputs]
    if op == "constant":
        return const(float(node.attrs["value"])) if math.prod(out.shape) == 1 else None
    if op == "cast":
        return ins[0] if node.inputs[0].dtype in FLOAT_TYPES else None
    if op == "expand":
        return ins[0]
    if op == "reshape":
        x = node.inputs[0]
        keeps_rows = x.type.rank >= 1 and out.type.rank >= 1 and x.shape[-1] == out.shape[-1]
        return ins[0] if keeps_rows else None
    if op in ("add", "sub"):
        return add(ins[0], ins[1], 1.0 if op == "add" else -1.0)
    if op == "mul":
        return mul(ins[0], ins[1])
    if op == "neg":
        return scale(ins[0], -1.0)
    if op == "div":
        inv = power(ins[1], -1.0) if len(ins[1]) == 1 else None
        return mul(ins[0], inv) if inv is not None else None
    if op == "reciprocal":
        return power(ins[0], -1.0) if len(ins[0]) == 1 else None
    if op == "pow":
        e = as_const(ins[1])
        return power(ins[0], e) if e is not None else None
    if op in ("sqrt", "rsqrt"):
        return sqrt_of(ins[0], 1.0 if op == "sqrt" else -1.0)
    if op in ("sum", "mean"):
        return _reduction(node, ins[0])
    return None


def _reduction(node, p: Poly) -> Poly | None:
    x = node.inputs[0]
    rank = x.type.rank
    if rank < 1:
        return None
    axes = sorted({a % rank for a in node.attrs["axes"]})
    keepdim = node.attrs.get("keepdim", False)
    if axes == [rank - 1] and keepdim:
        count, kind = x.shape[-1], "R"
    elif rank >= 2 and axes == list(range(rank - 1)):
        count, kind = math.prod(x.shape[:-1]), "C"
    else:
        return None
    summed = atom((kind, p))
    return summed if node.op == "sum" else scale(summed, 1.0 / count)
