"""RMSNorm: the captured pointwise ops and reductions (and their backward) become one composite each.

What a capture records for ``nn.RMSNorm``, a Llama-style ``x * rsqrt(x.pow(2).mean(-1, keepdim=True)
+ eps) * weight`` or Hugging Face's ``LlamaRMSNorm`` (``x.float()``, the same math, ``weight *
x.to(dtype)``) is a handful of pointwise ops around a mean over the last axis, and autograd's
backward of each of them.  Recognised from the math (``nova/passes/polynomial.py``: every value as
a polynomial over atoms), whatever ops, operand orders and casts spelled it:

    r  = sqrt(eps + (1/n) R(x^2)) ** -1                            the rstd (R: sum over the last axis)
    y  = x * r [* w]                                               w: a value of n elements
    dx = D [* w] * r - (1/n) x r^3 R(D [* w] x)                    D: the gradient of y
    dw = C(D x r)                                                  C: sum over the leading axes

Rewritten:

    y, rstd = rms_norm(x[, w])                 {eps, has_weight, dtype: y's}
    dx[, dw] = rms_norm_backward(D, x, rstd[, w])  {has_weight, weight_grad, dtype: dx's}

x is read as stored: a widening cast to FP32 in front of it (``x.float()``) is the kernel's own.
Casts inside the pattern are read as the identity: the composites compute in FP32 and round once
(a bf16 HF layer rounded x * r to bf16 before the weight; within the storage type's precision).
Where a chain of values (a cast, a reshape) carries the same math, its last value is replaced;
values of the old ops that something else still reads stay computed (the dead ones go with
``dce``).  The backward is rewritten only with its forward.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

from nova.ir.graph import Graph
from nova.ir.types import FLOAT_TYPES
from nova.passes import polynomial as poly
from nova.passes.dce import dce
from nova.passes.rewrite import Rewriter


@dataclass
class Match:
    x: object                       # the normalized value (as stored: before any widening cast)
    weight: object | None
    eps: float
    ys: list                        # the values that are y (the last of each chain)
    rstds: list                     # the values that are the rstd ([..., 1] f32)
    s_atom: tuple = ()              # sqrt(eps + (1/n) R(x^2)): the rstd is its inverse
    dy: object | None = None
    dxs: list = field(default_factory=list)
    dws: list = field(default_factory=list)


def find(graph: Graph) -> list[Match]:
    """The RMSNorms of ``graph`` (rules in the module docstring), in program order of their y."""
    polys, values = poly.evaluate(graph)
    users = graph.users()
    order = {v: i for i, node in enumerate(graph.nodes) for v in node.outputs}
    forwards: dict[tuple, Match] = {}
    for node in graph.nodes:
        for v in node.outputs:
            got = _forward(v, polys[v], values)
            if got is None:
                continue
            x, w, eps, s_atom = got
            key = (x, s_atom)
            m = forwards.get(key)
            if m is None:
                m = forwards[key] = Match(x, w, eps, [], [], s_atom)
            if w is not None and m.weight is None:          # the weighted y supersedes x * r
                m.weight, m.ys = w, []
            if w is m.weight:
                m.ys.append(v)
    matches = []
    for m in forwards.values():
        m.ys = _last_of_chains(m.ys, polys, users)
        inverse = poly.power(poly.atom(m.s_atom), -1.0)
        m.rstds = [v for v in order if polys[v] == inverse and v.dtype == "f32"
                   and tuple(v.shape) == tuple(m.x.shape[:-1]) + (1,)]
        _backward(m, polys, values, users, order)
        matches.append(m)
    return sorted(matches, key=lambda m: order[m.ys[0]])


def _forward(v, p, values):
    """(x, weight, eps, sqrt atom) when ``p`` is x * r [* w] with r an RMSNorm's rstd of x; else None."""
    if v.dtype not in FLOAT_TYPES or v.type.rank < 1 or len(p) != 1 or p[0][1] != 1.0:
        return None
    factors = dict(p[0][0])
    roots = [a for a, k in factors.items() if a[0] == "sqrt" and k == -1.0]
    if len(roots) != 1:
        return None
    s_atom = roots[0]
    stats = _rms_stats(s_atom[1], values)
    if stats is None:
        return None
    x_atom, x, eps = stats
    n = x.shape[-1]
    if factors.get(x_atom) != 1.0 or tuple(v.shape) != tuple(x.shape):
        return None
    rest = [a for a in factors if a not in (s_atom, x_atom)]
    if not rest:
        return x, None, eps, s_atom
    if len(rest) != 1 or factors[rest[0]] != 1.0 or rest[0][0] != "v":
        return None
    w = values[rest[0][1]]
    if w.dtype not in FLOAT_TYPES or math.prod(w.shape) != n or w.shape[-1:] != (n,):
        return None
    return x, w, eps, s_atom


def _rms_stats(p, values):
    """(x atom, x, eps) when ``p`` is eps + (1/n) R(x^2) over x's last axis of n; else None."""
    if len(p) != 2:
        return None
    const = [c for m, c in p if m == ()]
    other = [(m, c) for m, c in p if m != ()]
    if len(const) != 1 or const[0] < 0 or len(other) != 1:
        return None
    mono, c = other[0]
    if len(mono) != 1 or mono[0][1] != 1.0 or mono[0][0][0] != "R":
        return None
    inner = mono[0][0][1]
    if len(inner) != 1 or inner[0][1] != 1.0 or len(inner[0][0]) != 1:
        return None
    (x_atom, k), = inner[0][0]
    if k != 2.0 or x_atom[0] != "v":
        return None
    x = values[x_atom[1]]
    if x.dtype not in FLOAT_TYPES or x.type.rank < 1 or poly._round(1.0 / x.shape[-1]) != c:
        return None
    return x_atom, x, const[0]


def _backward(m: Match, polys, values, users, order) -> None:
    """The gradient values of ``m``'s y: dx (and dw) for the one outside value D they are built from.
    A value that is dx plus one other value (the residual stream's gradient, accumulated into the same
    sum by autograd) is dx too: it becomes ``add(dx, that value)``."""
    index = {id(v): i for i, v in enumerate(values)}
    x_atom = ("v", index[id(m.x)])
    w_atom = ("v", index[id(m.weight)]) if m.weight is not None else None
    n = m.x.shape[-1]
    first = order[m.ys[0]]
    rows = math.prod(m.x.shape)
    dxs: dict = {}
    for v, i in order.items():
        if i <= first or v.dtype not in FLOAT_TYPES or v.shape[-1:] != (n,) or math.prod(v.shape) != rows:
            continue
        p = polys[v]
        for d_atom in sorted({a for a in poly.top_atoms(p) if a[0] == "v"} - {x_atom, w_atom}):
            d = values[d_atom[1]]
            if d.shape[-1:] != (n,) or math.prod(d.shape) != rows or d.dtype not in FLOAT_TYPES:
                continue
            rest = poly.add(p, _dx(d_atom, x_atom, w_atom, m.s_atom, n), -1.0)
            if rest == ():
                dxs.setdefault(d_atom, []).append((v, None))
            elif rest is not None and len(rest) == 1 and rest[0][1] == 1.0 and len(rest[0][0]) == 1 \
                    and rest[0][0][0][1] == 1.0 and rest[0][0][0][0][0] == "v":
                other = values[rest[0][0][0][0][1]]
                if other.shape[-1:] == (n,) and math.prod(other.shape) == rows:
                    dxs.setdefault(d_atom, []).append((v, other))
    if len(dxs) > 1:
        return
    if dxs:
        (d_atom, found), = dxs.items()
        last = set(_last_of_chains([v for v, _ in found], polys, users))
        m.dxs = [(v, other) for v, other in found if v in last]
    else:                                           # x needs no gradient: the weight's alone
        d_atom = _weight_grad_only(m, polys, values, order, x_atom, first)
        if d_atom is None:
            return
    m.dy = values[d_atom[1]]
    if m.weight is not None:
        want = poly.atom(("C", poly.mul(poly.mul(poly.atom(d_atom), poly.atom(x_atom)),
                                        poly.power(poly.atom(m.s_atom), -1.0))))
        dws = [v for v, i in order.items() if i > first and polys[v] == want and v.dtype in FLOAT_TYPES
               and math.prod(v.shape) == n]
        m.dws = _last_of_chains(dws, polys, users)


def _weight_grad_only(m: Match, polys, values, order, x_atom, first):
    """The atom D of the one outside value that some value's C(D x r) is built from (None: no such D)."""
    found = set()
    inverse = dict(poly.power(poly.atom(m.s_atom), -1.0)[0][0])
    for v, i in order.items():
        p = polys[v]
        if i <= first or len(p) != 1 or p[0][1] != 1.0 or len(p[0][0]) != 1 or p[0][0][0][0][0] != "C":
            continue
        inner = p[0][0][0][0][1]
        if len(inner) != 1 or inner[0][1] != 1.0:
            continue
        factors = dict(inner[0][0])
        if factors.get(x_atom) != 1.0 or factors.get(m.s_atom) != inverse[m.s_atom]:
            continue
        rest = [a for a in factors if a not in (x_atom, m.s_atom)]
        if len(rest) == 1 and rest[0][0] == "v" and factors[rest[0]] == 1.0:
            d = values[rest[0][1]]
            if math.prod(d.shape) == math.prod(m.x.shape) and d.shape[-1:] == m.x.shape[-1:]:
                found.add(rest[0])
    return next(iter(found)) if len(found) == 1 else None


def _dx(d_atom, x_atom, w_atom, s_atom, n: int):
    """D [* w] * r - (1/n) x r^3 R(D [* w] x)."""
    g = poly.atom(d_atom) if w_atom is None else poly.mul(poly.atom(d_atom), poly.atom(w_atom))
    r = poly.atom(s_atom)
    direct = poly.mul(g, poly.power(r, -1.0))
    mean = poly.atom(("R", poly.mul(g, poly.atom(x_atom))))
    pulled = poly.scale(poly.mul(poly.mul(poly.atom(x_atom), poly.power(r, -3.0)), mean), -1.0 / n)
    return poly.add(direct, pulled)


def _last_of_chains(found: list, polys, users) -> list:
    """The values of ``found`` no other value of ``found`` is computed from by the same math."""
    same = set(found)
    return [v for v in found if not any(o in same and polys[o] == polys[v] for u in users.get(v, []) for o in u.outputs)]


def fuse_rms_norm(graph: Graph) -> Graph:
    """A new graph with every recognised RMSNorm (and its backward) rewritten into ``rms_norm``
    (``rms_norm_backward``), then dead code removed; ``graph`` itself is left unchanged."""
    matches = [m for m in find(graph) if m.ys]
    if not matches:
        return graph
    at: dict = {}
    for m in matches:
        at.setdefault(m.ys[0].producer, []).append(("forward", m))
        if m.dxs or m.dws:
            grads = [v for v, _ in m.dxs] + m.dws
            at.setdefault(min((v.producer for v in grads), key=graph.nodes.index), []).append(("backward", m))
    rw = Rewriter(graph)
    made: dict = {}                 # id(match) -> the composites' results
    replaced: dict = {}             # old value -> how its new value is made from them
    for node in graph.nodes:
        if not (node.outputs and all(v in replaced for v in node.outputs)):
            rw.copy(node)
        for what, m in at.get(node, []):
            if what == "forward":
                made[id(m)] = _emit_forward(rw, m, node.origin)
                replaced.update({v: (m, "y", None) for v in m.ys})
            elif id(m) in made:
                made[id(m)] += _emit_backward(rw, m, made[id(m)][1], node.origin)
                replaced.update({v: (m, "dx", other) for v, other in m.dxs})
                replaced.update({v: (m, "dw", None) for v in m.dws})
        for v in node.outputs:
            if v in replaced:
                m, role, other = replaced[v]
                y, _, *grads = made[id(m)]
                new = {"y": y, "dx": grads[0] if grads else None, "dw": grads[1] if len(grads) > 1 else None}[role]
                new = _adapt(rw, new, v)
                if other is not None:
                    new = rw.emit("add", [new, _adapt(rw, rw.get(other), v)], {})[0]
                rw.env[v] = new
    return dce(rw.finish())


def _weight(rw: Rewriter, w):
    got = rw.get(w)
    return got if tuple(w.shape) == (w.shape[-1],) else rw.emit("reshape", [got], {"shape": (w.shape[-1],)})[0]


def _adapt(rw: Rewriter, v, target):
    """``v`` (a new-graph value) as ``target``'s type: reshaped, cast."""
    if tuple(v.shape) != tuple(target.shape):
        v = rw.emit("reshape", [v], {"shape": tuple(target.shape)})[0]
    if v.dtype != target.dtype:
        v = rw.emit("cast", [v], {"dtype": target.dtype})[0]
    return v


def _stored(x):
    """``x`` before a widening cast to FP32 (exact: the composites widen what they read themselves)."""
    p = x.producer
    if p is not None and p.op == "cast" and x.dtype == "f32" and p.inputs[0].dtype in ("bf16", "f16"):
        return p.inputs[0]
    return x


def _eps(eps: float, dtype: str) -> float:
    """``eps`` as the kernel adds it: rounded to f32 below f64 (the sum is f32).  The same model
    traced by two torch versions may carry it as a Python float (1e-05) or as an f32 tensor's value
    (9.999999747e-06): one attribute, one kernel, for both."""
    return eps if dtype == "f64" else struct.unpack("f", struct.pack("f", eps))[0]


def _emit_forward(rw: Rewriter, m: Match, origin: str) -> list:
    ins = [rw.get(_stored(m.x))] + ([_weight(rw, m.weight)] if m.weight is not None else [])
    attrs = {"eps": _eps(m.eps, m.x.dtype), "has_weight": m.weight is not None, "dtype": m.ys[0].dtype}
    y, rstd = rw.emit("rms_norm", ins, attrs, origin)
    for v in m.rstds:
        rw.env[v] = rstd
    return [y, rstd]


def _emit_backward(rw: Rewriter, m: Match, rstd, origin: str) -> list:
    dy = rw.get(m.dy)
    if tuple(dy.shape) != tuple(m.x.shape):
        dy = rw.emit("reshape", [dy], {"shape": tuple(m.x.shape)})[0]
    ins = [dy, rw.get(_stored(m.x)), rstd] + ([_weight(rw, m.weight)] if m.weight is not None else [])
    attrs = {"has_weight": m.weight is not None, "weight_grad": bool(m.dws),
             "dtype": m.dxs[0][0].dtype if m.dxs else m.x.dtype}
    return list(rw.emit("rms_norm_backward", ins, attrs, origin))
