"""Cross-entropy: ``log_softmax`` -> ``nll_loss`` (and its backward) become one composite each.

What autograd records for ``F.cross_entropy(logits, target)`` is

    logp          = log_softmax(logits, axis=-1)                       [N, C], written
    loss, tw      = nll_loss(logp, target)                             reads one logp per row
    dlogp         = nll_loss_backward(dloss, logp, target, tw)         [N, C], zero but one per row
    dlogits       = log_softmax_backward(dlogp, logp, axis=-1)         [N, C]

three [N, C] tensors besides the logits (for a 32k vocabulary and 16k tokens, 2 GiB each) and
four full passes.  Rewritten:

    loss, lse     = cross_entropy(logits, target)                      lse: one f32 per row
    dlogits       = cross_entropy_backward(dloss, logits, target, lse)

with the same ``reduction`` and ``ignore_index``: the log-probabilities and their gradient are
never written, and ``dlogits`` can take the logits' buffer when the logits die at the backward
(the planner's in-place rule: the kernel is elementwise over the logits).

Rule: a ``log_softmax`` over the last axis of a rank-2 f32/f64 tensor whose result ``logp`` is read
by exactly one ``nll_loss`` (reduction mean or sum) and, when there is a backward, by exactly the
``nll_loss_backward`` of that loss (same target value, its ``total_weight``, same attributes) and
the ``log_softmax_backward`` that consumes that backward's result (as its ``dy``, over the same
axis); nothing else reads ``logp``, ``total_weight`` or ``dlogp``, and none of them is a graph
output.  The forward alone (no backward nodes, ``total_weight`` unread) is rewritten too.
Anything else is left as captured.  Low-precision logits are left alone (the executor's
cross-entropy kernels are FP32/FP64).

A backward without its forward (AOTAutograd's backward graph under ``torch.compile``, whose
``logp`` the forward saved and hands over as an input) is rewritten too:

    dlogp   = nll_loss_backward(dloss, logp, target, tw)
    dlogits = log_softmax_backward(dlogp, logp, axis=-1)
        ->
    dlogits = cross_entropy_backward(dloss, logp, target, zeros[N])

exact because cross_entropy_backward's softmax is ``exp(logits - lse)`` and ``exp(logp - 0)`` is
the softmax log_softmax_backward reads (``dlogp - exp(logp) * sum(dlogp)`` with ``dlogp`` zero but
``-dloss / count`` at each kept row's target is ``(softmax - onehot) * dloss / count``), and the
IR's nll_loss has no class weights, so its ``total_weight`` is the count of kept rows that
cross_entropy_backward counts itself.  The ``[N, C]`` ``dlogp`` is never written, and ``dlogits``
may take ``logp``'s storage when the caller donates it (``memory.Handoff.donated_inputs``).
Rule (``find_backward``): a ``log_softmax_backward`` over the last axis of a rank-2 f32/f64 tensor
whose ``dy`` is read only by it, is not a graph output and is the result of a ``nll_loss_backward``
(reduction mean or sum, scalar ``dloss``) of the same ``logp`` it reads as ``y``.
"""
from __future__ import annotations

from dataclasses import dataclass

from nova.ir.graph import Graph, Node
from nova.passes.dce import dce
from nova.passes.rewrite import Rewriter

DTYPES = ("f32", "f64")
REDUCTIONS = ("mean", "sum")


@dataclass
class Match:
    log_softmax: Node
    nll: Node
    nll_backward: Node | None = None
    log_softmax_backward: Node | None = None

    @property
    def attrs(self) -> dict:
        return {"reduction": self.nll.attrs.get("reduction", "mean"),
                "ignore_index": int(self.nll.attrs.get("ignore_index", -100))}


def _last_axis(node: Node) -> bool:
    rank = node.inputs[0].type.rank if node.op == "log_softmax" else node.inputs[1].type.rank
    return node.attrs["axis"] % rank == rank - 1


def loss_attrs(node: Node) -> dict:
    """A loss node's ``reduction`` and ``ignore_index``, the IR's defaults (mean, -100) filled in."""
    return {"reduction": node.attrs.get("reduction", "mean"), "ignore_index": int(node.attrs.get("ignore_index", -100))}


def same_loss_attrs(a: Node, b: Node) -> bool:
    """The same ``reduction`` and ``ignore_index`` (``loss_attrs``)."""
    return loss_attrs(a) == loss_attrs(b)


def find(graph: Graph) -> list[Match]:
    """The cross-entropy patterns of ``graph`` that can be rewritten (rule in the module docstring)."""
    users = graph.users()
    outputs = set(graph.output_values())
    matches = []
    for node in graph.nodes:
        if node.op != "log_softmax":
            continue
        x, logp = node.inputs[0], node.outputs[0]
        if x.type.rank != 2 or x.dtype not in DTYPES or not _last_axis(node) or logp in outputs:
            continue
        readers = users.get(logp, [])
        nlls = [u for u in readers if u.op == "nll_loss"]
        if len(nlls) != 1:
            continue
        nll = nlls[0]
        if nll.inputs[0] is not logp or nll.attrs.get("reduction", "mean") not in REDUCTIONS:
            continue
        target, total_weight = nll.inputs[1], nll.outputs[1]
        if total_weight in outputs:
            continue
        tw_readers = users.get(total_weight, [])
        match = Match(node, nll)
        if len(readers) == 1:                                      # the forward alone
            if tw_readers:
                continue
            matches.append(match)
            continue
        # forward + backward: logp read by exactly nll_loss, nll_loss_backward, log_softmax_backward
        backs = [u for u in readers if u.op == "nll_loss_backward"]
        lsbs = [u for u in readers if u.op == "log_softmax_backward"]
        if len(readers) != 3 or len(backs) != 1 or len(lsbs) != 1:
            continue
        back, lsb = backs[0], lsbs[0]
        dloss, b_logp, b_target, b_tw = back.inputs
        dlogp = back.outputs[0]
        if b_logp is not logp or b_target is not target or b_tw is not total_weight or dloss.shape != () \
                or not same_loss_attrs(nll, back) or tw_readers != [back]:
            continue
        if lsb.inputs[0] is not dlogp or lsb.inputs[1] is not logp or not _last_axis(lsb) \
                or dlogp in outputs or users.get(dlogp, []) != [lsb]:
            continue
        match.nll_backward, match.log_softmax_backward = back, lsb
        matches.append(match)
    return matches


@dataclass
class BackwardMatch:
    nll_backward: Node
    log_softmax_backward: Node

    @property
    def attrs(self) -> dict:
        return {"reduction": self.nll_backward.attrs.get("reduction", "mean"),
                "ignore_index": int(self.nll_backward.attrs.get("ignore_index", -100))}


def find_backward(graph: Graph, skip=frozenset()) -> list[BackwardMatch]:
    """The backward-only patterns of ``graph`` (rule in the module docstring), except the
    ``log_softmax_backward`` nodes in ``skip`` (those a whole pattern rewrites)."""
    users = graph.users()
    outputs = set(graph.output_values())
    matches = []
    for lsb in graph.nodes:
        if lsb.op != "log_softmax_backward" or lsb in skip:
            continue
        dlogp, y = lsb.inputs
        back = dlogp.producer
        if back is None or back.op != "nll_loss_backward" or y.type.rank != 2 or y.dtype not in DTYPES \
                or not _last_axis(lsb) or dlogp in outputs or users.get(dlogp, []) != [lsb]:
            continue
        dloss, logp, _target, _tw = back.inputs
        if logp is not y or dloss.shape != () or back.attrs.get("reduction", "mean") not in REDUCTIONS:
            continue
        matches.append(BackwardMatch(back, lsb))
    return matches


def fuse_cross_entropy(graph: Graph) -> Graph:
    """A new graph with every matched pattern rewritten into ``cross_entropy`` (and
    ``cross_entropy_backward``), then dead code removed; ``graph`` itself is left unchanged."""
    matches = find(graph)
    backward_only = find_backward(graph, {m.log_softmax_backward for m in matches})
    if not matches and not backward_only:
        return graph
    role = {}
    for b in backward_only:
        role[b.nll_backward] = ("skip", b)
        role[b.log_softmax_backward] = ("backward only", b)
    for m in matches:
        role[m.log_softmax] = ("skip", m)
        role[m.nll] = ("forward", m)
        if m.nll_backward is not None:
            role[m.nll_backward] = ("skip", m)
            role[m.log_softmax_backward] = ("backward", m)
    rw = Rewriter(graph)
    lse_of = {}
    for node in graph.nodes:
        what, m = role.get(node, ("copy", None))
        if what == "copy":
            rw.copy(node)
        elif what == "backward only":
            dloss, logp, target, _tw = m.nll_backward.inputs
            (zeros,) = rw.emit("constant", [], {"value": 0.0, "dtype": "f64" if logp.dtype == "f64" else "f32",
                                                "shape": logp.shape[:1]}, node.origin)
            (dx,) = rw.emit("cross_entropy_backward", [rw.get(dloss), rw.get(logp), rw.get(target), zeros],
                            m.attrs, node.origin)
            rw.env[node.outputs[0]] = dx
        elif what == "forward":
            x, target = m.log_softmax.inputs[0], m.nll.inputs[1]
            loss, lse = rw.emit("cross_entropy", [rw.get(x), rw.get(target)], m.attrs, m.nll.origin)
            rw.env[m.nll.outputs[0]] = loss
            lse_of[id(m)] = lse
        elif what == "backward":
            x, target, dloss = m.log_softmax.inputs[0], m.nll.inputs[1], m.nll_backward.inputs[0]
            (dx,) = rw.emit("cross_entropy_backward", [rw.get(dloss), rw.get(x), rw.get(target), lse_of[id(m)]],
                            m.attrs, node.origin)
            rw.env[node.outputs[0]] = dx
    return dce(rw.finish())
