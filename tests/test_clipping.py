"""Gradient clipping on the multi-tensor kernels, on the host: the plan (one multi-tensor sum launch for
every parameter's sum of squares with the norms' sqrt as its epilogue; the coefficient folded into the
update), compiled steps through the executor's CPU program against eager PyTorch, explain's launch count,
the sum kernel's argument table and work split replayed in Python, its PTX for sm_80/86/90, and the
configurator.

Trajectories: SGD in float32; AdamW with eps 1e-3 on a model without biases (Adam divides each update by
the gradient's own running RMS, so rounding noise in gradients that are mathematically zero -- GPT's
attention key bias -- becomes an lr-sized update in any two correct implementations; a larger eps and no
such parameter keep the comparison to rounding)."""
from __future__ import annotations

import copy
import dataclasses
import re
import warnings

import pytest
import torch
from hypothesis import given, settings, strategies as st

from nova.kernels.optimizer.problem import MultiTensorProblem
from nova.kernels.optimizer.sum_derive import MAX_LANES, configure_multi_tensor_sum, configure_sum_rule
from nova.kernels.optimizer.sum_problem import (HEADER, MultiTensorSumProblem, SumEntry, SumRule, chunk_counts,
                                                field_word, first_row_word, per_cta, slots, table_words,
                                                workspace_words)
from nova.kernels.rows.prologue import Prologue
from nova.models.gpt import CONFIGS as GPT_CONFIGS
from nova.models.gpt import GPT
from nova.models.llama import CONFIGS as LLAMA_CONFIGS
from nova.models.llama import Llama

GPT1 = dataclasses.replace(GPT_CONFIGS["tiny"], n_layer=1)
LLAMA1 = dataclasses.replace(LLAMA_CONFIGS["tiny"], n_layer=1)
SQUARE = SumEntry(("f32",), Prologue((("mul", ("in0", "in0")),), ((0, "out"),)), epilogue=(("sqrt", "f32"),))
TIED = SumEntry(("f32", "f32"), Prologue((("add", ("in0", "in1")), ("mul", ("%0", "%0"))), ((1, "out"),),
                                         ((0, "st0"),)), stored="f32", epilogue=(("sqrt", "f32"),))
CAST = SumEntry(("bf16",), Prologue((("cast_f32", ("in0",)), ("mul", ("%0", "%0"))), ((1, "out"),), ((0, "st0"),)),
                stored="f32", epilogue=(("sqrt", "f32"),))
HALF = SumEntry(("bf16",), Prologue((("mul", ("in0", "in0")), ("cast_bf16", ("%0",))), ((1, "out"),)), total="bf16",
                epilogue=(("sqrt", "bf16"),))
RULES = [SumRule((SQUARE,)), SumRule((SQUARE, TIED)), SumRule((SQUARE, TIED, CAST)), SumRule((HALF,))]


def rel(a, b) -> float:
    return float((a.detach().double() - b.detach().double()).norm() / b.detach().double().norm().clamp_min(1e-30))


def clipped_step(model, opt, over: str, zero: str = "after", max_norm: float = 0.05):
    """The user's step: ``clip_grad_norm_`` over ``model.parameters()`` or ``opt.param_groups``, zero_grad
    after the update (the gradients dropped) or before the backward (the clipped gradients kept)."""
    def step(idx, targets):
        if zero == "before":
            opt.zero_grad(set_to_none=True)
        loss = model(idx, targets)
        loss.backward()
        params = model.parameters() if over == "model" else [p for g in opt.param_groups for p in g["params"]]
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        opt.step()
        if zero == "after":
            opt.zero_grad(set_to_none=True)
        return loss
    return step


def batches(vocab, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, vocab, (2, 8), generator=g), torch.randint(0, vocab, (2, 8), generator=g))
            for _ in range(n)]


def program_of(step):
    return step._last.engine.program


# --------------------------------------------------------------------------- whole steps on the CPU program
STEPS = [("gpt-sgd-model", lambda: GPT(GPT1), lambda m: torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9),
          "model", "after"),
         ("llama-adamw-groups", lambda: Llama(LLAMA1, seed=0),
          lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-3), "groups", "after"),
         ("gpt-sgd-groups-grads-kept", lambda: GPT(GPT1), lambda m: torch.optim.SGD(m.parameters(), lr=0.5),
          "groups", "before")]


@pytest.mark.parametrize("name, make_model, make_opt, over, zero", STEPS, ids=[s[0] for s in STEPS])
def test_compiled_clipped_steps_match_eager(name, make_model, make_opt, over, zero):
    """Three steps through the executor's CPU program (the plan's groups, bindings, memory plan and
    write-back) against eager: parameters (and the clipped gradients, when the step keeps them) within
    1e-5; the plan sums every gradient in one multi-tensor sum group and folds the coefficient into the
    update (writing the scaled gradients back when the step reads them after)."""
    import nova
    torch.manual_seed(0)
    model_c = make_model()
    model_e = copy.deepcopy(model_c)
    opt_c, opt_e = make_opt(model_c), make_opt(model_e)
    step_c = nova.compile(clipped_step(model_c, opt_c, over, zero), backend="executor")
    step_e = clipped_step(model_e, opt_e, over, zero)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for idx, targets in batches(model_c.config.vocab_size, 3):
            loss_c, loss_e = step_c(idx, targets), step_e(idx, targets)
            assert rel(loss_c, loss_e) < 1e-5
    for (pname, pc), pe in zip(model_c.named_parameters(), model_e.parameters()):
        assert rel(pc, pe) < 1e-5, (pname, rel(pc, pe))
        assert (pc.grad is None) == (pe.grad is None), pname
        if pe.grad is not None:
            assert rel(pc.grad, pe.grad) < 1e-5, (pname, rel(pc.grad, pe.grad))
    program = program_of(step_c)
    params = len(list(model_c.parameters()))
    (summed,) = [g for g in program.plan.groups if g.multi_sum is not None]
    assert summed.multi_sum.tensors == params and summed.multi_sum.numel == sum(p.numel() for p in model_c.parameters())
    assert all(e.epilogue == (("sqrt", "f32"),) for e in summed.multi_sum.rule.entries)
    (update,) = [g for g in program.plan.groups if g.optimizer is not None]
    assert update.optimizer.rule.grad_scale and update.optimizer.rule.grad_out == (zero == "before")
    assert sum(n.op == "mul" for n in update.nodes) == params
    assert not program.stats["fallbacks"]


def launches(planned) -> int:
    return sum(g.kernel != "none" for g in planned.groups)


def test_explain_lists_the_clipping_as_three_launches():
    """GPT-tiny's step with and without clipping, as ``explain train`` plans it: the clipping adds the
    multi-tensor sum (the tied embedding's gradient sum moves into it), the sum of the stacked norms
    and the coefficient's scalar kernel -- at most 3 launches, none per parameter -- and explain says why."""
    from nova.compiler.explain import explain_planned, plan_training_step
    from nova.models import TrainRecipe
    plain, _ = plan_training_step("tiny", 2, 16, "adamw", "h200")
    clipped, tokens = plan_training_step("tiny", 2, 16, "adamw", "h200", recipe=TrainRecipe(clip_grad_norm=1.0))
    report = explain_planned(clipped.graph, clipped, "h200", tokens)
    names = [k["name"] for k in report["kernels"]]
    assert launches(clipped) - launches(plain) <= 3 and report["prediction"]["launches"] == launches(clipped)
    params = sum(1 for n in clipped.graph.nodes if n.op == "adamw")
    (sums,) = [k for k in report["kernels"] if k["name"].startswith("multi-tensor sum")]
    assert f"over {params} tensors" in sums["name"] and "fused horizontally" in sums["reason"]
    assert "sqrt" in sums["reason"] and sums["model"] == "multi-tensor sum configurator"
    (update,) = [k for k in report["kernels"] if "adamw" in k["name"]]
    assert "grad x scale" in update["name"] and "folded into the update" in update["reason"]
    assert not [n for n in names if re.match(r"pointwise (mul|sqrt) over", n)]
    assert not [n for n in names if n.startswith("row_reduce 1x") and "1x16 " not in n and "x100" not in n
                and f"1x{params} " not in n]
    assert any("multi-tensor sum kernel writes each input" in why for why in report["storage"]["reasons"])


def test_sums_read_before_the_clipping_stay_apart_from_it():
    """An L2 penalty's sums are read by the loss before the backward: they form their own multi-tensor sum,
    the clipping's sums another (one group runs where its last sum is, before its first reader)."""
    import nova
    torch.manual_seed(0)
    model_c = GPT(GPT1)
    model_e = copy.deepcopy(model_c)
    opt_c, opt_e = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (model_c, model_e))

    def make(model, opt):
        def step(idx, targets):
            loss = model(idx, targets) + 1e-3 * sum(p.square().sum() for p in model.parameters())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
            opt.step()
            opt.zero_grad()
            return loss
        return step
    step_c, step_e = nova.compile(make(model_c, opt_c), backend="executor"), make(model_e, opt_e)
    for idx, targets in batches(GPT1.vocab_size, 2):
        assert rel(step_c(idx, targets), step_e(idx, targets)) < 1e-5
    assert max(rel(pc, pe) for pc, pe in zip(model_c.parameters(), model_e.parameters())) < 1e-5
    groups = [g for g in program_of(step_c).plan.groups if g.multi_sum is not None]
    params = len(list(model_c.parameters()))
    penalty, clipping = groups                     # (a rows group the pointwise fusion gave several stored values
    assert penalty.multi_sum.tensors == params      # -- the penalty's gradients of one shape -- keeps its own kernel)
    assert params - 1 <= clipping.multi_sum.tensors <= params
    assert all(e.epilogue == (("sqrt", "f32"),) for e in clipping.multi_sum.rule.entries)
    assert not any(e.epilogue for e in penalty.multi_sum.rule.entries)


# --------------------------------------------------------------------------- the kernel's table and walk
def walk(problem: MultiTensorSumProblem, chunk: int, grid: int):
    """The kernel's work split replayed: which elements each CTA thread visits and the partial-sum slot
    each (CTA, tensor) pair writes; then the slots the last CTA adds for each tensor."""
    rule = problem.rule
    rows = [{"entry": k, "numel": n, **{name: 0 for name in rule.pointers()}}
            for k, n in zip(problem.entry_of, problem.sizes)]
    words = table_words(rule, rows, chunk, grid)
    tensors, chunks, k = words[0], words[1], words[2]
    seen = [[0] * n for n in problem.sizes]
    written = {}
    for b in range(grid):
        t, first = -1, words[first_row_word(rule, tensors, b)]
        for c in range(b * k, min(b * k + k, chunks)):
            t = max(t, first)
            assert c >= words[field_word(rule, t, "chunk_begin")], "the scan would start past the chunk's row"
            while c >= words[field_word(rule, t, "chunk_end")]:
                t += 1
            begin, numel = words[field_word(rule, t, "chunk_begin")], words[field_word(rule, t, "numel")]
            for e in range((c - begin) * chunk, (c - begin + 1) * chunk):
                if e < numel:
                    seen[t][e] += 1
            assert written.setdefault(b + t, (b, t)) == (b, t), "two (CTA, tensor) pairs share a slot"
    added = {}
    for t in range(tensors):
        begin, end = words[field_word(rule, t, "chunk_begin")], words[field_word(rule, t, "chunk_end")]
        first, last = begin // k, (max(end, 1) - 1) // k
        added[t] = [first + t + j for j in range(last - first + 1)] if end > begin else []
    return seen, written, added, words


@pytest.mark.parametrize("grid", [1, 3, 7, 528])
def test_the_walk_covers_every_element_once_and_the_final_adds_every_partial(grid):
    chunk = 64
    sizes = [1, 0, 17, chunk, chunk * 9 + 5, 3, 0, chunk * 2 - 1, 4097, 1]
    problem = MultiTensorSumProblem(RULES[1], tuple(sizes), tuple(k % 2 for k in range(len(sizes))))
    seen, written, added, words = walk(problem, chunk, grid)
    assert all(v == 1 for per in seen for v in per)
    for t, pair_slots in added.items():                  # exactly the slots the tensor's CTAs wrote, in CTA order
        assert pair_slots == sorted(s for s, (b, tt) in written.items() if tt == t)
    assert max(written, default=0) < slots(len(sizes), grid) <= workspace_words(len(sizes), grid)[0]
    assert words[:len(HEADER)] == [len(sizes), sum(chunk_counts(sizes, chunk)), per_cta(words[1], grid),
                                   workspace_words(len(sizes), grid)[0]]
    assert len(words) == first_row_word(problem.rule, len(sizes), grid)        # one first row a CTA, last


def test_entries_and_problems_refuse_what_no_kernel_computes():
    from nova.kernels.optimizer.problem import OptimizerProblemError
    with pytest.raises(OptimizerProblemError, match="one stored value"):
        SumEntry(("f32",), Prologue((("mul", ("in0", "in0")),), ((0, "out"),), ((0, "st0"),)))
    with pytest.raises(OptimizerProblemError, match="epilogue ops must be unary"):
        SumEntry(("f32",), Prologue((("mul", ("in0", "in0")),), ((0, "out"),)), epilogue=(("add", "f32"),))
    with pytest.raises(OptimizerProblemError, match="reads 'in1'"):
        SumEntry(("f32",), Prologue((("mul", ("in0", "in1")),), ((0, "out"),)))
    with pytest.raises(OptimizerProblemError, match="entry indices"):
        MultiTensorSumProblem(RULES[0], (4, 5), (0, 1))
    assert SumRule((SQUARE, TIED)).pointers() == ("in0", "in1", "st0", "out")
    assert "sqrt" in TIED.describe() and SumRule((SQUARE,)).to_dict()["op"] == "sum"
    with pytest.raises(OptimizerProblemError, match="reduces nothing stores st0"):
        SumEntry(("f32",), Prologue((("cast_bf16", ("in0",)),)))        # neither sums nor stores


# --------------------------------------------------------------------------- the multi-tensor map
CAST_ENTRY = SumEntry(("f32",), Prologue((("cast_bf16", ("in0",)),), (), ((0, "st0"),)), stored="bf16")


def test_store_only_entries_make_a_multi_tensor_map():
    """A rule of store-only entries (autocast's parameter casts) reads each tensor once and writes its
    stored value: no partials, no last CTA, no result in the bytes or the prediction; its kernel has
    neither the completion ticket nor the final pass."""
    rule = SumRule((CAST_ENTRY,))
    problem = MultiTensorSumProblem(rule, (4097, 1 << 20, 3), (0, 0, 0))
    assert not CAST_ENTRY.reduces and not rule.reduces and "map" in problem.describe()
    assert problem.bytes_moved() == (4097 + (1 << 20) + 3) * (4 + 2)
    c = configure_multi_tensor_sum(problem, "h200")
    assert c.prediction.terms_us["final"] == 0 and c.facts["slots"] == 0
    summed = MultiTensorSumProblem(SumRule((SQUARE,)), problem.sizes, problem.entry_of)
    assert configure_multi_tensor_sum(summed, "h200").prediction.terms_us["final"] > 0
    pytest.importorskip("mlir")
    from nova.codegen import ptxas
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    from nova.kernels.optimizer.compile import SUM_ROLE, build
    for target in ("a100", "h200"):
        art = build(rule, configure_sum_rule(rule, target), SUM_ROLE)
        r = art.resources
        assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0
        assert "atom." not in art.ptx and "membar.gl" not in art.ptx and "cvt.rn.bf16.f32" in art.ptx


def test_autocast_parameter_and_gradient_casts_are_one_multi_tensor_launch_each():
    """Under autocast every lone cast of a whole parameter joins one multi-tensor map group, placed where
    the first of them ran (before every reader of every cast), and the backward's casts of gradients that
    only the updates read (the bf16 bias sums widened for their FP32 parameters) another, where the last
    of them ran (after every source, before every update); no lone cast of either kind is left."""
    from nova.compiler.explain import plan_training_step
    from nova.models import TrainRecipe
    planned = plan_training_step("tiny", 2, 16, recipe=TrainRecipe(autocast="bf16"))[0]
    maps = [g for g in planned.groups if isinstance(g.problem, MultiTensorSumProblem) and not g.problem.rule.reduces]
    assert len(maps) == 2
    params, grads = maps
    users = planned.graph.users()
    where = {n: i for i, g in enumerate(planned.groups) for n in g.nodes}
    for group in maps:
        casts = group.nodes
        assert all(n.op == "cast" for n in casts) and len(casts) > 2
        assert [group.bindings[(t, "st0")] for t in range(len(casts))] == [n.outputs[0] for n in casts]
        at = planned.groups.index(group)
        assert all(where[u] > at for n in casts for u in users[n.outputs[0]])
        assert all(where[n.inputs[0].producer] < at for n in casts if n.inputs[0].producer is not None)
    assert all(n.inputs[0].producer is None for n in params.nodes) and "casts of whole parameters" in params.reason
    assert all(n.inputs[0].producer is not None and n.inputs[0].dtype == "bf16" and n.outputs[0].dtype == "f32"
               and {u.op for u in users[n.outputs[0]]} == {"adamw"} for n in grads.nodes)
    assert "only optimizer updates read" in grads.reason and "multi-tensor map" in grads.reason
    lone = [g.nodes[0] for g in planned.groups if [n.op for n in g.nodes] == ["cast"]]
    assert not [n for n in lone if n.inputs[0].producer is None and n.inputs[0].dtype == "f32"
                or {u.op for u in users[n.outputs[0]]} == {"adamw"}], lone


def test_a_recomputed_cast_stays_where_the_memory_policy_put_it():
    """GPT-144M under autocast: the default memory policy recomputes the MLP projections' weight casts in
    the backward (the forward's copies freed in between); only each parameter's first cast joins the map,
    so the recomputations stay lone launches in the backward and the peak is the policy's."""
    from nova.compiler.explain import plan_training_step
    from nova.models import TrainRecipe
    planned = plan_training_step("gpt144m", 16, recipe=TrainRecipe(autocast="bf16"))[0]
    taken = [t.saving for t in planned.policy.trials if t.decision == "taken"]
    assert any(t.startswith("recompute cast") for t in taken), taken
    group = next(g for g in planned.groups if isinstance(g.problem, MultiTensorSumProblem)
                 and not g.problem.rule.reduces)                  # the parameters' (the first)
    mapped = {n.inputs[0] for n in group.nodes}
    again = [g for g in planned.groups if [n.op for n in g.nodes] == ["cast"] and g.nodes[0].inputs[0] in mapped]
    assert again and all(planned.groups.index(g) > planned.groups.index(group) for g in again)


# --------------------------------------------------------------------------- configurator and code
@settings(max_examples=30, deadline=None)
@given(rule=st.sampled_from(RULES), sizes=st.lists(st.integers(0, 20_000_000), min_size=1, max_size=120),
       target=st.sampled_from(["h200", "a100", "rtx3060"]))
def test_configurator_properties(rule, sizes, target):
    problem = MultiTensorSumProblem(rule, tuple(sizes), tuple(k % len(rule.entries) for k in range(len(sizes))))
    c = configure_multi_tensor_sum(problem, target)
    s, gpu = c.schedule, c.target
    assert s.vector * rule.widest == 16 and s.chunk == s.vector * s.threads * s.unroll and s.unroll * s.vector <= MAX_LANES
    assert s.grid == gpu.sm_count * c.facts["ctas_per_sm"] and s.max_regs * s.threads * c.facts["ctas_per_sm"] <= gpu.regs_per_sm
    assert c.facts["per_cta"] * s.grid >= c.facts["chunks"] == sum(chunk_counts(sizes, s.chunk))
    assert c.facts["bytes"] >= problem.bytes_moved() and c.prediction.terms_us["final"] > 0
    assert s == configure_sum_rule(rule, target)          # the kernel never depends on the tensors


ptxas = pytest.importorskip("nova.codegen.ptxas")


@pytest.mark.skipif(not ptxas.available(), reason="ptxas not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{len(r.entries)} entries {r.widest} B")
def test_sum_kernels_assemble_without_spills_or_float_atomics(arch, rule):
    pytest.importorskip("mlir")
    from nova.kernels.optimizer.compile import SUM_ROLE, build
    target = {"sm_80": "a100", "sm_86": "rtx3060", "sm_90": "h200"}[arch]
    schedule = configure_sum_rule(rule, target)
    art = build(rule, schedule, SUM_ROLE)
    r = art.resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0
    assert r["registers"] <= schedule.max_regs and art.params == ("table", "work") and art.smem_bytes > 0
    assert "atom.global.add.u32" in art.ptx and not re.search(r"atom\.[a-z.]*f(16|32|64)", art.ptx)
    assert art.ptx.count("membar.gl") == 2 and "ld.volatile.global" in art.ptx
    assert not re.search(r"\bcall\b", art.ptx) and "sqrt.rn" in art.ptx


def test_update_rules_of_folded_groups_are_precompiled():
    """The plan's kernels as ``nova precompile`` lists them: the multi-tensor sum rule and the update rule
    with the gradient scale."""
    from nova.compiler.explain import plan_training_step
    from nova.compiler.precompile import step_kernels
    from nova.models import TrainRecipe
    planned, _ = plan_training_step("tiny", 2, 16, "adamw", "h200", recipe=TrainRecipe(clip_grad_norm=1.0))
    kernels = step_kernels(planned)
    assert len(kernels.sums) == 1 and isinstance(kernels.sums[0], SumRule)
    assert [r.grad_scale for r in kernels.optimizer] == [True]
    problems = [g.problem for g in planned.groups if isinstance(g.problem, MultiTensorProblem)]
    assert problems and all(p.rule.grad_scale for p in problems)
