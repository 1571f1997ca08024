"""Pointwise recomputation: intermediates the forward saves for the backward, recomputed inside the
backward's own pointwise kernels instead of written and read back, when that moves fewer bytes.

Autograd saves what each op's derivative reads.  A chain written op by op (Hugging Face's
``gelu_new``: pow, mul, add, tanh, mul) therefore saves its intermediates (``tanh(...)``, ``1 +
tanh(...)``, ``0.5 * x``), and the forward's kernel writes each of them while the backward's kernel
reads them back, where ``F.gelu(approximate="tanh")`` saves only its input.  Recomputing them from
the values that are kept anyway makes both spellings move the same bytes.

**Candidates**: the saved roots of ``remat.candidates`` (the same chains the memory budget
recomputes).  **Rule** (``worth_recomputing``), all of:

1. the chain is pointwise ops and views only (no GEMM, reduction, norm, gather): recomputed in
   the backward's pointwise kernel it costs no launch and FLOPs are free in a memory-bound kernel;
2. every backward reader of the roots is a pointwise op, so the recomputed nodes fuse into the
   kernel that reads them (a GEMM or row kernel reading one would need the copy written);
3. the chain reads only other saved roots or graph inputs (``remat._chain``'s ``reads``), which
   stay in memory anyway: recomputing adds no stored bytes;
4. bytes: the roots' bytes twice (written by the forward, read by the backward) exceed the bytes
   of the chain's reads that the backward readers do not read already (``added_bytes``).

Greedy in program order with ``remat.pick``'s exclusion: a chain may not read a root recomputed
by another chain, nor may its root be read by one (every copy reads originals only).  The rewrite
is ``remat.rematerialize``: copies tagged ``[recomputed]`` right before their first backward reader.
A root left out by the exclusion (``1 + tanh(...)`` reads ``tanh(...)``, recomputed in the same
round) is a candidate again in the next round, whose chain then runs back through the recomputed
one; at most ``MAX_ROUNDS`` rounds (a chain of ``n`` saved intermediates needs ``n``).
Source: the cost rule of this module (bytes over one bandwidth; the launch is shared), the same
saved-tensor analysis as ``remat.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from nova.ir.graph import Graph, Value
from nova.ir.ops import kind
from nova.passes.remat import Candidate, backward_start, candidates, gpu_model, rematerialize

CHAIN_KINDS = ("pointwise", "view")
MAX_ROUNDS = 4


@dataclass(frozen=True)
class Recomputed:
    """One decision, as ``explain`` shows it."""
    name: str                 # the saved tensor's class (``peak.tensor_class``)
    nbytes: int               # its bytes (no longer written nor read back)
    added_bytes: int          # bytes the backward reads in addition to recompute it
    ops: tuple[str, ...]      # the recomputed ops

    def describe(self) -> str:
        from nova.passes.fusion import format_bytes
        return (f"{self.name}: {'+'.join(self.ops)} recomputed in the backward's pointwise kernel "
                f"(saves {format_bytes(2 * self.nbytes)} written and read back, reads "
                f"{format_bytes(self.added_bytes)} more)")


def added_bytes(candidate: Candidate, users) -> int:
    """Bytes of the chain's reads (other saved roots, graph inputs) that no backward reader of the
    candidate's roots reads already."""
    chain = set(candidate.chain)
    readers = {u for r in candidate.roots for u in users.get(r, ()) if u not in chain}
    already = {v for u in readers for v in u.inputs}
    leaves = {v for n in candidate.chain for v in n.inputs if v.producer not in chain}
    return sum(v.type.nbytes for v in leaves if v not in already)


def worth_recomputing(candidate: Candidate, users, backward: set) -> bool:
    """The rule of the module docstring for one candidate."""
    if any(kind(n.op) not in CHAIN_KINDS for n in candidate.chain):
        return False
    readers = [u for r in candidate.roots for u in _readers(r, users) if u in backward]
    if not readers or any(kind(u.op) != "pointwise" for u in readers):
        return False
    return 2 * candidate.nbytes > added_bytes(candidate, users)


def _readers(root: Value, users) -> list:
    """The non-view nodes reading ``root`` directly or through views."""
    out, stack = [], [root]
    while stack:
        v = stack.pop()
        for u in users.get(v, ()):
            if kind(u.op) == "view":
                stack.extend(u.outputs)
            else:
                out.append(u)
    return out


def recompute_pointwise(graph: Graph, target=None) -> tuple[Graph, list[Recomputed]]:
    """``graph`` with the saved pointwise intermediates worth recomputing recomputed in the backward
    (rule in the module docstring), and the decisions; the input graph is left unchanged."""
    decisions: list[Recomputed] = []
    for _ in range(MAX_ROUNDS):
        graph, made = _round(graph, target)
        if not made:
            break
        decisions += made
    return graph, decisions


def _round(graph: Graph, target) -> tuple[Graph, list[Recomputed]]:
    start = backward_start(graph)
    if start is None:
        return graph, []
    users = graph.users()
    backward = set(graph.nodes[start:])
    chosen, recomputed, pinned = [], set(), set()
    for c in candidates(graph, gpu_model(target)):
        if not worth_recomputing(c, users, backward):
            continue
        if pinned.intersection(c.roots) or c.reads & recomputed:
            continue
        chosen.append(c)
        recomputed.update(c.roots)
        pinned |= c.reads
    if not chosen:
        return graph, []
    rewritten, _ = rematerialize(graph, [r for c in chosen for r in c.roots])
    decisions = [Recomputed(c.name, c.nbytes, added_bytes(c, users), tuple(n.op for n in c.chain
                                                                            if kind(n.op) != "view"))
                 for c in chosen]
    return rewritten, decisions
