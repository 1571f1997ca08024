"""Rematerialization: activations the forward saves for the backward, recomputed in the backward
instead of kept, chosen by cost.

The backward starts at the first node the frontend stamped ``[backward]`` (else the first
``cross_entropy_backward``); nodes before it are the forward.

**Candidates** (``candidates``): the arena storage roots (a value and its views, ``layout.py``)
produced by the forward and read by the backward (directly or through a view).  A candidate's
*chain* is the forward nodes that recompute every member the backward reads, back to values that
stay available: graph inputs and other saved roots (whose own copy is used when they are
recomputed too).  A chain is at most ``MAX_CHAIN`` nodes of recomputable ops (views not counted; pointwise, views,
reductions, fills, matmuls, normalizations, softmaxes, gathers); anything else (attention, an
opaque ATen op) is not a candidate.

**Cost** (``node_time_us``): a matmul's time from the GEMM configurator (``configure``, the target's
calibrated prediction where it has one: the time ``explain`` gives the same GEMM; a matmul the
configurator does not take, its ``2 M N K`` FLOPs at the target's tensor-core peak, which is
optimistic: GPT-42M's recomputed projections cost 1.6x that); any other node its bytes (inputs
read, results written) at the target's DRAM bandwidth (pessimistic for a pointwise chain the fusion
pass joins to its backward reader: Llama's SwiGLU product is priced 1.55x the plans' difference);
a view nothing, nor a bias added to a GEMM's result (its epilogue).  **Benefit**: the root's bytes, freed at the peak when the root is live across it.
So a pointwise or norm result (its chain reads a few tensors of its size) frees a hundred times
more bytes per microsecond than a GEMM output (its chain is a GEMM).  The default memory policy
(``memory_policy.py``) prices candidates by planning them; these closed forms order them.

**Rule and algorithm** (``pick``, driven by ``budget.fit_budget``): a closed-form greedy on the
liveness intervals at the peak.  Take the candidates whose root is live at the plan's busiest
position, sort them by bytes freed per microsecond of recompute (best first; ties: the earliest
in the forward, whose copy lands latest in the backward, far from the peak), take the shortest
prefix whose bytes cover the excess over the budget, skipping a candidate whose chain reads a
recomputed root or whose root a recomputed chain reads (those stay kept: a chain reads originals
only, so no recomputation cascades back through the forward and every copy lives only from its
first to its last backward reader), rewrite, re-plan (fusion, schedule, memory),
repeat until the plan fits or no candidate is live at the peak.  Each round recomputes at least
one more candidate, so there are at most as many rounds as candidates (in practice 1-3: the
prefix covers the excess); the result is at most the excess plus one candidate's bytes above the
best prefix on the intervals it saw, and the plan with every candidate live at the peak
recomputed is the floor ``budget`` reports when the budget is below it.

**Rewrite** (``rematerialize``, graph -> graph, the input left unchanged): the recomputed nodes
are copies of the forward's (same op, attributes and origin, tagged ``RECOMPUTED_TAG``) emitted
right before the first backward node that reads the value, inputs from the available values (or
their own copies, emitted first); every backward reader reads the copy, the forward keeps the
original, which now dies at its last forward reader.  **In a sibling's kernel** (``sibling_reader``):
a chain of pointwise ops whose inputs a later backward pointwise node reads anyway (SwiGLU's product
``silu(gate) * up``, read by the down projection's weight-gradient GEMM before the SwiGLU backward reads
gate and up) is emitted right before that node instead, and the root's readers before it (and what
reads them) after the nodes that follow, before the first node that needs their results: the fusion
pass then joins the copy to the sibling's kernel (shared inputs, ``fusion._shared_input``), which writes
the recomputed value as one more output, and the schedule runs the deferred readers once it has.
Its closed-form time (``candidates``) is then the root's write alone: the sibling reads the chain's
inputs already.  The fusion pass groups the copies like the
forward's nodes (same pointwise / rows families); the schedule runs a recomputed group only when
one of its backward readers could otherwise run (``schedule.greedy_order``); the memory planner
places them like any value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from nova.ir.graph import Graph, Node, Value
from nova.dtypes import MODE_OF_STORAGE
from nova.ir.ops import kind
from nova.passes import layout as layout_analysis
from nova.passes.rewrite import Rewriter

RECOMPUTED_TAG = "[recomputed]"
BACKWARD_TAG = "[backward]"
MAX_CHAIN = 8
SIBLING_WINDOW = 24          # backward nodes after the root's first reader searched for a sibling (one layer's block)
RECOMPUTABLE_KINDS = ("pointwise", "view", "reduce", "creation", "matmul")
RECOMPUTABLE_OPS = ("layer_norm", "rms_norm", "softmax", "log_softmax", "index_select", "take_along_axis", "concat")


@dataclass(frozen=True)
class Candidate:
    roots: tuple[Value, ...]       # the saved storage roots one forward node made (a norm's y, mean, rstd)
    chain: tuple[Node, ...]        # forward nodes recomputed for them, in program order
    nbytes: int                    # bytes freed where the roots are live
    recompute_us: float            # the chain's predicted time
    name: str                      # tensor class (``peak.tensor_class``)
    position: int                  # program position of the roots' producer
    gemm: bool                     # the chain holds a matmul
    reads: frozenset = frozenset() # the other saved roots its chain reads (they stay kept)
    node_us: tuple[float, ...] = ()  # each chain node's predicted time
    sibling: str = ""              # the backward op whose kernel recomputes it (``sibling_reader``), "" for none

    @property
    def bytes_per_us(self) -> float:
        return self.nbytes / max(self.recompute_us, 1e-3)


def gpu_model(target):
    from nova.hwmodel import get_target
    return get_target(target if target is not None else "h200")


def backward_start(graph: Graph) -> int | None:
    """The index of the first backward node (see the module docstring), None without a backward."""
    for i, node in enumerate(graph.nodes):
        if node.origin.endswith(BACKWARD_TAG):
            return i
    for i, node in enumerate(graph.nodes):
        if node.op == "cross_entropy_backward":
            return i
    return None


def recomputable(node: Node) -> bool:
    return kind(node.op) in RECOMPUTABLE_KINDS or node.op in RECOMPUTABLE_OPS


def node_time_us(node: Node, gpu, copies: bool = False) -> float:
    """The predicted time of one recomputed node (rule in the module docstring); a view that
    ``copies`` (not a strided view of its input) moves its bytes."""
    k = kind(node.op)
    if k == "view" and not copies:
        return 0.0
    if node.op == "add" and node.inputs[0].producer is not None and node.inputs[0].producer.op == "matmul" \
            and node.inputs[1].type.rank == 1:
        return 0.0                    # a bias: the GEMM's epilogue adds it as it writes
    if k == "matmul":
        configured = _gemm_time_us(node, gpu)
        if configured is not None:
            return configured
        out = node.outputs[0].type
        a = node.inputs[0].type
        depth = a.shape[-2] if node.attrs.get("transpose_a") else a.shape[-1]
        flops = 2.0 * math.prod(out.shape) * depth
        mode = MODE_OF_STORAGE.get(a.dtype)
        rate = gpu.peak_flops(mode) if mode and gpu.supports(gpu.best_family(mode), mode) else gpu.peak_fp32_flops()
        return flops / rate * 1e6
    moved = sum(v.type.nbytes for v in node.inputs) + sum(v.type.nbytes for v in node.outputs)
    return moved / gpu.dram_bw * 1e6


def _gemm_time_us(node: Node, gpu) -> float | None:
    """A recomputed matmul as the GEMM configurator predicts it on ``gpu`` (calibrated where it can
    be), its operands dense (a recomputation reads its own buffers): the problem the fusion pass
    would state for it (``fusion.classify_gemm``); None when that is no Nova GEMM."""
    from nova.configurator import configure
    from nova.passes.fusion import classify_gemm
    problem, _ = classify_gemm(node, {v: layout_analysis.root_layout(v) for v in node.inputs})
    if problem is None:
        return None
    try:
        cfg = configure(problem, gpu)
    except (ValueError, RuntimeError):    # a problem the configurator refuses: the FLOP closed form
        return None
    return cfg.time_us


def candidates(graph: Graph, gpu) -> list[Candidate]:
    """Every saved root that can be recomputed, with its chain, bytes and time."""
    from nova.passes.peak import tensor_class
    start = backward_start(graph)
    if start is None:
        return []
    layouts = layout_analysis.analyze(graph)
    users = graph.users()
    outputs = set(graph.output_values())
    position = {n: i for i, n in enumerate(graph.nodes)}
    forward = set(graph.nodes[:start])
    saved_members: dict[Value, list[Value]] = {}
    for node in graph.nodes[:start]:
        for v in node.outputs:
            if v in outputs or not any(position[u] >= start for u in users.get(v, ())):
                continue
            root = layouts[v].root
            if root.producer in forward and layouts[root].root is root:
                saved_members.setdefault(root, []).append(v)
    roots = {r for r in saved_members if not any(layouts[v].root is r and v in outputs
                                                 for v in _family(graph, layouts, r))}
    by_producer: dict[Node, list[Value]] = {}
    for root in sorted(roots, key=lambda r: (position[r.producer], r.index)):
        by_producer.setdefault(root.producer, []).append(root)
    out = []
    for producer, group in by_producer.items():
        members = [m for r in group for m in saved_members[r]]
        found = _chain(members, set(roots), set(group), forward, layouts)
        if found is None:
            continue
        chain, reads = found
        chain.sort(key=position.get)
        times = tuple(node_time_us(n, gpu, layouts[n.outputs[0]].root is n.outputs[0]) for n in chain)
        sibling = sibling_reader(graph, chain, set(group), start, layouts, position)
        if sibling is not None:       # the sibling's kernel writes the roots: their bytes alone
            times = tuple(sum(r.type.nbytes for r in group) / gpu.dram_bw * 1e6 if i == len(chain) - 1 else 0.0
                          for i in range(len(chain)))
        out.append(Candidate(tuple(group), tuple(chain), sum(r.type.nbytes for r in group), sum(times),
                             tensor_class(group[0]), position[producer],
                             any(kind(n.op) == "matmul" for n in chain), frozenset(reads), times,
                             sibling.op if sibling is not None else ""))
    out.sort(key=lambda c: c.position)
    return out


def _family(graph, layouts, root):
    return [v for n in graph.nodes for v in n.outputs if layouts[v].root is root]


def _available(v: Value, roots, own, forward, layouts) -> bool:
    """``v`` can be read by a recomputed chain without recomputing it: a graph input, a value made
    outside the forward, or a member of another saved root (not one of ``own``)."""
    if v.producer is None or v.producer not in forward:
        return True
    r = layouts[v].root
    return r in roots and r not in own


def _chain(members, roots, own, forward, layouts):
    """(the nodes recomputing ``members``, the other saved roots they read) or None."""
    chain: list[Node] = []
    reads = set()
    seen = set()
    stack = [m.producer for m in members]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        if not recomputable(node):
            return None
        seen.add(node)
        chain.append(node)
        if sum(kind(n.op) != "view" for n in chain) > MAX_CHAIN:
            return None
        for v in node.inputs:
            if not _available(v, roots, own, forward, layouts):
                stack.append(v.producer)
            elif v.producer in forward:
                reads.add(layouts[v].root)
    return chain, reads


def sibling_reader(graph: Graph, chain, roots: set, start: int, layouts, position) -> Node | None:
    """The backward node whose kernel recomputes ``roots`` (their ``chain`` copied before it), or None:
    the chain is pointwise ops and views only, the roots' first backward reader is no pointwise op
    (whose kernel would recompute the chain itself), and within SIBLING_WINDOW nodes after it a
    pointwise node (not one a GEMM's epilogue may take, ``_epilogue_bound``) reads a value the chain
    reads from outside itself (a leaf) without depending on any backward reader of the roots (those
    are emitted after it: the module docstring)."""
    if any(kind(n.op) not in ("pointwise", "view") for n in chain):
        return None
    inside = set(chain)
    leaves = {v for n in chain for v in n.inputs if v.producer not in inside and v.producer is not None}
    if not leaves:
        return None
    first = None
    tainted: set = set()
    for node in graph.nodes[start:]:
        reads_root = any(layouts[v].root in roots for v in node.inputs)
        if first is None:
            if not reads_root:
                continue
            if kind(node.op) == "pointwise":
                return None           # the first reader's own kernel recomputes the chain (no copy written)
            first = position[node]
        if position[node] - first > SIBLING_WINDOW:
            return None
        if reads_root or any(v.producer in tainted for v in node.inputs):
            tainted.add(node)
            continue
        if kind(node.op) == "pointwise" and leaves.intersection(node.inputs) and not _epilogue_bound(node):
            return node
    return None


def _epilogue_bound(node: Node) -> bool:
    """An activation's backward reading a matmul's result (through views): the fusion pass may apply it
    in that GEMM's epilogue (``fusion.activation_grad_pays``: GELU's backward of an MLP's dgrad GEMM),
    where no copy can join it."""
    if not node.op.endswith("_backward"):
        return False
    for v in node.inputs:
        while v.producer is not None and kind(v.producer.op) == "view":
            v = v.producer.inputs[0]
        if v.producer is not None and v.producer.op == "matmul":
            return True
    return False


def pick(cands: list[Candidate], chosen: list[Candidate], memory, env: dict, excess: int) -> list[Candidate]:
    """The next batch (rule in the module docstring): among the candidates not chosen whose root
    (``env[root]`` in the planned graph) is live at the busiest position, best bytes per
    microsecond first, the shortest prefix covering ``excess`` bytes."""
    from nova.passes.peak import busiest_position
    t = busiest_position(memory)
    taken = {id(c) for c in chosen}
    recomputed = {r for c in chosen for r in c.roots}
    pinned = {r for c in chosen for r in c.reads}
    live = []
    for c in cands:
        if id(c) in taken:
            continue
        plans = [memory.values.get(env.get(r)) for r in c.roots]
        if any(p is not None and p.kind == "arena" and p.live is not None and p.live[0] < t <= p.live[1]
               for p in plans):
            live.append(c)
    live.sort(key=lambda c: (-c.bytes_per_us, c.position))
    batch, freed = [], 0
    for c in live:
        if pinned.intersection(c.roots) or c.reads & recomputed:
            continue
        batch.append(c)
        recomputed.update(c.roots)
        pinned |= c.reads
        freed += c.nbytes
        if freed >= excess:
            break
    return batch


def recompute_time_us(chosen: list[Candidate]) -> float:
    """The predicted time of the recomputed nodes (a node shared by two chains counted once)."""
    times = {n: t for c in chosen for n, t in zip(c.chain, c.node_us)}
    return sum(times.values())


def classes(cands: list[Candidate], chosen: list[Candidate], fits: bool):
    """The candidates grouped by tensor class: recomputed or kept, with why."""
    from nova.passes.peak import TensorClass, format_size
    taken = {id(c) for c in chosen}
    out: dict[tuple[str, str], TensorClass] = {}
    for c in cands:
        decision = "recomputed" if id(c) in taken else "kept"
        tc = out.setdefault((c.name, decision), TensorClass(c.name, decision))
        tc.count += 1
        tc.nbytes += c.nbytes
        tc.recompute_us += c.recompute_us
    for tc in out.values():
        ratio = tc.nbytes / max(tc.recompute_us, 1e-3)
        rate = f"{format_size(ratio)} per us of recompute"
        if tc.decision == "recomputed":
            tc.why = f"live at the peak; {rate}"
        else:
            tc.why = f"{rate}; the plan fits without it" if fits else f"{rate}; not live at the peak"
    return sorted(out.values(), key=lambda tc: (tc.decision != "recomputed", -tc.nbytes))


def rematerialize(graph: Graph, roots) -> tuple[Graph, dict]:
    """``graph`` with the saved ``roots`` recomputed in the backward (rule in the module
    docstring); returns the new graph and the map from ``graph``'s values to the new graph's."""
    start = backward_start(graph)
    roots = set(roots)
    if start is None or not roots:
        rw = Rewriter(graph)
        for node in graph.nodes:
            rw.copy(node)
        return rw.finish(), rw.env
    layouts = layout_analysis.analyze(graph)
    users = graph.users()
    position = {n: i for i, n in enumerate(graph.nodes)}
    forward = set(graph.nodes[:start])
    saved = set()
    for node in graph.nodes[:start]:
        for v in node.outputs:
            if any(position[u] >= start for u in users.get(v, ())):
                saved.add(layouts[v].root)
    copies: dict[Value, Value] = {}
    rw = Rewriter(graph)

    def must_copy(v: Value) -> bool:
        if v.producer is None or v.producer not in forward:
            return False
        r = layouts[v].root
        return r in roots or r not in saved

    def chain_of(root: Value) -> list[Node]:
        nodes, stack = [], [m.producer for m in _family(graph, layouts, root) if m.producer in forward]
        while stack:
            n = stack.pop()
            if n not in nodes:
                nodes.append(n)
                stack += [v.producer for v in n.inputs if must_copy(v)]
        return nodes

    # roots recomputed in a sibling's kernel: emitted at the sibling
    at_sibling: dict[Node, list[Value]] = {}
    waiting: set = set()              # roots whose sibling is still ahead
    for r in sorted(roots, key=lambda r: position[r.producer]):
        sib = sibling_reader(graph, chain_of(r), {r}, start, layouts, position)
        if sib is not None:
            at_sibling.setdefault(sib, []).append(r)      # its views follow with their readers: a view
            waiting.add(r)                                # read at once would close the copy's kernel
    deferred: list[Node] = []
    deferred_set: set = set()

    def read(v: Value) -> Value:
        if not must_copy(v):
            return rw.get(v)
        if v not in copies:
            node = v.producer
            inputs = [read(u) for u in node.inputs]
            outs = rw.emit(node.op, inputs, node.attrs, f"{node.origin} {RECOMPUTED_TAG}".strip())
            for old, new in zip(node.outputs, outs):
                copies[old] = new
        return copies[v]

    def emit(node: Node) -> None:
        outs = rw.emit(node.op, [read(v) for v in node.inputs], node.attrs, node.origin)
        for old, new in zip(node.outputs, outs):
            rw.env[old] = new

    def flush() -> None:
        """The sibling's copies (of the roots still waiting) and the deferred readers, in order."""
        for members in at_sibling.values():
            for v in members:
                if layouts[v].root in waiting:
                    read(v)
        waiting.clear()
        for n in deferred:
            emit(n)
        deferred.clear()
        deferred_set.clear()

    for i, node in enumerate(graph.nodes):
        if i < start:
            rw.copy(node)
            continue
        for v in at_sibling.get(node, ()):
            if layouts[v].root in waiting:
                read(v)
        waiting.difference_update(layouts[v].root for v in at_sibling.get(node, ()))
        after_deferred = bool(deferred_set) and any(v.producer in deferred_set for v in node.inputs)
        if waiting and (after_deferred or any(layouts[v].root in waiting for v in node.inputs)):
            deferred.append(node)            # a reader of a root whose copy comes with its sibling, or of its result
            deferred_set.add(node)
            continue
        if after_deferred:
            flush()                          # the first node after the sibling that needs the deferred results
        emit(node)
    flush()
    return rw.finish(), rw.env
