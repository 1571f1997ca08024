"""The default memory policy: without a memory budget, the planner still takes the memory savings
whose predicted cost is (near) nothing.

**The rule.**  A saving is taken when it lowers the plan's peak and the plan with it, and with every
saving taken before it, is predicted at most ``fraction`` slower than the fastest plan:

    price(plan with the savings) - price(fastest plan)  <=  fraction x price(fastest plan)

``price`` is the step-time model ``explain`` reports (every kernel's configurator prediction
summed: ``nova.compiler.explain.predicted_step_us``), so a saving costs what the plans' difference
says (the chunk GEMMs' partial waves, the weight gradient's running sums, the launches added, what
fusion makes of a recomputed node), not a closed form.  ``fraction`` is ``NOVA_MEMORY_POLICY``
(``nova/options.py``): ``lean`` (the default) is ``LEAN_FRACTION``, 0.5 % of the step, below what a
training benchmark resolves run to run; ``fast`` takes nothing (the fastest plan, as before the
policy); a number is that fraction.  ``budget.py`` starts from this plan when a budget is given.

**What is tried**, in order (each trial is a plan of the rewritten graph, priced):

1. The chunked loss (``chunked_loss.py``): ``c = 2, 3, ...`` row chunks, up to ``max_chunks``; the
   largest count before the first one refused is kept (each count adds a running sum of the weight
   gradient and a partial wave to each chunk GEMM, so the cost grows with ``c``).  It comes first:
   on the built-in models its first counts free the most bytes per microsecond (GPT-42M: 2 chunks
   free 0.95 GiB for 36 us; a LayerNorm output class frees 0.25 GiB for 126 us).
2. Host offload (``offload.py``; only with ``host_offload``, the step-time model of its timeline, and
   a target with a host link): the saved values live at the peak whose copies to host and back hide
   behind the kernels on that timeline (``offload.choose``), all of them at once; priced as the plan
   with them plus the copies' cost (``offload.cost_us``: the kernels' waits for them on the plan's
   own timeline and the kernels' slowdown beside them).  Before rematerialization, as under a
   budget; at the measured slowdown it frees fewer bytes per microsecond than the cheap
   recomputations (Hugging Face's Llama-42M: 352 MiB for 457 us, against 252 MiB for 50 us of its
   SwiGLU products), so the default policy refuses it on the built-in models.
3. Rematerialization (``remat.py``) of the tensor classes live at the peak, best bytes per
   closed-form microsecond first.  A class is priced when its closed-form recompute time is at most
   ``TRY_FACTOR`` times the allowance left (the closed forms are within a factor 2 of the priced
   cost on the built-in models: GEMM chains are priced higher, fused pointwise chains lower); a
   class refused whole is priced once more as the prefix of its tensors (earliest layers first) that
   its priced cost per tensor fits in what is left; a class whose closed form is over it is priced
   as the prefix its closed form per tensor fits, where one tensor does.  After a saving priced
   below nothing (it gave time back) the classes are visited again from the best rate, those skipped
   for want of time included.  At most
   ``MAX_CLASS_TRIALS`` classes are priced; a class holding less than ``MIN_FREED`` of the peak (a
   position table, a constant) is skipped.

The decisions and each trial's bytes and price are stored on ``Planned.policy`` (a
``PolicyReport``); ``explain`` only reads them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

LEAN_FRACTION = 0.005        # NOVA_MEMORY_POLICY=lean: savings may cost 0.5 % of the predicted step
TRY_FACTOR = 2.0             # a class is priced when its closed-form time is within 2x the allowance left
MAX_CLASS_TRIALS = 3         # rematerialization classes priced at most (each trial is a plan + a price)
MIN_FREED = 0.005            # classes holding less than 0.5 % of the peak are not tried


@dataclass(frozen=True)
class MemoryPolicy:
    """How much predicted step time the savings may cost (``fraction`` of the fastest plan's), and
    the step-time model that prices a plan (``price(planned) -> us``)."""
    fraction: float
    price: Callable

    def describe(self) -> str:
        return "lean" if self.fraction == LEAN_FRACTION else f"{self.fraction:g} of the step"


@dataclass
class Trial:
    """One saving tried: what, the decision, the bytes it lowered the peak by and its predicted cost."""
    saving: str                 # "chunked loss, 2 row chunks", "recompute gelu_tanh at transformer.h.*.mlp (8 tensors)"
    decision: str               # "taken", "refused", "not tried"
    freed_bytes: int            # peak of the plan before it minus the plan with it (0 when not planned)
    cost_us: float              # predicted step time of the plan with it minus the plan before it's;
                                # not tried: the closed-form recompute time
    total_us: float | None      # predicted step time of the plan with it minus the fastest plan's (the
                                # rule's left side); None when not planned
    why: str


@dataclass
class PolicyReport:
    policy: str                 # "lean", "0.01 of the step"
    fraction: float
    fastest_peak_bytes: int
    fastest_step_us: float
    peak_bytes: int = 0
    step_us: float = 0.0
    loss_chunks: int = 1
    trials: list[Trial] = field(default_factory=list)

    @property
    def allowance_us(self) -> float:
        return self.fraction * self.fastest_step_us

    @property
    def cost_us(self) -> float:
        return self.step_us - self.fastest_step_us

    def to_dict(self) -> dict:
        d = asdict(self)
        d["allowance_us"] = round(self.allowance_us, 3)
        d["cost_us"] = round(self.cost_us, 3)
        return d


def lean_plan(planned, policy: MemoryPolicy, plan_graph, target, host_offload=None):
    """``planned`` (the fastest plan) with the savings the rule takes; ``plan_graph(graph) ->
    Planned`` plans a rewritten graph; ``host_offload``: the step-time model of the host offload's
    timeline (``group_times(planned) -> us per group``), None: nothing offloaded.  The result
    carries its ``PolicyReport`` (``.policy``)."""
    from nova.passes import chunked_loss, remat
    fastest_us = policy.price(planned)
    report = PolicyReport(policy.describe(), policy.fraction, planned.memory.peak_bytes, fastest_us,
                          planned.memory.peak_bytes, fastest_us)
    allowance = policy.fraction * fastest_us
    current, current_us = planned, fastest_us

    def judge(trial_plan, what: str, extra_us: float = 0.0) -> tuple[bool, float]:
        """Take ``trial_plan`` if the rule allows (its price plus ``extra_us``); (taken, its price)."""
        nonlocal current, current_us
        us = policy.price(trial_plan) + extra_us
        freed = current.memory.peak_bytes - trial_plan.memory.peak_bytes
        total = us - fastest_us
        if freed <= 0:
            why = "does not lower the peak"
        else:
            side = "over" if total > allowance else "within"
            why = f"{side} the {allowance:.1f} us allowed ({policy.fraction:.2%} of the step)"
        taken = freed > 0 and total <= allowance
        report.trials.append(Trial(what, "taken" if taken else "refused", freed, round(us - current_us, 3),
                                   round(total, 3), why))
        if taken:
            current, current_us = trial_plan, us
        return taken, us

    # 1. the chunked loss
    graph = planned.graph
    matches = chunked_loss.find(graph)
    if matches:
        rows = min(m.logits.shape[0] for m in matches)
        for count in range(2, chunked_loss.max_chunks(rows) + 1):
            if not judge(plan_graph(chunked_loss.chunk_loss(graph, count)), f"chunked loss, {count} row chunks")[0]:
                break
            report.loss_chunks = count

    # 2. host offload of what hides behind the kernels
    gpu = remat.gpu_model(target)
    if host_offload is not None:
        _offload_trial(current, gpu, host_offload, plan_graph, judge)

    # 3. rematerialization, class by class, on the (chunked, offloaded) graph
    base = current.graph
    classes = _live_classes(remat.candidates(base, gpu), current.memory)
    chosen: list = []
    priced = 0
    done: set = set()                 # classes priced (or too small to be worth a plan)
    skipped: dict[str, Trial] = {}    # classes not tried yet, their "not tried" line in the report
    restart = True
    while restart:                    # again from the best rate after a saving gave time back
        restart = False
        for name, cands in classes:
            if name in done:
                continue
            closed = sum(c.recompute_us for c in cands)
            left = allowance - (current_us - fastest_us)
            nbytes = sum(c.nbytes for c in cands)
            what = _what(name, cands, cands)
            if nbytes < MIN_FREED * current.memory.peak_bytes:
                done.add(name)        # a constant, a position table: not worth a plan
                continue
            per_closed = closed / len(cands)
            fits_closed = math.floor(max(left, 0.0) / per_closed) if per_closed > 0 else len(cands)
            if priced >= MAX_CLASS_TRIALS or (closed > TRY_FACTOR * max(left, 0.0) and fits_closed < 1):
                why = (f"{MAX_CLASS_TRIALS} classes priced already" if priced >= MAX_CLASS_TRIALS else
                       f"its closed-form time {closed:.1f} us is more than {TRY_FACTOR:g}x the {max(left, 0.0):.1f} "
                       f"us left, one tensor's ({per_closed:.1f} us) more than it")
                if name in skipped:
                    skipped[name].why = why
                else:
                    skipped[name] = Trial(what, "not tried", 0, round(closed, 3), None, why)
                    report.trials.append(skipped[name])
                continue
            if name in skipped:
                report.trials.remove(skipped.pop(name))
            done.add(name)
            priced += 1
            ordered = sorted(cands, key=lambda c: c.position)
            before = current_us
            if closed > TRY_FACTOR * max(left, 0.0):       # the prefix of its tensors the closed form fits
                prefix = ordered[:fits_closed]
                what = _what(name, prefix, cands)
                if judge(_remat_plan(base, chosen + prefix, plan_graph), what)[0]:
                    chosen += prefix
            else:
                taken, us = judge(_remat_plan(base, chosen + cands, plan_graph), what)
                if taken:
                    chosen += cands
                else:
                    per_tensor = (us - before) / len(cands) if report.trials[-1].freed_bytes > 0 else 0.0
                    fits = math.floor(left / per_tensor) if per_tensor > 0 else 0
                    if 0 < fits < len(cands):
                        prefix = ordered[:fits]
                        what = _what(name, prefix, cands)
                        if judge(_remat_plan(base, chosen + prefix, plan_graph), what)[0]:
                            chosen += prefix
            if current_us < before:   # it gave time back: the classes skipped for want of it may fit now
                restart = True
                break
    report.peak_bytes, report.step_us = current.memory.peak_bytes, current_us
    current.policy = report
    return current


def _what(name: str, some: list, cands: list) -> str:
    """A rematerialization trial's line: the class, how many of its tensors and bytes, and where a
    sibling's kernel recomputes them (``remat.sibling_reader``)."""
    from nova.passes.peak import format_size
    count = f"{len(some)} of {len(cands)} tensors" if len(some) < len(cands) else \
        f"{len(cands)} tensor{'s' if len(cands) > 1 else ''}"
    ops = sorted({c.sibling for c in some if c.sibling})
    inside = f" in the kernel of the backward's {'/'.join(ops)}" if ops else ""
    return f"recompute {name} ({count}, {format_size(sum(c.nbytes for c in some))}){inside}"


def _offload_trial(current, gpu, group_times, plan_graph, judge) -> None:
    """Step 2: every value ``offload.choose`` finds hidden at ``current``'s peak, judged as one saving."""
    from nova.passes import offload as host
    from nova.passes.peak import format_size
    picked = host.choose(current, gpu, group_times, current.memory.peak_bytes)
    if not picked:
        return
    trial = plan_graph(host.offload(current, picked)[0])
    _, extra = host.priced(trial, gpu, group_times)
    names = sorted({o.name for o in picked})
    judge(trial, f"host offload of {len(picked)} value{'s' if len(picked) > 1 else ''} "
                 f"({format_size(sum(o.nbytes for o in picked))}: {', '.join(names)})", extra)


def _remat_plan(graph, cands, plan_graph):
    from nova.passes import remat
    rewritten, _ = remat.rematerialize(graph, [r for c in cands for r in c.roots])
    return plan_graph(rewritten)


def _live_classes(cands, memory) -> list[tuple[str, list]]:
    """The candidates whose roots are live at the busiest position, by tensor class, best bytes per
    closed-form microsecond first."""
    from nova.passes.peak import busiest_position, live_at
    t = busiest_position(memory)
    by_class: dict[str, list] = {}
    for c in cands:
        if any(live_at(memory, memory.values[r], t) for r in c.roots if r in memory.values):
            by_class.setdefault(c.name, []).append(c)
    rate = {name: sum(c.nbytes for c in cs) / max(sum(c.recompute_us for c in cs), 1e-3) for name, cs in by_class.items()}
    return sorted(by_class.items(), key=lambda kv: -rate[kv[0]])
