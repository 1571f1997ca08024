"""Layouts, scheduling and the memory plan: views alias or copy, donation, in-place reuse, no two
live buffers overlap (checked by the validator and by running the plan over one arena against the
interpreter), peak bounds, determinism; random DAGs with hypothesis."""
import copy
import dataclasses
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nova.ir import Graph, TensorType
from nova.ir import interpreter
from nova.passes import fuse, pipeline, plan_memory, validate_memory_plan
from nova.passes.examples import random_inputs, transformer_step
from nova.passes.layout import view_strides
from nova.passes.memory import Handoff, aligned
from nova.passes.pipeline import format_plan
from nova.passes.reference import run_planned
from nova.passes.schedule import is_topological

F = lambda *shape: TensorType(shape, "f32")          # noqa: E731


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def check_runs(graph, planned, seed=0, int_high=2):
    """The plan validates, and running it over one arena gives the interpreter's results."""
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    inputs = random_inputs(graph, seed, int_high)
    expected = interpreter.run(graph, inputs)
    got = run_planned(planned, [t.clone() for t in inputs])
    for e, r in zip(expected, got):
        torch.testing.assert_close(r, e, equal_nan=True)


# ---------------------------------------------------------------- layouts
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_view_strides_agree_with_torch(data):
    rank = data.draw(st.integers(1, 4))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    base = torch.empty(shape, device="meta")
    perm = data.draw(st.permutations(range(rank)))
    x = base.permute(perm)
    if data.draw(st.booleans()) and x.shape[0] > 1:
        x = x[::2]
    numel = x.numel()
    divisors = [d for d in range(1, numel + 1) if numel % d == 0]
    first = data.draw(st.sampled_from(divisors))
    second = data.draw(st.sampled_from([d for d in divisors if (numel // first) % d == 0]))
    new_shape = (first, second, numel // first // second)
    try:
        expected = tuple(x.view(new_shape).stride())
    except RuntimeError:
        expected = None
    assert view_strides(tuple(x.shape), tuple(x.stride()), new_shape) == expected


def test_views_alias_their_root_and_a_reshape_after_a_permute_is_a_copy():
    g = Graph()
    x = g.input(F(2, 3, 4), "x")
    y = g.op("exp", x)
    flat = g.op("reshape", y, shape=(6, 4))                       # a view of y
    t = g.op("permute", y, perm=(0, 2, 1))                        # a view of y
    merged = g.op("reshape", t, shape=(2, 12))                    # not expressible as strides: a copy
    tail = g.op("slice", flat, axis=0, start=2, end=6, step=2)    # a view of y, offset 8
    for name, v in (("flat", flat), ("merged", merged), ("tail", tail), ("t", t)):
        g.output(v, name)
    planned = pipeline(g)
    mem, pg = planned.memory, planned.graph
    values = {o.name: o.value for o in pg.outputs}
    y_new = values["flat"].producer.inputs[0]
    assert mem[values["flat"]].kind == "alias" and mem[values["flat"]].alias_of is y_new
    assert mem[values["tail"]].view.strides == (8, 1) and mem[values["tail"]].view.offset == 8
    assert mem[values["t"]].view.strides == (12, 1, 4)
    assert mem[values["merged"]].kind == "arena"
    copy_group = next(gr for gr in planned.groups if values["merged"].producer in gr.nodes)
    assert copy_group.kind == "view" and copy_group.kernel == "nova"          # one Nova pointwise copy kernel
    assert copy_group.problem.inputs[0].strides[-1] == 4 and not copy_group.problem.stores
    check_runs(g, planned)


# ---------------------------------------------------------------- the training step
@pytest.fixture(scope="module")
def step():
    graph = transformer_step(layers=2)
    return graph, pipeline(graph)


def test_training_step_plan_is_valid_and_runs_over_one_arena(step):
    graph, planned = step
    check_runs(graph, planned, seed=2, int_high=32)


def test_adamw_updates_are_written_into_their_inputs(step):
    graph, planned = step
    mem, g = planned.memory, planned.graph
    updating = [j for j, o in enumerate(g.outputs) if o.updates is not None]
    params = sum(i.role == "param" for i in graph.inputs)
    assert params == 28 and len(updating) == 3 * params + 1 and [j for j, _ in mem.donations] == updating
    for j, i in mem.donations:
        v = g.outputs[j].value
        assert mem[v].kind == "external" and mem[v].donated and mem[v].input_index == i == g.outputs[j].updates
    inputs = random_inputs(graph, 0, 32)
    storage = [t.clone() for t in inputs]
    results = run_planned(planned, storage)
    for j, i in mem.donations:                  # the new values are in the caller's tensors
        assert torch.equal(storage[i], results[j])


def test_breakdown_and_peak_bounds(step):
    graph, planned = step
    mem, g = planned.memory, planned.graph
    assert sum(mem.breakdown.values()) == mem.peak_bytes == mem.arena_bytes + mem.external_bytes
    params = sum(i.value.type.nbytes for i in g.inputs if i.role == "param")
    assert mem.breakdown["parameters"] == params and mem.breakdown["optimizer_state"] > params
    assert mem.breakdown["gradients"] > 0 and mem.breakdown["activations"] > 0
    roots = [p for p in mem.values.values() if p.kind == "arena"]
    assert mem.peak_bytes <= sum(aligned(p.nbytes) for p in roots) + mem.external_bytes
    assert mem.peak_bytes >= mem.live_peak_bytes >= max_live_set(planned)
    text = format_plan(planned)
    assert "donation: 85 of 85" in text and "epilogue" in text and "arena" in text


def max_live_set(planned):
    """Largest sum of arena bytes live at one position, from the values' own intervals (a value
    written in place over a dying one shares its bytes at the position where one ends and the
    other starts)."""
    mem = planned.memory
    end = len(planned.order)
    best = 0
    for t in range(end + 1):
        best = max(best, sum(aligned(p.nbytes) for p in mem.values.values()
                             if p.kind == "arena" and p.live[0] <= t <= p.live[1]
                             and not (p.reuses is not None and p.live[0] == t)))
    return best + mem.external_bytes


def test_in_place_reuse_takes_a_dying_buffer():
    g = Graph()
    x = g.input(F(64, 64), "x", "data")
    w = g.input(F(64, 64), "w", "param")
    h = g.op("matmul", x, w)                     # arena
    e = g.op("exp", h)                           # h dies here: e takes its buffer
    m = g.op("matmul", e, w)
    g.output(g.op("tanh", m), "y")               # m dies here
    planned = pipeline(g)
    mem, pg = planned.memory, planned.graph
    pairs = [(a.producer.op, b.producer.op) for a, b in mem.inplace()]
    assert ("matmul", "exp") in pairs and ("matmul", "tanh") in pairs
    assert mem.arena_bytes == 2 * 64 * 64 * 4    # two buffers ping-pong
    check_runs(g, planned)


def test_no_in_place_when_the_dying_input_is_read_in_another_layout():
    g = Graph()
    x = g.input(F(32, 32), "x")
    h = g.op("exp", x)
    g.output(g.op("add", h, g.op("permute", h, perm=(1, 0))), "y")   # h + hᵀ: not element for element
    planned = pipeline(g)
    assert planned.memory.inplace() == []
    check_runs(g, planned)


def test_donation_is_refused_when_the_old_value_is_read_after_the_new_one_is_written():
    g = Graph()
    p = g.input(F(16, 16), "p", "param")
    new = g.op("mul", p, g.op("constant", value=0.5, dtype="f32"))
    g.output(new, "p", "param", updates=0)
    # reads the old p, transposed, where the new one is written (one pointwise kernel reads each element
    # of p before writing the same element of new, but p^T's element lies elsewhere)
    g.output(g.op("sub", new, g.op("permute", p, perm=(1, 0))), "delta")
    planned = pipeline(g)
    assert planned.memory.donations == []
    assert planned.memory[planned.graph.outputs[0].value].kind == "arena"
    check_runs(g, planned)


def test_donation_in_place_at_the_producing_node():
    g = Graph()
    step = g.input(TensorType((), "f32"), "step", "opt_state")
    g.output(g.op("add", step, g.op("constant", value=1.0, dtype="f32")), "step", "opt_state", updates=0)
    planned = pipeline(g)
    assert planned.memory.donations == [(0, 0)] and planned.memory.arena_bytes <= 256
    check_runs(g, planned)


def test_the_validator_catches_overlapping_live_buffers(step):
    graph, planned = step
    arena = [(v, p) for v, p in planned.memory.values.items() if p.kind == "arena" and p.live[1] > p.live[0]]
    (a, pa), (b, pb) = next(((x, px), (y, py)) for x, px in arena for y, py in arena
                            if x is not y and px.offset != py.offset
                            and px.live[0] <= py.live[1] and py.live[0] <= px.live[1])
    broken = copy.copy(planned.memory)
    broken.values = dict(planned.memory.values)
    broken.values[b] = dataclasses.replace(pb, offset=pa.offset)
    with pytest.raises(AssertionError, match="overlap"):
        validate_memory_plan(planned.graph, planned.groups, broken)


def test_the_validator_catches_an_unsafe_donation():
    g = Graph()
    p = g.input(F(16, 16), "p", "param")
    new = g.op("exp", p)
    g.output(new, "p", "param", updates=0)
    g.output(g.op("sub", new, g.op("permute", p, perm=(1, 0))), "delta")
    planned = pipeline(g)
    new = planned.graph.outputs[0].value
    broken = copy.copy(planned.memory)
    broken.values = dict(planned.memory.values)
    broken.values[new] = dataclasses.replace(broken.values[new], kind="external", offset=None, input_index=0,
                                             donated=True)
    broken.donations = [(0, 0)]
    with pytest.raises(AssertionError, match="read after"):
        validate_memory_plan(planned.graph, planned.groups, broken)


def test_same_graph_same_plan():
    a, b = pipeline(transformer_step()), pipeline(transformer_step())
    assert format_plan(a) == format_plan(b)
    offsets = lambda p: [(v.kind, v.offset, v.input_index) for v in p.memory.values.values()]   # noqa: E731
    assert offsets(a) == offsets(b) and [n.op for n in a.order] == [n.op for n in b.order]


def test_schedule_is_never_worse_than_program_order(step):
    graph, planned = step
    program = fuse(planned.graph)
    assert plan_memory(planned.graph, program).arena_bytes >= planned.memory.arena_bytes
    assert is_topological(planned.groups)


# ---------------------------------------------------------------- random DAGs
SHAPES = [(4, 6), (6, 4), (6,), (24,), (2, 3, 4)]
UNARY = ["exp", "tanh", "neg", "relu", "gelu_tanh", "sigmoid"]
BINARY = ["add", "mul", "sub", "maximum"]


@st.composite
def random_graphs(draw):
    g = Graph("random")
    pool = []
    for i in range(draw(st.integers(1, 3))):
        shape = draw(st.sampled_from(SHAPES))
        pool.append(g.input(F(*shape), f"in{i}", draw(st.sampled_from(["param", "data", "opt_state"]))))
    for _ in range(draw(st.integers(1, 16))):
        x = draw(st.sampled_from(pool))
        choice = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "reshape", "permute", "slice",
                                       "expand", "matmul", "constant", "linear", "flatten_transposed"]))
        if choice == "binary":
            partners = [y for y in pool if y.shape == x.shape or y.shape == x.shape[-1:] or y.shape == ()]
            out = g.op(draw(st.sampled_from(BINARY)), x, draw(st.sampled_from(partners)))
        elif choice == "reduce" and x.type.rank >= 1:
            out = g.op("sum", x, axes=(draw(st.integers(0, x.type.rank - 1)),), keepdim=draw(st.booleans()))
        elif choice == "reshape":
            n = x.type.numel
            targets = [s for s in SHAPES + [(n,), (1, n), (12, 2)] if math.prod(s) == n]
            out = g.op("reshape", x, shape=draw(st.sampled_from(targets)))
        elif choice == "permute" and x.type.rank >= 2:
            out = g.op("permute", x, perm=tuple(draw(st.permutations(range(x.type.rank)))))
        elif choice == "slice" and x.type.rank >= 1 and x.shape[0] >= 2:
            out = g.op("slice", x, axis=0, start=draw(st.integers(0, 1)), end=x.shape[0], step=draw(st.integers(1, 2)))
        elif choice == "expand" and x.type.rank >= 1:
            out = g.op("expand", x, shape=(3,) + x.shape)
        elif choice == "matmul" and x.type.rank == 2:
            partners = [y for y in pool if y.type.rank == 2 and x.shape[1] in y.shape]
            y = draw(st.sampled_from(partners)) if partners else x
            if y.shape[0] == x.shape[1]:
                out = g.op("matmul", x, y)
            elif y.shape[1] == x.shape[1]:
                out = g.op("matmul", x, y, transpose_b=True)
            else:
                out = g.op("exp", x)
        elif choice == "linear" and x.type.rank == 2:      # torch-style: t(w), mm, bias add, maybe relu
            n = draw(st.sampled_from([3, 4]))
            w = g.input(F(n, x.shape[1]), f"w{len(g.inputs)}", "param")
            b = g.input(F(n), f"b{len(g.inputs)}", "param")
            out = g.op("add", g.op("matmul", x, g.op("permute", w, perm=(1, 0))), b)
            if draw(st.booleans()):
                out = g.op("relu", out)
        elif choice == "flatten_transposed" and x.type.rank >= 2:
            out = g.op("reshape", g.op("permute", x, perm=tuple(reversed(range(x.type.rank)))), shape=(x.type.numel,))
        elif choice == "constant":
            out = g.op("add", x, g.op("constant", value=draw(st.sampled_from([0.5, 1.0, 2.0])), dtype="f32"))
        else:
            out = g.op(draw(st.sampled_from(UNARY)), x)
        pool.append(out)
    produced = [v for v in pool if v.producer is not None]
    outs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3, unique_by=id))
    for k, v in enumerate(outs):
        g.output(v, f"out{k}")
    for i, spec in enumerate(list(g.inputs)):
        same = [v for v in produced if v.type == spec.value.type]
        if same and draw(st.booleans()):
            g.output(draw(st.sampled_from(same)), f"new{i}", "param", updates=i)
    return g


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.integers(0, 3))
def test_random_graphs_plan_validly_and_run_over_one_arena(graph, seed):
    planned = pipeline(graph)
    assert is_topological(planned.groups)
    check_runs(graph, planned, seed)
    mem = planned.memory
    assert mem.live_peak_bytes <= mem.peak_bytes <= \
        sum(aligned(p.nbytes) for p in mem.values.values() if p.kind == "arena") + mem.external_bytes


# ---------------------------------------------------------------- the program's boundary (Handoff)
def test_outputs_apart_are_packed_in_a_region_of_their_own(step):
    """``Handoff(outputs_apart=True)``: every output's buffer lies in the output region at the arena's
    top, which holds nothing but those buffers (and what shares their bytes in place); the plan
    validates and runs."""
    graph, plain = step
    planned = pipeline(graph, handoff=Handoff(outputs_apart=True))
    mem, g = planned.memory, planned.graph
    start, stop = mem.output_region
    assert stop == mem.arena_bytes and plain.memory.output_region is None
    roots = {mem.root(o.value) for o in g.outputs}
    buffers = {mem[r].offset for r in roots if mem[r].kind == "arena"}
    assert buffers and all(o >= start for o in buffers)
    for v, p in mem.values.items():
        if p.kind == "arena" and p.nbytes and p.offset >= start:
            assert p.offset in buffers, f"{v} is in the output region but shares no output's buffer"
    sizes = {mem[r].offset: aligned(mem[r].nbytes) for r in roots if mem[r].kind == "arena"}
    assert stop - start == sum(sizes.values())
    check_runs(graph, planned, seed=2, int_high=32)


def donated_graph(read_later: bool):
    g = Graph()
    x = g.input(F(64, 64), "x", "data")
    w = g.input(F(64, 64), "w", "param")
    e = g.op("exp", x)                            # x dies here (unless read later)
    y = g.op("matmul", e, w)
    g.output(g.op("add", y, x) if read_later else y, "y")
    return g


def test_a_donated_input_is_written_in_place_once_it_dies():
    g = donated_graph(read_later=False)
    planned = pipeline(g, handoff=Handoff(donated_inputs=frozenset({0})))
    exp = next(n for n in planned.graph.nodes if n.op == "exp").outputs[0]
    p = planned.memory[exp]
    assert p.kind == "external" and p.donated and p.input_index == 0 and p.reuses is planned.graph.inputs[0].value
    plain = pipeline(g)
    assert plain.memory[next(n for n in plain.graph.nodes if n.op == "exp").outputs[0]].kind == "arena"
    assert planned.memory.arena_bytes < plain.memory.arena_bytes
    check_runs(g, planned)


def test_a_donated_input_read_later_or_returned_keeps_its_value():
    g = donated_graph(read_later=True)
    planned = pipeline(g, handoff=Handoff(donated_inputs=frozenset({0})))
    assert not any(p.kind == "external" and p.donated for p in planned.memory.values.values())
    check_runs(g, planned)
    g = Graph()
    x = g.input(F(8, 8), "x", "data")
    g.output(x, "same")
    g.output(g.op("exp", x), "e")
    planned = pipeline(g, handoff=Handoff(donated_inputs=frozenset({0})))
    assert not any(p.kind == "external" and p.donated for p in planned.memory.values.values())


def test_the_validator_catches_a_result_written_into_an_input_still_read():
    g = donated_graph(read_later=True)
    planned = pipeline(g, handoff=Handoff(donated_inputs=frozenset({0})))
    exp = next(n for n in planned.graph.nodes if n.op == "exp").outputs[0]
    broken = copy.copy(planned.memory)
    broken.values = dict(planned.memory.values)
    broken.values[exp] = dataclasses.replace(broken.values[exp], kind="external", offset=None, input_index=0,
                                             donated=True, reuses=planned.graph.inputs[0].value)
    with pytest.raises(AssertionError, match="still read"):
        validate_memory_plan(planned.graph, planned.groups, broken)


@pytest.mark.parametrize("axis", [-1, 0])
def test_log_softmax_writes_over_the_row_input_it_reads_last(axis):
    """A row-wise composite over the last axis reads each row whole before writing it: its result
    takes the logits' buffer as they die (not over the first axis: columns are not rows)."""
    g = Graph()
    x = g.input(F(32, 16), "x", "data")
    w = g.input(F(48, 16), "w", "param")
    logits = g.op("matmul", x, w, transpose_b=True)
    g.output(g.op("log_softmax", logits, axis=axis), "logp")
    planned = pipeline(g)
    logp = planned.graph.outputs[0].value
    assert (planned.memory[logp].reuses is not None) == (axis == -1)
    assert planned.memory.arena_bytes == aligned(32 * 48 * 4) * (1 if axis == -1 else 2)
    check_runs(g, planned)


def test_a_result_stored_in_its_readers_layout_never_takes_an_input_in_place():
    """Llama's rotary backward stores dq and dk transposed (in the layout the next GEMM reads): such a
    kernel puts element i where the input's element j != i lies, which another thread may still have to
    read, so its result gets a buffer of its own.  Every in-place result of the planned step is stored
    densely, in the flat order its input is read."""
    from nova.compiler.explain import plan_training_step
    from nova.passes import layout as layout_analysis
    planned, _ = plan_training_step("llama-tiny", 4, target="h200")
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    layouts = layout_analysis.analyze(planned.graph, planned.storage)
    for v, plan in planned.memory.values.items():
        if plan.reuses is not None:
            assert layouts[v].dense and layouts[plan.reuses].dense, (v.producer.op, layouts[v].describe())
    strided = [v for v in planned.memory.values if layouts[v].root is v and not layouts[v].dense]
    assert strided, "the plan has no result stored in a reader's layout: the test checks nothing"


def test_a_unit_axis_stride_does_not_make_an_in_place_write_overlap():
    """A permuted row sum ``[2, 4, 1]`` reports stride 4 on its unit axis where the exp writing over it
    in place has 1: the same elements (an axis of extent 1 has no stride), so the plan validates and
    runs like the interpreter (found by the random graphs above)."""
    g = Graph("unit-axis")
    x = g.input(TensorType((2, 3, 4), "f32"), "x")
    g.output(g.op("exp", g.op("permute", g.op("sum", x, axes=(1,), keepdim=True), perm=(0, 2, 1))), "out0")
    planned = pipeline(g)
    check_runs(g, planned)
