"""A memory budget: the device memory a planned step may need, parsed once and met by the planner.

Sizes (``parse_size``): a number and a unit, ``12GiB``, ``11.5GB``, ``800MiB``, ``512KiB``,
``4096B`` or a plain integer of bytes; binary units are powers of 1024, decimal ones of 1000; the
unit is case-insensitive, a space between number and unit is allowed.  This is the one parser of
sizes (``nova.compile(memory_budget=)``, ``--memory-budget`` of the CLI and the benchmark).

``fit_budget(planned, budget, target, plan_graph, default)`` makes the plan need at most ``budget``
bytes (``MemoryPlan.peak_bytes``: arena + user-owned + what the program allocates outside the arena,
when the plan lists it: ``MemoryPlan.outside``, ``nova/compiler/outside_arena.py``; every re-plan
lists it again), in the order of the savings' size per cost; ``planned`` is the fastest plan,
``default`` the plan made without a budget (the default memory policy's, ``memory_policy.py``, or
``planned`` itself):

1. **Fits already**: the default plan is kept as is (``BudgetReport.fits``, nothing changed).
2. **Chunked loss** (``chunked_loss.py``): where the LM head's logits are live at the peak, the
   smallest chunk count whose logits chunk fits in what the rest of the plan leaves:
   ``c = ceil(L / (budget - (peak - L)))`` for logits of ``L`` bytes, at most
   ``chunked_loss.max_chunks`` (chunks of ``MIN_CHUNK_ROWS`` rows); when the rest alone does not
   fit, the largest count (rematerialization makes room for the rest); never fewer chunks than the
   default plan's (they were priced at nothing).  Kept only if it lowers the peak.  (The default
   plan's rematerializations are not carried over: the greedy below picks from every candidate.)
3. **Host offload** (``offload.py``; with a ``host_offload`` timeline and a target with a host link): the saved
   values live at the peak that are dearest to recompute (GEMM and attention outputs first), copied
   to host memory and back on the copy engines where the model predicts the copies hidden behind
   the step's kernels, until they cover the excess or the link has no time left; one round, kept
   only if it lowers the peak.  Steps 3 and 4 are planned with the offloads and without: the plan
   that fits at the smaller predicted cost is kept (``_offload_and_recompute``).
4. **Rematerialization** (``remat.py``): the greedy on the liveness intervals at the peak that
   module states, re-planning after each batch, until the plan fits or no candidate is live at
   the peak.

The plan's peak counts bytes allocated; a memory cap (``torch.cuda.set_per_process_memory_fraction``, a
smaller GPU) counts what PyTorch's caching allocator reserves.  The arena is one allocation, but the
parameters, the optimizer state and the data are one tensor each, and the allocator reserves more
than their bytes (blocks rounded up, segments partly used): ``allocator_headroom`` =
``ALLOCATOR_SLACK`` x those bytes is kept free, so the plan must fit ``budget - headroom``.

If the plan still does not fit, ``MemoryBudgetError``: ONE line naming the smallest peak reached
and what dominates it at its busiest position (user-owned parameters and optimizer state, the
allocations outside the arena, then the arena's tensor classes), e.g. ``train_gpt144m (batch 16 x
1024): the smallest plan is 13.1 GiB (parameters+optimizer state 1.6 GiB, outside the arena 0.1 GiB,
...); raise the budget or lower the batch``.

The decisions are stored on ``Planned.budget`` (a ``BudgetReport``): the budget, the unbudgeted
peak, the chunk count, each offloaded and rematerialized tensor class with its bytes and cost, the
host memory the offloaded copies take, the predicted extra step time; ``explain`` only reads them.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from nova.ir.graph import Graph
from nova.passes.peak import TensorClass, composition, format_size

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


ALLOCATOR_SLACK = 0.12   # [MEASURED] what PyTorch's caching allocator reserved beyond the plan's bytes, over the
                         # user-owned tensors' bytes (parameters, optimizer state, data: 1.75 GB): 9.7-9.8% for
                         # GPT-144M at batch 16 and 20 and Hugging Face's GPT-2 at its sizes under a 12 GiB cap
                         # (bench/results/h200-2026-12-04/run8, run9: 170-172 MB; at batch 20 without it the
                         # step ran out of memory), and 2 points of margin


def allocator_headroom(graph) -> int:
    """Bytes a budget keeps free for the caching allocator around the user-owned tensors (the graph's
    inputs: parameters, optimizer state, data): ``ALLOCATOR_SLACK`` x their bytes."""
    return math.ceil(ALLOCATOR_SLACK * sum(spec.value.type.nbytes for spec in graph.inputs))


class MemoryBudgetError(ValueError):
    """The step does not fit the memory budget (or the budget is not a size): one line."""

    def __init__(self, message: str, floor_bytes: int | None = None, composition: list | None = None):
        super().__init__(message)
        self.floor_bytes = floor_bytes
        self.composition = composition or []


def parse_size(text) -> int:
    """Bytes of ``text`` (``"12GiB"``, ``"11.5GB"``, ``"800MiB"``, ``"4096"``; an int passes
    through); ``MemoryBudgetError`` in one line otherwise."""
    if isinstance(text, bool):
        raise MemoryBudgetError(f"memory budget {text!r} is not a size")
    if isinstance(text, int):
        if text <= 0:
            raise MemoryBudgetError(f"memory budget must be positive, got {text} bytes")
        return text
    match = _SIZE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if not match or (unit and unit not in UNITS):
        raise MemoryBudgetError(f"memory budget {str(text)!r} is not a size: write a number and a unit, "
                                f"e.g. 12GiB, 11.5GB, 800MiB ({', '.join(u for u in UNITS if u != 'b')} or bytes)")
    nbytes = int(float(match.group(1)) * UNITS[unit or "b"])
    if nbytes <= 0:
        raise MemoryBudgetError(f"memory budget must be positive, got {text!r}")
    return nbytes


@dataclass
class BudgetReport:
    budget_bytes: int
    unbudgeted_peak_bytes: int
    peak_bytes: int = 0
    headroom_bytes: int = 0               # kept free for the allocator (``allocator_headroom``): the plan fits
                                          # budget_bytes - headroom_bytes
    fits: bool = False
    loss_chunks: int = 1                  # row chunks of the LM head + cross-entropy (1: not chunked)
    loss_chunk_why: str = ""
    chunk_cost_us: float = 0.0            # the chunked loss's extra work (weight-gradient sums, concat)
    recompute_us: float = 0.0             # the rematerialized nodes' predicted time
    rounds: int = 0                       # plans made while fitting (after the unbudgeted one)
    outside_bytes: int = 0                # of peak_bytes: the program's allocations outside the arena
    host_bytes: int = 0                   # page-locked host memory of the offloaded copies (not in peak_bytes)
    offload_us: float = 0.0               # the offloads' predicted cost: kernels waiting on the copies, and
                                          # their slowdown beside them (``offload.copy_us_per_byte``)
    classes: list[TensorClass] = field(default_factory=list)

    @property
    def extra_step_us(self) -> float:
        return self.chunk_cost_us + self.recompute_us + self.offload_us

    def to_dict(self) -> dict:
        from dataclasses import asdict
        d = asdict(self)
        d["extra_step_us"] = round(self.extra_step_us, 3)
        return d


# ==================================================================== refusal
def describe_step(graph) -> str:
    """``train_gpt144m (batch 16 x 1024)``: the graph's name and its token batch, if it has one."""
    for spec in graph.inputs:
        shape = spec.value.type.shape
        if spec.role == "data" and len(shape) == 2 and spec.value.dtype.startswith(("i", "u")):
            return f"{graph.name} (batch {shape[0]} x {shape[1]})"
    return graph.name


def refusal(planned, budget: int, headroom: int = 0) -> MemoryBudgetError:
    parts = composition(planned)
    floor = planned.memory.peak_bytes
    text = ", ".join(f"{name} {format_size(n)}" for name, n in parts)
    need = f", a budget of {format_size(floor + headroom)} with the {format_size(headroom)} kept for the " \
        "allocator" if headroom else ""
    return MemoryBudgetError(f"{describe_step(planned.graph)} does not fit a memory budget of {format_size(budget)}: "
                             f"the smallest plan is {format_size(floor)} ({text}{need}); raise the budget or lower "
                             "the batch", floor + headroom, parts)


# ==================================================================== fitting
def fit_budget(planned, budget, target, plan_graph, default=None, host_offload=None):
    """``planned`` (the fastest plan) made to fit ``budget`` bytes, from ``default`` (the plan
    without a budget; None: ``planned``) (rules in the module docstring); ``plan_graph(graph) ->
    Planned`` fuses, orders and plans a rewritten graph; ``host_offload``: the step-time model of
    the host offload's timeline (``group_times(planned) -> us per group``), None: nothing offloaded.  Raises ``MemoryBudgetError`` when the smallest plan reached is above
    the budget."""
    from nova.passes import chunked_loss, remat
    from nova.passes import offload as host
    asked = parse_size(budget)
    headroom = allocator_headroom(planned.graph)
    budget = asked - headroom                       # what the plan may need (module docstring)
    default = default if default is not None else planned
    policy = getattr(default, "policy", None)
    least = policy.loss_chunks if policy is not None else 1
    report = BudgetReport(asked, default.memory.peak_bytes, headroom_bytes=headroom)
    if default.memory.peak_bytes <= budget:
        report.fits, report.peak_bytes = True, default.memory.peak_bytes
        report.outside_bytes = default.memory.outside_bytes
        report.loss_chunks = least
        report.loss_chunk_why = "the plan fits: nothing chunked or recomputed" if default is planned else \
            "the default memory policy's plan fits: nothing more chunked or recomputed"
        default.budget = report
        return default

    gpu = remat.gpu_model(target)
    graph = planned.graph
    matches = chunked_loss.find(graph)
    logits = sum(m.logits.type.nbytes for m in matches)
    rows = min((m.logits.shape[0] for m in matches), default=0)

    def chunked(count: int):
        if count < 2:
            return planned
        report.rounds += 1
        return plan_graph(chunked_loss.chunk_loss(graph, count))

    # 1. the chunked loss, its count from the room the rest of the plan leaves
    current, chunks, fitting = planned, 1, 1
    if matches:
        fitting = max(least, chunked_loss.chunk_count(logits, rows, budget - (planned.memory.peak_bytes - logits)))
        rate = max((c.bytes_per_us for c in remat.candidates(graph, gpu)), default=0.0)
        one_more = sum(chunked_loss.step_us(m, gpu) for m in matches)
        count = min(fitting, chunked_loss.cost_chunk_count(logits, rows, one_more, rate)) if rate else fitting
        count = max(count, least)
        trial = chunked(count)
        if trial.memory.peak_bytes < planned.memory.peak_bytes:
            current, chunks = trial, count
    # 2. host offload of what is dearest to recompute, while the copies hide behind the kernels;
    # 3. rematerialization on the (chunked, offloaded) graph; with fewer chunks than fit alone, both
    #    again on the count that fits alone when they cannot make the room (the smaller plan kept)
    before_remat = current.graph
    current, offloaded, chosen, placed, offload_us = _offload_and_recompute(current, budget, gpu, plan_graph, report,
                                                                           host_offload)
    if current.memory.peak_bytes > budget and 1 < chunks < fitting:
        trial = chunked(fitting)
        if trial.memory.peak_bytes < planned.memory.peak_bytes:
            again = _offload_and_recompute(trial, budget, gpu, plan_graph, report, host_offload)
            if again[0].memory.peak_bytes < current.memory.peak_bytes:      # the smaller of the two
                chunks, before_remat = fitting, trial.graph
                current, offloaded, chosen, placed, offload_us = again
    # 4. fewer chunks when rematerialization made room: the count from the room now left (a plan
    #    with offloads keeps its count: their copies were placed on its timeline)
    if chunks > 2 and current.memory.peak_bytes <= budget and not offloaded:
        count = max(least, chunked_loss.chunk_count(logits, rows,
                                                    budget - (current.memory.peak_bytes - math.ceil(logits / chunks))))
        if count < chunks:
            rewritten = chunked_loss.chunk_loss(graph, count)
            if chosen:
                rewritten, _ = remat.rematerialize(rewritten, _translate([r for c in chosen for r in c.roots],
                                                                        before_remat, rewritten))
            report.rounds += 1
            trial = plan_graph(rewritten)
            if trial.memory.peak_bytes <= budget:
                current, chunks = trial, count
    if current.memory.peak_bytes > budget:
        raise refusal(current, asked, headroom)

    report.loss_chunks = chunks
    if chunks > 1:
        report.chunk_cost_us = sum(chunked_loss.chunk_cost_us(m, chunks, gpu) for m in matches)
        why = "the default memory policy's count (priced at nothing)" if chunks == least else \
            "the smallest count whose chunk fits beside the rest" if chunks == fitting else \
            "one more chunk would free fewer bytes per us than recomputing activations"
        report.loss_chunk_why = (f"logits of {format_size(logits)} live at the peak; chunks of "
                                 f"{format_size(math.ceil(logits / chunks))}: {why}")
        report.classes.insert(0, TensorClass("logits (LM head + cross-entropy)", "chunked", len(matches), logits, 0.0,
                                             f"{chunks} row chunks: {report.loss_chunk_why}"))
    elif matches:
        report.loss_chunk_why = "chunking the loss does not lower the peak"
    else:
        report.loss_chunk_why = "no LM head + cross-entropy to chunk"
    report.recompute_us = remat.recompute_time_us(chosen)
    if offloaded:
        report.host_bytes, report.offload_us = current.memory.host_bytes, offload_us
        report.classes[:0] = host.classes(placed, offloaded)
    report.peak_bytes = current.memory.peak_bytes
    report.outside_bytes = current.memory.outside_bytes
    report.fits = True
    current.budget = report
    current.policy = policy
    current.stats = {**planned.stats, **current.stats}
    return current


def _offload_and_recompute(current, budget: int, gpu, plan_graph, report, host_offload):
    """Steps 3 and 4 of the module docstring on ``current``: ``(the plan, the offloads taken, the
    candidates recomputed, the offloads as ``offload.check`` prices them on the plan, their cost)``.
    Where values can be offloaded both ways are planned, with the offloads and recomputing alone: the
    one that fits at the smaller predicted cost (recomputation's closed form, plus the offloads'
    ``offload.cost_us``), else the one with the smaller peak; the copies back of a plan with offloads
    can bring a new peak to the backward's start, where nothing is left to recompute, and the
    re-plans can move a reloaded value's first reader earlier."""
    from nova.passes import offload as host
    from nova.passes import remat
    ways = []
    if host_offload and current.memory.peak_bytes > budget:
        picked = host.choose(current, gpu, host_offload, current.memory.peak_bytes - budget)
        if picked:
            report.rounds += 1
            trial = plan_graph(host.offload(current, picked)[0])
            if trial.memory.peak_bytes < current.memory.peak_bytes:
                report.classes, chosen = [], []
                if trial.memory.peak_bytes > budget:
                    trial, chosen = _rematerialize(trial, budget, gpu, plan_graph, report)
                placed, offload_us = host.priced(trial, gpu, host_offload)
                ways.append((trial, picked, chosen, placed, offload_us, list(report.classes)))
    report.classes, chosen = [], []
    if current.memory.peak_bytes > budget:
        current, chosen = _rematerialize(current, budget, gpu, plan_graph, report)
    ways.append((current, [], chosen, [], 0.0, list(report.classes)))
    fitting = [w for w in ways if w[0].memory.peak_bytes <= budget]
    best = min(fitting, key=lambda w: remat.recompute_time_us(w[2]) + w[4]) if fitting else \
        min(ways, key=lambda w: w[0].memory.peak_bytes)
    report.classes = best[5]
    return best[:5]


def _rematerialize(planned, budget: int, gpu, plan_graph, report):
    """The greedy of ``remat.py`` on ``planned``'s graph: ``(the plan that fits, or the smallest
    reached, the candidates recomputed in it)``; ``report.classes`` says what was kept and why."""
    from nova.passes import remat
    graph = planned.graph
    cands = remat.candidates(graph, gpu)
    chosen: list = []
    current = best = planned
    best_chosen: list = []
    env = {r: r for c in cands for r in c.roots}
    while current.memory.peak_bytes > budget:
        picked = remat.pick(cands, chosen, current.memory, env, current.memory.peak_bytes - budget)
        if not picked:
            break
        chosen = chosen + picked
        rewritten, env = remat.rematerialize(graph, [r for c in chosen for r in c.roots])
        current = plan_graph(rewritten)
        report.rounds += 1
        if current.memory.peak_bytes < best.memory.peak_bytes:
            best, best_chosen = current, chosen
    report.classes = remat.classes(cands, best_chosen, best.memory.peak_bytes <= budget)
    return best, best_chosen


def _translate(values, old: Graph, new: Graph) -> list:
    """``old``'s forward values as ``new``'s: the same node position and result index (the
    chunked loss rewrites only after the forward, so forward positions agree)."""
    position = {n: i for i, n in enumerate(old.nodes)}
    return [new.nodes[position[v.producer]].outputs[v.index] for v in values]
