"""Activations written op by op become the one named op: math is recognised, not names.

Hugging Face's GPT-2 writes its GELU as ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``,
op by op.  After ``recompute.py`` its intermediates are read by the chain alone (the backward
recomputes what it needs from ``x``), so the chain is a function of ``x`` with one result: when the
pointwise family's canonical form of that function (``kernels/pointwise/canonical.py``: products and
sums matched through their factors and terms, constants to a relative 1e-4) is one named activation
of ``x`` -- ``gelu_tanh``, ``gelu_erf``, ``relu``, ``silu`` (those a GEMM's epilogue computes) -- the chain becomes
that one node.  The fusion pass then treats it as it treats ``F.gelu(approximate="tanh")``: in the
producing GEMM's epilogue, its input written beside it when the backward reads it.

**Backward chains**: autograd's backward of such a chain (after ``recompute.py``, a function of the
output's gradient ``dy`` and ``x`` alone) becomes the named backward op (``gelu_tanh_backward(dy, x)``:
the GEMM that computes ``dy`` applies it in its epilogue, as it does for ``F.gelu``'s backward) when the
chain equals it as a function: evaluated once at ``PROBES`` random points of both inputs (spread over
the activation's curve and its saturation) as math -- each op in float64, a cast between float types
the identity, as the forward's canonical form reads it -- it agrees with the named op of (dy, x) in one
of the two orders to ``GRAD_RTOL`` of the largest value.

**Rounding**: the named op computes in FP32 and rounds its result once to the chain's type.  Under
autocast eager rounds every op's result to 16 bits on the way (HF GPT-2's GELU backward: each of its
ops rounds to bfloat16); the named op is the exact function rounded once, at least as close to the
float64 function as eager's chain (``tests/test_named_activations.py`` checks both against it).  The
forward is read the same way (``_named``), and torch.compile computes such chains in FP32 too.

**Chains**: for each pointwise node, in reverse program order, the largest set of pointwise nodes
ending at it whose results are read only inside the set (a result read elsewhere, or a graph
output, must be written: that node stays), over exactly one value from outside (constant fills, read
as literals, aside) of the chain's result type.  A node belongs to at most one replaced chain.
"""
from __future__ import annotations

from nova.ir.graph import Graph, Node
from nova.ir.types import FLOAT_TYPES
from nova.ir.ops import kind
from nova.kernels.pointwise.problem import PointwiseProblemError
from nova.passes.dce import dce
from nova.passes.pointwise_from_ir import program_of
from nova.passes.rewrite import Rewriter

NAMED = ("gelu_tanh", "gelu_erf", "relu", "silu")   # what a GEMM epilogue computes (fusion.EPILOGUE_ACTIVATIONS)
GRADIENTS = ("gelu_tanh_backward",)                # what a GEMM epilogue computes of (dy, x) (fusion.ACTIVATION_GRADS)
PROBES = 512                                       # random points a backward chain is compared at
GRAD_RTOL = 1e-4                                   # of the largest value (decimal constants: ~1e-7)


def _chain(end: Node, users, outputs, taken) -> tuple[list[Node], list]:
    """(the chain's nodes, the values it reads from outside) ending at ``end`` (module docstring)."""
    members = {end}
    grew = True
    while grew:
        grew = False
        for node in list(members):
            for v in node.inputs:
                p = v.producer
                if p is None or p in members or p in taken or kind(p.op) != "pointwise" or len(p.outputs) != 1 \
                        or v in outputs or any(u not in members for u in users.get(v, ())):
                    continue
                members.add(p)
                grew = True
    produced = {v for n in members for v in n.outputs}
    reads = list(dict.fromkeys(v for n in members for v in n.inputs if v not in produced))
    return list(members), reads


def _named(nodes, inputs, out) -> str | None:
    """The named activation ``nodes`` compute of ``inputs[0]`` (constant fills among ``inputs`` are
    literals), or None."""
    fills = [v.producer for v in inputs[1:]]
    try:
        _, (expr,) = program_of(fills + nodes, inputs[:1], [out])
    except PointwiseProblemError:
        return None
    if expr.op in NAMED and len(expr.args) == 1 and expr.args[0].op == "input":
        return expr.op
    return None


def _named_gradient(nodes, inputs, fills, out) -> tuple[str, list] | None:
    """``(op, [dy, x])`` when ``nodes`` compute ``op(dy, x)`` of their two ``inputs`` in either order (one
    of ``GRADIENTS``; module docstring: the chain evaluated once, compared with the op both ways)."""
    import torch
    from nova.ir.ops import opdef
    gen = torch.Generator().manual_seed(0)
    probes = [torch.randn(PROBES, generator=gen, dtype=torch.float64) * 3 for _ in inputs]   # curve and tails
    env = {v: torch.tensor(float(v.producer.attrs["value"]), dtype=torch.float64) for v in fills}
    env.update(zip(inputs, probes))
    try:
        for n in nodes:                          # as math: float64 throughout, a float cast the identity
            args = [env[v] for v in n.inputs]
            if n.op == "cast" and n.outputs[0].dtype in FLOAT_TYPES:
                env[n.outputs[0]] = args[0]
            else:
                env[n.outputs[0]] = opdef(n.op).reference(torch, *args, **n.attrs).to(torch.float64)
    except Exception:                            # an op whose reference takes no float64 vectors: not this
        return None
    got = env[out]
    for op in GRADIENTS:
        for dy, x in ((0, 1), (1, 0)):
            want = opdef(op).reference(torch, probes[dy], probes[x])
            if got.shape == want.shape and float((got - want).abs().max()) <= GRAD_RTOL * float(want.abs().max()):
                return op, [inputs[dy], inputs[x]]
    return None


def name_activations(graph: Graph) -> Graph:
    """``graph`` with each op-by-op activation chain replaced by its named op (module docstring)."""
    users = graph.users()
    outputs = set(graph.output_values())
    index = {n: i for i, n in enumerate(graph.nodes)}
    replaced: dict[Node, tuple[str, object]] = {}       # a chain's last node -> (op, its input)
    taken: set[Node] = set()
    for end in reversed(graph.nodes):
        if kind(end.op) != "pointwise" or end in taken or len(end.outputs) != 1:
            continue
        nodes, reads = _chain(end, users, outputs, taken)
        inputs = [v for v in reads if v.producer is None or v.producer.op != "constant"]
        if len(nodes) < 2 or len(inputs) not in (1, 2) or any(v.type != end.outputs[0].type for v in inputs):
            continue
        fills = [v for v in reads if v not in inputs]
        ordered = sorted(nodes, key=index.__getitem__)
        if len(inputs) == 1:
            op = _named(ordered, inputs + fills, end.outputs[0])
            named = (op, inputs) if op is not None else None
        else:
            named = _named_gradient(ordered, inputs, fills, end.outputs[0])
        if named is None:
            continue
        replaced[end] = named
        taken.update(nodes)
    if not replaced:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in replaced:
            op, args = replaced[node]
            (rw.env[node.outputs[0]],) = rw.emit(op, [rw.get(v) for v in args], {}, node.origin)
        elif node not in taken:
            rw.copy(node)
    return dce(rw.finish())
