"""The executor's reading of the planner's result (``nova.passes`` → ``Planned``), in one place.

The executor consumes a duck-typed ``Planned``; this module turns it into the executor's own
``PlanView`` so that an integration with the real ``nova.passes`` changes this file only.
What is read (exact attribute names; alternatives in brackets are accepted too):

    planned.graph                    nova.ir.Graph, the optimized graph the groups refer to
    planned.groups                   list, in execution order, of groups with
        .kind                        "gemm" | "pointwise" | "reduction" | "composite" | "view" | "opaque"
        .nodes                       the group's nodes (nova.ir.Node), in program order
        .reason                      optional text (shown by describe())
        .nova_kernel [.has_nova_kernel, .has_kernel, .nova]   optional bool: False = no Nova kernel for this gemm
                                     group (run it on torch.matmul); absent = try Nova
        (a GEMM epilogue recorded in the group is not read: the executor fuses bias/activation
        nodes that follow a matmul in the same group itself, when the intermediates are dead)
    planned.order                    not read (groups are already in execution order)
    planned.memory                   the MemoryPlan:
        .arena_bytes                 size of the one arena
        .peak_bytes                  optional, the plan's peak of live bytes (default arena_bytes)
        .values [.slots, .placements, .entries]   Mapping Value -> placement, or a method
                                     .placement(value) [.lookup, .get] returning one (or None)
        .donations [.donated]        optional: Mapping output index -> input index, or
                                     Mapping Value -> input index, or an iterable of output
                                     indices / output Values (the input is Output.updates)
    placement:
        .offset                      byte offset in the arena (None when not in the arena)
        .nbytes                      bytes reserved (>= the value's size)
        .alias_of [.alias, .base]    the value whose storage this (view) value aliases
        .external                    bool: a graph input the user owns (not in the arena)
        .strides                     optional element strides of the value in its slot
        .donated_to [.donate_to, .donation]   optional: the graph input this output is written into

Values the plan does not mention: graph inputs are external; any other value gets a private
scratch buffer (counted in ``Program.stats["scratch_bytes"]``) so that a plan that drops a dead
result (a layer norm's unused mean) still runs.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class ExecutorError(RuntimeError):
    """A plan the executor cannot run, or a run it refuses (one line naming what and where)."""


@dataclass
class Placement:
    """Where one value lives, as the executor understands it."""
    kind: str                            # "arena" | "alias" | "external" | "none"
    offset: int | None = None
    nbytes: int = 0
    base: object = None                  # alias: the planned base Value
    strides: tuple[int, ...] | None = None
    donated_to: int | None = None        # the graph input an output is written into


@dataclass
class GroupView:
    index: int
    kind: str
    nodes: list
    reason: str = ""
    nova_kernel: bool = True


@dataclass
class PlanView:
    graph: object
    groups: list[GroupView]
    placements: dict                     # Value -> Placement (only values the plan mentions)
    arena_bytes: int
    peak_bytes: int
    donations: dict[int, int] = field(default_factory=dict)    # output index -> input index

    def placement(self, value) -> Placement:
        return self.placements.get(value, Placement("none"))


def _first_attr(obj, names, default=None):
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


def _raw_placement(memory, value):
    for name in ("values", "slots", "placements", "entries"):
        table = getattr(memory, name, None)
        if isinstance(table, Mapping):
            return table.get(value)
    for name in ("placement", "lookup", "get"):
        fn = getattr(memory, name, None)
        if callable(fn):
            try:
                return fn(value)
            except (KeyError, LookupError):
                return None
    if isinstance(memory, Mapping):
        return memory.get(value)
    return None


def _placement(raw) -> Placement:
    if raw is None:
        return Placement("none")
    offset = _first_attr(raw, ("offset",))
    nbytes = int(_first_attr(raw, ("nbytes", "size"), 0) or 0)
    base = _first_attr(raw, ("alias_of", "alias", "base"))
    strides = _first_attr(raw, ("strides",))
    donated = _first_attr(raw, ("donated_to", "donate_to", "donation"))
    donated = donated if isinstance(donated, int) and not isinstance(donated, bool) else None
    if base is not None:
        kind = "alias"
    elif _first_attr(raw, ("external",), False):
        kind = "external"
    elif offset is not None:
        kind = "arena"
    else:
        kind = "none"
    return Placement(kind, None if offset is None else int(offset), nbytes, base,
                     tuple(strides) if strides is not None else None, donated)


def _donations(memory, graph, placements) -> dict[int, int]:
    """output index -> input index, from ``memory.donations`` (any of the accepted forms) and
    from placements that name the input they are written into."""
    out: dict[int, int] = {}
    index_of = {}
    for k, o in enumerate(graph.outputs):
        index_of.setdefault(o.value, []).append(k)
    raw = _first_attr(memory, ("donations", "donated"))
    if raw is not None:
        items = raw.items() if isinstance(raw, Mapping) else ((x, None) for x in raw)
        for key, target in items:
            ks = [key] if isinstance(key, int) and not isinstance(key, bool) else index_of.get(key, [])
            for k in ks:
                if not 0 <= k < len(graph.outputs):
                    raise ExecutorError(f"memory plan donates output {k}, but graph {graph.name} has "
                                        f"{len(graph.outputs)} outputs")
                target_i = target if target is not None else graph.outputs[k].updates
                if target_i is not None:
                    out[k] = int(target_i)
    for value, p in placements.items():
        if p.donated_to is not None:
            for k in index_of.get(value, []):
                out.setdefault(k, p.donated_to)
    for k, i in out.items():
        o = graph.outputs[k]
        if o.updates is not None and o.updates != i:
            raise ExecutorError(f"memory plan donates output {o.name!r} into input {i}, "
                                f"but it updates input {o.updates}")
        if not 0 <= i < len(graph.inputs) or graph.inputs[i].value.type != o.value.type:
            raise ExecutorError(f"memory plan donates output {o.name!r} ({o.value.type}) into input {i}, "
                                f"which does not exist or has another type")
    return out


def read_plan(planned) -> PlanView:
    """The executor's view of ``planned`` (see the module docstring for what is read)."""
    graph = getattr(planned, "graph", None)
    memory = getattr(planned, "memory", None)
    groups = getattr(planned, "groups", None)
    if graph is None or memory is None or groups is None:
        raise ExecutorError("build() needs a planned graph with .graph, .groups and .memory "
                            f"(got {type(planned).__name__})")
    values = [i.value for i in graph.inputs] + [v for n in graph.nodes for v in n.outputs]
    placements = {}
    for v in values:
        p = _placement(_raw_placement(memory, v))
        if p.kind != "none":
            placements[v] = p
    arena_bytes = int(_first_attr(memory, ("arena_bytes",), 0) or 0)
    peak_bytes = int(_first_attr(memory, ("peak_bytes",), arena_bytes) or arena_bytes)
    views = []
    for index, g in enumerate(groups):
        nova = _first_attr(g, ("nova_kernel", "has_nova_kernel", "has_kernel", "nova"), True)
        views.append(GroupView(index, str(getattr(g, "kind", "opaque")), list(getattr(g, "nodes", ())),
                               str(getattr(g, "reason", "") or ""), nova is not False))
    return PlanView(graph, views, placements, arena_bytes, peak_bytes, _donations(memory, graph, placements))
