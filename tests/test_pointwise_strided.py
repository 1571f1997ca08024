"""Pointwise results written at strides (``PointwiseProblem.stores``) and the storage pass's rules for
pointwise producers (``nova/passes/storage.py``): the problem and its key, the vector width, ptxas, the
concat-by-placement and storage-order rules on small graphs (match / no match, run against the IR
interpreter), the Llama-tiny step on the CPU executor against eager, and ``explain`` before/after."""
import dataclasses
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from executor_support import rel_error  # noqa: E402
from pointwise_support import STRIDED_CASES  # noqa: E402
from test_passes_storage import check_runs, copies  # noqa: E402
from nova.ir import Graph, TensorType  # noqa: E402
from nova.kernels.family import kernel_key  # noqa: E402
from nova.kernels.pointwise.derive import configure_pointwise  # noqa: E402
from nova.kernels.pointwise.emit import build_module  # noqa: E402
from nova.kernels.pointwise.problem import PointwiseProblemError  # noqa: E402
from nova.passes import pipeline  # noqa: E402
from nova.passes.pointwise_from_ir import pointwise_problem  # noqa: E402
from nova.passes.storage import copy_concat_inputs, plan_storage  # noqa: E402

CASES = {case.name: case for case in STRIDED_CASES}


def exp_graph(shape=(6, 40)):
    g = Graph("exp")
    x = g.input(TensorType(shape, "f32"), "x")
    y = g.op("exp", x)
    g.output(y, "y")
    return g, x, y


# --------------------------------------------------------------------------- the problem
def test_contiguous_outputs_keep_their_problem_key_and_code():
    """An output stated at its contiguous layout is the problem stated without one: same problem, key
    and MLIR text; a strided one is another problem (its strides in the key)."""
    import nova.kernels.pointwise.compile  # noqa: F401  (registers the family)
    g, x, y = exp_graph()
    rows = {x: (40, 1)}
    plain = pointwise_problem(g.nodes, [x], [y], rows.__getitem__)
    dense = pointwise_problem(g.nodes, [x], [y], rows.__getitem__, written_at=lambda v: ((40, 1), 0))
    strided = pointwise_problem(g.nodes, [x], [y], rows.__getitem__, written_at=lambda v: ((48, 1), 8))
    assert plain == dense and plain.stores == () and "stores" not in plain.to_dict()
    c = configure_pointwise(plain)
    assert kernel_key("pointwise", plain, c.schedule, "pointwise", c.target) == \
        kernel_key("pointwise", dense, c.schedule, "pointwise", c.target)
    assert build_module(plain, c.schedule) == build_module(dense, c.schedule)
    assert strided.stores[0].strides == (48, 1) and strided.to_dict()["stores"][0]["strides"] == [48, 1]
    cs = configure_pointwise(strided)
    assert kernel_key("pointwise", strided, cs.schedule, "pointwise", cs.target) != \
        kernel_key("pointwise", plain, c.schedule, "pointwise", c.target)
    assert "memref<280xf32>" in build_module(strided, cs.schedule)         # 1 + 5 * 48 + 39 * 1 elements


def test_outputs_coalesce_with_the_inputs_and_overlaps_are_refused():
    g, x, y = exp_graph((4, 8, 16))
    dense = {x: (128, 16, 1)}
    merged = pointwise_problem(g.nodes, [x], [y], dense.__getitem__, written_at=lambda v: ((256, 16, 1), 0))
    assert merged.shape == (4, 128) and merged.stores[0].strides == (256, 1)      # inner two axes merge
    with pytest.raises(PointwiseProblemError, match="two elements to one address"):
        pointwise_problem(g.nodes, [x], [y], dense.__getitem__, written_at=lambda v: ((16, 8, 1), 0))


@pytest.mark.parametrize("name, vector", [("rotate_half-f32", 4), ("rotate_half-bf16", 8), ("heads_permuted-f32", 4),
                                          ("transposed-f16", 8), ("offset_slice-bf16", 2)])
def test_vector_width_respects_the_outputs(name, vector):
    """16-byte vectors only where every contiguous output (innermost stride 1) is aligned for them; an
    output written at another innermost stride is stored lane by lane and does not narrow it."""
    p = CASES[name].problem()
    assert p.stores and configure_pointwise(p).schedule.vector == vector
    text = build_module(p, configure_pointwise(p).schedule)
    scattered = any(s.strides[-1] != 1 for s in p.stores)
    assert ("vector.store" in text) != scattered and ("%scatter" in text) == scattered


ptxas = pytest.importorskip("nova.codegen.ptxas")


@pytest.mark.skipif(not ptxas.available(), reason="ptxas not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_strided_output_kernels_assemble_without_spills(arch, name):
    pytest.importorskip("mlir")
    from nova.kernels.pointwise.compile import build
    c = configure_pointwise(CASES[name].problem())
    r = build(c.problem, dataclasses.replace(c.schedule, arch=arch)).resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0
    assert 0 < r["registers"] <= 64


# --------------------------------------------------------------------------- the storage rules
def rope_graph(B=2, H=2, T=8, D=16, *, concat_output=False, from_input=False) -> Graph:
    """x = exp(a) [B, H, T, D] (a pointwise result; ``from_input``: x is the input itself), RoPE's
    y = x * cos + cat(-x2, x1) * sin."""
    g = Graph("rope")
    f = lambda *s: TensorType(s, "f32")                 # noqa: E731
    a = g.input(f(B, H, T, D), "a", "data")
    cos, sin = g.input(f(T, D), "cos", "data"), g.input(f(T, D), "sin", "data")
    x = a if from_input else g.op("exp", a)
    x1, x2 = g.op("slice", x, axis=3, start=0, end=D // 2), g.op("slice", x, axis=3, start=D // 2, end=D)
    rot = g.op("concat", g.op("neg", x2), x1, axis=3)
    g.output(g.op("add", g.op("mul", x, cos), g.op("mul", rot, sin)), "y")
    if concat_output:
        g.output(rot, "rot")
    return g


def test_rotate_half_concat_folds_into_the_kernel_that_reads_it():
    """RoPE's ``x * cos + cat(-x2, x1) * sin``: pointwise ops alone read the concat, so it folds into
    their kernel (storage rule -1): never written, no launch of its own, its halves read in place
    through windows."""
    g = rope_graph()
    copied = copy_concat_inputs(g)
    storage = plan_storage(copied)
    (concat,) = [n for n in copied.nodes if n.op == "concat"]
    assert list(storage.folded) == [concat] and not storage.assembled
    assert sorted(n.op for n in storage.folded[concat]) == ["cast", "neg"]
    planned = pipeline(g)
    (group,) = [gr for gr in planned.groups if any(n.op == "concat" for n in gr.nodes)]
    assert group.kernel == "nova" and {"neg", "concat", "mul", "add"} <= {n.op for n in group.nodes}
    (folded,) = [n for n in group.nodes if n.op == "concat"]
    assert folded.outputs[0] not in group.outputs and "folded" in group.reason
    assert sum(x.window is not None for x in group.problem.inputs) == 2
    check_runs(planned, g)


def test_a_concat_a_gemm_reads_is_written_in_place_by_one_kernel():
    """The same concat read by a matmul (no pointwise reader to fold into): the neg and the copy of
    the other half write it in place, one kernel, and the concat launches nothing."""
    g = Graph("rope_gemm")
    f = lambda *s: TensorType(s, "f32")                 # noqa: E731
    x = g.input(f(16, 8), "x", "data")
    rot = g.op("concat", g.op("neg", g.op("slice", x, axis=1, start=4, end=8)),
               g.op("slice", x, axis=1, start=0, end=4), axis=1)
    g.output(g.op("matmul", rot, g.input(f(8, 8), "w", "data")), "y")
    copied = copy_concat_inputs(g)
    storage = plan_storage(copied)
    (concat,) = [n for n in copied.nodes if n.op == "concat"]
    assert list(storage.assembled) == [concat] and "the pointwise kernel writes" in storage.assembled[concat]
    assert not storage.folded
    assert [storage.layouts[x.producer.outputs[0]].offset for x in concat.inputs] == [0, 4]
    planned = pipeline(g)
    (group,) = [gr for gr in planned.groups if {n.op for n in gr.nodes} == {"neg", "cast"}]
    assert group.kernel == "nova" and len(group.problem.stores) == 2
    assert [gr.kernel for gr in planned.groups if gr.nodes[0].op == "concat"] == ["none"]
    check_runs(planned, g)


@pytest.mark.parametrize("graph, why", [
    (rope_graph(concat_output=True), "the concat is a graph output (its inputs keep their own buffers)"),
    (rope_graph(from_input=True), "no input of the concat is a kernel's result: nothing to place"),
])
def test_no_assembly_where_it_is_not_safe(graph, why):
    # from_input: cat(-x2, x1) with x a graph input; neg is placeable, so a copy goes in; a concat of
    # two slices of an input alone has none
    copied = copy_concat_inputs(graph)
    if "graph output" in why:
        assert copied is graph and not plan_storage(graph).assembled, why
    check_runs(pipeline(graph), graph)


def test_a_concat_of_views_alone_gets_no_copies():
    g = Graph("views")
    x = g.input(TensorType((4, 8), "f32"), "x")
    cat = g.op("concat", g.op("slice", x, axis=1, start=4, end=8), g.op("slice", x, axis=1, start=0, end=4), axis=1)
    g.output(g.op("exp", cat), "y")
    assert copy_concat_inputs(g) is g and not plan_storage(g).assembled


def merge_add_graph(B=2, H=2, T=8, D=16, *, also_sum=False) -> Graph:
    """a + b [B, H, T, D] -> permute -> reshape [B*T, H*D] (a head merge after a pointwise add) -> matmul."""
    g = Graph("merge_add")
    f = lambda *s: TensorType(s, "f32")                 # noqa: E731
    a, b = g.input(f(B, H, T, D), "a", "data"), g.input(f(B, H, T, D), "b", "data")
    w = g.input(f(H * D, H * D), "w", "param")
    s = g.op("add", a, b)
    y = g.op("reshape", g.op("permute", s, perm=(0, 2, 1, 3)), shape=(B * T, H * D))
    g.output(g.op("matmul", y, w), "y")
    if also_sum:
        g.output(g.op("sum", s, axes=(3,)), "s_sum")
    return g


def test_a_pointwise_result_is_stored_with_its_heads_merged():
    g = merge_add_graph()
    storage = plan_storage(g)
    (value, lay), = storage.layouts.items()
    assert value.producer.op == "add" and lay.strides == (8 * 32, 16, 32, 1)
    assert copies(g) == 1 and copies(g, storage) == 0
    assert "written in place by the pointwise kernel" in next(iter(storage.freed.values()))
    planned = pipeline(g)
    (group,) = [gr for gr in planned.groups if gr.nodes[0].op == "add"]
    assert group.kernel == "nova" and group.problem.stores[0].strides[-1] == 1
    check_runs(planned, g)


def test_no_storage_order_when_a_reduction_reads_the_pointwise_result():
    g = merge_add_graph(also_sum=True)
    assert not plan_storage(g).layouts and copies(g) == 1
    check_runs(pipeline(g), g)


# --------------------------------------------------------------------------- Llama
def test_llama_tiny_first_step_loss_and_every_gradient_match_eager():
    """``nova.compile(backend="executor")`` on CPU with the rotate-half concats folded into the kernels
    that read them and the dq/dk merges stored in place, against eager PyTorch: the loss and every
    parameter's gradient."""
    import nova
    from nova.models.llama import Llama
    model, twin = Llama("tiny", seed=0), Llama("tiny", seed=0)

    def grads_step(m):
        def step(idx, targets):
            loss = m(idx, targets)
            loss.backward()
            return loss
        return step

    gen = torch.Generator().manual_seed(5)
    vocab = model.config.vocab_size
    idx, targets = torch.randint(0, vocab, (2, 16), generator=gen), torch.randint(0, vocab, (2, 16), generator=gen)
    compiled = nova.compile(grads_step(model), backend="executor")
    loss = compiled(idx, targets)
    ref = grads_step(twin)(idx, targets)
    assert rel_error(loss, ref.detach()) < 1e-5
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert p.grad is not None and rel_error(p.grad, q.grad) < 1e-4, name
    program = compiled._last.engine.program
    with_concat = [launch for launch in program.launches if any(n.op == "concat" for n in launch.nodes)]
    assert len(with_concat) == 4 * model.config.n_layer and all(len(launch.nodes) > 3 for launch in with_concat)


def test_llama_tiny_adamw_steps_through_the_executor_track_eager():
    """Sixty AdamW steps of Llama-tiny through the executor (the plan's arena, in-place results and
    donations on CPU) against eager: every loss and the final parameters to float32 rounding."""
    import copy
    import nova
    from nova.models import make_train_step
    from nova.models.llama import Llama
    model = Llama("tiny", seed=0)
    twin = copy.deepcopy(model)
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1) for m in (model, twin)]
    step, ref = nova.compile(make_train_step(model, opts[0]), backend="executor"), make_train_step(twin, opts[1])
    gen = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    for _ in range(60):
        idx, targets = torch.randint(0, vocab, (4, 16), generator=gen), torch.randint(0, vocab, (4, 16), generator=gen)
        loss, expected = step(idx, targets), ref(idx, targets)
        assert rel_error(loss.detach(), expected.detach()) < 1e-5
    assert step.stats.captures == 1
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert rel_error(p.detach(), q.detach()) < 1e-5, name


def test_explain_llama_before_and_after(monkeypatch):
    """``explain train llama42m`` (small batch): with the pointwise storage rules no concat launches
    (folded into the kernels that read them; without the rules each is one Nova pointwise kernel of
    its own), the dq/dk head-merge copies are gone, and the predicted step and launches drop; no ATen
    kernel either way."""
    from nova.compiler import explain
    import importlib
    pipeline_module = importlib.import_module("nova.passes.pipeline")
    storage_module = importlib.import_module("nova.passes.storage")

    def counts():
        report = explain.explain_train("llama42m", 2, 64)
        assert not [k for k in report["kernels"] if k["kernel"] == "aten"]
        launched = [k["reason"].split(" ")[0] for k in report["kernels"]]
        return launched.count("concat"), launched.count("reshape"), report["prediction"]["step_ms"], \
            report["prediction"]["launches"]
    after = counts()
    attention_only = lambda v: v.producer is not None and v.producer.op in storage_module.STRIDED_WRITES  # noqa: E731
    monkeypatch.setattr(pipeline_module, "copy_concat_inputs", lambda g: g)
    monkeypatch.setattr(storage_module, "writes_strided", attention_only)
    monkeypatch.setattr(storage_module, "fold_cones", lambda *args: None)
    before = counts()
    layers = 8
    assert before[0] == 4 * layers and after[0] == 0                      # rotate-half forward and backward, q and k
    assert before[1] - after[1] == 2 * layers                              # the dq and dk head merges
    assert after[2] < before[2] and after[3] < before[3]


def test_a_transposed_store_is_priced_at_its_fitted_rate_and_a_transposed_read_is_not():
    """RoPE's backward writes [B, T, H, D] while it walks [B, H, T, D]: its output bytes count at
    1 / TRANSPOSED_STORE_EFFICIENCY; the forward reads q that way and is priced as a contiguous read;
    a result split into the halves of a row (strides decreasing) is no transposed store."""
    from nova.hwmodel import get_target
    from nova.kernels.pointwise.derive import TRANSPOSED_STORE_EFFICIENCY, configure_pointwise, launch_constants
    from nova.kernels.pointwise.problem import Instr, Operand, PointwiseProblem
    shape = (32, 8, 512, 64)
    dense, walk_t = (262144, 32768, 64, 1), (262144, 64, 512, 1)
    add = (Instr("add", (0, 1), (), "f32"),)

    def problem(a, b, store=None):
        return PointwiseProblem(shape, (Operand("f32", a), Operand("f32", b)), add, (2,),
                                (Operand("f32", store),) if store else ())
    plain, read_t, store_t = problem(dense, dense), problem(walk_t, dense), problem(dense, dense, walk_t)
    out_bytes = 4 * plain.numel
    assert plain.transposed_store_bytes() == read_t.transposed_store_bytes() == 0
    assert store_t.transposed_store_bytes() == out_bytes
    t = {name: configure_pointwise(p, "h200").prediction.time_us for name, p in
         (("plain", plain), ("read_t", read_t), ("store_t", store_t))}
    assert t["read_t"] == pytest.approx(t["plain"])
    slower = out_bytes * (1 / TRANSPOSED_STORE_EFFICIENCY - 1) / (3 * out_bytes)   # the extra share of the bytes
    launch = launch_constants(get_target("h200"))["t_launch_us"]
    assert t["store_t"] - t["plain"] == pytest.approx((t["plain"] - launch) * slower, rel=0.02)
    halves = PointwiseProblem((65536, 32), (Operand("f32", (64, 1)),), (Instr("neg", (0,), (), "f32"),), (1,),
                              (Operand("f32", (64, 1)),))
    assert halves.transposed_store_bytes() == 0
