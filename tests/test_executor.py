"""CPU tests of the executor (``nova.compiler.executor``): programs built from hand-made IR graphs
planned by the stand-in planner (tests/executor_support.py) against the reference interpreter,
donation, aliasing, arena reuse, stats, the Nova GEMM lowering (with an emulated ``nova.matmul``)
and the plan reader's errors."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from executor_support import (ALL_CASES, Case, Group, MemoryPlan, Placement, Planned, attention_block,
                              grouped_attention, linear_inference, memory_ops_step, mlp_training_step, plan,
                              rel_error)
from nova.compiler.executor import ExecutorError, build, gemm_problems
from nova.compiler.gemm_lowering import layout
from nova.ir import Graph, TensorType, interpreter, opdef

TOL = 1e-5


def run_both(case: Case, planned, seed=0, **kw):
    """(program, outputs, reference outputs, the inputs given to the program)."""
    inputs = case.inputs(seed)
    ref = interpreter.run(case.graph, [x.clone() for x in inputs])
    program = build(planned, "cpu", poison=True, **kw)
    return program, program.run(inputs), ref, inputs


def assert_close(graph, got, ref, tol=TOL):
    errors = {o.name: rel_error(g, r) for o, g, r in zip(graph.outputs, got, ref)}
    bad = {k: e for k, e in errors.items() if not e <= tol}
    assert not bad, f"{graph.name}: outputs off the interpreter: {bad}"


# --------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("mode", ["slot-per-value", "reuse+fused"])
@pytest.mark.parametrize("name", list(ALL_CASES))
def test_program_matches_the_interpreter(name, mode):
    case = ALL_CASES[name]()
    planned = plan(case.graph, reuse=mode != "slot-per-value", fuse_epilogue=mode != "slot-per-value")
    program, got, ref, _ = run_both(case, planned)
    assert_close(case.graph, got, ref)
    assert program.stats["runs"] == 1 and program.stats["scratch_bytes"] == 0


def test_reused_arena_bytes_hold_values_at_different_times():
    case = mlp_training_step()
    planned = plan(case.graph, reuse=True)
    placed = [(v, p) for v, p in planned.memory.values.items() if p.offset is not None]
    overlapping = [(a, b) for i, (a, pa) in enumerate(placed) for b, pb in placed[i + 1:]
                   if pa.offset < pb.offset + pb.nbytes and pb.offset < pa.offset + pa.nbytes]
    assert overlapping, "the reusing planner should let two values share arena bytes"
    assert planned.memory.arena_bytes < sum(p.nbytes for _, p in placed)
    program, got, ref, _ = run_both(case, planned)
    assert_close(case.graph, got, ref)
    a, b = overlapping[0]
    ta, tb = program.value_tensor(a), program.value_tensor(b)
    span = lambda t: (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
    (a0, a1), (b0, b1) = span(ta), span(tb)
    assert a0 < b1 and b0 < a1, "values the plan overlaps must share the program's arena bytes"


# --------------------------------------------------------------------------- donation and outputs
def test_donated_outputs_update_the_inputs_in_place_over_steps():
    case = mlp_training_step()
    graph = case.graph
    planned = plan(graph, reuse=True, fuse_epilogue=True)
    assert len(planned.memory.donations) == sum(o.updates is not None for o in graph.outputs)
    program = build(planned, "cpu", poison=True)
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
    program = build(plan(case.graph, reuse=True, fuse_epilogue=True), "cpu")
    got = program.run(inputs)
    assert_close(case.graph, got, ref)
    assert got[2] is inputs[2] and isinstance(got[2], torch.nn.Parameter) and got[2].requires_grad
    assert not got[0].requires_grad and got[2].grad is None


def test_without_donation_inputs_stay_and_results_are_fresh():
    case = mlp_training_step()
    planned = plan(case.graph, reuse=True, donate=False)
    inputs = case.inputs(2)
    before = [x.clone() for x in inputs]
    program = build(planned, "cpu", poison=True)
    got = program.run(inputs)
    assert all(torch.equal(a, b) for a, b in zip(inputs, before)), "inputs changed without donation"
    assert_close(case.graph, got, interpreter.run(case.graph, before))
    arena = program.store["arena"].untyped_storage().data_ptr()
    for result in got:
        assert result.untyped_storage().data_ptr() != arena
        assert all(result.untyped_storage().data_ptr() != x.untyped_storage().data_ptr() for x in inputs)
    # every adamw output is copied from its input before the in-place update: 3 per parameter, +0 for step's add
    assert program.stats["copies"] == 3 * 6 and program.stats["donated_outputs"] == 0


def test_results_survive_the_next_step():
    case = attention_block()
    program = build(plan(case.graph, reuse=True), "cpu")
    first = program.run(case.inputs(3))
    kept = [t.clone() for t in first]
    second = program.run(case.inputs(4))
    assert all(torch.equal(a, b) for a, b in zip(first, kept)), "a returned tensor was overwritten by the next run"
    assert any(not torch.equal(a, b) for a, b in zip(first, second))


# --------------------------------------------------------------------------- views, constants, stats
def test_free_views_alias_their_base():
    case = attention_block()
    planned = plan(case.graph)
    program, got, ref, _ = run_both(case, planned)
    assert_close(case.graph, got, ref)
    aliases = [v for v, p in planned.memory.values.items() if p.alias_of is not None]
    assert len(aliases) >= 8
    for v in aliases:
        node = v.producer
        view, base = program.value_tensor(v), program.value_tensor(node.inputs[0])
        assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(), node.op
        assert torch.equal(view, opdef(node.op).reference(torch, base, **node.attrs))
    # a view the planner cannot alias (a reshape of a sliced or permuted tensor) is one copy launch:
    # q, k, v split into heads, the heads merged back, and dq, dk, dv merged
    assert program.stats["launches"].get("view", 0) == 7


def expected_launches(planned):
    """Per group kind, the groups that compute something (not only constants or aliased views)."""
    alias = {v for v, p in planned.memory.values.items() if p.alias_of is not None}
    counts = {}
    for g in planned.groups:
        if any(n.op not in ("constant", "iota") and not (n.outputs[0] in alias) for n in g.nodes):
            counts[g.kind] = counts.get(g.kind, 0) + 1
    return counts


@pytest.mark.parametrize("name, copies", [("mlp", 0), ("attention", 5), ("memory", 1), ("grouped", 5)])
def test_stats_count_launches_and_copies(name, copies):
    case = ALL_CASES[name]()
    planned = plan(case.graph, reuse=True, fuse_epilogue=True)
    program = build(planned, "cpu")
    counts = expected_launches(planned)
    assert program.stats["launches"] == dict(sorted(counts.items()))
    assert program.stats["launches_total"] == sum(counts.values())
    assert program.stats["free_groups"] == len(planned.groups) - sum(counts.values())
    assert program.stats["arena_bytes"] == planned.memory.arena_bytes
    assert program.stats["peak_bytes"] == planned.memory.peak_bytes
    # attention: out + lse copied (no out variant), its backward dq/dk/dv; grouped: the same;
    # memory: the opaque aten.cumsum's result; mlp: everything has an out variant
    assert program.stats["copies"] == copies
    program.run(case.inputs(0))
    assert program.stats["copies"] == copies
    text = program.describe()
    assert len(text.splitlines()) == 4 + program.stats["launches_total"] + len(program.stats["fallbacks"])
    assert f"{program.stats['launches_total']} launches" in text


def test_constants_are_filled_once_outside_the_arena():
    case = memory_ops_step()
    planned = plan(case.graph, reuse=True)
    program = build(planned, "cpu", poison=True)
    consts = [n.outputs[0] for n in case.graph.nodes if n.op in ("constant", "iota")]
    for v in consts:
        assert program.loc[v][0] == "const"
    assert program.stats["constants_bytes"] >= 2 * 256
    program.run(case.inputs(0))
    iota = next(n for n in case.graph.nodes if n.op == "iota")
    assert torch.equal(program.value_tensor(iota.outputs[0]), torch.arange(iota.attrs["length"]))
    program.store["arena"].fill_(255)                       # trash every arena byte between steps
    assert_close(case.graph, program.run(case.inputs(1)), interpreter.run(case.graph, case.inputs(1)))


# --------------------------------------------------------------------------- inputs
def test_data_inputs_are_staged_and_replaced_parameters_rebind():
    case = linear_inference()
    program = build(plan(case.graph, reuse=True), "cpu")
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
    program = build(plan(case.graph), "cpu")
    inputs = case.inputs(0)
    with pytest.raises(ExecutorError, match=r"takes 4 inputs \(x, fc1.weight, fc1.bias, fc2.weight\), got 3"):
        program.run(inputs[:3])
    bad = list(inputs)
    bad[1] = bad[1].double()
    with pytest.raises(ExecutorError, match=r"input 'fc1.weight' must be f32\[16,8\], got torch.float64\[16, 8\]"):
        program.run(bad)
    with pytest.raises(ExecutorError, match="meta program only describes"):
        build(plan(case.graph), "meta").run(inputs)


# --------------------------------------------------------------------------- the plan reader
def test_plan_errors_are_one_line():
    case = mlp_training_step()
    planned = plan(case.graph)
    missing = Planned(planned.graph, [g for g in planned.groups if g.nodes[0].op != "log_softmax"],
                      planned.order, planned.memory)
    with pytest.raises(ExecutorError, match=r"runs nll_loss before the value f32\[8,12\] it reads is computed"):
        build(missing, "cpu")
    doubled = Planned(planned.graph, planned.groups + planned.groups[:1], planned.order, planned.memory)
    with pytest.raises(ExecutorError, match="is in groups 0 and"):
        build(doubled, "cpu")
    values = dict(planned.memory.values)
    gelu = next(n for n in case.graph.nodes if n.op == "gelu_tanh").outputs[0]
    values[gelu] = Placement(alias_of=case.graph.inputs[0].value)
    with pytest.raises(ExecutorError, match="aliases the result of node .* gelu_tanh, which is not a view op"):
        build(Planned(planned.graph, planned.groups, planned.order,
                      MemoryPlan(values, planned.memory.arena_bytes, planned.memory.peak_bytes)), "cpu")
    values = dict(planned.memory.values)
    values[gelu] = Placement(planned.memory.arena_bytes - 4, 4)
    with pytest.raises(ExecutorError, match=r"node \d+ gelu_tanh \(f32\[2,4,16\]\) at arena offset \d+ needs 512 bytes"):
        build(Planned(planned.graph, planned.groups, planned.order,
                      MemoryPlan(values, planned.memory.arena_bytes, planned.memory.peak_bytes)), "cpu")


def test_plan_reader_takes_alternative_spellings_and_unplanned_values():
    """Placements under ``.slots`` with ``.alias``, donations as a set of output indices, a dead
    layer-norm statistic left out of the plan (it gets scratch)."""
    case = mlp_training_step()
    planned = plan(case.graph, reuse=True)

    @dataclass
    class Slot:
        offset: int | None
        nbytes: int
        alias: object
        external: bool

    @dataclass
    class Memory:
        slots: dict
        arena_bytes: int
        donated: set

    ln = next(n for n in case.graph.nodes if n.op == "layer_norm")
    slots = {v: Slot(p.offset, p.nbytes, p.alias_of, p.external) for v, p in planned.memory.values.items()
             if v is not ln.outputs[1]}
    memory = Memory(slots, planned.memory.arena_bytes, set(planned.memory.donations))
    program, got, ref, inputs = run_both(case, Planned(case.graph, planned.groups, planned.order, memory))
    assert_close(case.graph, got, ref)
    assert program.stats["scratch_bytes"] == 256 and program.stats["peak_bytes"] == planned.memory.arena_bytes
    assert program.stats["donated_outputs"] == 19


# --------------------------------------------------------------------------- optimizer variants
@pytest.mark.parametrize("attrs", [
    dict(op="adamw", lr=1e-2, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.0, maximize=True),
    dict(op="sgd", lr=0.1),
    dict(op="sgd", lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.1, maximize=True),
    dict(op="sgd", lr=0.1, momentum=0.9, nesterov=True),
], ids=["adamw-maximize", "sgd", "sgd-momentum", "sgd-first-step"])
def test_optimizer_variants(attrs):
    attrs = dict(attrs)
    op = attrs.pop("op")
    g = Graph("opt")
    t = TensorType((5, 7), "f32")
    p = g.input(t, "p", "param")
    grad = g.input(t, "g", "grad")
    extra = []
    if op == "adamw":
        extra = [g.input(t, "m", "opt_state"), g.input(t, "v", "opt_state"), g.input(TensorType((), "i64"), "step", "opt_state")]
    elif attrs.get("momentum") and not attrs.get("nesterov"):
        extra = [g.input(t, "buf", "opt_state")]
    res = g.op(op, p, grad, *extra, **attrs)
    res = res if isinstance(res, tuple) else (res,)
    updates = [0, 2, 3] if op == "adamw" else [0, 2 if extra else None]
    for k, r in enumerate(res):
        g.output(r, f"out{k}", "param" if k == 0 else "opt_state", updates=updates[k])

    def make(gen, device):
        xs = [torch.randn(5, 7, generator=gen) for _ in range(2)]
        if op == "adamw":
            xs += [torch.randn(5, 7, generator=gen) * 0.1, torch.rand(5, 7, generator=gen) * 0.01, torch.tensor(4)]
        elif extra:
            xs.append(torch.randn(5, 7, generator=gen))
        return xs
    case = Case(g, make)
    for donate in (True, False):
        program, got, ref, _ = run_both(case, plan(g, donate=donate))
        assert_close(g, got, ref)


# --------------------------------------------------------------------------- the Nova GEMM lowering
class EmulatedNova:
    """``nova.matmul``'s contract on CPU tensors (2-D operands row-major or transposed, row-major
    output, [N] bias, relu/gelu/silu), recording each launch."""

    def __init__(self):
        self.launches = []

    def __call__(self, a, b, *, out, bias=None, activation="none", target=None):
        from nova.runtime.tensors import is_c_contiguous
        for name, t in (("a", a), ("b", b)):
            assert t.dim() == 2, f"{name} must be 2-D"
            rows, cols = t.shape
            assert is_c_contiguous(t.shape, t.stride()) or is_c_contiguous((cols, rows), t.stride()[::-1]), name
        assert is_c_contiguous(out.shape, out.stride()) and out.shape == (a.shape[0], b.shape[1])
        assert a.dtype == b.dtype and (bias is None or bias.shape == (b.shape[1],))
        self.launches.append((a.shape[0], b.shape[1], a.shape[1], not is_c_contiguous(a.shape, a.stride()),
                              not is_c_contiguous(b.shape, b.stride()), bias is not None, activation))
        r = a @ b + (bias if bias is not None else 0)
        r = {"none": r, "relu": torch.relu(r), "silu": torch.nn.functional.silu(r),
             "gelu": torch.nn.functional.gelu(r, approximate="tanh")}[activation]
        out.copy_(r)
        return out


def problem_tuples(problems):
    return [(p.M, p.N, p.K, p.trans_a, p.trans_b, p.bias, p.activation) for p in problems]


@pytest.mark.parametrize("name", ["linear", "mlp", "attention", "grouped"])
def test_nova_lowering_with_an_emulated_nova(name):
    case = ALL_CASES[name]()
    planned = plan(case.graph, reuse=True, fuse_epilogue=True)
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, planned, gemm=nova)
    assert_close(case.graph, got, ref)
    assert program.stats["torch_gemms"] == 0 and len(nova.launches) == program.stats["nova_gemm_launches"]
    assert set(problem_tuples(gemm_problems(planned))) == set(nova.launches)


def test_linear_layers_flatten_and_fuse_their_epilogue():
    case = linear_inference(B=2, T=4, C=8, H=16)
    planned = plan(case.graph, fuse_epilogue=True)
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, planned, gemm=nova)
    assert_close(case.graph, got, ref)
    # [2,4,8] x [16,8]^T + bias, gelu: one launch on the flattened rows; the second linear's output
    # is a graph output, so its relu stays an ATen kernel
    assert nova.launches == [(8, 16, 8, False, True, True, "gelu"), (8, 8, 16, False, True, False, "none")]
    assert program.stats["fused_epilogue_nodes"] == 2
    from nova.configurator.problem import GemmProblem
    assert gemm_problems(planned) == [GemmProblem(8, 16, 8, "tf32", False, True, True, "gelu", "f32"),
                                      GemmProblem(8, 8, 16, "tf32", False, True, False, "none", "f32")]


def test_training_step_keeps_the_pre_activation_and_loops_true_batches():
    mlp = mlp_training_step(B=2, T=4, C=8, H=16, V=12)
    nova = EmulatedNova()
    run_both(mlp, plan(mlp.graph, fuse_epilogue=True), gemm=nova)
    # forward linears fuse only the bias (gelu's input is read by its backward); weight gradients
    # read the activations transposed in place (trans_a)
    assert nova.launches[:2] == [(8, 16, 8, False, True, True, "none"), (8, 12, 16, False, True, True, "none")]
    assert (12, 16, 8, True, False, False, "none") in nova.launches
    grouped = grouped_attention(B=2, Hq=4, Hk=2)
    nova = EmulatedNova()
    program, got, ref, _ = run_both(grouped, plan(grouped.graph), gemm=nova)
    assert_close(grouped.graph, got, ref)
    assert len(nova.launches) == 2 * 4 and program.stats["nova_gemm_launches"] == 8     # one per (batch, head)


def test_layouts_nova_cannot_read_fall_back_to_torch():
    g = Graph("strided")
    x = g.input(TensorType((8, 16), "f32"), "x", "data")
    w = g.input(TensorType((16, 4), "f32"), "w", "param")
    odd = g.op("slice", x, axis=1, start=0, end=16, step=2)          # every other column: no GEMM layout
    g.output(g.op("matmul", odd, g.op("slice", w, axis=0, start=0, end=8)), "y")
    case = Case(g, lambda gen, device: [torch.randn(8, 16, generator=gen), torch.randn(16, 4, generator=gen)])
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, plan(g), gemm=nova)
    assert_close(g, got, ref)
    assert not nova.launches and program.stats["torch_gemms"] == 1
    assert any("neither row-major nor transposed" in f for f in program.stats["fallbacks"])
    assert layout(torch.empty(3, 5).mT) == "col" and layout(torch.empty(3, 5)[:, ::2]) is None


def test_plans_that_overlap_live_values_are_refused():
    case = mlp_training_step()
    planned = plan(case.graph, reuse=True)
    values = dict(planned.memory.values)
    h_b = next(n for n in case.graph.nodes if n.op == "gelu_tanh").inputs[0]        # read again by gelu's backward
    logp = next(n for n in case.graph.nodes if n.op == "log_softmax").outputs[0]
    values[logp] = Placement(values[h_b].offset, values[logp].nbytes)
    with pytest.raises(ExecutorError, match=r"the plan puts f32\[2,4,16\] \(live over launches \d+\.\.\d+\) and "
                                            r"f32\[8,12\] .* on the same arena bytes"):
        build(Planned(case.graph, planned.groups, planned.order,
                      MemoryPlan(values, planned.memory.arena_bytes, planned.memory.peak_bytes,
                                 planned.memory.donations)), "cpu")
    # an elementwise node writing its result over the input it reads last is fine (in place)
    g = Graph("in_place")
    x = g.input(TensorType((4, 4), "f32"), "x", "data")
    e = g.op("exp", x)
    t = g.op("tanh", e)
    g.output(t, "y")
    p = plan(g)
    p.memory.values[t] = Placement(p.memory.values[e].offset, p.memory.values[e].nbytes)
    program = build(p, "cpu")
    assert_close(g, program.run([torch.ones(4, 4)]), [torch.ones(4, 4).exp().tanh()])


def test_meta_program_describes_the_cuda_program():
    """Without a GPU: the CUDA program's kernels (efficient attention, its padded log-sum-exp
    workspace, Nova GEMMs) and the precompile commands of its GEMMs."""
    case = attention_block(B=2, T=40, heads=4, D=16)
    program = build(plan(case.graph, reuse=True, fuse_epilogue=True), "meta")
    s = program.stats
    assert s["workspace_bytes"] == 2 * 4 * 64 * 4                  # lse of T = 40 padded to 64 rows
    assert s["copies"] == 2 + 4 and s["nova_gemm_launches"] == 6 and s["torch_gemms"] == 0
    text = program.describe()
    assert "_scaled_dot_product_efficient_attention_backward (lse padded" in text and "nova gemm 80x192x64 tf32 NT" in text
    from nova.compiler.executor import precompile_commands
    commands = precompile_commands(program.gemm_problems(), "h200")
    assert commands[0].startswith("nova precompile gemm --shapes 80x192x64,") and "--target h200 --dtype tf32" in commands[0]
    shapes = [shape for c in commands for shape in c.split("--shapes ")[1].split(" ")[0].split(",")]
    assert len(shapes) == len(program.gemm_problems())


def test_no_fusion_when_the_epilogue_result_reuses_an_operand():
    """A plan may put ``add(matmul(a, w), b)`` on ``a``'s bytes (``a`` is dead after the matmul);
    a fused launch would write them while reading ``a``, so the bias add stays separate."""
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
    planned = plan(g, fuse_epilogue=True)
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, planned, gemm=nova)
    assert program.stats["fused_epilogue_nodes"] == 1 and nova.launches[0][5]          # fused when apart
    planned.memory.values[y] = Placement(planned.memory.values[a].offset, planned.memory.values[y].nbytes)
    nova = EmulatedNova()
    program, got, ref, _ = run_both(case, planned, gemm=nova)
    assert_close(g, got, ref)
    assert program.stats["fused_epilogue_nodes"] == 0 and not nova.launches[0][5]


def test_unsafe_donations_are_refused():
    case = mlp_training_step()
    graph = case.graph
    planned = plan(graph, batch_optimizer=False)
    # run fc1.weight's (donated) update before the last matmul that reads the old weight
    w1 = graph.inputs[4].value
    reader = [n for n in graph.nodes if n.op == "matmul" and w1 in n.inputs][-1]
    update = next(n for n in graph.nodes if n.op == "adamw" and n.inputs[0] is w1)
    groups = [grp for grp in planned.groups if update not in grp.nodes]
    at = next(k for k, grp in enumerate(groups) if reader in grp.nodes)
    step_add = next(n for n in graph.nodes if n.op == "add" and n.inputs[0] is graph.inputs[-1].value)
    groups = [grp for grp in groups if step_add not in grp.nodes]
    groups[at:at] = [Group("pointwise", [step_add]), Group("composite", [update])]
    with pytest.raises(ExecutorError, match=r"donates 'fc1.weight' into input 'fc1.weight', written at launch \d+ "
                                            r"\(adamw\), but matmul reads that input at launch \d+"):
        build(Planned(graph, groups, planned.order, planned.memory), "cpu")


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
