"""Scheduling: the order the groups run in.

Rule: a greedy list scheduler over the group DAG.  Among the groups whose producers have all run,
take the one with the best memory balance, bytes it frees (arena buffers it is the last reader of)
minus bytes it allocates (its results that need a new buffer; an output that updates an input is
expected to be donated and counts zero); ties go to the earlier group in program order.  The
greedy order and the program order are both planned (``memory.plan_memory``) and the one with the
smaller arena wins (program order on a tie), so scheduling never makes the peak worse than the order
the frontend captured.  Groups stay contiguous (a group is one launch); the result is
deterministic: every choice is broken by program position.

Recomputed groups (every node a rematerialized copy, ``remat.RECOMPUTED_TAG``) run just in time: such
a group is ready only when it is *demanded*, i.e. one of its successors could run once the
recomputed groups before it have (all its other predecessors have run), directly or through a
chain of recomputed groups; else the greedy would recompute them as soon as the forward made
their inputs, which is keeping them.

Transfer groups (``offload``/``reload``, ``offload.py``) run as soon as they are ready: their
copies run on the copy engines beside the kernels, and the plan placed them by the values they
run after (an offload completes where the copy is predicted done; a reload starts where its copy
is predicted to end before its first reader), so running them any later only holds bytes longer.
"""
from __future__ import annotations

from nova.ir.graph import Graph
from nova.passes import layout as layout_analysis
from nova.passes.fusion import Group
from nova.passes.remat import RECOMPUTED_TAG


def recomputed(group: Group) -> bool:
    """Every node of ``group`` is a rematerialized copy."""
    return all(n.origin.endswith(RECOMPUTED_TAG) for n in group.nodes)


def group_dag(groups: list[Group]) -> tuple[list[list[int]], list[list[int]]]:
    """(predecessors, successors) of each group, by index, in first-seen order."""
    owner = {n: i for i, g in enumerate(groups) for n in g.nodes}
    preds: list[list[int]] = [[] for _ in groups]
    succs: list[list[int]] = [[] for _ in groups]
    for i, g in enumerate(groups):
        for v in g.inputs:
            j = owner.get(v.producer) if v.producer is not None else None
            if j is not None and j != i and j not in preds[i]:
                preds[i].append(j)
                succs[j].append(i)
    return preds, succs


def is_topological(groups: list[Group]) -> bool:
    seen = set()
    for g in groups:
        for v in g.inputs:
            if v.producer is not None and v.producer not in seen:
                return False
        seen.update(g.nodes)
    return True


def greedy_order(graph: Graph, groups: list[Group], layouts=None) -> list[Group]:
    """The memory-greedy topological order of ``groups`` (see the module docstring)."""
    layouts = layouts if layouts is not None else layout_analysis.analyze(graph)
    preds, succs = group_dag(groups)
    out_roots = {layouts[v].root for v in graph.output_values()}
    updating = {o.value for o in graph.outputs if o.updates is not None}

    readers: dict = {}                 # arena root -> groups that read it (or an alias of it)
    for i, g in enumerate(groups):
        if g.kind == "view" and g.kernel == "none":
            continue
        for v in g.inputs:
            root = layouts[v].root
            if root.producer is not None:
                readers.setdefault(root, set()).add(i)
    remaining = {root: len(r) for root, r in readers.items()}
    reads_of = [list(dict.fromkeys(layouts[v].root for v in g.inputs if layouts[v].root in readers))
                if not (g.kind == "view" and g.kernel == "none") else [] for g in groups]
    allocates = [sum(v.type.nbytes for v in g.outputs if layouts[v].root is v and v not in updating)
                 for g in groups]

    def balance(i: int) -> int:
        freed = sum(r.type.nbytes for r in reads_of[i] if remaining[r] == 1 and r not in out_roots)
        return freed - allocates[i]

    lazy = [recomputed(g) for g in groups]
    eager = [g.kind == "transfer" for g in groups]
    done = [False] * len(groups)

    def demanded(i: int, seen: set) -> bool:
        for s in succs[i]:
            if s in seen:
                continue
            seen.add(s)
            if all(done[p] or lazy[p] for p in preds[s]) and (not lazy[s] or demanded(s, seen)):
                return True
        return False

    waiting = [len(p) for p in preds]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    order = []
    while ready:
        eligible = [i for i in ready if eager[i]]
        if not eligible:
            eligible = [i for i in ready if not lazy[i]] + [i for i in ready if lazy[i] and demanded(i, set())]
        best = max(eligible or ready, key=lambda i: (balance(i), -i))
        ready.remove(best)
        done[best] = True
        order.append(best)
        for r in reads_of[best]:
            remaining[r] -= 1
        for s in succs[best]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    if len(order) != len(groups):
        raise ValueError("the groups do not form a DAG")
    return [groups[i] for i in order]


def schedule(graph: Graph, groups: list[Group], layouts=None) -> list[Group]:
    """The execution order of ``groups``: the greedy order if its memory plan needs a smaller arena
    than program order's, else program order."""
    return schedule_with_plan(graph, groups, layouts)[0]


def schedule_with_plan(graph: Graph, groups: list[Group], layouts=None, storage=None, handoff=None):
    """``schedule`` and the memory plan of the order it picked (planned once per candidate);
    ``layouts`` as ``layout.analyze(graph, storage)`` gives them; ``handoff`` the program's
    boundary (``memory.Handoff``)."""
    from nova.passes.memory import plan_memory
    layouts = layouts if layouts is not None else layout_analysis.analyze(graph, storage)
    if not is_topological(groups):
        raise ValueError("fusion returned groups out of topological order")
    program_plan = plan_memory(graph, groups, layouts, storage, handoff)
    greedy = greedy_order(graph, groups, layouts)
    if [id(g) for g in greedy] == [id(g) for g in groups]:
        return list(groups), program_plan
    greedy_plan = plan_memory(graph, greedy, layouts, storage, handoff)
    if greedy_plan.arena_bytes < program_plan.arena_bytes:
        return greedy, greedy_plan
    return list(groups), program_plan
