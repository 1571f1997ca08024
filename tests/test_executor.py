"""CPU tests of the executor (``nova.compiler.executor``) on plans of the real planner's types
(``nova.passes``): hand-made IR graphs and the passes' example training step planned by the real
pipeline, by hand-built variants of it (tests/executor_support.py: one arena slot per value, one
group per node) and by plans broken on purpose, against the reference interpreter: donation,
aliasing, arena reuse, stats, the Nova GEMM lowering (with an emulated ``nova.matmul``) and the
executor's refusals."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from executor_support import (ALL_CASES, Case, arena_values, attention_block, batched_attention_step, fused_values,
                              grouped_attention, kernel_values, linear_inference, memory_ops_step, mlp_training_step, node_groups, planned,
                              rel_error, rows_scratch_bytes, scratch_bytes, slot_per_value)
from nova.compiler.executor import ExecutorError, build, gemm_problems
from nova.compiler.gemm_lowering import layout
from nova.kernels.gemm.problem import GemmProblem
from nova.ir import Graph, TensorType, interpreter, opdef
from nova.passes import View, validate_memory_plan
from nova.passes.examples import linear_bias_gelu, random_inputs, transformer_step

TOL = 1e-5
PLANS = {
    "pipeline": planned,
    "slot-per-value": lambda graph: slot_per_value(planned(graph)),
    "node-groups": node_groups,
}


def run_both(case: Case, plan, seed=0, **kw):
    """(program, outputs, reference outputs, the inputs given to the program)."""
    inputs = case.inputs(seed)
    ref = interpreter.run(case.graph, [x.clone() for x in inputs])
    program = build(plan, "cpu", poison=True, **kw)
    return program, program.run(inputs), ref, inputs


def assert_close(graph, got, ref, tol=TOL):
    errors = {o.name: rel_error(g, r) for o, g, r in zip(graph.outputs, got, ref)}
    bad = {k: e for k, e in errors.items() if not e <= tol}
    assert not bad, f"{graph.name}: outputs off the interpreter: {bad}"


def edited(plan, changes: dict, **memory_fields):
    """``plan`` with some values' ``ValuePlan`` replaced (a value mapped to None is dropped) and
    other ``MemoryPlan`` fields changed."""
    values = dict(plan.memory.values)
    for v, p in changes.items():
        if p is None:
            values.pop(v)
        else:
            values[v] = p
    return dataclasses.replace(plan, memory=dataclasses.replace(plan.memory, values=values, **memory_fields))


def edited_gemm(plan, group, problem):
    """``plan`` with gemm ``group`` given to a Nova GEMM of ``problem`` (no epilogue), whatever the
    fusion pass found."""
    from nova.passes.fusion import Epilogue
    changed = dataclasses.replace(group, kernel="nova", problem=problem, epilogue=Epilogue())
    return dataclasses.replace(plan, groups=[changed if g is group else g for g in plan.groups])


def node(plan, op, nth=0):
    """The ``nth`` node of ``op`` in the plan's (optimized) graph, in program order."""
    return [n for n in plan.graph.nodes if n.op == op][nth]


def span(t):
    return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()


# --------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("mode", list(PLANS))
@pytest.mark.parametrize("name", list(ALL_CASES))
def test_program_matches_the_interpreter(name, mode):
    case = ALL_CASES[name]()
    plan = PLANS[mode](case.graph)
    program, got, ref, _ = run_both(case, plan)
    assert_close(case.graph, got, ref)
    assert program.stats["runs"] == 1 and program.stats["arena_bytes"] == plan.memory.arena_bytes
    # every value has planned storage (fused GEMM intermediates live in their group's result): no scratch
    # but the row statistics a rows kernel keeps inside, which its nodes write one by one on CPU
    assert program.stats["scratch_bytes"] == rows_scratch_bytes(plan)


def test_reused_arena_bytes_hold_values_at_different_times():
    case = mlp_training_step()
    plan = planned(case.graph)
    placed = arena_values(plan)
    overlapping = [(a, b) for i, (a, pa) in enumerate(placed) for b, pb in placed[i + 1:]
                   if pa.offset < pb.offset + pb.nbytes and pb.offset < pa.offset + pa.nbytes]
    assert overlapping, "the planner lets two values share arena bytes"
    assert plan.memory.arena_bytes < sum(p.nbytes for _, p in placed)
    assert plan.memory.inplace(), "and writes an elementwise result over the input it reads last"
    program, got, ref, _ = run_both(case, plan)
    assert_close(case.graph, got, ref)
    # the program keeps every arena value there, but constants (filled once, in their own area)
    assert {v for v, _ in placed if program.loc[v][0] != "arena"} == \
        {v for v, _ in placed if v.producer.op in ("constant", "iota")}
    for a, b in overlapping:
        if program.loc[a][0] != "arena" or program.loc[b][0] != "arena":
            continue
        (a0, a1), (b0, b1) = span(program.value_tensor(a)), span(program.value_tensor(b))
        assert a0 < b1 and b0 < a1, "values the plan overlaps must share the program's arena bytes"
    slots = slot_per_value(plan)
    assert slots.memory.arena_bytes == sum(-(-p.nbytes // 256) * 256 for _, p in placed) + \
        sum(-(-w.nbytes // 256) * 256 for w in plan.memory.workspaces)          # the launch workspaces too
    assert_close(case.graph, build(slots, "cpu", poison=True).run(case.inputs(0)), ref)


# --------------------------------------------------------------------------- donation and outputs
def test_donated_outputs_update_the_inputs_in_place_over_steps():
    case = mlp_training_step()
    graph = case.graph
    plan = planned(graph)
    assert len(plan.memory.donations) == sum(o.updates is not None for o in graph.outputs) == 19
    program = build(plan, "cpu", poison=True)
    state = case.inputs(1)
    pointers = [x.data_ptr() for x in state]
    for step in range(3):
        fresh = case.inputs(100 + step)
        state[0], state[1] = fresh[0], fresh[1]                     # new data each step
        ref = interpreter.run(graph, [x.clone() for x in state])
        got = program.run(state)
        assert_close(graph, got, ref)
        for o, result in zip(graph.outputs, got):
            if o.updates is not None:
                assert result is state[o.updates], f"{o.name}: a donated output must be the input object"
        assert [x.data_ptr() for x in state[2:]] == pointers[2:]
    assert float(state[-1]) == 3.0 + 3, "the step count (donated) advanced once per run"
    assert program.stats["donated_outputs"] == 19 and program.stats["rebinds"] == 0


def test_parameters_that_require_grad_are_updated_without_autograd():
    """The user's parameters are ``nn.Parameter``s: in-place updates and out= kernels run without autograd."""
    case = mlp_training_step()
    inputs = case.inputs(7)
    ref = interpreter.run(case.graph, [x.clone() for x in inputs])
    inputs = [torch.nn.Parameter(x) if spec.role == "param" else x for x, spec in zip(inputs, case.graph.inputs)]
    program = build(planned(case.graph), "cpu")
    got = program.run(inputs)
    assert_close(case.graph, got, ref)
    assert got[2] is inputs[2] and isinstance(got[2], torch.nn.Parameter) and got[2].requires_grad
    assert not got[0].requires_grad and got[2].grad is None


def test_without_donation_inputs_stay_and_results_are_fresh():
    case = mlp_training_step()
    plan = slot_per_value(planned(case.graph), donate=False)
    assert not plan.memory.donations and not any(p.donated for p in plan.memory.values.values())
    inputs = case.inputs(2)
    before = [x.clone() for x in inputs]
    program = build(plan, "cpu", poison=True)
    got = program.run(inputs)
    assert all(torch.equal(a, b) for a, b in zip(inputs, before)), "inputs changed without donation"
    assert_close(case.graph, got, interpreter.run(case.graph, before))
    arena = program.store["arena"].untyped_storage().data_ptr()
    for result in got:
        assert result.untyped_storage().data_ptr() != arena
        assert all(result.untyped_storage().data_ptr() != x.untyped_storage().data_ptr() for x in inputs)
    # every adamw output is copied from its input before the in-place update: 3 per parameter, +0 for step's add;
    # on CPU a Nova pointwise group is its nodes' IR reference, each of its outputs copied in
    kernel_outputs = sum(len(gr.outputs) for gr in plan.groups if gr.kind == "pointwise" and gr.kernel == "nova")
    assert program.stats["copies"] == 3 * 6 + kernel_outputs and program.stats["donated_outputs"] == 0


def test_results_survive_the_next_step():
    case = attention_block()
    program = build(planned(case.graph), "cpu")
    first = program.run(case.inputs(3))
    kept = [t.clone() for t in first]
    second = program.run(case.inputs(4))
    assert all(torch.equal(a, b) for a, b in zip(first, kept)), "a returned tensor was overwritten by the next run"
    assert any(not torch.equal(a, b) for a, b in zip(first, second))


# --------------------------------------------------------------------------- end to end: passes -> executor
def _step_state_inputs(graph, state, seed):
    """``state`` with fresh data inputs (the batch changes each step, the state carries over)."""
    fresh = random_inputs(graph, seed, int_high=8)
    return [fresh[i] if spec.role == "data" else state[i] for i, spec in enumerate(graph.inputs)]


@pytest.mark.parametrize("example, donated, copies", [
    # transformer_step: 16 parameters x (param, exp_avg, exp_avg_sq) + the step count donated; the
    # CPU flash-attention kernels have no out= variants: out+lse and dq+dk+dv are copied in (5)
    (transformer_step, 49, 5),
    (linear_bias_gelu, 0, 0),
], ids=["transformer_step", "linear_bias_gelu"])
def test_passes_to_executor_end_to_end(example, donated, copies):
    """``nova.passes.pipeline`` -> ``executor.build(planned, "cpu")`` -> three steps, each against
    the interpreter on the captured graph; donated outputs are the very input tensors, updated in place.

    Scratch: the plan has no storage for a Nova GEMM group's intermediates (the product, and the
    biased product before a fused activation: ``ValuePlan.kind == "fused"``).  A CPU program
    computes those groups unfused (torch.matmul, then the bias add / activation as ATen kernels),
    so it needs them.  They are computed in the bytes of the group's result (the plan reserves
    those from the launch's start), so the program needs no scratch; they used to get scratch of
    their own: 24,576 bytes for linear_bias_gelu (two [64, 48] f32), 9,216 for transformer_step
    (the four linears' products), and on CUDA too, where the Nova epilogue never writes them.
    Copies: ATen kernels without an out= variant (CPU flash attention and its backward)."""
    graph = example()
    plan = planned(graph)
    validate_memory_plan(plan.graph, plan.groups, plan.memory)
    program = build(plan, "cpu", poison=True)
    s = program.stats
    assert s["donated_outputs"] == len(plan.memory.donations) == donated
    # on CPU a Nova pointwise group runs as its nodes' IR reference, each of its outputs copied in
    kernel_outputs = sum(len(gr.outputs) for gr in plan.groups if gr.kind == "pointwise" and gr.kernel == "nova")
    assert s["copies"] == copies + kernel_outputs and s["scratch_bytes"] == rows_scratch_bytes(plan) \
        and not s["fallbacks"]
    fused = fused_values(plan)
    assert fused and all(program.loc[v][0] == "arena" for v in fused)
    assert all(program.loc[v] == ("kernel",) for v in kernel_values(plan))
    state = random_inputs(graph, 1, int_high=8)
    for step in range(3):
        state = _step_state_inputs(graph, state, 100 + step)
        ref = interpreter.run(graph, [x.clone() for x in state])
        pointers = [x.data_ptr() for x in state]
        got = program.run(state)
        assert_close(graph, got, ref)
        for (k, i) in plan.memory.donations:
            assert got[k] is state[i], f"{graph.outputs[k].name}: a donated output must be the input object"
        assert [x.data_ptr() for x in state] == pointers
        assert all(got[k] is not x for k, o in enumerate(graph.outputs) if o.updates is None for x in state)
    s = program.stats                                       # (recomputed when the first run bound the inputs)
    assert s["runs"] == 3 and s["rebinds"] == 0 and s["copies"] == copies + kernel_outputs \
        and s["scratch_bytes"] == rows_scratch_bytes(plan)
    if donated:
        assert float(state[-1]) == 3.0 + 3


# --------------------------------------------------------------------------- views, constants, stats
def test_free_views_alias_their_base():
    case = attention_block()
    plan = planned(case.graph)
    program, got, ref, _ = run_both(case, plan)
    assert_close(case.graph, got, ref)
    aliases = [v for v, p in plan.memory.values.items() if p.kind == "alias" and opdef(v.producer.op).kind == "view"]
    assert len(aliases) >= 8
    for v in aliases:
        n = v.producer
        view, base = program.value_tensor(v), program.value_tensor(n.inputs[0])
        assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), n.op
        assert torch.equal(view, opdef(n.op).reference(torch, base, **n.attrs))
    # a reshape of a permuted tensor is no strided view of a row-major buffer: the heads merged back
    # (twice: canonicalize folds the [B*T, C] reshape of the merged [B, T, C] copy into a second
    # reshape of the permute) and dq, dk, dv merged.  The storage pass has the attention kernels write
    # those results in the merged layout (the forward's out with its axes as [B, T, H, D], dq/dk/dv in
    # their slices of the concat's buffer), so none copies and the concat launches nothing; the plan
    # without those decisions (one group per node) copies 4 times
    copies = [g for g in plan.groups if g.kind == "view" and g.kernel == "aten"]
    assert program.stats["launches"].get("view", 0) == len(copies) == 0
    assert len(plan.storage.freed) == 5 and len(plan.storage.assembled) == 1
    assert not [n for launch in program.launches for n in launch.nodes if n.op == "concat"]
    for v, p in plan.memory.values.items():
        if p.kind == "alias" and v not in aliases:          # placed by its kernel in the concat's buffer
            concat = p.alias_of.producer
            assert concat in plan.storage.assembled and program.value_tensor(v).untyped_storage().data_ptr() == \
                program.value_tensor(p.alias_of).untyped_storage().data_ptr()
    assert build(node_groups(case.graph), "cpu").stats["launches"]["view"] == 4


def expected_launches(plan):
    """Per group kind, the groups that compute something (not only constants or free views)."""
    counts = {}
    for g in plan.groups:
        if g.kernel != "none" and any(n.op not in ("constant", "iota") for n in g.nodes):
            counts[g.kind] = counts.get(g.kind, 0) + 1
    return counts


@pytest.mark.parametrize("name, copies", [("mlp", 0), ("attention", 5), ("memory", 1), ("grouped", 5)])
def test_stats_count_launches_and_copies(name, copies):
    case = ALL_CASES[name]()
    plan = planned(case.graph)
    program = build(plan, "cpu")
    counts = expected_launches(plan)
    assert program.stats["launches"] == dict(sorted(counts.items()))
    assert program.stats["launches_total"] == sum(counts.values())
    assert program.stats["free_groups"] == len(plan.groups) - sum(counts.values())
    assert program.stats["arena_bytes"] == plan.memory.arena_bytes
    assert program.stats["peak_bytes"] == plan.memory.peak_bytes
    # attention: out + lse copied (no out variant), its backward dq/dk/dv; grouped: the same;
    # memory: the opaque aten.cumsum's result; mlp: everything has an out variant; on CPU each output of a
    # Nova pointwise kernel (a fused group, a concat or a copying view: its nodes' IR reference) is copied in
    from nova.kernels.pointwise.problem import PointwiseProblem
    copies += sum(len(gr.outputs) for gr in plan.groups if gr.kernel == "nova" and isinstance(gr.problem, PointwiseProblem))
    assert program.stats["copies"] == copies
    program.run(case.inputs(0))
    assert program.stats["copies"] == copies
    text = program.describe()
    assert len(text.splitlines()) == 4 + program.stats["launches_total"] + len(program.stats["fallbacks"])
    assert f"{program.stats['launches_total']} launches" in text


def test_constants_are_filled_once_outside_the_arena():
    case = memory_ops_step()
    plan = planned(case.graph)
    program = build(plan, "cpu", poison=True)
    consts = [n.outputs[0] for n in plan.graph.nodes if n.op in ("constant", "iota")]
    assert len(consts) >= 2
    for v in consts:
        assert program.loc[v][0] == "const"
    assert program.stats["constants_bytes"] >= 2 * 256
    program.run(case.inputs(0))
    iota = node(plan, "iota")
    assert torch.equal(program.value_tensor(iota.outputs[0]), torch.arange(iota.attrs["length"]))
    program.store["arena"].fill_(255)                       # trash every arena byte between steps
    assert_close(case.graph, program.run(case.inputs(1)), interpreter.run(case.graph, case.inputs(1)))


# --------------------------------------------------------------------------- inputs
def test_data_inputs_are_staged_and_replaced_parameters_rebind():
    case = linear_inference()
    program = build(planned(case.graph), "cpu")
    inputs = case.inputs(5)
    program.run(inputs)
    slot = program.static_input(0)
    assert slot is not None and slot.data_ptr() != inputs[0].data_ptr() and program.static_input(1) is None
    assert torch.equal(slot, inputs[0])
    inputs[0] = case.inputs(6)[0]                              # new batch: copied into the slot
    assert_close(case.graph, program.run(inputs), interpreter.run(case.graph, inputs))
    inputs[1] = inputs[1].clone() * 2                          # a parameter replaced (new storage): rebind
    assert_close(case.graph, program.run(inputs), interpreter.run(case.graph, inputs))
    assert program.stats["rebinds"] == 1 and program.stats["runs"] == 3


def test_input_errors_are_one_line():
    case = linear_inference()
    plan = planned(case.graph)
    program = build(plan, "cpu")
    inputs = case.inputs(0)
    with pytest.raises(ExecutorError, match=r"takes 4 inputs \(x, fc1.weight, fc1.bias, fc2.weight\), got 3"):
        program.run(inputs[:3])
    bad = list(inputs)
    bad[1] = bad[1].double()
    with pytest.raises(ExecutorError, match=r"input 'fc1.weight' must be f32\[16,8\], got torch.float64\[16, 8\]"):
        program.run(bad)
    with pytest.raises(ExecutorError, match="meta program only describes"):
        build(plan, "meta").run(inputs)


# --------------------------------------------------------------------------- the plan reader
def test_plan_errors_are_one_line():
    case = mlp_training_step()
    plan = planned(case.graph)
    missing = dataclasses.replace(plan, groups=[g for g in plan.groups if all(n.op != "gelu_tanh" for n in g.nodes)])
    with pytest.raises(ExecutorError, match=r"runs \w+ before the value f32\[2,4,16\] it reads is computed"):
        build(missing, "cpu")
    doubled = dataclasses.replace(plan, groups=plan.groups + plan.groups[:1])
    with pytest.raises(ExecutorError, match="is in groups 0 and"):
        build(doubled, "cpu")
    gelu = node(plan, "gelu_tanh").outputs[0]
    x = plan.graph.inputs[0].value
    as_alias = dataclasses.replace(plan.memory[gelu], kind="alias", offset=None, alias_of=x,
                                   view=View(gelu.shape, (64, 16, 1), 0))
    with pytest.raises(ExecutorError, match="aliases the result of node .* gelu_tanh, which is not a view op"):
        build(edited(plan, {gelu: as_alias}), "cpu")
    off_the_end = dataclasses.replace(plan.memory[gelu], offset=plan.memory.arena_bytes - 4)
    with pytest.raises(ExecutorError, match=r"node \d+ gelu_tanh \(f32\[2,4,16\]\) at arena offset \d+ needs 512 bytes"):
        build(edited(plan, {gelu: off_the_end}), "cpu")
    with pytest.raises(ExecutorError, match="unknown placement kind 'spilled'"):
        build(edited(plan, {gelu: dataclasses.replace(plan.memory[gelu], kind="spilled")}), "cpu")
    k, i = plan.memory.donations[0]
    with pytest.raises(ExecutorError, match=rf"donates output '{plan.graph.outputs[k].name}' .* into input {i + 1}, "
                                            rf"but it updates input {i}"):
        build(edited(plan, {}, donations=[(k, i + 1)] + plan.memory.donations[1:]), "cpu")


def test_values_without_a_placement_get_scratch():
    """A Nova GEMM group's intermediates (fused: no storage in the plan) that the CPU program still
    computes live in the group result's bytes; a value the plan leaves out entirely gets scratch."""
    graph = linear_bias_gelu()
    plan = planned(graph)
    (group,) = plan.groups
    assert group.kernel == "nova" and group.epilogue.describe() == "bias+gelu"
    mm, biased = (n.outputs[0] for n in group.nodes[:2])
    y = group.nodes[2].outputs[0]
    assert plan.memory[mm].kind == plan.memory[biased].kind == "fused" and plan.memory[y].kind == "arena"
    inputs = random_inputs(graph, 3)
    ref = interpreter.run(graph, [x.clone() for x in inputs])
    program = build(plan, "cpu", poison=True)
    assert_close(graph, program.run(inputs), ref)
    assert program.stats["scratch_bytes"] == 0
    assert span(program.value_tensor(mm)) == span(program.value_tensor(biased)) == span(program.value_tensor(y))
    unplaced = edited(plan, {mm: None, biased: None})
    program = build(unplaced, "cpu", poison=True)
    assert_close(graph, program.run(inputs), ref)
    assert program.stats["scratch_bytes"] == scratch_bytes([mm, biased]) == 2 * 64 * 48 * 4
    assert program.stats["peak_bytes"] == plan.memory.peak_bytes
    for v in (mm, biased):
        assert program.loc[v][0] == "scratch"


# --------------------------------------------------------------------------- optimizer variants
@pytest.mark.parametrize("op, hyper, attrs", [
    ("adamw", [1e-2, 0.8, 0.99, 1e-6, 0.0], dict(maximize=True, decoupled=True)),
    ("adamw", [1e-2, 0.8, 0.99, 1e-6, 0.1], dict(decoupled=False)),
    ("sgd", [0.1, 0.0, 0.0, 0.0], {}),
    ("sgd", [0.1, 0.9, 0.1, 0.1], dict(with_momentum=True, maximize=True)),
    ("sgd", [0.1, 0.9, 0.0, 0.0], dict(with_momentum=True, nesterov=True)),
], ids=["adamw-maximize", "adam-coupled-decay", "sgd", "sgd-momentum", "sgd-first-step"])
def test_optimizer_variants(op, hyper, attrs):
    g = Graph("opt")
    t = TensorType((5, 7), "f32")
    p = g.input(t, "p", "param")
    grad = g.input(t, "g", "grad")
    extra = []
    if op == "adamw":
        extra = [g.input(t, "m", "opt_state"), g.input(t, "v", "opt_state"), g.input(TensorType((), "i64"), "step", "opt_state")]
    extra.append(g.input(TensorType((len(hyper),), "f64"), "hyper", "opt_state"))
    if attrs.get("with_momentum") and not attrs.get("nesterov"):
        extra.append(g.input(t, "buf", "opt_state"))
    res = g.op(op, p, grad, *extra, **attrs)
    res = res if isinstance(res, tuple) else (res,)
    updates = [0, 2, 3] if op == "adamw" else [0, 3 if len(extra) > 1 else None]
    for k, r in enumerate(res):
        g.output(r, f"out{k}", "param" if k == 0 else "opt_state", updates=updates[k])

    def make(gen, device):
        xs = [torch.randn(5, 7, generator=gen) for _ in range(2)]
        if op == "adamw":
            xs += [torch.randn(5, 7, generator=gen) * 0.1, torch.rand(5, 7, generator=gen) * 0.01, torch.tensor(4)]
        xs.append(torch.tensor(hyper, dtype=torch.float64))
        if len(extra) > 1 and op == "sgd":
            xs.append(torch.randn(5, 7, generator=gen))
        return xs
    case = Case(g, make)
    plan = planned(g)
    assert len(plan.memory.donations) == sum(u is not None for u in updates[:len(res)])
    for donate in (True, False):
        program, got, ref, _ = run_both(case, plan if donate else slot_per_value(plan, donate=False))
        assert_close(g, got, ref)
        assert program.stats["donated_outputs"] == (len(plan.memory.donations) if donate else 0)


# --------------------------------------------------------------------------- the Nova GEMM lowering
class EmulatedNova:
    """``nova.matmul``'s contract on CPU tensors (2-D operands row-major or transposed, or 3-D
    batches of such matrices with any batch stride; a row-major output, [B, M, N] batched; [N]
    bias, relu/gelu/silu, a residual and a pre-activation output laid out as the output),
    recording each launch as ``problem_tuples`` does its problem."""

    def __init__(self):
        self.launches = []
        self.rounded = []                   # per launch: round_through (the result rounded to a's type first)

    def __call__(self, a, b, *, out, bias=None, activation="none", target=None, deterministic=None, residual=None,
                 preactivation=None, round_through=False, activation_grad=False):
        from nova.kernels.gemm.problem import GemmProblem
        from nova.runtime.tensors import is_c_contiguous

        def transposed(name, t):
            rows, cols = t.shape[-2:]
            row_major = is_c_contiguous((rows, cols), t.stride()[-2:])
            assert row_major or is_c_contiguous((cols, rows), t.stride()[-2:][::-1]), name
            return not row_major
        assert a.dim() == b.dim() == out.dim() and a.dim() in (2, 3)
        ta, tb = transposed("a", a), transposed("b", b)
        assert is_c_contiguous(out.shape[-2:], out.stride()[-2:])
        assert out.shape[-2:] == (a.shape[-2], b.shape[-1]) and a.shape[:-2] == b.shape[:-2] == out.shape[:-2]
        assert a.dtype == b.dtype and (bias is None or bias.shape == (b.shape[-1],))
        (M, K), N, batch = a.shape[-2:], b.shape[-1], {}
        if a.dim() == 3 and out.shape[0] > 1:
            strides = [t.stride(0) if t.shape[0] > 1 else 0 for t in (a, b, out)]
            batch = dict(zip(("batch", "batch_stride_a", "batch_stride_b", "batch_stride_c"), [out.shape[0]] + strides))
        for t in (residual, preactivation):
            assert t is None or (t.shape == out.shape and t.stride() == out.stride() and t.dtype == out.dtype)
        self.launches += problem_tuples([GemmProblem(M, N, K, "tf32", ta, tb, bias is not None, activation, **batch,
                                                     residual=residual is not None,
                                                     preactivation=preactivation is not None)])
        pre = a @ b + (bias if bias is not None else 0)
        if activation_grad:                 # (a @ b + bias) * gelu'(R), R the saved pre-activation
            assert activation == "gelu" and residual is not None and preactivation is None
            self.launches.append(self.launches.pop() + ("dgelu",))
            out.copy_(torch.ops.aten.gelu_backward(pre, residual, approximate="tanh"))
            return out
        r = {"none": pre, "relu": torch.relu(pre), "silu": torch.nn.functional.silu(pre),
             "gelu": torch.nn.functional.gelu(pre, approximate="tanh")}[activation]
        self.rounded.append(bool(round_through))
        if round_through:
            assert a.dtype in (torch.bfloat16, torch.float16) and out.dtype == torch.float32
            r = r.to(a.dtype).to(out.dtype)
        if residual is not None:
            r = r + residual
        if preactivation is not None:
            preactivation.copy_(pre)
        out.copy_(r)
        return out


def problem_tuples(problems):
    return [(p.M, p.N, p.K, p.trans_a, p.trans_b, p.bias, p.activation)
            + ((p.batch, p.batch_stride_a, p.batch_stride_b, p.batch_stride_c) if p.batch > 1 else ())
            + (("preact",) if p.preactivation else ()) + (("residual",) if p.residual else ())
            + (("dgelu",) if p.activation_grad else ()) for p in problems]


@pytest.mark.parametrize("name", ["linear", "mlp", "attention", "grouped", "bmm"])
def test_nova_lowering_with_an_emulated_nova(name):
    case = ALL_CASES[name]()
    plan = planned(case.graph)
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, plan, gemm=nova)
    assert_close(case.graph, got, ref)
    assert len(nova.launches) == program.stats["nova_gemm_launches"]
    assert set(problem_tuples(gemm_problems(plan))) == set(nova.launches)
    # the planner sends to ATen what Nova cannot run (grouped: a batched right operand)
    assert program.stats["torch_gemms"] == sum(g.kind == "gemm" and g.kernel != "nova" for g in plan.groups)


@pytest.mark.parametrize("make", [transformer_step, linear_bias_gelu, lambda: mlp_training_step().graph,
                                  lambda: attention_block(B=2, T=40, heads=4, D=16).graph],
                         ids=["transformer_step", "linear_bias_gelu", "mlp", "attention"])
def test_the_planners_gemm_problems_are_the_launched_ones(make):
    """Each Nova group's ``Group.problem`` (what the configurator schedules for it) is exactly the
    GEMM the CUDA program launches for it (epilogue included); ATen groups launch torch.matmul."""
    plan = planned(make())
    program = build(plan, "meta")
    launched = {}
    for launch in program.launches:
        for gl in launch.gemms:
            launched.setdefault(launch.group, []).extend(gl.problems() if gl.backend == "nova" else ["torch"])
    for i, g in enumerate(plan.groups):
        if g.kind == "gemm" and g.kernel == "nova":          # (rows groups: nova/passes/rows.py)
            assert launched[i] == [g.problem], g.reason
            launch = program.launches[[l.group for l in program.launches].index(i)]     # a reshape inside an
            assert launch.gemms[0].epilogue == [n for n in g.nodes[1:] if n.op != "reshape"]   # epilogue: a view
        elif g.kind == "gemm":
            assert launched[i] == ["torch"], g.reason
    assert program.stats["scratch_bytes"] == 0 and not program.stats["fallbacks"]


def test_linear_layers_flatten_and_fuse_their_epilogue():
    case = linear_inference(B=2, T=4, C=8, H=16)
    plan = planned(case.graph)
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, plan, gemm=nova)
    assert_close(case.graph, got, ref)
    # [2,4,8] x [16,8]^T + bias, gelu: one launch on the flattened rows; the second linear's output
    # is a graph output, so its relu runs in the epilogue with that output written beside it
    assert nova.launches == [(8, 16, 8, False, True, True, "gelu"), (8, 8, 16, False, True, False, "relu", "preact")]
    assert program.stats["fused_epilogue_nodes"] == 3
    from nova.kernels.gemm.problem import GemmProblem
    expected = [GemmProblem(8, 16, 8, "tf32", False, True, True, "gelu", "f32"),
                GemmProblem(8, 8, 16, "tf32", False, True, False, "relu", "f32", preactivation=True)]
    assert gemm_problems(plan) == expected == [g.problem for g in plan.groups if g.kind == "gemm" and g.kernel == "nova"]


def test_training_step_keeps_the_pre_activation_and_loops_true_batches():
    mlp = mlp_training_step(B=2, T=4, C=8, H=16, V=12)
    nova = EmulatedNova()
    run_both(mlp, planned(mlp.graph), gemm=nova)
    # the first linear runs gelu in its epilogue and writes gelu's input beside it (its backward reads
    # it: the pre-activation output); weight gradients read the activations transposed in place (trans_a)
    assert nova.launches[:2] == [(8, 16, 8, False, True, True, "gelu", "preact"), (8, 12, 16, False, True, True, "none")]
    assert (12, 16, 8, True, False, False, "none") in nova.launches
    grouped = grouped_attention(B=2, Hq=4, Hk=2)
    plan = planned(grouped.graph)
    (scores,) = [g for g in plan.groups if g.kind == "gemm"]
    # k's first head of each batch element, broadcast over the 4 query heads: (b, h) -> b * 96, not
    # one stride over the flat (b, h)
    assert scores.kernel == "aten" and "the batch axes of b" in scores.reason
    nova = EmulatedNova()
    program, got, ref, _ = run_both(grouped, plan, gemm=nova)
    assert_close(grouped.graph, got, ref)
    assert not nova.launches and program.stats["torch_gemms"] == 1
    # a plan that gives the batched matmul to Nova anyway: the bound views are no one launch
    forced = edited_gemm(plan, scores, GemmProblem(24, 6, 8, "tf32", False, True))
    nova = EmulatedNova()
    program, got, ref, _ = run_both(grouped, forced, gemm=nova)
    assert_close(grouped.graph, got, ref)
    assert not nova.launches and program.stats["torch_gemms"] == 1
    assert any("batch axes that do not merge into one stride" in f for f in program.stats["fallbacks"])


def test_true_batched_matmuls_are_one_batched_nova_gemm_each():
    """A step of true batched matmuls ([B, H, T, D] attention and its backward, transposes read in
    place): the plan gives each matmul one batched Nova GEMM of B*H matrices, the executor launches
    exactly those problems once each, and the step matches the interpreter."""
    case = batched_attention_step(B=2, H=3, T=6, D=4)
    plan = planned(case.graph)
    gemms = [g for g in plan.groups if g.kind == "gemm"]
    assert len(gemms) == 6 and all(g.kernel == "nova" and g.problem.batch == 6 for g in gemms), \
        [g.reason for g in gemms]
    assert all("gemm 6x" in g.reason for g in gemms)                  # the plan's reason names the batch
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, plan, gemm=nova)
    assert_close(case.graph, got, ref)
    assert sorted(nova.launches) == sorted(problem_tuples(g.problem for g in gemms))
    assert set(problem_tuples(gemm_problems(plan))) == set(nova.launches)
    assert program.stats["nova_gemm_launches"] == 6 and program.stats["torch_gemms"] == 0
    assert sorted({(p.trans_a, p.trans_b) for p in gemm_problems(plan)}) == [(False, False), (False, True),
                                                                               (True, False)]


def test_layouts_nova_cannot_read_fall_back_to_torch():
    g = Graph("strided")
    x = g.input(TensorType((8, 16), "f32"), "x", "data")
    w = g.input(TensorType((16, 4), "f32"), "w", "param")
    odd = g.op("slice", x, axis=1, start=0, end=16, step=2)          # every other column: no GEMM layout
    g.output(g.op("matmul", odd, g.op("slice", w, axis=0, start=0, end=8)), "y")
    case = Case(g, lambda gen, device: [torch.randn(8, 16, generator=gen), torch.randn(16, 4, generator=gen)])
    plan = planned(g)
    (mm,) = [grp for grp in plan.groups if grp.kind == "gemm"]
    assert mm.kernel == "aten" and "not dense" in mm.reason              # the planner already knows
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, plan, gemm=nova)
    assert_close(g, got, ref)
    assert not nova.launches and program.stats["torch_gemms"] == 1 and not program.stats["fallbacks"]
    nova = EmulatedNova()                                                 # a plan that asks for Nova anyway
    program, got, ref, _ = run_both(case, edited_gemm(plan, mm, GemmProblem(8, 4, 8, "tf32")), gemm=nova)
    assert_close(g, got, ref)
    assert not nova.launches and program.stats["torch_gemms"] == 1
    assert any("neither row-major nor transposed" in f for f in program.stats["fallbacks"])
    assert layout(torch.empty(3, 5).mT) == "col" and layout(torch.empty(3, 5)[:, ::2]) is None


def test_plans_that_overlap_live_values_are_refused():
    case = mlp_training_step()
    plan = planned(case.graph)
    h_b = node(plan, "gelu_tanh").inputs[0]                     # read again by gelu's backward
    rstd = node(plan, "layer_norm").outputs[2]                   # read again by the norm's backward
    assert plan.memory[h_b].kind == plan.memory[rstd].kind == "arena"
    clash = dataclasses.replace(plan.memory[rstd], offset=plan.memory[h_b].offset)
    with pytest.raises(ExecutorError, match=r"the plan puts f32\[2,4,1\] \(live over launches \d+\.\.\d+\) and "
                                            r"f32\[2,4,16\] .* on the same arena bytes"):
        build(edited(plan, {rstd: clash}), "cpu")
    # an elementwise node writing its result over the input it reads last is fine (in place): the
    # planner does it, and a hand-made plan may too
    g = Graph("in_place")
    x = g.input(TensorType((4, 4), "f32"), "x", "data")
    e = g.op("exp", x)
    t = g.op("tanh", e)
    s = g.op("sin", t)
    g.output(s, "y")
    p = node_groups(g)
    assert p.memory[t].reuses is e and p.memory[s].reuses is t
    assert p.memory[t].offset == p.memory[e].offset == p.memory[s].offset
    assert_close(g, build(p, "cpu").run([torch.ones(4, 4)]), [torch.ones(4, 4).exp().tanh().sin()])
    slots = slot_per_value(p)
    assert slots.memory[t].offset != slots.memory[e].offset
    p = edited(slots, {t: dataclasses.replace(slots.memory[t], offset=slots.memory[e].offset)})
    assert_close(g, build(p, "cpu").run([torch.ones(4, 4)]), [torch.ones(4, 4).exp().tanh().sin()])


def test_meta_program_describes_the_cuda_program():
    """Without a GPU: the CUDA program's kernels (efficient attention, its padded log-sum-exp
    workspace, Nova GEMMs) and the precompile commands of its GEMMs."""
    case = attention_block(B=2, T=40, heads=4, D=16)
    program = build(planned(case.graph), "meta")
    s = program.stats
    assert s["workspace_bytes"] == 2 * 4 * 64 * 4                  # lse of T = 40 padded to 64 rows
    assert s["copies"] == 2 + 4 and s["nova_gemm_launches"] == 6 and s["torch_gemms"] == 0
    text = program.describe()
    assert "_scaled_dot_product_efficient_attention_backward (lse padded" in text and "nova gemm 80x192x64 tf32 NT" in text
    from nova.compiler.executor import precompile_commands
    commands = precompile_commands(program.gemm_problems(), "h200")
    assert commands[0].startswith("nova precompile gemm --shapes 80x") and "--target h200 --dtype tf32" in commands[0]
    shapes = [shape for c in commands for shape in c.split("--shapes ")[1].split(" ")[0].split(",")]
    assert len(shapes) == len(program.gemm_problems())


def test_gpt_step_attention_reads_its_strided_views_without_copies(monkeypatch):
    """A GPT step's attention (head dimension 64: Nova's kernels) as a meta CUDA program: q, k, v are
    views of the fused qkv projection and dout a transposed view of the output projection's gradient;
    the kernels address them in place (no copies), and the precompile list (``step_kernels``) holds the
    problems with exactly those strides, the forward's and the backward's kernels once each."""
    from nova.compiler.explain import plan_training_step
    from nova.compiler.precompile import step_kernels
    from nova import models
    from nova.models import gpt
    cfg = gpt.GPTConfig(vocab_size=64, n_embd=128, n_layer=2, n_head=2, block_size=32)
    monkeypatch.setitem(models.MODELS, "d64", (gpt.GPT, cfg))       # the registry first (built without d64)
    monkeypatch.setitem(gpt.CONFIGS, "d64", cfg)
    planned, _ = plan_training_step("d64", 2, 24)
    program = build(planned, "meta")
    kernels = [k for launch in program.launches for k in launch.kernels if k.attention]
    assert len(kernels) == 2 * 2 and [k.copies for k in kernels] == [0] * 4
    assert not any("copy" in k.what for k in kernels)
    kernels = step_kernels(planned)
    gemms, attention = kernels.gemms, kernels.attention
    assert gemms == program.gemm_problems() and attention == program.attention_kernels()
    (fwd, fwd_roles), (bwd, bwd_roles) = attention
    assert fwd_roles == ("fwd",) and bwd_roles == ("bwd_pre", "bwd_dkv", "bwd_dq")
    qkv = (24 * 3 * 128, 64, 3 * 128)                      # [B, T, 3, H, D] -> [B, H, T, D]
    merged = (24 * 128, 64, 128)                           # [B, T, H, D] -> [B, H, T, D]
    # the forward writes out with its heads merged ([B, T, H, D]: the output projection reads it
    # without a copy); the backward writes dq, dk, dv into their slices of the fused projection's
    # gradient [B, T, 3, H, D] (the concat launches nothing)
    assert dict(fwd.strides) == {"q": qkv, "k": qkv, "v": qkv, "out": merged}
    assert dict(bwd.strides) == {"q": qkv, "k": qkv, "v": qkv, "out": merged, "dout": merged,
                                 "dq": qkv, "dk": qkv, "dv": qkv}
    assert fwd.for_role("fwd") == bwd.for_role("fwd")      # one forward kernel


def test_no_fusion_when_the_epilogue_result_reuses_an_operand():
    """A plan may put ``add(matmul(a, w), b)`` on ``a``'s bytes (``a`` is dead after the matmul),
    against the planner's own rule (a fused group's result is reserved from the launch's start);
    a fused launch would write them while reading ``a``, so the group runs unfused on torch.matmul
    and ATen, noted (and the product gets scratch instead of the result's bytes)."""
    g = Graph("reuse_operand")
    x = g.input(TensorType((8, 16), "f32"), "x", "data")
    w = g.input(TensorType((4, 16), "f32"), "w", "param")
    b = g.input(TensorType((4,), "f32"), "b", "param")
    a = g.op("exp", x)
    mm = g.op("matmul", a, w, transpose_b=True)
    y = g.op("add", mm, b)
    g.output(y, "y")
    case = Case(g, lambda gen, device: [torch.randn(8, 16, generator=gen), torch.randn(4, 16, generator=gen),
                                        torch.randn(4, generator=gen)])
    plan = planned(g)
    a, y = node(plan, "exp").outputs[0], node(plan, "add").outputs[0]
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, plan, gemm=nova)
    assert_close(g, got, ref)
    assert program.stats["fused_epilogue_nodes"] == 1 and nova.launches[0][5]          # fused when apart
    assert program.stats["scratch_bytes"] == 0
    bad = edited(plan, {y: dataclasses.replace(plan.memory[y], offset=plan.memory[a].offset)})
    with pytest.raises(AssertionError, match="overlap"):
        validate_memory_plan(bad.graph, bad.groups, bad.memory)
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, bad, gemm=nova)
    assert_close(g, got, ref)
    assert program.stats["fused_epilogue_nodes"] == 0 and not nova.launches and program.stats["torch_gemms"] == 1
    assert any("shares bytes with an operand" in f for f in program.stats["fallbacks"])
    assert program.stats["scratch_bytes"] == scratch_bytes([node(bad, "matmul").outputs[0]]) == 256


def test_unsafe_donations_are_refused():
    case = mlp_training_step()
    plan = planned(case.graph)
    graph = plan.graph
    # run fc1.weight's (donated) update before the last matmul that reads the old weight
    w1 = graph.inputs[4].value
    assert graph.inputs[4].name == "fc1.weight"
    reader = [n for n in plan.order if n.op == "matmul" and w1 in n.inputs][-1]
    merged = next(grp for grp in plan.groups if grp.nodes[0].op == "adamw" and any(n.inputs[0] is w1 for n in grp.nodes))
    node = next(n for n in merged.nodes if n.inputs[0] is w1)          # fc1.weight's update, alone
    update = dataclasses.replace(merged, nodes=[node], inputs=list(node.inputs), outputs=list(node.outputs))
    rest = dataclasses.replace(merged, nodes=[n for n in merged.nodes if n is not node])
    groups = [rest if grp is merged else grp for grp in plan.groups]
    at = next(k for k, grp in enumerate(groups) if reader in grp.nodes)
    groups[at:at] = [update]
    with pytest.raises(ExecutorError, match=r"donates 'fc1.weight' into input 'fc1.weight', written at launch \d+ "
                                            r"\(adamw\), but matmul reads that input at launch \d+"):
        build(dataclasses.replace(plan, groups=groups), "cpu")


# --------------------------------------------------------------------------- the GPU tests' helpers, on CPU
def test_gpu_cases_plan_and_describe_on_meta():
    """tests/test_executor_gpu.py's cases through the real pipeline as meta (CUDA) programs, its
    precompile list and its float64 reference (``widen``), here where no GPU runs them."""
    import test_executor_gpu as gpu
    for name, make in gpu.CASES.items():
        case = make()
        plan = planned(case.graph)
        gpu.check_gemm_backends(plan, build(plan, "meta"))
    problems = gpu.all_problems()
    assert problems and set(problems) >= {g.problem for g in planned(gpu.CASES["mlp"]().graph).groups
                                          if g.kind == "gemm" and g.problem}
    from nova.compiler.executor import precompile_commands
    assert all(c.startswith("nova precompile gemm --shapes ") for c in precompile_commands(problems, "h200"))
    case = mlp_training_step()
    inputs = case.inputs(0)
    ref64 = gpu.reference64(case.graph, inputs)
    assert all(r.dtype == torch.float64 for r, x in zip(ref64, interpreter.run(case.graph, inputs)) if x.is_floating_point())
    gpu.assert_close(case.graph, interpreter.run(case.graph, inputs), ref64, "f32 interpreter", tol=1e-5)


def test_cuda_attention_kernels_with_emulated_efficient_attention(monkeypatch):
    """The CUDA branch of the attention kernels on CPU, with ATen's efficient-attention contract
    emulated: the forward returns the log-sum-exp padded to 32 rows with +inf, the backward
    requires that padding; grouped-query heads repeated and their gradients summed."""
    import types
    from nova.compiler import aten_kernels as ak
    real = torch.ops.aten

    def forward(q, k, v, bias, compute_lse, dropout, causal, *, scale):
        out, lse = real._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout, causal, scale=scale)
        t = q.shape[2]
        padded = torch.full(q.shape[:2] + (-(-t // 32) * 32,), math.inf)
        padded[..., :t] = lse
        return out.transpose(1, 2).contiguous().transpose(1, 2), padded, torch.empty(()), torch.empty(())

    def backward(dout, q, k, v, bias, out, lse, seed, offset, dropout, mask, causal, *, scale):
        t = q.shape[2]
        assert lse.shape[-1] % 32 == 0 and bool(torch.isinf(lse[..., t:]).all()) and k.shape[1] == q.shape[1]
        return (*real._scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse[..., :t].contiguous(),
                                                                          dropout, causal, scale=scale), None)

    fake = types.SimpleNamespace(_scaled_dot_product_efficient_attention=forward,
                                 _scaled_dot_product_efficient_attention_backward=backward)
    monkeypatch.setattr(ak, "aten", fake)
    case = grouped_attention(B=2, Hq=4, Hk=2, Tq=40, Tk=40, D=8)
    ins = case.inputs(3)
    fwd, bwd = case.graph.nodes[0], case.graph.nodes[1]
    ctx = ak.KernelContext("cuda", torch.device("cpu"))
    o, lse = (torch.full(v.type.shape, math.nan) for v in fwd.outputs)
    kernel = ak.attention(fwd, ins[:3], [o, lse], ctx)
    kernel.run()
    grads = [torch.full(v.type.shape, math.nan) for v in bwd.outputs]
    kernel_b = ak.attention_backward(bwd, [ins[3], *ins[:3], o, lse], grads, ctx)
    kernel_b.run()
    ref = interpreter.run(case.graph, ins)
    for got, want in zip([o, lse, *grads], ref[:5]):
        assert rel_error(got, want) < TOL
    assert kernel.copies == 2 and kernel_b.copies == 4 and ctx.workspace_bytes == 2 * 4 * 64 * 4


# --------------------------------------------------------------------------- per-call storage
def apart(graph, donated=frozenset()):
    from nova.passes import pipeline
    from nova.passes.memory import Handoff
    return pipeline(graph, handoff=Handoff(outputs_apart=True, donated_inputs=frozenset(donated)))


def test_per_call_outputs_are_handed_over_without_copies_and_outlive_the_next_run(monkeypatch):
    """A per-call program returns the output region's buffers themselves (no clone); a run while the
    caller still holds them writes other buffers; once the caller lets go, the next run takes the first
    ones again (same addresses: the binding made for them, no new one); ``release`` frees them all."""
    from torch.multiprocessing.reductions import StorageWeakRef
    from nova.compiler import step_storage
    monkeypatch.setattr(step_storage, "SMALL_OUTPUT", 0)      # every output here is "large"
    case = attention_block()
    plan = apart(case.graph)
    program = build(plan, "cpu", poison=True, per_call=True)
    state = case.inputs(3)                                     # the same tensors each run (parameters), new values

    def inputs(seed):
        for x, y in zip(state, case.inputs(seed)):
            x.copy_(y)
        return state
    first = program.run(inputs(3))
    assert_close(case.graph, first, interpreter.run(case.graph, case.inputs(3)))
    assert program.stats["cloned_outputs"] == 0 and program.stats["output_buffer_bytes"] > 0
    assert "arena" not in program.store                        # the device's shared arena, per run
    kept = [t.clone() for t in first]
    second = program.run(inputs(4))
    assert all(torch.equal(a, b) for a, b in zip(first, kept)), "a returned buffer was written by the next run"
    assert {t.untyped_storage().data_ptr() for t in first}.isdisjoint({t.untyped_storage().data_ptr() for t in second})
    assert_close(case.graph, second, interpreter.run(case.graph, case.inputs(4)))
    addresses = sorted(t.untyped_storage().data_ptr() for t in first)
    rebinds = program.stats["rebinds"]
    del first, kept
    third = program.run(inputs(5))
    assert sorted(t.untyped_storage().data_ptr() for t in third) == addresses
    assert program.stats["rebinds"] == rebinds                 # the first binding again
    assert_close(case.graph, third, interpreter.run(case.graph, case.inputs(5)))
    refs = [StorageWeakRef(t.untyped_storage()) for t in third + second]
    del third, second
    program.release()
    assert all(r.expired() for r in refs), "release keeps a run's output buffers alive"


def test_a_steady_loop_binds_once(monkeypatch):
    """Forward then backward, outputs dropped before the next step (a training loop): every step runs
    at the first step's addresses -- arena and output buffers -- so each program binds once."""
    from nova.compiler import step_storage
    monkeypatch.setattr(step_storage, "SMALL_OUTPUT", 0)
    case = attention_block()
    first, second = build(apart(case.graph), "cpu", per_call=True), build(apart(case.graph), "cpu", per_call=True)
    state = case.inputs(0)
    for step in range(5):
        for x, y in zip(state, case.inputs(step)):
            x.copy_(y)
        out = first.run(state)
        out2 = second.run(state)
        assert_close(case.graph, out2, interpreter.run(case.graph, case.inputs(step)))
        del out, out2
    assert first.stats["rebinds"] == second.stats["rebinds"] == 0 and len(first._bindings) == 1


def test_small_outputs_are_copies_so_a_loop_may_keep_them(monkeypatch):
    """A loop that keeps every step's loss: small outputs come out as copies of one buffer the program
    owns, so keeping them holds no buffer of the program's and every run binds as the first did;
    large outputs still come out as the program's buffers."""
    from nova.compiler import step_storage
    case = attention_block()
    plan = apart(case.graph)
    sizes = sorted(n for _, n in build(plan, "cpu", per_call=True)._pieces)
    monkeypatch.setattr(step_storage, "SMALL_OUTPUT", sizes[0])        # the smallest output is "small"
    program = build(plan, "cpu", per_call=True)
    state = case.inputs(0)
    kept = []
    for step in range(4):
        for x, y in zip(state, case.inputs(step)):
            x.copy_(y)
        out = program.run(state)
        assert_close(case.graph, out, interpreter.run(case.graph, case.inputs(step)))
        small = [t for t in out if t.untyped_storage().nbytes() <= sizes[0]]
        assert small
        kept += small                                                 # the "losses" a loop logs later
        del out
    assert program.stats["rebinds"] == 0
    assert len({t.untyped_storage().data_ptr() for t in kept}) == len(kept)    # each a copy of its own


def test_an_input_the_program_never_reads_is_not_bound():
    """AOTAutograd hands a backward the forward's attention seeds (CPU tensors, new each step) that the
    program never reads: they are neither bound (no device check, not in the binding's key) nor staged."""
    g = Graph("seed")
    x = g.input(TensorType((8, 8), "f32"), "x", "data")
    g.input(TensorType((), "i64"), "seed", "data")
    g.output(g.op("exp", x), "y")
    program = build(apart(g), "cpu", per_call=True, in_place={0, 1})
    x = torch.randn(8, 8)
    for k in range(3):
        (y,) = program.run([x, torch.tensor(k)])
        torch.testing.assert_close(y, torch.exp(x))
        del y
    assert program.stats["rebinds"] == 0


def test_programs_share_one_arena_per_device():
    """The per-call programs of a device run their intermediates in one buffer as large as the largest
    need; it is freed once no program holds it."""
    import gc
    from nova.compiler.step_storage import shared_arena
    small, large = attention_block(T=4), attention_block(T=16)
    programs = [build(apart(c.graph), "cpu", per_call=True) for c in (small, large)]
    needs = [p.stats["step_arena_bytes"] for p in programs]
    assert needs[0] < needs[1]
    for p, c in zip(programs, (small, large)):
        assert_close(c.graph, p.run(c.inputs(1)), interpreter.run(c.graph, c.inputs(1)))
    arena = shared_arena(torch.device("cpu"))
    assert arena.buffer is not None and arena.buffer.numel() >= needs[1]
    programs[1].release()
    assert arena.buffer is not None                             # the small program still runs in it
    del programs
    gc.collect()
    assert arena.buffer is None


def test_in_place_inputs_need_no_static_slot_and_are_not_kept():
    case = attention_block()
    plan = apart(case.graph)
    data = [i for i, s in enumerate(case.graph.inputs) if s.role == "data"]
    staged = build(plan, "cpu", per_call=True)
    program = build(plan, "cpu", per_call=True, in_place=data)
    assert program.stats["in_place_inputs"] == len(data)
    assert program.stats["static_input_bytes"] < staged.stats["static_input_bytes"]
    from torch.multiprocessing.reductions import StorageWeakRef
    inputs = case.inputs(5)
    got = program.run(inputs)
    assert_close(case.graph, got, interpreter.run(case.graph, case.inputs(5)))
    refs = [StorageWeakRef(inputs[i].untyped_storage()) for i in data]
    del inputs, got
    assert all(r.expired() for r in refs), "the program keeps an input it read in place alive"


def test_a_donated_input_receives_the_result_written_in_place():
    g = Graph("donated")
    x = g.input(TensorType((16, 16), "f32"), "x", "data")
    w = g.input(TensorType((16, 16), "f32"), "w", "param")
    g.output(g.op("matmul", g.op("exp", x), w), "y")
    plan = apart(g, donated={0})
    program = build(plan, "cpu", per_call=True)
    xs, ws = torch.randn(16, 16), torch.randn(16, 16)
    given = xs.clone()
    (y,) = program.run([given, ws])
    torch.testing.assert_close(y, torch.exp(xs) @ ws)
    torch.testing.assert_close(given, torch.exp(xs))          # exp(x) was written into x's storage
    assert program.stats["static_input_bytes"] == 0


def test_per_call_bindings_are_kept_by_address(monkeypatch):
    """Runs whose buffers and inputs sit at a kept binding's addresses run its launches (no new
    binding); other addresses bind anew, and only ``BINDINGS_KEPT`` bindings are kept."""
    from nova.compiler import executor
    case = mlp_training_step()
    plan = apart(case.graph)
    program = build(plan, "cpu", per_call=True)
    pools = {k: {area: torch.empty_like(t) for area, t in program._step_storage(torch.device("cpu"), False).items()}
             for k in range(executor.BINDINGS_KEPT + 1)}                # buffers at addresses of their own
    current = {"pool": 0}
    monkeypatch.setattr(program, "_step_storage", lambda device, poison: pools[current["pool"]])
    state = case.inputs(1)
    for pool in [0, 0, 1, 0, 1]:
        current["pool"] = pool
        ref = interpreter.run(case.graph, [x.clone() for x in state])
        assert_close(case.graph, program.run(state), ref)
    assert program.stats["rebinds"] == 1 and len(program._bindings) == 2
    for pool in range(executor.BINDINGS_KEPT + 1):
        current["pool"] = pool
        program.run(state)
    assert len(program._bindings) == executor.BINDINGS_KEPT and program.stats["rebinds"] == executor.BINDINGS_KEPT


@pytest.mark.parametrize("momentum", [False, True])
def test_the_aten_sgd_update_reads_its_gradient_before_writing_over_it(momentum):
    """An update is an elementwise composite, so the memory plan may put a result that is not donated
    over the dying gradient's bytes; the ATen SGD kernel reads every input before writing an output
    (it once copied the old parameter over the gradient first)."""
    import types
    from nova.compiler import aten_kernels as ak
    from nova.ir.ops import ref_sgd
    gen = torch.Generator().manual_seed(0)
    param, grad, buf = (torch.randn(8, 8, dtype=torch.float64, generator=gen) for _ in range(3))
    hyper = torch.tensor([0.1, 0.9, 0.0, 1e-2], dtype=torch.float64)
    want = ref_sgd(torch, param, grad, hyper, *((buf,) if momentum else ()), with_momentum=momentum)
    node = types.SimpleNamespace(attrs={"with_momentum": momentum})
    storage = grad.clone()                                  # the gradient's bytes, reused by an output
    outs = [storage] + ([buf.clone()] if momentum else [])
    ins = [param, storage, hyper] + ([outs[1]] if momentum else [])
    ak.sgd(node, ins, outs, ak.KernelContext("cpu", torch.device("cpu"))).run()
    for got, ref in zip(outs, want):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_the_aten_adamw_update_reads_its_gradient_before_writing_over_it():
    """The foreach AdamW kernel with the new parameter's and the first moment's results over two
    gradients' bytes (neither update donated) gives what it gives with every result apart: the
    gradients are read into their own buffers first."""
    import types
    from nova.compiler import aten_kernels as ak
    gen = torch.Generator().manual_seed(0)
    params, grads, ms = ([torch.randn(8, 8, dtype=torch.float64, generator=gen) for _ in range(2)] for _ in range(3))
    vs = [torch.rand(8, 8, dtype=torch.float64, generator=gen) for _ in range(2)]
    hyper = torch.tensor([1e-2, 0.9, 0.999, 1e-8, 1e-2], dtype=torch.float64)
    step = torch.tensor(3.0, dtype=torch.float64)
    nodes = [types.SimpleNamespace(attrs={"decoupled": True, "maximize": False})] * 2
    ctx = ak.KernelContext("cpu", torch.device("cpu"))

    def run(outs_list, grads_in):
        ins_list = [[params[j], grads_in[j], ms[j], vs[j], step, hyper] for j in range(2)]
        ak.adamw(nodes, ins_list, outs_list, ctx).run()
        return outs_list
    apart = run([[torch.empty_like(t) for t in (p, m, v)] for p, m, v in zip(params, ms, vs)], grads)
    storages = [g.clone() for g in grads]                   # the gradients' bytes, reused by outputs
    over = run([[storages[0], torch.empty_like(ms[0]), torch.empty_like(vs[0])],
                [torch.empty_like(params[1]), storages[1], torch.empty_like(vs[1])]], storages)
    for outs, ref in zip(over, apart):
        for got, r in zip(outs, ref):
            torch.testing.assert_close(got, r, rtol=0, atol=0)
