"""Host offload: activations the forward saves for the backward, copied to host memory while the
forward runs and back while the backward runs, on the copy engines beside the kernels -- chosen
where the copies are predicted to hide behind the step's kernels.

**Why.**  Rematerialization (``remat.py``) pays for freed bytes with kernel time, cheapest per byte
first, so a GEMM's or attention's output costs the most to free.  A copy engine moves those bytes
over the host link (PCIe, NVLink-C2C) while the SMs compute: where the copy fits in the time the
step spends between the value's writer and its first backward reader, the bytes leave the device
for the kernels' slowdown while the copies are on the link.  So under a budget the planner offloads
what is dearer to recompute than to copy, while the link has time, and recomputes the rest.

**The timeline** (``timeline``): each group of the current plan in its order, its time what the
step-time model ``explain`` reports predicts for it (``nova.compiler.explain.group_times_us``,
handed in by the caller as ``group_times``: the passes do not price kernels themselves).  A copy
of ``n`` bytes takes ``copy_us = LINK_LATENCY_US + n / host_link_bw`` (the target's figure, per
direction; a target without one offloads nothing).

**The copies** (``simulate``): one copy stream per direction, each first in, first out.  An
offload's copy starts when its value's writer ends (or when the copy before it ends: as soon as
possible, in writer order); the value's device bytes are free from the *join*: the first group that
ends after the copy is predicted done (the ``offload`` node runs after it).  A reload's copy starts
after the *issue* group: as late as possible, latest reader first, the latest group whose end
leaves ``copy_us`` before both its first backward reader starts and the next reload copy starts;
the bytes are taken from there.  A value whose copies do not both fit, or whose join is not before
the plan's busiest position and its issue at or after it, is not offloaded: on the timeline of the
plan the choice is made on, no kernel waits for a copy.  Rematerialization then re-plans the
backward (a recomputed norm may read a reloaded residual sooner): ``check`` prices the copies on
the final plan, their waits included, and ``budget`` keeps the plan without offloads where that
is cheaper.

**The cost** (``copy_us_per_byte``, ``cost_us``): while a copy is on the link, the kernels beside it
run a fraction slower (the target's ``host_copy_slowdown``, 0.03, measured at 0.023-0.053 for a
training step's kernels on an H100); each offloaded byte crosses the link twice (out and back), so it costs
``2 x host_copy_slowdown / host_link_bw``.  The copies' own DRAM traffic (~1.5% of the bandwidth at
50 GB/s) is the smaller part of that; the measured figure holds all of it.

**The rule** (``choose``): candidates are the saved arena roots of at least ``MIN_BYTES`` (the
value itself and views of it; no other result stored in its bytes; written by a launch of its own),
live at the busiest position, whose forward readers are all before it and backward readers after
it, and whose recomputation costs more per byte than the copies (``remat.candidates``' closed
form).  Dearest to recompute first (a value nothing recomputes, attention's output say, first of
all; ties: the earliest writer, whose window is longest), each kept when the copies of every value
taken so far still fit, until the bytes cover the excess over the budget.  A closed-form greedy,
like ``remat.pick``: at most the excess plus one value above it; ``budget.fit_budget`` re-plans
once after it and leaves the rest to rematerialization.

**The rewrite** (``offload``, graph -> graph, the input left unchanged): the graph's nodes in the
plan's order; after the join group's last node ``h = offload(x, a)`` (``a``: a result of the join
group, which orders the copy's end there), after the issue group's last node ``y = reload(h, b)``;
every reader of ``x`` (or of a view of it) after the issue group reads ``y`` (views re-emitted on
it).  The scheduler runs transfer groups as soon as they are ready (``schedule.py``), so the re-plan
keeps them where they were placed; the memory plan puts ``h`` in host memory (``MemoryPlan.host_bytes``)
and ``x``'s bytes die at the offload, ``y``'s are taken at the reload.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from nova.ir.graph import Graph, Node, Value
from nova.ir.ops import kind
from nova.passes import layout as layout_analysis
from nova.passes.rewrite import Rewriter

LINK_LATENCY_US = 10.0    # [EST] a copy's fixed cost: cudaMemcpyAsync issue and the DMA's start, a few us
MIN_BYTES = 1 << 20       # a value worth a copy: the bytes move in ~4x the copy's fixed cost on a 25-50 GB/s link
OFFLOADED_TAG = "[offloaded]"
RELOADED_TAG = "[reloaded]"


@dataclass(frozen=True)
class Offload:
    """One value copied to host memory and back, where the copies run (group indices of the plan
    the decision was made on) and what it frees."""
    root: Value               # the saved value (the plan's graph)
    nbytes: int
    copy_us: float            # one direction
    writer: int               # the group that writes it (its copy to host starts after it)
    join: int                 # the offload runs after this group: the copy to host is done by its end
    issue: int                # the reload's copy starts after this group
    reader: int               # the first group of the backward that reads it
    name: str                 # tensor class (``peak.tensor_class``)
    recompute_us: float | None = None   # remat's closed form for it (None: not recomputable)
    stall_us: float = 0.0     # predicted wait of a kernel for the copies (0 for every value ``choose`` takes)


def copy_us(nbytes: int, gpu) -> float:
    """``LINK_LATENCY_US + nbytes / host_link_bw``: one copy over the host link."""
    return LINK_LATENCY_US + nbytes / gpu.host_link_bw * 1e6


def can_offload(gpu) -> bool:
    """A target with a host link and the kernels' slowdown beside its copies (``copy_us_per_byte``)."""
    return gpu.has("host_link_bw") and gpu.has("host_copy_slowdown")


# ------------------------------------------------------------------ the timeline
def timeline(times: list[float]) -> tuple[list[float], list[float]]:
    """(start, end) times in us of each group, one after another, from each group's predicted
    time (``group_times(planned)``; 0 for one that launches nothing)."""
    starts, ends, t = [], [], 0.0
    for us in times:
        starts.append(t)
        t += us
        ends.append(t)
    return starts, ends


def group_index(planned) -> dict[Node, int]:
    """Each node of ``planned`` -> the index of its group."""
    return {n: i for i, g in enumerate(planned.groups) for n in g.nodes}


# ------------------------------------------------------------------ candidates
@dataclass(frozen=True)
class Candidate:
    root: Value
    nbytes: int
    writer: int               # group index
    last_forward: int         # the last group before the backward that reads it (or the writer)
    reader: int               # the first backward group that reads it
    name: str
    recompute_us: float | None


def candidates(planned, gpu) -> list[Candidate]:
    """The saved arena roots that can be offloaded (module docstring), in writer order."""
    from nova.passes.peak import tensor_class
    from nova.passes.remat import backward_start, candidates as remat_candidates
    graph, memory = planned.graph, planned.memory
    start = backward_start(graph)
    if start is None:
        return []
    backward = set(graph.nodes[start:])
    layouts = layout_analysis.analyze(graph, planned.storage)
    users = graph.users()
    outputs = set(graph.output_values())
    group_of = group_index(planned)
    sharing: dict[Value, list[Value]] = {}          # root -> every value stored in its bytes
    for n in graph.nodes:
        for v in n.outputs:
            sharing.setdefault(layouts[v].root, []).append(v)
    recompute = {}
    for c in remat_candidates(graph, gpu):
        for r in c.roots:
            recompute[r] = c.recompute_us * r.type.nbytes / max(c.nbytes, 1)
    out = []
    for node in graph.nodes[:start]:
        if node.op in ("offload", "reload") or kind(node.op) == "view":
            continue
        for x in node.outputs:
            p = memory.values.get(x)
            if p is None or p.kind != "arena" or x in outputs or layouts[x].root is not x or x.type.nbytes < MIN_BYTES:
                continue
            members = _view_family(x, users)
            if any(m in outputs for m in members) or not set(sharing.get(x, ())) <= set(members) or \
                    planned.groups[group_of[node]].kernel == "none":
                continue                     # a value placed in its bytes, or written by no launch of its own
            readers = [u for m in members for u in users.get(m, ()) if kind(u.op) != "view"]
            back = [group_of[u] for u in readers if u in backward]
            if not back:
                continue
            fwd = [group_of[u] for u in readers if u not in backward]
            out.append(Candidate(x, x.type.nbytes, group_of[node], max(fwd, default=group_of[node]), min(back),
                                 tensor_class(x), recompute.get(x)))
    out.sort(key=lambda c: c.writer)
    return out


def _view_family(x: Value, users) -> list[Value]:
    """``x`` and the views of it (view ops over view ops)."""
    family, stack = [x], [x]
    while stack:
        for u in users.get(stack.pop(), ()):
            if kind(u.op) == "view":
                family.append(u.outputs[0])
                stack.append(u.outputs[0])
    return family


# ------------------------------------------------------------------ the copies
def simulate(chosen: list[Candidate], starts, ends, gpu, peak_group: int | None = None) -> list[Offload] | None:
    """Where the copies of ``chosen`` run on the two copy streams (module docstring): one
    ``Offload`` each, or None when any does not fit (its join not before ``peak_group`` or its
    issue not at or after it, when given)."""
    n = len(starts)
    placed: dict[int, tuple] = {}
    free = 0.0
    for k, c in sorted(enumerate(chosen), key=lambda kc: kc[1].writer):
        t = copy_us(c.nbytes, gpu)
        done = max(ends[c.writer], free) + t
        free = done
        join = next((g for g in range(max(c.writer, c.last_forward), n) if ends[g] >= done), None)
        if join is None or join >= c.reader:
            return None
        placed[k] = (t, join)
    out: list[Offload | None] = [None] * len(chosen)
    latest = math.inf                         # the reload copies, latest first: each ends before its reader
    for k, c in sorted(enumerate(chosen), key=lambda kc: -kc[1].reader):    # and before the next one starts
        t, join = placed[k]
        due = min(starts[c.reader], latest)
        issue = next((g for g in range(c.reader - 1, join - 1, -1) if ends[g] + t <= due), None)
        if issue is None:
            return None
        latest = ends[issue]
        if peak_group is not None and not join < peak_group <= issue:
            return None
        out[k] = Offload(c.root, c.nbytes, t, c.writer, join, issue, c.reader, c.name, c.recompute_us)
    return out


def copy_us_per_byte(gpu) -> float:
    """The copies' cost per offloaded byte (module docstring): ``2 x host_copy_slowdown / host_link_bw``."""
    return 2.0 * gpu.host_copy_slowdown / gpu.host_link_bw * 1e6


def choose(planned, gpu, group_times, excess: int) -> list[Offload]:
    """The values to offload (rule in the module docstring) so the plan's peak drops by ``excess``
    bytes; ``group_times``: the step-time model (``timeline``)."""
    from nova.passes.peak import busiest_position
    memory = planned.memory
    if not can_offload(gpu) or excess <= 0 or not memory.order:
        return []
    t = busiest_position(memory)
    peak_group = group_index(planned)[memory.order[min(t, len(memory.order) - 1)]]
    times = group_times(planned)
    starts, ends = timeline(times)
    cost = copy_us_per_byte(gpu)
    live = [c for c in candidates(planned, gpu)
            if c.last_forward < peak_group < c.reader and _live(memory, c.root, t)
            and (c.recompute_us is None or c.recompute_us / c.nbytes > cost)]
    live.sort(key=lambda c: (-(math.inf if c.recompute_us is None else c.recompute_us / c.nbytes), c.writer))
    chosen: list[Candidate] = []
    plan: list[Offload] = []
    freed = 0
    for c in live:
        trial = simulate(chosen + [c], starts, ends, gpu, peak_group)
        if trial is None:
            continue
        chosen.append(c)
        plan = trial
        freed += c.nbytes
        if freed >= excess:
            break
    return plan


def check(planned, gpu, times: list[float]) -> list[Offload]:
    """The offloads in ``planned`` (its transfer nodes) with the copies' predicted waits on its own
    timeline (``times``: ``group_times(planned)``): an offload's copy must end before its group
    starts, a reload's before its first reader."""
    if not can_offload(gpu):
        return []
    starts, ends = timeline(times)
    group_at = group_index(planned)
    users = planned.graph.users()
    pairs = []
    for off, rel in transfers(planned):
        x, y = off.inputs[0], rel.outputs[0]
        readers = [group_at[u] for m in _view_family(y, users) for u in users.get(m, ()) if kind(u.op) != "view"]
        pairs.append((x, group_at[x.producer], group_at[off], group_at[rel], min(readers, default=len(starts) - 1)))
    waits = {}
    free = 0.0
    for x, writer, join, issue, reader in sorted(pairs, key=lambda p: p[1]):
        done = max(ends[writer], free) + copy_us(x.type.nbytes, gpu)
        free = done
        waits[x] = max(0.0, done - starts[join])
    out = []
    free = 0.0
    from nova.passes.peak import tensor_class
    for x, writer, join, issue, reader in sorted(pairs, key=lambda p: p[3]):
        t = copy_us(x.type.nbytes, gpu)
        free = max(ends[issue], free) + t
        stall = waits[x] + max(0.0, free - starts[reader])
        out.append(Offload(x, x.type.nbytes, t, writer, join, issue, reader, tensor_class(x), None, stall))
    return out


def _live(memory, root, t) -> bool:
    from nova.passes.peak import live_at
    p = memory.values.get(root)
    return p is not None and live_at(memory, p, t)


# ------------------------------------------------------------------ the rewrite
def offload(planned, chosen: list[Offload]) -> tuple[Graph, dict]:
    """``planned.graph`` with ``chosen`` copied to host and back (rule in the module docstring), its
    nodes in the plan's order; returns the new graph and the map from old values to new ones."""
    graph = planned.graph
    rw = Rewriter(graph)
    if not chosen:
        for node in graph.nodes:
            rw.copy(node)
        return rw.finish(), rw.env
    users = graph.users()
    by_join: dict[int, list[Offload]] = {}
    by_issue: dict[int, list[Offload]] = {}
    for o in chosen:
        by_join.setdefault(o.join, []).append(o)
        by_issue.setdefault(o.issue, []).append(o)
    host: dict[Value, Value] = {}
    reloaded: dict[Value, Value] = {}          # old value (the root or a view of it) -> its reloaded copy
    family = {}
    for o in chosen:
        for m in _view_family(o.root, users):
            family[m] = o.root

    def read(v: Value) -> Value:
        root = family.get(v)
        if root is None or root not in reloaded:
            return rw.get(v)
        if v not in reloaded:                  # a view of the reloaded value, emitted on it
            node = v.producer
            outs = rw.emit(node.op, [read(u) for u in node.inputs], node.attrs, node.origin)
            for old, new in zip(node.outputs, outs):
                reloaded[old] = new
        return reloaded[v]

    for index, group in enumerate(planned.groups):
        for node in group.nodes:
            if any(family.get(v) in reloaded for v in node.inputs) and kind(node.op) != "view" or \
                    node.op in ("offload", "reload"):
                outs = rw.emit(node.op, [read(v) for v in node.inputs], node.attrs, node.origin)
                for old, new in zip(node.outputs, outs):
                    rw.env[old] = new
            else:
                rw.copy(node)
        anchor = rw.get(group.outputs[0] if group.outputs else group.nodes[-1].outputs[0])
        for o in by_join.get(index, ()):
            (h,) = rw.emit("offload", [rw.get(o.root), anchor], {}, _tagged(o.root.producer, OFFLOADED_TAG))
            host[o.root] = h
        for o in by_issue.get(index, ()):
            (y,) = rw.emit("reload", [host[o.root], anchor], {}, _tagged(o.root.producer, RELOADED_TAG))
            reloaded[o.root] = y
    return rw.finish(), rw.env


def _tagged(node: Node, tag: str) -> str:
    return f"{node.origin} {tag}".strip()


def transfers(planned) -> list[tuple[Node, Node]]:
    """The (offload, reload) node pairs of a plan's graph."""
    users = planned.graph.users()
    return [(n, u) for n in planned.graph.nodes if n.op == "offload" for u in users.get(n.outputs[0], ())
            if u.op == "reload"]


def cost_us(planned, gpu, placed: list[Offload]) -> float:
    """The offloads' predicted cost in ``planned``: the kernels' waits for the copies (``placed``,
    ``check``'s on the plan's own timeline) and the kernels' slowdown beside them (``copy_us_per_byte``)."""
    if not planned.memory.host_bytes:
        return 0.0
    return sum(o.stall_us for o in placed) + planned.memory.host_bytes * copy_us_per_byte(gpu)


def priced(planned, gpu, group_times) -> tuple[list[Offload], float]:
    """The offloads in ``planned`` placed on its own timeline (``check``, ``group_times(planned)``) and
    their predicted cost (``cost_us``)."""
    times = group_times(planned)
    placed = check(planned, gpu, times)
    return placed, cost_us(planned, gpu, placed)


def classes(placed: list[Offload], chosen: list[Offload] = ()):
    """The offloaded values grouped by tensor class, with why (``budget.BudgetReport.classes``);
    ``chosen``: the decisions (``choose``), for what recomputing them would have cost."""
    from nova.passes.peak import TensorClass, format_size
    recompute: dict[str, list] = {}
    for o in chosen:
        recompute.setdefault(o.name, []).append(o)
    out: dict[str, TensorClass] = {}
    for o in placed:
        tc = out.setdefault(o.name, TensorClass(o.name, "offloaded"))
        tc.count += 1
        tc.nbytes += o.nbytes
        tc.recompute_us += o.stall_us
    for tc in out.values():
        link = sum(o.copy_us for o in placed if o.name == tc.name)
        waits = f"{tc.recompute_us:.0f} us of kernels waiting on them" if tc.recompute_us >= 0.5 else \
            "hidden behind the kernels"
        priced = [o for o in recompute.get(tc.name, ()) if o.recompute_us is not None]
        dear = "not recomputable" if not priced else \
            f"recomputing costs {sum(o.recompute_us for o in priced):.0f} us"
        tc.why = (f"live at the peak, {dear}; copied to host and back ({2 * link / 1000:.2f} ms of copy "
                  f"engine time), {waits}")
    return sorted(out.values(), key=lambda tc: -tc.nbytes)
