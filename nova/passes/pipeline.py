"""The passes in order: ``pipeline(graph) -> Planned`` (the contract of docs/graph-compiler.md §3).

    verify -> dce -> cse -> canonicalize -> cse                 the optimized graph
           -> cross_entropy -> verify                           log_softmax+nll_loss (+backward) fused
           -> rms_norm -> verify                                RMSNorm's ops (+backward) recognised, fused
           -> grouped_query                                     attention reads K/V heads un-repeated, its
                                                                backward sums each group (``grouped_query.py``)
           -> recompute_pointwise                               saved pointwise intermediates recomputed
                                                                in the backward's kernels (``recompute.py``)
           -> name_activations                                  an activation written op by op becomes its
                                                                named op (``named_activations.py``)
           -> sink_slices                                       slices of pointwise results computed from
                                                                slices of the operands (``sink_slices.py``)
           -> place_casts                                       casts next to the rows ops that take them
                                                                (``rows_casts.py``)
           -> copy_concat_inputs                                a concat's unplaceable inputs copied by a kernel
           -> plan_storage                                      strided kernel results in their readers' layout
           -> fuse                                              groups (kernels)
           -> schedule                                          the order the groups run in
           -> plan_memory                                       arena offsets, aliases, donation
           [-> chunked_loss, remat, re-planned]                 the savings the default memory policy
                                                                prices at (near) nothing (``memory_policy.py``)
           [-> chunked_loss, offload, remat, re-planned]        under a memory budget (``budget.py``)

``format_plan`` renders the result for ``explain``: the pass statistics, each group with its kernel
and reason, and the memory plan with its breakdown.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nova.ir.graph import Graph, Node
from nova.ir.printer import value_names
from nova.ir.verify import verify
from nova.kernels.switch import KernelSwitch, kernel_switch
from nova.passes import layout as layout_analysis
from nova.passes.canonicalize import canonicalize
from nova.passes.cross_entropy import fuse_cross_entropy
from nova.passes.cse import cse
from nova.passes.dce import dce
from nova.passes.rms_norm import fuse_rms_norm
from nova.passes.fusion import Group, format_bytes, fuse
from nova.passes.grouped_query import read_kv_heads
from nova.passes.named_activations import name_activations
from nova.passes.recompute import recompute_pointwise
from nova.passes.rows_casts import place_casts
from nova.passes.sink_slices import sink_slices
from nova.passes.memory import Handoff, LaunchWorkspace, MemoryPlan, OutsideAllocation, place_workspaces, with_outside
from nova.passes.schedule import schedule_with_plan
from nova.passes.storage import StoragePlan, copy_concat_inputs, plan_storage


@dataclass
class Planned:
    graph: Graph                      # the optimized graph (groups and memory refer to its values)
    groups: list[Group]               # in execution order
    order: list[Node]                 # the groups' nodes, one after another: what runs, in order
    memory: MemoryPlan
    target: object = None             # as given to pipeline (the compiler configures GEMMs for it)
    stats: dict[str, int] = field(default_factory=dict)   # node count after each pass
    budget: object = None             # budget.BudgetReport when planned under a memory budget
    policy: object = None             # memory_policy.PolicyReport when planned under a memory policy
    recomputed: list = field(default_factory=list)   # recompute.Recomputed decisions
    storage: StoragePlan = field(default_factory=StoragePlan)   # where strided-writing kernels store results


def pipeline(graph: Graph, target=None, kernels: KernelSwitch | None = None, *,
             memory_budget=None, outside_arena=None, handoff: Handoff | None = None,
             memory_policy=None, host_offload=None) -> Planned:
    """Optimize, group, order and plan ``graph`` (which is left unchanged).  ``kernels``: which
    memory-bound and attention groups may run on Nova kernels (``KernelSwitch``; default: the
    ``NOVA_POINTWISE`` and ``NOVA_ATTENTION`` settings).  With a
    ``memory_policy`` (``memory_policy.MemoryPolicy``; None: the fastest plan) the plan takes the
    memory savings it prices at (near) nothing (``memory_policy.lean_plan``).  With a
    ``memory_budget`` (bytes or a size such as ``"12GiB"``) the plan is made to fit it
    (``budget.fit_budget``, from the policy's plan: chunked loss, rematerialization) or
    ``MemoryBudgetError`` says the smallest plan reached; ``host_offload``: the step-time model a
    budgeted plan times its host offloads with (``offload.py``; ``nova.compiler.explain.host_offload``),
    None: nothing offloaded.  ``outside_arena``: ``planned -> [OutsideAllocation | LaunchWorkspace]``,
    what the program of a plan allocates besides the values (the compiler's
    ``nova.compiler.outside_arena.account``): the allocations outside its arena, stated on every plan
    made (``memory.with_outside``), and its launches' workspaces, placed in the arena
    (``memory.place_workspaces``), so peaks and the budget include both.
    ``handoff``: how the program's outputs and inputs cross its boundary (``memory.Handoff``:
    outputs in a region of their own, donated inputs; default: neither)."""
    from nova.kernels.gemm.configure import memoized
    from nova.passes.budget import fit_budget, parse_size
    from nova.passes.memory_policy import lean_plan
    if kernels is None:
        kernels = kernel_switch()
    if memory_budget is not None:
        memory_budget = parse_size(memory_budget)
    verify(graph)
    stats = {"captured": len(graph.nodes)}
    g = dce(graph)
    stats["dce"] = len(g.nodes)
    g = cse(g)
    stats["cse"] = len(g.nodes)
    g = cse(canonicalize(g))
    stats["canonicalize"] = len(g.nodes)
    g = fuse_cross_entropy(g)
    stats["cross_entropy"] = len(g.nodes)
    g = fuse_rms_norm(g)
    stats["rms_norm"] = len(g.nodes)
    g = read_kv_heads(g)
    stats["grouped_query"] = len(g.nodes)
    g, recomputed = recompute_pointwise(g, target)
    stats["recompute"] = len(g.nodes)
    g = name_activations(g)
    stats["named_activations"] = len(g.nodes)
    g = sink_slices(g)
    stats["sink_slices"] = len(g.nodes)
    g = place_casts(g)
    stats["casts"] = len(g.nodes)
    g = copy_concat_inputs(g)
    stats["concat_copies"] = len(g.nodes)
    verify(g)
    planned = plan_graph(g, target, stats, kernels, outside_arena, handoff)
    planned.recomputed = recomputed
    if memory_budget is None and memory_policy is None:
        return planned

    def replanner(stage: str):
        def replan(rewritten: Graph) -> Planned:
            verify(rewritten)
            replanned = plan_graph(rewritten, target, {**stats, stage: len(rewritten.nodes)}, kernels, outside_arena,
                                    handoff)
            replanned.recomputed = recomputed
            return replanned
        return replan
    with memoized():                  # the trials plan, size and price the same GEMMs again and again
        default = planned
        if memory_policy is not None:
            default = lean_plan(planned, memory_policy, replanner("memory_policy"), target, host_offload)
        if memory_budget is None:
            return default
        return fit_budget(planned, memory_budget, target, replanner("memory_budget"), default, host_offload)


def plan_graph(g: Graph, target=None, stats: dict | None = None, kernels: KernelSwitch | None = None,
               outside_arena=None, handoff: Handoff | None = None) -> Planned:
    """Group, order and plan an optimized graph ``g`` (``kernels``, ``outside_arena``, ``handoff``: as for
    ``pipeline``)."""
    kernels = kernels if kernels is not None else kernel_switch()
    storage = plan_storage(g, outputs_as_stored=handoff is not None and handoff.outputs_apart)
    layouts = layout_analysis.analyze(g, storage)
    groups, memory = schedule_with_plan(g, fuse(g, layouts, kernels, storage, target), layouts, storage, handoff)
    planned = Planned(g, groups, [n for grp in groups for n in grp.nodes], memory, target,
                      dict(stats or {}), storage=storage)
    if outside_arena is not None:
        found = outside_arena(planned)
        with_outside(memory, [i for i in found if isinstance(i, OutsideAllocation)])
        place_workspaces(memory, groups, [i for i in found if isinstance(i, LaunchWorkspace)])
    return planned


def format_plan(planned: Planned, max_groups: int | None = None) -> str:
    """A readable account of the plan: passes, groups with reasons, memory."""
    g, mem = planned.graph, planned.memory
    names = value_names(g)
    launches = [grp for grp in planned.groups if grp.kernel != "none"]
    nova = sum(grp.kernel == "nova" for grp in planned.groups)
    lines = [f"plan {g.name}: {len(g.nodes)} nodes in {len(planned.groups)} groups, {len(launches)} launches "
             f"({nova} on Nova kernels, {len(launches) - nova} on ATen), "
             f"{len(planned.groups) - len(launches)} free views"]
    if planned.stats:
        lines.append("passes: " + " -> ".join(f"{k} {v}" for k, v in planned.stats.items()) + " nodes")
    for decision in planned.recomputed:
        lines.append(f"recomputed: {decision.describe()}")
    lines.append("groups (execution order):")
    shown = planned.groups if max_groups is None else planned.groups[:max_groups]
    for i, grp in enumerate(shown):
        ops = "+".join(n.op for n in grp.nodes)
        outs = ",".join(names[v] for v in grp.outputs) or "-"
        lines.append(f"  {i:>3} {grp.kind:<9} {grp.kernel:<4} {ops:<28} -> {outs:<10} {grp.reason}")
    if len(shown) < len(planned.groups):
        lines.append(f"  ... {len(planned.groups) - len(shown)} more groups")
    removed = planned.storage.describe()
    if removed["copies_removed"] or removed["concats_assembled"] or removed["concats_folded"]:
        lines.append(f"storage: {removed['results_stored']} kernel results written in their readers' layout: "
                     f"{removed['copies_removed']} view copies and {removed['concats_assembled']} concats removed, "
                     f"{removed['concats_folded']} concats folded into their readers' kernels")
    if mem.workspaces:
        lines.append(f"launch workspaces: {len(mem.workspaces)} in the arena, "
                     f"{format_bytes(sum(w.nbytes for w in mem.workspaces))} together, each live during its launch")
    lines.append(f"memory: peak {format_bytes(mem.peak_bytes)} = arena {format_bytes(mem.arena_bytes)} "
                 f"+ external {format_bytes(mem.external_bytes)} + outside the arena "
                 f"{format_bytes(mem.outside_bytes) if mem.outside is not None else '(not listed)'} (largest live set "
                 f"{format_bytes(mem.live_peak_bytes)})")
    for cat, nbytes in mem.breakdown.items():
        if nbytes:
            lines.append(f"  {cat:<16} {format_bytes(nbytes):>10}")
    updating = [o for o in g.outputs if o.updates is not None]
    donated = [g.outputs[j].name for j, _ in mem.donations]
    lines.append(f"  donation: {len(donated)} of {len(updating)} updating outputs written into their input's storage")
    not_donated = [o.name for o in updating if o.name not in set(donated)]
    if not_donated:
        lines.append(f"    not donated (input still read later): {', '.join(not_donated)}")
    kinds: dict[str, int] = {}
    for p in mem.values.values():
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    lines.append(f"  values: {kinds.get('arena', 0)} arena buffers ({len(mem.inplace())} in place over a dying "
                 f"input), {kinds.get('alias', 0)} aliases (free views), {kinds.get('external', 0)} external, "
                 f"{kinds.get('fused', 0)} fused away")
    return "\n".join(lines)
