"""The storage pass (``nova/passes/storage.py``): attention results written in the layout their
readers need, so head merges are views and the concat of dq, dk, dv launches nothing; the memory
plan, the reference runner, the CPU executor and ``explain`` follow the decision.  Numbers are checked
against the IR interpreter (small graphs) and eager PyTorch (the GPT-tiny step)."""
import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from executor_support import rel_error  # noqa: E402
from nova.compiler.executor import ExecutorError, build  # noqa: E402
from nova.ir import Graph, TensorType, interpreter  # noqa: E402
from nova.passes import pipeline, validate_memory_plan  # noqa: E402
from nova.passes import layout as layout_analysis  # noqa: E402
from nova.passes.examples import random_inputs  # noqa: E402
from nova.passes.reference import run_planned  # noqa: E402
from nova.passes.storage import axis_order, invert_chain, plan_storage  # noqa: E402
from nova.passes.layout import Layout  # noqa: E402


# --------------------------------------------------------------------------- small graphs
def merge_graph(B=2, H=2, T=8, D=16, *, also_output=False, also_exp=False, also_sum=False) -> Graph:
    """attention -> permute -> reshape [B*T, H*D] (the head merge) -> matmul."""
    g = Graph("merge")
    f = lambda *s: TensorType(s, "f32")                 # noqa: E731
    q, k, v = (g.input(f(B, H, T, D), n, "data") for n in "qkv")
    w = g.input(f(H * D, H * D), "w", "param")
    o, _ = g.op("attention", q, k, v, scale=1 / math.sqrt(D), causal=True)
    y = g.op("reshape", g.op("permute", o, perm=(0, 2, 1, 3)), shape=(B * T, H * D))
    g.output(g.op("matmul", y, w), "y")
    if also_output:
        g.output(o, "o")
    if also_exp:
        g.output(g.op("exp", o), "exp_o")
    if also_sum:
        g.output(g.op("sum", o, axes=(3,)), "sum_o")
    return g


def concat_graph(B=2, H=2, T=8, D=16, *, dq_also_output=False) -> Graph:
    """attention and its backward; dq, dk, dv merged [B, T, H*D] and concatenated (a fused qkv gradient)."""
    g = Graph("concat")
    f = lambda *s: TensorType(s, "f32")                 # noqa: E731
    q, k, v, dout = (g.input(f(B, H, T, D), n, "data") for n in ("q", "k", "v", "dout"))
    o, lse = g.op("attention", q, k, v, scale=1 / math.sqrt(D), causal=True)
    dq, dk, dv = g.op("attention_backward", dout, q, k, v, o, lse, scale=1 / math.sqrt(D), causal=True)
    merge = lambda d: g.op("reshape", g.op("permute", d, perm=(0, 2, 1, 3)), shape=(B, T, H * D))   # noqa: E731
    merged = [merge(d) for d in (dq, dk, dv)]
    cat = g.op("concat", *merged, axis=2)
    g.output(g.op("exp", g.op("reshape", cat, shape=(B * T, 3 * H * D))), "dqkv")
    g.output(o, "o")
    if dq_also_output:
        g.output(merged[0], "dq_merged")
    return g


def copies(graph, storage=None) -> int:
    layouts = layout_analysis.analyze(graph, storage)
    return sum(layout_analysis.is_copy(n, layouts) for n in graph.nodes)


def check_runs(planned, graph, seed=0):
    """The plan validated, the reference runner and the CPU executor against the interpreter."""
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    inputs = random_inputs(graph, seed)
    want = interpreter.run(graph, [x.clone() for x in inputs])
    for got in (run_planned(planned, [x.clone() for x in inputs]),
                build(planned, "cpu", poison=True).run([x.clone() for x in inputs])):
        errors = {o.name: rel_error(a, b) for o, a, b in zip(graph.outputs, got, want)}
        assert all(e <= 1e-5 for e in errors.values()), errors


# --------------------------------------------------------------------------- the pass
def test_inverting_a_head_merge_gives_the_heads_merged_storage_order():
    g = merge_graph()
    reshape = next(n for n in g.nodes if n.op == "reshape")
    permute = reshape.inputs[0].producer
    y = reshape.outputs[0]
    lay = invert_chain([permute, reshape], Layout(y, y.shape, (32, 1), 0))
    assert lay.strides == (8 * 32, 16, 32, 1) and axis_order(lay) == (0, 2, 1, 3)
    # a reshape that merges axes inverts only where they are adjacent in memory
    flat = Graph("flat")
    x = flat.input(TensorType((24,), "f32"), "x", "data")
    grid = flat.op("reshape", x, shape=(4, 6))
    assert invert_chain([grid.producer], Layout(grid, (4, 6), (6, 1), 0)).strides == (1,)
    assert invert_chain([grid.producer], Layout(grid, (4, 6), (1, 4), 0)) is None       # column-major


def test_attention_output_is_stored_with_its_heads_merged():
    g = merge_graph()
    storage = plan_storage(g)
    o = next(n for n in g.nodes if n.op == "attention").outputs[0]
    (value, lay), = storage.layouts.items()
    assert value is o and lay.root is o and lay.strides == (8 * 32, 16, 32, 1)
    assert copies(g) == 1 and copies(g, storage) == 0
    (why,) = storage.freed.values()
    assert "written in place by the attention kernel in its consumer's layout" in why and "0, 2, 1, 3" in why
    planned = pipeline(g)
    assert planned.memory[planned.graph.nodes[0].outputs[0]].view is not None      # a strided arena root
    assert not any(gr.kind == "view" and gr.kernel == "aten" for gr in planned.groups)
    check_runs(planned, g)


@pytest.mark.parametrize("graph, why", [
    (merge_graph(D=2), "the kernel refuses the strides (a head stride of 8 bytes)"),
    (merge_graph(also_output=True), "the result is a graph output"),
    (merge_graph(also_sum=True), "a reduction reads it in the old layout"),
])
def test_no_storage_order_where_it_is_not_safe(graph, why):
    storage = plan_storage(graph)
    assert not storage.layouts and copies(graph, storage) == copies(graph) == 1, why
    check_runs(pipeline(graph), graph)


def test_an_output_is_stored_with_its_heads_merged_when_handed_over_as_stored():
    """The attention output is also a graph output: kept row-major (a copy for the head merge) unless
    the program hands its outputs over as stored (``Handoff.outputs_apart``: the torch.compile
    backend), where it is stored heads-merged as the trace's kernel stores it and returned so."""
    from nova.passes.memory import Handoff
    g = merge_graph(also_output=True)
    assert not plan_storage(g).layouts
    assert [lay.strides for lay in plan_storage(g, outputs_as_stored=True).layouts.values()] == [(8 * 32, 16, 32, 1)]
    planned = pipeline(g, handoff=Handoff(outputs_apart=True))
    o = planned.graph.outputs[1].value
    assert planned.memory[o].view is not None and planned.memory[o].offset >= planned.memory.output_region[0]
    check_runs(planned, g)
    program = build(planned, "cpu", per_call=True)
    inputs = random_inputs(g, 3)
    y, o_out = program.run([x.clone() for x in inputs])
    assert o_out.stride() == (8 * 32, 16, 32, 1)
    torch.testing.assert_close(o_out, interpreter.run(g, inputs)[1])


def test_dq_dk_dv_are_written_into_the_concat_buffer():
    g = concat_graph()
    storage = plan_storage(g)
    concat = next(n for n in g.nodes if n.op == "concat")
    backward = next(n for n in g.nodes if n.op == "attention_backward")
    cat = concat.outputs[0]
    assert list(storage.assembled) == [concat]
    C = 2 * 16
    for i, d in enumerate(backward.outputs):
        lay = storage.layouts[d]
        assert lay.root is cat and lay.strides == (8 * 3 * C, 16, 3 * C, 1) and lay.offset == i * C
    assert copies(g) == 3 and copies(g, storage) == 0
    # the forward's out, read by the backward only (no view of it copies), keeps its dense layout
    assert next(n for n in g.nodes if n.op == "attention").outputs[0] not in storage.layouts

    planned = pipeline(g)
    mem, order = planned.memory, planned.order
    pg = planned.graph
    (pconcat,) = [n for n in pg.nodes if n.op == "concat"]
    (pbackward,) = [n for n in pg.nodes if n.op == "attention_backward"]
    pcat = pconcat.outputs[0]
    (group,) = [gr for gr in planned.groups if gr.nodes == [pconcat]]
    assert group.kernel == "none" and "launches nothing" in group.reason
    assert all(mem[d].kind == "alias" and mem[d].alias_of is pcat for d in pbackward.outputs)
    assert mem[pcat].live[0] == order.index(pbackward) < order.index(pconcat)      # live from the first write
    program = build(planned, "cpu")
    assert not any(n.op == "concat" for launch in program.launches for n in launch.nodes)
    check_runs(planned, g)


def test_no_assembly_when_a_slice_is_read_elsewhere():
    g = concat_graph(dq_also_output=True)
    storage = plan_storage(g)
    assert not storage.assembled and not any(layout.root.producer.op == "concat" for layout in storage.layouts.values())
    check_runs(pipeline(g), g)


def test_a_buffer_sharing_bytes_with_the_concat_before_the_concat_runs_is_refused():
    """The concat's buffer is written by the attention backward, not the concat: a plan that lets
    the log-sum-exp (last read by that same backward) share its bytes must be refused by the planner's
    validation and by the executor."""
    planned = pipeline(concat_graph())
    mem = planned.memory
    pg = planned.graph
    lse = next(n for n in pg.nodes if n.op == "attention").outputs[1]
    cat = next(n for n in pg.nodes if n.op == "concat").outputs[0]
    assert mem[lse].kind == "arena"
    values = dict(mem.values)
    values[cat] = dataclasses.replace(mem[cat], offset=mem[lse].offset)
    arena = max(mem.arena_bytes, mem[lse].offset + -(-mem[cat].nbytes // 256) * 256)
    broken = dataclasses.replace(planned, memory=dataclasses.replace(mem, values=values, arena_bytes=arena))
    with pytest.raises(AssertionError, match="overlap in time and in the arena"):
        validate_memory_plan(broken.graph, broken.groups, broken.memory)
    with pytest.raises(ExecutorError, match="on the same arena bytes"):
        build(broken, "cpu")


# --------------------------------------------------------------------------- GPT-tiny
def test_gpt_tiny_plan_has_no_head_merge_copies_nor_concats():
    from pointwise_support import gpt_tiny_planned
    from nova.compiler.explain import explain_planned
    planned = gpt_tiny_planned()
    assert not [gr for gr in planned.groups if gr.kind == "view" and gr.kernel == "aten"]
    concats = [gr for gr in planned.groups if gr.nodes[0].op == "concat"]
    assert concats and all(gr.kernel == "none" for gr in concats)
    described = planned.storage.describe()
    layers = sum(n.op == "attention" for n in planned.graph.nodes)
    assert described["concats_assembled"] == layers and described["copies_removed"] == 4 * layers
    program = build(planned, "meta")
    launched = {n.op for launch in program.launches for n in launch.nodes}
    assert "concat" not in launched and program.stats["launches"].get("view", 0) == 0
    report = explain_planned(planned.graph, planned, "h200")
    assert not [k for k in report["kernels"] if k["name"] in ("reshape", "concat")]
    assert report["storage"] == described


def test_gpt_tiny_first_step_loss_and_every_gradient_match_eager():
    """``nova.compile(backend="executor")`` on CPU, with the attention results in their readers'
    layout, against eager PyTorch: the loss and every parameter's gradient of the first step."""
    import nova
    from nova.models.gpt import GPT
    model, twin = GPT("tiny", seed=0), GPT("tiny", seed=0)

    def grads_step(m):
        def step(idx, targets):
            loss = m(idx, targets)
            loss.backward()
            return loss
        return step

    gen = torch.Generator().manual_seed(3)
    vocab = model.config.vocab_size
    idx, targets = torch.randint(0, vocab, (2, 16), generator=gen), torch.randint(0, vocab, (2, 16), generator=gen)
    compiled = nova.compile(grads_step(model), backend="executor")
    loss = compiled(idx, targets)
    ref = grads_step(twin)(idx, targets)
    assert rel_error(loss, ref.detach()) < 1e-5
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert p.grad is not None and rel_error(p.grad, q.grad) < 1e-4, name
    program = compiled._last.engine.program
    assert program.plan.assembled and program.stats["launches"].get("view", 0) == 0
