"""``explain`` for a whole program: what was captured, the kernels it runs (with why and their
predicted times), each GEMM's schedule, the memory plan and the predicted step time.

    report = explain_planned(captured_graph, planned, target, tokens_per_step=32 * 512)
    render(report)                 # rich tables;  json.dumps(report) for other tools

Every time is the configurator's closed-form prediction (no measurement): Nova GEMMs by
``nova.configurator.configure`` (calibrated where the target has a calibration), attention by
``nova.kernels.attention.configure_attention`` where the executor runs Nova's attention kernels, the
Nova rows groups (norms, softmax, losses, reductions) by ``nova.kernels.rows.configure_rows``, the
embedding groups (gather, deterministic scatter-add) by ``nova.kernels.embedding.configure_embedding``, fused
pointwise groups by ``nova.kernels.pointwise.configure_pointwise`` and optimizer groups by
``nova.kernels.optimizer.configure_multi_tensor`` where they run on Nova's kernels,
the groups on ATen kernels kind by kind from the target's calibration of them where it has one
(``cost.aten_kinds_time``; the kernels counted on meta, ``nova.compiler.aten_launches``), else by
the memory-bound and closed-form models of ``nova.compiler.cost``.  Views that copy no more and
concats that launch nothing (the storage pass, ``nova/passes/storage.py``) have no kernel report;
``report["storage"]`` counts them with why.  Each kernel report names the
model that priced it (``model``); ``prediction["aten"]`` says which one priced the ATen groups and
sums them by kind.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from nova.compiler import cost
from nova.ir.graph import Node
from nova.kernels.optimizer.sum_problem import MultiTensorSumProblem
from nova.kernels.pointwise.problem import PointwiseProblem
from nova.passes.embedding import EMBEDDING_OPS
from nova.passes.fusion import OPTIMIZER_UPDATES


@dataclass
class KernelReport:
    index: int
    kind: str                 # the group's kind: gemm, pointwise, reduction, composite, view, opaque
    kernel: str               # what runs it: "nova", "aten" or "none" (a free view)
    name: str                 # a readable name: the GEMM problem, the composite op, the fused ops
    predicted_us: float
    bound: str
    formula: str
    reason: str
    origin: str = ""
    schedule: dict | None = None
    model: str = ""           # what priced it: gemm/attention/pointwise/multi-tensor configurator, aten kinds, memory-bound, ...
    aten_kinds: dict | None = None   # calibrated ATen groups: {kind: {kernels, bytes, eta, calibrated, time_us}}


@dataclass
class ProgramReport:
    name: str
    target: str
    captured_ops: dict
    captured_nodes: int
    passes: dict
    kernels: list[KernelReport] = field(default_factory=list)
    fallback_ops: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    prediction: dict = field(default_factory=dict)
    storage: dict = field(default_factory=dict)   # the storage pass's decisions: copies and concats removed, why

    def to_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------ per-group predictions
def _bytes_of(values) -> int:
    return sum(v.type.nbytes for v in values)


def _attention_report(group, node: Node, target) -> tuple[float, str, str, str, dict | None]:
    problem = group.problem if group.kernel == "nova" else None      # the plan's decision
    backward = node.op == "attention_backward"
    if problem is not None:
        from nova.kernels.attention import configure_attention
        cfg = configure_attention(problem, target)
        roles = cfg.schedule.with_combines(("bwd_pre", "bwd_dkv", "bwd_dq") if backward else ("fwd",))
        t = sum(cfg.terms[r]["time_us"] for r in roles)
        bound = max(roles, key=lambda r: cfg.terms[r]["time_us"])
        return (t, cfg.terms[bound]["bound"], f"configure_attention({problem.describe()}): "
                + " + ".join(f"{r} {cfg.terms[r]['time_us']:.1f}" for r in roles),
                "nova", {"roles": list(roles), "problem": problem.to_dict(), "schedule": cfg.schedule.to_dict(),
                         "tensor_core_us": round(sum(cfg.terms[r].get("tensor-core", 0.0) for r in roles), 3)})
    q, k, v = (node.inputs[0], node.inputs[1], node.inputs[2]) if not backward else node.inputs[1:4]
    b, h, t_q, d = q.shape
    flops = cost.attention_flops(b, h, t_q, k.shape[2], d, v.shape[3], bool(node.attrs.get("causal")), backward)
    kt = cost.attention_fallback_time(flops, target)
    return kt.time_us, kt.bound, kt.formula, "aten", None


def _gemm_report(group, target) -> tuple[float, str, str, dict | None, object]:
    """(time, bound, formula, schedule, the configuration) of a Nova GEMM group."""
    from nova.configurator import configure
    cfg = configure(group.problem, target)
    t = cfg.time_us
    s = cfg.schedule
    if cfg.skinny:             # the same keys as the tiles' (the GEMM schedules table reads them)
        schedule = {"kernel": "skinny", "tile": s.label(), "stages": "-", "split_k": s.splits,
                    "split_reduction": "workspace" if s.split else None, "instruction": "fma.rn.f32 (CUDA cores)",
                    "swap_ab": False, "persistent": False, "model_us": round(cfg.prediction.time_us, 2),
                    "calibrated_us": None}
        return t, cfg.prediction.bound, f"configure({group.problem.describe()})", schedule, cfg
    schedule = {"tile": f"{s.block_m}x{s.block_n}x{s.block_k}", "stages": s.stages, "split_k": s.split_k,
                "split_reduction": s.split_reduction if s.split_k > 1 else "stream_k" if s.stream_k else None,
                "instruction": str(s.mma), "swap_ab": s.swap_ab, "persistent": s.persistent,
                "model_us": round(cfg.prediction.time_us, 2),
                "calibrated_us": None if cfg.calibrated_time_us is None else round(cfg.calibrated_time_us, 2)}
    if getattr(s, "pingpong", False):
        schedule["consumers"] = "pingpong"
    return t, cfg.prediction.bound, f"configure({group.problem.describe()})", schedule, cfg


def _rows_report(group, target) -> tuple[float, str, str, dict]:
    """A Nova rows group: the rows configurator's prediction (``nova.kernels.rows.configure_rows``)."""
    from nova.kernels.rows.abi import KERNEL_NAMES
    from nova.kernels.rows.derive import configure_rows
    cfg = configure_rows(group.problem, target)
    formula = " + ".join(f"{role} {term['time_us']:.1f}" for role, term in cfg.terms.items())
    return cfg.prediction.time_us, cfg.prediction.bound, formula, {"roles": list(cfg.schedule.roles),
                                                                   "schedule": cfg.schedule.to_dict(),
                                                                   "kernels": _kernel_terms(cfg.terms, KERNEL_NAMES.get)}


def _embedding_report(group, target) -> tuple[float, str, str, dict]:
    """A Nova embedding group: the embedding configurator's prediction (``nova.kernels.embedding.configure_embedding``)."""
    from nova.kernels.embedding.abi import kernel_name
    from nova.kernels.embedding.derive import configure_embedding
    cfg = configure_embedding(group.problem, target)
    formula = " + ".join(f"{role} {term['time_us']:.1f}" for role, term in cfg.terms.items())
    return cfg.prediction.time_us, cfg.prediction.bound, formula, {"roles": list(cfg.schedule.roles),
                                                                   "schedule": cfg.schedule.to_dict(),
                                                                   "kernels": _kernel_terms(cfg.terms, kernel_name)}


def _kernel_terms(terms: dict, entry) -> list[dict]:
    """A multi-kernel group's kernels: ``[{"role", "kernel", "time_us", "bytes", "bound"}]``, ``kernel`` the
    entry point ``entry(role)`` names (what ``nova.bench.step_kernels`` matches each device kernel's
    measured time to)."""
    return [{"role": role, "kernel": entry(role), "time_us": term["time_us"], "bytes": term["bytes"],
             "bound": term["bound"]} for role, term in terms.items()]


def _pointwise_report(group, target) -> tuple[float, str, str, dict]:
    """A Nova pointwise group: its kernel's configuration (``nova/kernels/pointwise/derive.py``)."""
    from nova.kernels.pointwise.derive import configure_pointwise
    cfg = configure_pointwise(group.problem, target)
    return (cfg.prediction.time_us, cfg.prediction.bound, f"configure_pointwise({cfg.problem.expression()})",
            {**cfg.schedule.to_dict(), "bytes": cfg.facts["bytes"], "trips": cfg.facts["trips"]})


def _optimizer_report(group, target) -> tuple[float, str, str, dict]:
    """A Nova optimizer group: its multi-tensor kernel's configuration (``nova/kernels/optimizer/derive.py``)."""
    from nova.kernels.optimizer.derive import configure_multi_tensor
    cfg = configure_multi_tensor(group.problem, target)
    return (cfg.prediction.time_us, cfg.prediction.bound, f"configure_multi_tensor({cfg.problem.describe()})",
            {**cfg.schedule.to_dict(), "chunk": cfg.schedule.chunk, "bytes": cfg.facts["bytes"],
             "chunks": cfg.facts["chunks"]})


def _sum_report(group, target) -> tuple[float, str, str, dict]:
    """A Nova multi-tensor sum group: its kernel's configuration (``nova/kernels/optimizer/sum_derive.py``)."""
    from nova.kernels.optimizer.sum_derive import configure_multi_tensor_sum
    cfg = configure_multi_tensor_sum(group.problem, target)
    terms = cfg.prediction.terms_us
    return (cfg.prediction.time_us, cfg.prediction.bound,
            f"configure_multi_tensor_sum({cfg.problem.describe()}): pass {terms['memory'] + terms['launch']:.1f} + "
            f"final {terms['final']:.1f}",
            {**cfg.schedule.to_dict(), "chunk": cfg.schedule.chunk, "bytes": cfg.facts["bytes"],
             "chunks": cfg.facts["chunks"], "entries": len(cfg.problem.rule.entries)})


def _is_update(group) -> bool:
    return group.kind == "composite" and group.nodes[-1].op in OPTIMIZER_UPDATES


def _group_name(group) -> str:
    if group.problem is not None:
        return group.problem.describe()
    ops = [n.op for n in group.nodes]
    return ops[0] if len(ops) == 1 else f"{ops[0]}+{len(ops) - 1} ({'+'.join(sorted(set(ops)))})"


def _group_traffic(group) -> tuple[int, int]:
    """(DRAM bytes, launches) of a memory-bound group.  On ATen kernels (``group.kernel == "aten"``)
    every op is its own kernel that reads its inputs and writes its outputs, intermediates
    included: the sum over the group's data-moving nodes (views move nothing, unless the group is
    a view that copies).  A fused kernel would move only the group's inputs and outputs."""
    if group.kernel != "aten":
        return _bytes_of(group.inputs) + _bytes_of(group.outputs), 1
    from nova.ir.ops import kind
    moving = [n for n in group.nodes if kind(n.op) != "view"] or list(group.nodes)
    return sum(_bytes_of(n.inputs) + _bytes_of(n.outputs) for n in moving), len(moving)


# Groups priced by their closed form where the target has no calibration of ATen's kernels: the
# cross-entropy kernels keep each row chunk's intermediates in L2 by design
# (cost.CROSS_ENTROPY_CHUNK_BYTES), so their DRAM bytes are the logits once, not every call's
# operands (their launches agree with the count).  A calibration measured them as they run.
CLOSED_FORM_OPS = ("cross_entropy", "cross_entropy_backward")


def aten_dispatch(planned) -> dict:
    """``{group index: aten_launches.Dispatched}`` for the groups that run on ATen kernels, counted
    by running the executor's own launches on meta tensors under a dispatch mode: each ATen call's
    CUDA kernels by kind, with the bytes they move (``nova.compiler.aten_launches``).  An IR node
    often launches several (a cross-entropy chunk loop, an optimizer group's foreach calls).  Groups
    whose launch cannot run on meta (Nova's own kernels) are left out; their reports keep the
    closed form."""
    import torch
    from nova.compiler.aten_launches import counting_mode
    from nova.compiler.executor import Program

    out = {}
    try:
        program = Program(planned, "meta")
    except Exception:                     # a plan the executor cannot lay out: closed forms only
        return out
    for launch in program.launches:
        if launch.kind == "gemm" or any(k.pointwise is not None or k.optimizer is not None or k.multi_sum is not None
                                        for k in launch.kernels):
            continue                      # Nova's GEMMs, pointwise and multi-tensor kernels: no ATen call
        mode = counting_mode()
        try:
            with torch.no_grad(), mode:
                launch()
        except Exception:                 # not runnable on meta (Nova's attention launcher)
            continue
        out[launch.group] = mode.dispatched
    return out


def aten_model(target) -> dict:
    """Which model prices the ATen groups on ``target``: the stored calibration (its file, profile and
    date) or the uncalibrated memory-bound form."""
    stored = cost.aten_calibration(target)
    if not stored:
        return {"model": "memory-bound", "calibration": None}
    from nova.hwmodel import calibration
    return {"model": "calibrated", "calibration": {
        "file": calibration.path_for(target.name, "aten").name, "profile": stored["source"]["profile"],
        "device": stored["source"].get("device"), "fitted": stored.get("fitted"),
        "t_fixed_us": stored["constants"]["t_fixed_us"]}}


def kernel_reports(planned, target) -> list[KernelReport]:
    """One report per group that launches a kernel, in execution order (``priced_kernels``)."""
    return priced_kernels(planned, target)[0]


def priced_kernels(planned, target):
    """``(reports, step clock)``: one report per group that launches a kernel, in execution order, with
    the calibrated GEMMs priced at the clock the whole step settles on (``nova.compiler.step_clock``;
    None where the target has no step calibration, each GEMM then at its own clock)."""
    reports, gemms = kernel_reports_at_own_clocks(planned, target)
    return reports, _at_step_clock(reports, gemms, target)


def kernel_reports_at_own_clocks(planned, target):
    """``(reports, gemms)``: the reports with each GEMM at its own back-to-back clock, and the GEMMs
    the step clock prices (``(report, step_clock.PricedGemm)``)."""
    from nova.compiler import step_clock
    reports, gemms = [], []
    dispatched = aten_dispatch(planned)
    stored = cost.aten_calibration(target)
    for index, group in enumerate(planned.groups):
        if group.kernel == "none" or group.kind in ("collective", "transfer"):
            continue       # collectives: nova.compiler.communication; transfers: the copy engines (the budget's report)
        node = group.head
        name, schedule, kernel, kinds, priced = _group_name(group), None, group.kernel, None, None
        if group.kind == "gemm" and group.problem is not None:
            t, bound, formula, schedule, cfg = _gemm_report(group, target)
            model = "gemm configurator" + (" (calibrated)" if schedule["calibrated_us"] is not None else "")
            priced = step_clock.priced_gemm(cfg)
        elif node.op in ("attention", "attention_backward"):
            t, bound, formula, kernel, schedule = _attention_report(group, node, target)
            model = "attention configurator" if kernel == "nova" else "fp32 attention"
        elif group.kernel == "nova" and isinstance(group.problem, PointwiseProblem):
            t, bound, formula, schedule = _pointwise_report(group, target)
            model = "pointwise configurator"
        elif _is_update(group) and group.kernel == "nova":
            t, bound, formula, schedule = _optimizer_report(group, target)
            model = "multi-tensor configurator"
        elif group.kernel == "nova" and isinstance(group.problem, MultiTensorSumProblem):
            t, bound, formula, schedule = _sum_report(group, target)
            model = "multi-tensor sum configurator"
        elif group.kernel == "nova" and node.op in EMBEDDING_OPS:
            t, bound, formula, schedule = _embedding_report(group, target)
            model = "embedding configurator"
        elif group.kind != "gemm" and group.kernel == "nova" and group.problem is not None:
            t, bound, formula, schedule = _rows_report(group, target)
            model = "rows configurator"
        elif index in dispatched and group.kernel == "aten" and (stored or node.op not in CLOSED_FORM_OPS):
            d = dispatched[index]
            counted = f" ({d.calls} ATen calls, {d.kernels} kernels, counted on meta)"
            if stored:
                kt = cost.aten_kinds_time(d.kinds, target, stored)
                model, kinds = "aten kinds (calibrated)", kt.terms
            else:
                kt = cost.memory_bound_time(d.bytes, target, d.kernels)
                model = "memory-bound"
            t, bound, formula = kt.time_us, kt.bound, kt.formula + counted
        else:
            moved, launches = _group_traffic(group)
            model = "memory-bound"
            if node.op in ("cross_entropy", "cross_entropy_backward"):
                logits = node.inputs[0] if node.op == "cross_entropy" else node.inputs[1]
                launches = cost.cross_entropy_launches(node.op, logits.shape[0],
                                                       logits.shape[1] * logits.type.itemsize,
                                                       node.attrs.get("reduction", "mean"))
                model = "cross-entropy closed form"
            kt = cost.memory_bound_time(moved, target, launches)
            t, bound, formula = kt.time_us, kt.bound, kt.formula
        reports.append(KernelReport(index, group.kind, kernel, name, round(t, 3), bound, formula, group.reason,
                                    node.origin, schedule, model, kinds))
        if group.kind == "gemm" and group.problem is not None and priced is not None:
            gemms.append((reports[-1], priced))
    return reports, gemms


def step_clock_inputs(reports, gemms) -> tuple[list, float, float]:
    """What the step clock reads (``step_clock.settle``): the priced GEMMs, attention's tensor-core
    time and every other kernel's time (us)."""
    priced_ids = {id(r) for r, _ in gemms}
    attention_tensor_us = sum((r.schedule or {}).get("tensor_core_us", 0.0) for r in reports
                              if r.model == "attention configurator")
    other_us = sum(r.predicted_us for r in reports if id(r) not in priced_ids)
    return [g for _, g in gemms], attention_tensor_us, other_us


def _at_step_clock(reports, gemms, target):
    """Price ``gemms`` (``(report, PricedGemm)``) at the step's clock, in place; the clock or None."""
    from nova.compiler import step_clock
    clock = step_clock.settle(*step_clock_inputs(reports, gemms), target)
    if clock is None:
        return None
    for report, g in gemms:
        report.schedule["own_clock_us"] = report.predicted_us      # at the kernel's own back-to-back clock
        report.predicted_us = round(g.at(clock.mhz)[1], 3)
        report.formula += f" at the step's clock {clock.mhz:.0f} MHz"
    return clock


def predicted_step_us(planned, target) -> float:
    """The predicted step time of ``planned`` on ``target`` in microseconds: its kernels' predictions
    summed (``kernel_reports``), what ``explain`` reports as ``prediction.step_ms``."""
    from nova.hwmodel import get_target
    return sum(k.predicted_us for k in kernel_reports(planned, get_target(target if target is not None else "h200")))


def group_times_us(planned, target, reports=None) -> list[float]:
    """Each group's predicted time in microseconds (``reports``: ``kernel_reports`` of ``planned``,
    priced here when not given; 0 for a group that launches nothing, a collective, a transfer): the
    timeline of ``nova.passes.offload``."""
    from nova.hwmodel import get_target
    if reports is None:
        reports = priced_kernels(planned, get_target(target if target is not None else "h200"))[0]
    times = [0.0] * len(planned.groups)
    for report in reports:
        times[report.index] = report.predicted_us
    return times


def host_offload(enabled: bool, target):
    """The host offload's step-time model for plans made for ``target`` (``pipeline(host_offload=)``),
    None when ``enabled`` is false (the caller reads ``NOVA_HOST_OFFLOAD``)."""
    return (lambda planned: group_times_us(planned, target)) if enabled else None


def memory_policy(fraction: float | None, target):
    """The default memory policy (``nova.passes.memory_policy``) of plans made for ``target``: the
    savings whose plans ``predicted_step_us`` prices at most ``fraction`` of the step slower (the
    caller reads ``NOVA_MEMORY_POLICY``); None for ``fraction`` None (``fast``)."""
    from nova.passes.memory_policy import MemoryPolicy
    if fraction is None:
        return None
    return MemoryPolicy(fraction, lambda planned: predicted_step_us(planned, target))


def aten_kind_totals(kernels) -> dict:
    """``{kind: {kernels, bytes, predicted_us}}`` over the reports priced kind by kind."""
    totals: dict[str, dict] = {}
    for k in kernels:
        for kind, term in (k.aten_kinds or {}).items():
            entry = totals.setdefault(kind, {"kernels": 0, "bytes": 0, "eta": term["eta"], "predicted_us": 0.0})
            entry["kernels"] += term["kernels"]
            entry["bytes"] += term["bytes"]
            entry["predicted_us"] = round(entry["predicted_us"] + term["time_us"], 3)
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]["predicted_us"]))


# ------------------------------------------------------------------ the whole program
def explain_planned(captured_graph, planned, target, tokens_per_step: int | None = None) -> dict:
    """The JSON-able report of a planned program (keys: captured_ops, kernels, fallback_ops, memory,
    prediction, ...)."""
    from nova.hwmodel import get_target
    target = get_target(target)
    kernels, clock = priced_kernels(planned, target)
    fallback = {}
    for node in captured_graph.nodes:
        if node.op == "aten":
            fallback[node.attrs["target"]] = fallback.get(node.attrs["target"], 0) + 1
    mem = planned.memory
    offload_us = 0.0
    if mem.host_bytes:                     # the copies' waits and their toll on the kernels beside them
        from nova.passes import offload as host
        offload_us = host.priced(planned, target, lambda p: group_times_us(p, target, kernels))[1]
    step_us = sum(k.predicted_us for k in kernels) + offload_us
    by_kind: dict[str, dict] = {}
    for k in kernels:
        key = f"{k.kind}/{k.kernel}"
        entry = by_kind.setdefault(key, {"count": 0, "predicted_us": 0.0})
        entry["count"] += 1
        entry["predicted_us"] = round(entry["predicted_us"] + k.predicted_us, 3)
    prediction = {"step_ms": round(step_us / 1e3, 4), "host_offload_ms": round(offload_us / 1e3, 4),
                  "launches": len(kernels), "by_kind": by_kind,
                  "aten": {**aten_model(target), "kinds": aten_kind_totals(kernels)},
                  "sm_clock": None if clock is None else clock.to_dict()}
    if tokens_per_step:
        prediction["tokens_per_step"] = tokens_per_step
        prediction["tokens_per_s"] = round(tokens_per_step / (step_us * 1e-6)) if step_us else None
    report = ProgramReport(
        name=captured_graph.name, target=target.name, captured_ops=captured_graph.op_counts(),
        captured_nodes=len(captured_graph.nodes), passes=dict(planned.stats), kernels=kernels,
        fallback_ops=fallback,
        memory={"peak_bytes": mem.peak_bytes, "arena_bytes": mem.arena_bytes, "external_bytes": mem.external_bytes,
                "live_peak_bytes": mem.live_peak_bytes, "breakdown": dict(mem.breakdown),
                "outside_arena_bytes": mem.outside_bytes,
                "outside_arena": None if mem.outside is None else [asdict(i) for i in mem.outside],
                "launch_workspaces": _launch_workspaces(mem),
                "donations": len(mem.donations),
                "budget": planned.budget.to_dict() if getattr(planned, "budget", None) is not None else None,
                "policy": planned.policy.to_dict() if getattr(planned, "policy", None) is not None else None,
                "over_schedule": memory_over_schedule(planned),
                "host_bytes": mem.host_bytes, "offloads": _offloads(planned, target, kernels)},
        prediction=prediction, storage=planned.storage.describe())
    return report.to_dict()


def _offloads(planned, target, kernels) -> list[dict]:
    """Each value the plan copies to host memory and back (``nova.passes.offload``): its class and
    bytes, one copy's time, the groups it runs between and the kernels' predicted wait for it, on
    the timeline of ``kernels`` (the plan's priced reports)."""
    from nova.passes import offload
    if not planned.memory.host_bytes:
        return []
    placed = offload.check(planned, target, group_times_us(planned, target, kernels))
    return [{"tensor_class": o.name, "bytes": o.nbytes, "copy_us": round(o.copy_us, 1), "written_by_group": o.writer,
             "offload_group": o.join, "reload_group": o.issue, "first_reader_group": o.reader,
             "wait_us": round(o.stall_us, 1)} for o in placed]


SCHEDULE_POINTS = 400           # at most this many points in a plan's memory-over-schedule profile


def memory_over_schedule(planned, points: int = SCHEDULE_POINTS) -> dict:
    """The plan's device memory at each position of its schedule: the arena's live bytes
    (``peak.live_profile``: values and launch workspaces) over ``base_bytes``, what the step holds
    the whole time (the graph's inputs it uses in place: parameters, gradients, optimizer state; and
    the allocations outside the arena).  ``live_bytes`` keeps the largest value of each of at most
    ``points`` equal runs of positions (so the peak survives); ``positions`` is the schedule's
    length."""
    from nova.passes.peak import live_profile
    mem = planned.memory
    profile = live_profile(mem) if mem.order else [0]
    runs = min(points, len(profile))
    bounds = [round(i * len(profile) / runs) for i in range(runs + 1)]
    live = [max(profile[a:b]) for a, b in zip(bounds, bounds[1:])]
    return {"positions": len(profile), "live_bytes": live, "base_bytes": mem.external_bytes + mem.outside_bytes,
            "peak_bytes": mem.peak_bytes}


def _launch_workspaces(mem) -> dict:
    """The launch workspaces the plan placed in the arena (``MemoryPlan.workspaces``): how many, their
    bytes were they apart, the largest."""
    placed = list(getattr(mem, "workspaces", ()))
    largest = max(placed, key=lambda w: w.nbytes, default=None)
    return {"count": len(placed), "bytes_if_apart": sum(w.nbytes for w in placed),
            "largest": None if largest is None else {"what": largest.what, "nbytes": largest.nbytes,
                                                     "group": largest.group}}


# ------------------------------------------------------------------ built-in training steps
def training_step(model_name: str, batch: int, seq: int | None = None, optimizer: str = "adamw",
                  recipe=None):
    """A built-in model's training step on the meta device (nothing allocated):
    ``(fn, args, model, opt, tokens_per_step)`` ready for ``nova.frontend.capture``; ``recipe``
    (``nova.models.TrainRecipe``) adds autocast, an attention-mask argument, gradient clipping."""
    import torch
    from nova import models
    from nova.models import TrainRecipe, make_train_step
    recipe = recipe or TrainRecipe()
    cfg = models.config(model_name)
    seq = seq or cfg.block_size
    if not 1 <= seq <= cfg.block_size:
        raise ValueError(f"--seq {seq} is outside 1..{cfg.block_size} (the model's learned positions)")
    if batch < 1:
        raise ValueError(f"--batch must be positive, got {batch}")
    with torch.device("meta"):
        model = models.build(model_name)
    if optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    elif optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    else:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose adamw or sgd")

    train_step = make_train_step(model, opt, recipe)

    idx = torch.zeros((batch, seq), dtype=torch.long, device="meta")
    mask = (torch.ones((batch, seq), dtype=torch.long, device="meta"),) if recipe.padded else ()
    return train_step, (idx, idx.clone(), *mask), model, opt, batch * seq


def plan_training_step(model_name: str, batch: int, seq: int | None = None, optimizer: str = "adamw",
                       target="h200", memory_budget=None, recipe=None, opts=None):
    """A built-in model's training step captured and planned for ``target`` on the meta device:
    ``(planned, tokens_per_step)``, what ``nova precompile train`` and the GEMM suite
    (``nova.bench.train_gemms``) read the step's kernels from.  ``opts``: the ``nova.options.Options``
    to plan under (its memory policy), default the process's."""
    from nova import options
    from nova.frontend import capture
    from nova.compiler.outside_arena import account
    from nova.passes import pipeline
    opts = opts or options.current()
    fn, args, model, opt, tokens = training_step(model_name, batch, seq, optimizer, recipe)
    captured = capture(fn, args, models=[model], optimizers=[opt], name=f"train_{model_name}")
    return pipeline(captured.graph, target, memory_budget=memory_budget, outside_arena=account,
                    memory_policy=memory_policy(opts.memory_policy, target),
                    host_offload=host_offload(opts.host_offload, target)), tokens


def explain_train(model_name: str, batch: int, seq: int | None = None, target="h200",
                  optimizer: str = "adamw", gpus: int = 1, memory_budget=None, recipe=None,
                  unbudgeted: bool = False) -> dict:
    """Capture, plan and explain a built-in model's training step for ``target`` (no GPU needed).
    ``gpus`` > 1: the data-parallel step (DDP's gradient average, bucketed), its communication
    schedule (``report["communication"]``) and predicted scaling (``report["scaling"]``).  Under
    ``memory_budget`` when given (``MemoryBudgetError`` when the step cannot fit it); with
    ``unbudgeted`` too, the plan without the budget is made as well and its memory over the
    schedule is ``report["memory"]["over_schedule_unbudgeted"]`` (what the budget changed)."""
    import time
    from nova import options
    from nova.compiler.outside_arena import account
    from nova.frontend import capture
    from nova.passes import pipeline
    fn, args, model, opt, tokens = training_step(model_name, batch, seq, optimizer, recipe)
    t0 = time.perf_counter()
    captured = capture(fn, args, models=[model], optimizers=[opt], name=f"train_{model_name}")
    t1 = time.perf_counter()

    def plan(budget):
        opts = options.current()
        return pipeline(captured.graph, target, memory_budget=budget, outside_arena=account,
                        memory_policy=memory_policy(opts.memory_policy, target),
                        host_offload=host_offload(opts.host_offload, target))
    planned = plan(memory_budget)
    t2 = time.perf_counter()
    if gpus > 1:
        return _explain_data_parallel(captured.graph, planned, target, tokens, gpus, (model_name, batch, args,
                                                                                      optimizer, model, t0, t1))
    report = explain_planned(captured.graph, planned, target, tokens)
    if unbudgeted and memory_budget is not None:
        report["memory"]["over_schedule_unbudgeted"] = memory_over_schedule(plan(None))
    report["model"] = {"name": model_name, "batch": batch, "seq": args[0].shape[1], "optimizer": optimizer,
                       "recipe": (recipe.describe() if recipe else "plain"),
                       "parameters": sum(p.numel() for p in model.parameters())}
    report["times_s"] = {"capture": round(t1 - t0, 3), "passes": round(t2 - t1, 3)}
    return report


def _explain_data_parallel(graph, single_planned, target, tokens, gpus: int, described) -> dict:
    """The data-parallel report: the step with its gradients averaged over ``gpus`` ranks
    (``nova.passes.buckets.average_gradients``, as DDP's capture gives it), bucketed and planned,
    its communication schedule and scaling against the single-GPU plan."""
    import time
    from nova.compiler import communication
    from nova.compiler.collectives import bucketed
    from nova.hwmodel import get_target
    from nova.compiler.outside_arena import account
    from nova.passes import pipeline
    from nova.passes.buckets import average_gradients
    model_name, batch, args, optimizer, model, t0, t1 = described
    model_target = get_target(target)
    single_us = sum(k.predicted_us for k in kernel_reports(single_planned, model_target))
    from nova import options
    distributed, _, _ = bucketed(average_gradients(graph, gpus, "default"), model_target)
    planned = pipeline(distributed, target, outside_arena=account,
                       memory_policy=memory_policy(options.current().memory_policy, target))
    t2 = time.perf_counter()
    report = explain_planned(distributed, planned, target, tokens)
    kernels = kernel_reports(planned, model_target)
    report["communication"] = communication.schedule(planned, kernels, model_target, gpus)
    report["scaling"] = communication.scaling(report["communication"], single_us, tokens)
    report["model"] = {"name": model_name, "batch": batch, "seq": args[0].shape[1], "optimizer": optimizer,
                       "parameters": sum(p.numel() for p in model.parameters()), "gpus": gpus}
    report["times_s"] = {"capture": round(t1 - t0, 3), "passes": round(t2 - t1, 3)}
    return report


# ------------------------------------------------------------------ rendering
def render_outside_arena(items, console, top: int = 6) -> None:
    """The program's allocations outside the arena (the report's ``memory.outside_arena``, from
    ``MemoryPlan.outside``): totals by lifetime and the largest ones; launch temporaries count only
    for the largest launch."""
    from rich.markup import escape
    if items is None:
        return
    persistent = [i for i in items if i["lifetime"] != "launch"]
    largest = max((i for i in items if i["lifetime"] == "launch"), key=lambda i: i["nbytes"], default=None)
    driver = sum(i["nbytes"] for i in items if i["allocator"] == "driver")
    console.print(f"  outside the arena: {len(persistent)} allocations of the program and its outputs "
                  f"{_mib(sum(i['nbytes'] for i in persistent))} + the largest launch's temporaries "
                  f"{_mib(largest['nbytes'] if largest else 0)}" + (f" ({escape(largest['what'])})" if largest else "")
                  + (f"; {_mib(driver)} of it by cuMemAlloc (torch.cuda.max_memory_allocated does not see it)"
                     if driver else ""))
    for i in sorted(persistent, key=lambda i: -i["nbytes"])[:top]:
        console.print(f"    {_mib(i['nbytes']):>11}  {escape(i['what'])}")


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB"


def render_budget(budget: dict, console, priced_ms: float | None = None) -> None:
    """The memory budget's decisions: per tensor class kept, offloaded, recomputed or chunked and why, the
    predicted peak and the predicted cost in step time: the closed forms that chose (``budget.py``)
    and, given ``priced_ms`` (the plan's predicted step time minus the fastest plan's, both as
    ``explain`` prices them), the plans' difference."""
    from rich.markup import escape
    from rich.table import Table
    priced = f"+{priced_ms:.3f} ms per step over the fastest plan as priced; " if priced_ms is not None else ""
    kept = budget.get("headroom_bytes") or 0
    room = f" ({_gb(kept)} kept for the allocator around the user's tensors)" if kept else ""
    offload = f", host offload {budget['offload_us'] / 1e3:.3f} ms with {_gb(budget['host_bytes'])} of page-locked " \
        "host memory" if budget.get("host_bytes") else ""
    console.print(f"memory budget {_gb(budget['budget_bytes'])}{room}: predicted peak {_gb(budget['peak_bytes'])} "
                  f"(unbudgeted {_gb(budget['unbudgeted_peak_bytes'])}); loss in {budget['loss_chunks']} row "
                  f"chunk{'s' if budget['loss_chunks'] > 1 else ''}; predicted cost {priced}closed forms "
                  f"+{budget['extra_step_us'] / 1e3:.3f} ms (recompute {budget['recompute_us'] / 1e3:.3f} ms, chunked loss "
                  f"{budget['chunk_cost_us'] / 1e3:.3f} ms{offload}); {budget['rounds']} re-plans")
    if not budget["classes"]:
        console.print(f"  {escape(budget['loss_chunk_why'])}")
        return
    table = Table(title="saved activations by tensor class")
    for col in ("tensor class", "decision", "tensors", "bytes", "recompute ms", "why"):
        table.add_column(col)
    for c in budget["classes"]:
        table.add_row(escape(c["name"]), c["decision"], str(c["count"]), _gb(c["nbytes"]),
                      f"{c['recompute_us'] / 1e3:.3f}" if c["decision"] == "recomputed" else "-", escape(c["why"]))
    console.print(table)


def render_policy(policy: dict, console) -> None:
    """The default memory policy's decisions (``nova.passes.memory_policy``): the rule, the fastest
    and the chosen plan's peak and predicted step time, then each saving tried with its bytes freed
    at the peak and its predicted cost (this saving's, and all taken so far against the fastest plan)."""
    from rich.markup import escape
    from rich.table import Table
    console.print(f"memory policy {policy['policy']} (NOVA_MEMORY_POLICY: savings taken while the plan is predicted at "
                  f"most {policy['fraction']:.2%} of the step slower than the fastest plan, {policy['allowance_us'] / 1e3:.3f} ms): "
                  f"peak {_gb(policy['fastest_peak_bytes'])} -> {_gb(policy['peak_bytes'])}, predicted step "
                  f"{policy['fastest_step_us'] / 1e3:.3f} -> {policy['step_us'] / 1e3:.3f} ms "
                  f"(+{policy['cost_us'] / 1e3:.3f} ms); loss in {policy['loss_chunks']} row "
                  f"chunk{'s' if policy['loss_chunks'] > 1 else ''}")
    if not policy["trials"]:
        console.print("  no saving to try (no LM head + cross-entropy, no saved activation)")
        return
    table = Table(title="memory savings tried (default policy)")
    for col in ("saving", "decision", "freed at peak", "cost ms", "total ms", "why"):
        table.add_column(col)
    for t in policy["trials"]:
        table.add_row(escape(t["saving"]), t["decision"], _gb(t["freed_bytes"]) if t["freed_bytes"] else "-",
                      (f"{t['cost_us'] / 1e3:+.3f}" + (" (closed form)" if t["total_us"] is None else "")),
                      "-" if t["total_us"] is None else f"{t['total_us'] / 1e3:+.3f}", escape(t["why"]))
    console.print(table)


def _gb(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _render_aten(aten: dict | None, console) -> None:
    """Which model priced the ATen groups; with a calibration, its kinds' kernels, bytes and times."""
    from rich.table import Table
    if not aten:
        return
    cal = aten["calibration"]
    if cal is None:
        console.print("ATen groups: memory-bound model (bytes at eta_dram of DRAM + t_launch per kernel; "
                      "no ATen calibration for this target)")
        return
    table = Table(title=f"ATen kernels by kind (calibrated: {cal['file']}, t_fixed {cal['t_fixed_us']:.2f} us "
                        f"per kernel, fitted on {cal['profile']})")
    for col in ("kind", "kernels", "GB moved", "eta (of DRAM bw)", "predicted ms"):
        table.add_column(col, justify="left" if col == "kind" else "right")
    for kind, v in aten["kinds"].items():
        table.add_row(kind, str(v["kernels"]), f"{v['bytes'] / 1e9:.2f}", f"{v['eta']:.3f}", f"{v['predicted_us'] / 1e3:.3f}")
    console.print(table)


def _render_storage(storage: dict | None, console) -> None:
    """What the storage pass removed (``nova/passes/storage.py``): views that no longer copy and
    concats that launch nothing, each with why."""
    folded = storage.get("concats_folded", 0) if storage else 0
    if not storage or not (storage["copies_removed"] or storage["concats_assembled"] or folded):
        return
    console.print(f"storage: {storage['copies_removed']} view copies and {storage['concats_assembled'] + folded} "
                  f"concats removed ({storage['results_stored']} kernel results written in their readers' layout, "
                  f"{folded} concats folded into their readers' kernels)")
    for why, count in storage["reasons"].items():
        console.print(f"  {count} x {why}")


def render(report: dict, console=None, top: int = 12) -> None:
    """Rich tables: captured ops, kernels by kind, the most expensive kernels with why, GEMM
    schedules, the memory plan and the prediction."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    console = console or Console()
    model = report.get("model")
    head = f"{report['name']} on {report['target']}"
    if model:
        head += (f": {model['name']} ({model['parameters'] / 1e6:.1f}M parameters), batch {model['batch']} x "
                 f"seq {model['seq']}, {model['optimizer']}")
        if model.get("gpus", 1) > 1:
            head += f", data parallel over {model['gpus']} GPUs (per GPU: this batch)"
    console.print(head)
    ops = report["captured_ops"]
    console.print(f"captured {report['captured_nodes']} IR nodes, {len(ops)} distinct ops: "
                  + ", ".join(f"{k} {v}" for k, v in list(ops.items())[:14]) + (" ..." if len(ops) > 14 else ""))
    console.print("passes: " + " -> ".join(f"{k} {v}" for k, v in report["passes"].items()) + " nodes")
    if report["fallback_ops"]:
        console.print("opaque ATen ops: " + ", ".join(f"{k} x{v}" for k, v in report["fallback_ops"].items()))
    else:
        console.print("opaque ATen ops: none (every op is in the IR)")

    by_kind = Table(title="kernels by kind (predicted)")
    for col in ("kind / runs on", "launches", "predicted ms", "share"):
        by_kind.add_column(col, justify="right" if col != "kind / runs on" else "left")
    total = sum(v["predicted_us"] for v in report["prediction"]["by_kind"].values()) or 1.0
    for key, v in sorted(report["prediction"]["by_kind"].items(), key=lambda kv: -kv[1]["predicted_us"]):
        by_kind.add_row(key, str(v["count"]), f"{v['predicted_us'] / 1e3:.3f}", f"{v['predicted_us'] / total:.0%}")
    console.print(by_kind)
    _render_aten(report["prediction"].get("aten"), console)

    kernels = sorted(report["kernels"], key=lambda k: -k["predicted_us"])[:top]
    table = Table(title=f"the {len(kernels)} most expensive kernels")
    for col in ("#", "kernel", "runs on", "predicted us", "bound", "why these ops, how predicted"):
        table.add_column(col)
    for k in kernels:
        why = escape(k["reason"] + (f"  [{k['model']}: {k['formula']}]" if k["formula"] else ""))
        table.add_row(str(k["index"]), k["name"], k["kernel"], f"{k['predicted_us']:.1f}", k["bound"], why)
    console.print(table)

    gemms = [k for k in report["kernels"] if k["kind"] == "gemm" and k["schedule"]]
    if gemms:
        seen, sched = set(), Table(title="GEMM schedules (as explain matmul derives them)")
        for col in ("problem", "tile", "stages", "split-K", "instruction", "predicted us", "count"):
            sched.add_column(col)
        counts: dict[str, int] = {}
        for k in gemms:
            counts[k["name"]] = counts.get(k["name"], 0) + 1
        for k in gemms:
            if k["name"] in seen:
                continue
            seen.add(k["name"])
            s = k["schedule"]
            sched.add_row(k["name"], s["tile"] + (" (swapped)" if s["swap_ab"] else "")
                          + (" ping-pong" if s.get("consumers") == "pingpong" else ""), str(s["stages"]),
                          str(s["split_k"]) + ({"workspace": " ws", "atomic": " atomic", "stream_k": " stream-K"}.get(s.get("split_reduction"), "")),
                          s["instruction"], f"{k['predicted_us']:.1f}", str(counts[k["name"]]))
        console.print(sched)

    _render_storage(report.get("storage"), console)
    mem = report["memory"]
    console.print(f"memory plan: peak {_gb(mem['peak_bytes'])} (arena {_gb(mem['arena_bytes'])} + user-owned "
                  f"{_gb(mem['external_bytes'])} + outside the arena {_gb(mem.get('outside_arena_bytes', 0))}), "
                  f"{mem['donations']} updates written in place (donation)")
    console.print("  " + ", ".join(f"{k} {_gb(v)}" for k, v in mem["breakdown"].items() if v))
    render_outside_arena(mem.get("outside_arena"), console)
    ws = mem.get("launch_workspaces")
    if ws and ws["count"]:
        from rich.markup import escape
        console.print(f"  launch workspaces in the arena: {ws['count']}, each live during its launch only "
                      f"({_mib(ws['bytes_if_apart'])} were they apart; the largest {_mib(ws['largest']['nbytes'])}: "
                      f"{escape(ws['largest']['what'])})")
    if mem.get("policy"):
        render_policy(mem["policy"], console)
    if mem.get("budget"):
        fastest = (mem.get("policy") or {}).get("fastest_step_us")
        render_budget(mem["budget"], console,
                      None if fastest is None else report["prediction"]["step_ms"] - fastest / 1e3)
    p = report["prediction"]
    line = f"Prediction: {p['step_ms']:.2f} ms per step over {p['launches']} launches"
    if p.get("host_offload_ms"):
        line += f" (with the host offload's {p['host_offload_ms']:.3f} ms)"
    if p.get("tokens_per_s"):
        line += f", {p['tokens_per_s'] / 1e3:.1f}k tokens/s"
    console.print(line + " (the configurator's models, no measurement)")
    if p.get("sm_clock"):
        c = p["sm_clock"]
        console.print(f"  GEMMs priced at the step's SM clock, {c['mhz']:.0f} MHz: tensor-core duty {c['duty']:.2f} "
                      f"of the step, f = min({c['max_mhz']:.0f}, {c['sustained_mhz']:.0f} * duty^(-1/3)) "
                      f"({escape(c['source'])})")
    if "communication" in report:
        from nova.compiler.communication import render as render_communication
        render_communication(report, console)
    if "times_s" in report:
        console.print(f"captured in {report['times_s']['capture']:.2f} s, planned in {report['times_s']['passes']:.2f} s, "
                      "no GPU")
