"""The pointwise family's index-dependent kernels and the plans that use them: ``iota`` (position ids),
inputs ``Window``ed to their slice (a concat no kernel assembles in place: the loss's shifted labels),
the copy of a view that is no strided view, and ``gather`` of a one-axis table (the padding mask's
vmapped index).  Their problems and keys, the vector width, ptxas, each case's generated kernel run on
the CPU (tests/pointwise_cpu.py) against float64 with poisoned outputs; the graph rewrites that make
the Hugging Face steps' glue small (integer ``x + 0``, slices of a concat, sums of zero-padded concats,
a concat reading a pointwise result twice) against the interpreter and the CPU executor; and
``explain train`` of the Hugging Face models: no ATen kernel left."""
import dataclasses
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pointwise_indexing_support import CASES, IndexCase, Input  # noqa: E402
from nova.compiler.executor import build  # noqa: E402
from nova.ir import Graph, TensorType, interpreter  # noqa: E402
from nova.kernels.family import kernel_key  # noqa: E402
from nova.kernels.pointwise.derive import configure_pointwise  # noqa: E402
from nova.kernels.pointwise.emit import build_module, unsupported  # noqa: E402
from nova.kernels.pointwise.problem import PointwiseProblem, PointwiseProblemError  # noqa: E402
from nova.passes import pipeline  # noqa: E402
from nova.passes.canonicalize import canonicalize  # noqa: E402
from nova.passes.pointwise_from_ir import pointwise_problem  # noqa: E402
from nova.passes.storage import copy_concat_inputs, plan_storage  # noqa: E402

BY_NAME = {case.name: case for case in CASES}


# --------------------------------------------------------------------------- the problems
def test_every_case_is_a_problem_the_family_computes():
    for case in CASES:
        p = case.problem()
        assert isinstance(p, PointwiseProblem) and not unsupported(p), case.name


def test_new_features_appear_in_a_key_only_where_used():
    """An operand without a window or a table states neither (its key is the key of before); iota,
    windows and tables are in the problem's dict and so in its key."""
    import nova.kernels.pointwise.compile  # noqa: F401  (registers the family)
    shift = BY_NAME["concat_shift_labels-i64"].problem()
    (x,) = shift.inputs
    assert x.window is not None and x.to_dict()["window"] == {"axis": 1, "start": 0, "extent": 39}
    assert [i.op for i in shift.program if i.op == "iota"] == ["iota"]
    mask = BY_NAME["gather_mask-bool"].problem()
    assert mask.inputs[2].table == (240, 1) and mask.inputs[2].to_dict()["table"] == [240, 1]
    assert all(set(o.to_dict()) == {"dtype", "strides", "align"} for o in mask.inputs[:2])
    c = configure_pointwise(shift)
    plain = dataclasses.replace(shift, inputs=(dataclasses.replace(x, window=None),))
    assert kernel_key("pointwise", shift, c.schedule, "pointwise", c.target) != \
        kernel_key("pointwise", plain, c.schedule, "pointwise", c.target)


def test_a_window_axis_is_never_merged():
    """Coalescing merges the contiguous axes around a window but not the window's own (its index renumbered)."""
    g = Graph("middle")
    x, y = g.input(TensorType((2, 1, 3, 4, 6), "f32"), "x"), g.input(TensorType((2, 1, 5, 4, 6), "f32"), "y")
    cat = g.op("concat", x, y, axis=2)
    from nova.passes.pointwise_from_ir import concat_problem
    strides = {x: (72, 72, 24, 6, 1), y: (120, 120, 24, 6, 1)}
    p = concat_problem(cat.producer, strides.__getitem__)
    assert p.shape == (2, 8, 24)                                     # the unit axis dropped, 4 x 6 merged
    assert [i.window for i in p.inputs] == [dataclasses.replace(p.inputs[0].window, axis=1, start=0, extent=3),
                                            dataclasses.replace(p.inputs[0].window, axis=1, start=3, extent=5)]
    assert p.inputs[0].strides == (72, 24, 1) and p.inputs[0].span(p.shape) == 2 * 3 * 24     # x's elements


@pytest.mark.parametrize("name, vector", [("concat_halves-f32", 4), ("concat_shift_labels-i64", 1),
                                          ("concat_middle-bf16", 8), ("concat_gathered-f32", 4),
                                          ("iota_positions-i64", 2), ("copy_shifted-i64", 1),
                                          ("gather_mask-bool", 2), ("rope_folded-f32", 4),
                                          ("rope_folded_backward-bf16", 8)])
def test_vector_width(name, vector):
    """16-byte vectors where every contiguous operand allows them; a window along the innermost axis
    must be made of whole vectors (the labels' window of 39: 1), a gathered table does not narrow it."""
    assert configure_pointwise(BY_NAME[name].problem()).schedule.vector == vector


def test_a_window_not_made_of_whole_vectors_narrows_the_vector():
    case = IndexCase("odd", "concat", (Input((4, 6), "f32", (4, 8), lambda t: t[:, :6]),
                                       Input((4, 10), "f32", (4, 16), lambda t: t[:, :10])),
                     lambda g, x, y: g.op("concat", x, y, axis=1))
    c = configure_pointwise(case.problem())
    assert c.schedule.vector == 2 and any("window [0, 6)" in s.reason for s in c.derivation)


def test_what_no_kernel_of_the_family_computes_is_one_line():
    g = Graph("iota")
    x = g.input(TensorType((8, 4), "i64"), "x")
    y = g.op("add", x, g.op("reshape", g.op("iota", length=8, dtype="i64"), shape=(8, 1)))
    with pytest.raises(PointwiseProblemError, match="does not run along the last axis"):
        pointwise_problem([n for n in g.nodes if n.op != "reshape"], [x], [y], {x: (4, 1)}.__getitem__)
    g = Graph("table")
    t, i = g.input(TensorType((16,), "f32"), "t"), g.input(TensorType((16,), "i64"), "i")
    y = g.op("add", g.op("index_select", t, i, axis=0), t)
    with pytest.raises(PointwiseProblemError, match="both as a gathered table and element by element"):
        pointwise_problem(g.nodes, [t, i], [y], {t: (1,), i: (1,)}.__getitem__)


# --------------------------------------------------------------------------- the generated code
ptxas = pytest.importorskip("nova.codegen.ptxas")


@pytest.mark.skipif(not ptxas.available(), reason="ptxas not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_kernels_assemble_without_spills(arch, name):
    pytest.importorskip("mlir")
    from nova.kernels.pointwise.compile import build as build_kernel
    c = configure_pointwise(BY_NAME[name].problem())
    r = build_kernel(c.problem, dataclasses.replace(c.schedule, arch=arch)).resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0
    assert 0 < r["registers"] <= 64


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_generated_kernel_matches_float64_on_the_cpu(case):
    """The kernel's own MLIR, every thread of every CTA, run on host memory by MLIR's execution engine:
    fresh data, the output poisoned, the result against the IR references in float64."""
    pytest.importorskip("mlir")
    from pointwise_cpu import run_pointwise
    gen = torch.Generator().manual_seed(3)
    tensors = case.tensors("cpu", gen)
    problem = case.problem(tensors)
    out = case.output("cpu", tensors)
    run_pointwise(problem, configure_pointwise(problem).schedule, case.operands(tensors), [out])
    case.check(out, tensors)


def test_the_clamps_keep_every_access_inside_its_operand():
    """The text of the labels' concat: the slice's column is clamped to its 39 columns (its last piece
    needs no lower clamp), the memref spans exactly the elements addressed."""
    p = BY_NAME["concat_shift_labels-i64"].problem()
    text = build_module(p, configure_pointwise(p).schedule)
    assert "memref<239xi64>" in text and "arith.minsi" in text and "arith.maxsi" not in text
    mask = BY_NAME["gather_mask-bool"].problem()
    text = build_module(mask, configure_pointwise(mask).schedule)
    assert "memref<240xi8>" in text and text.count("arith.maxsi") == text.count("arith.minsi") >= 1


# --------------------------------------------------------------------------- the rewrites and the plans
def random_inputs(graph, seed=0) -> list:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in graph.inputs:
        t = spec.value.type
        if t.dtype in ("i64", "i32"):
            out.append(torch.randint(0, 7, t.shape, generator=gen).to(getattr(torch, {"i64": "int64", "i32": "int32"}[t.dtype])))
        else:
            out.append(torch.randn(t.shape, generator=gen))
    return out


def check_runs(graph, planned=None):
    """The CPU executor (outputs poisoned first) against the interpreter, element for element."""
    planned = planned or pipeline(graph)
    inputs = random_inputs(graph)
    want = interpreter.run(graph, [x.clone() for x in inputs])
    got = build(planned, "cpu", poison=True).run([x.clone() for x in inputs])
    for o, a, b in zip(graph.outputs, got, want):
        assert torch.allclose(a, b, rtol=1e-6, atol=0), o.name
    return planned


def labels_graph(B=3, T=8, masked=False) -> Graph:
    """The loss's label shift: cat(labels, -100)[:, 1:] flattened, read by a sum (masked: the labels are
    a pointwise result, ``where(mask == 0, -100, labels)``)."""
    g = Graph("labels")
    labels = g.input(TensorType((B, T), "i64"), "labels")
    if masked:
        mask = g.input(TensorType((B, T), "i64"), "mask")
        labels = g.op("where", g.op("eq", mask, g.op("constant", value=0, dtype="i64")),
                      g.op("constant", value=-100, dtype="i64"), labels)
    pad = g.op("constant", value=-100, dtype="i64", shape=(B, 1))
    shifted = g.op("slice", g.op("concat", labels, pad, axis=1), axis=1, start=1, end=T + 1)
    g.output(g.op("reshape", shifted, shape=(B * T,)), "targets")
    return g


@pytest.mark.parametrize("masked", [False, True], ids=["labels", "masked-labels"])
def test_the_label_shift_is_one_concat_kernel(masked):
    """``cat(labels, -100)[:, 1:]`` becomes ``cat(labels[:, 1:], -100)``: its flattening is a view, and
    the concat one Nova pointwise kernel reading the slice in place (no copy, no ATen); masked, the
    where computes its slice and writes it in place (the concat launches nothing)."""
    g = labels_graph(masked=masked)
    c = canonicalize(g)
    (concat,) = [n for n in c.nodes if n.op == "concat"]
    assert concat.outputs[0].shape == (3, 8) and concat.inputs[0].producer.op == "slice"
    planned = check_runs(g)
    launched = [gr for gr in planned.groups if gr.kernel != "none"]
    assert all(gr.kernel == "nova" for gr in launched)
    if masked:      # the slice sinks through the where (sink_slices.py), whose kernel writes its part in place
        assert [gr.kernel for gr in planned.groups if gr.nodes[0].op == "concat"] == ["none"]
        return
    (cat,) = [gr for gr in launched if gr.nodes[0].op == "concat"]
    assert cat.problem.inputs[0].window is not None and "one Nova pointwise kernel reads each input" in cat.reason
    assert "a constant fill" in cat.reason
    assert not [gr for gr in planned.groups if gr.kind == "view" and gr.kernel != "none"]


def test_integer_plus_zero_is_the_value():
    g = Graph("positions")
    ids = g.op("add", g.op("iota", length=16, dtype="i64"), g.op("constant", value=0, dtype="i64"))
    f = g.op("add", g.input(TensorType((16,), "f32"), "x"), g.op("constant", value=0.0, dtype="f32"))
    g.output(ids, "ids")
    g.output(f, "f")
    c = canonicalize(g)
    assert c.outputs[0].value.producer.op == "iota"                # a constant of the step: launches nothing
    assert c.outputs[1].value.producer.op == "add"                 # a float's x + 0 is not x for x = -0.0
    planned = check_runs(g)
    assert [gr.kernel for gr in planned.groups if gr.nodes[0].op == "iota"] == ["none"]


def rotate_half_backward_graph(B=2, H=2, T=4, D=8) -> Graph:
    """Autograd's gradient of HF's ``cat(-x[..., D/2:], x[..., :D/2])`` at g * sin: two zero-padded slice
    gradients added, plus the cos term (modeling_llama's rotate_half, backward)."""
    f = lambda *s: TensorType(s, "f32")                                 # noqa: E731
    gr = Graph("rope_backward")
    dy, sin, cos = gr.input(f(B, H, T, D), "dy"), gr.input(f(T, D), "sin"), gr.input(f(T, D), "cos")
    g = gr.op("mul", dy, sin)
    h = D // 2
    zeros = gr.op("constant", value=0.0, dtype="f32", shape=(B, H, T, h))
    first = gr.op("concat", zeros, gr.op("neg", gr.op("slice", g, axis=3, start=0, end=h)), axis=3)
    second = gr.op("concat", gr.op("slice", g, axis=3, start=h, end=D), zeros, axis=3)
    gr.output(gr.op("add", gr.op("add", first, second), gr.op("mul", dy, cos)), "dx")
    return gr


def test_zero_padded_slice_gradients_add_up_to_one_folded_concat():
    """HF's rotate-half backward: the two zero-padded slice gradients become one concat of the halves
    of ``dy * sin``; the slices sink through the product (each half computed from slices of ``dy`` and
    ``sin``) and the concat folds into the add with ``dy * cos``: one kernel for all of it, reading
    ``dy`` in place three times (one region of memory: ``shared_reads``)."""
    g = rotate_half_backward_graph()
    c = canonicalize(g)
    (concat,) = [n for n in c.nodes if n.op == "concat"]
    assert [x.producer.op for x in concat.inputs] == ["slice", "neg"] and "constant" not in c.op_counts()
    planned = check_runs(g)
    (kernel,) = [gr for gr in planned.groups if gr.kernel != "none"]
    assert kernel.kernel == "nova" and "concat" in [n.op for n in kernel.nodes]
    problem = kernel.problem
    assert sum(x.window is not None for x in problem.inputs) == 4          # dy's halves and sin's
    dy = 2 * 2 * 4 * 8
    ((elements, members),) = [entry for entry in problem.shared_reads if len(entry[1]) == 3]
    assert elements == dy
    assert problem.bytes_moved() == 4 * (dy + 2 * 4 * 8 + dy)               # dy once, sin and cos, the result


def test_a_concat_of_one_pointwise_result_twice_folds_into_its_reader():
    """RoPE's ``emb = cat(freqs, freqs)`` read by ``cos``: each occurrence copied (rule 0), the concat
    folded into the cos kernel, which reads freqs through both windows."""
    g = Graph("rotary")
    t = g.input(TensorType((6, 1), "f32"), "t")
    inv = g.input(TensorType((4,), "f32"), "inv")
    freqs = g.op("mul", t, inv)
    emb = g.op("concat", freqs, freqs, axis=1)
    g.output(g.op("cos", emb), "cos")
    copied = copy_concat_inputs(g)
    assert sum(n.op == "cast" for n in copied.nodes) == 2 and plan_storage(copied).folded
    planned = check_runs(g)
    (reader,) = [gr for gr in planned.groups if any(n.op == "concat" for n in gr.nodes)]
    assert reader.kernel == "nova" and [n.op for n in reader.nodes][-2:] == ["concat", "cos"]
    assert [x.window is not None for x in reader.problem.inputs] == [True, True]


def test_the_padding_mask_gather_fuses_with_its_index_and_its_reader():
    """``where(mask[b * T + t], 0, -inf)``: the index arithmetic, the gather of the bool table and the
    select are one Nova pointwise kernel; the table is read from memory, never computed in it."""
    B, T = 3, 8
    g = Graph("mask")
    mask = g.input(TensorType((B, T), "i64"), "mask")
    table = g.op("reshape", g.op("cast", mask, dtype="bool"), shape=(B * T,))
    rows = g.input(TensorType((B, 1), "i64"), "rows")
    index = g.op("add", g.op("mul", rows, g.op("constant", value=0, dtype="i64")),
                 g.op("reshape", g.op("iota", length=T, dtype="i64"), shape=(1, T)))
    g.output(g.op("where", g.op("index_select", table, index, axis=0), g.op("constant", value=0.0, dtype="f32"),
                  g.op("constant", value=float("-inf"), dtype="f32")), "bias")
    planned = check_runs(g)
    (gather,) = [gr for gr in planned.groups if any(n.op == "index_select" for n in gr.nodes)]
    assert gather.kind == "pointwise" and gather.kernel == "nova"
    assert {n.op for n in gather.nodes} >= {"index_select", "where"}
    assert [x.table for x in gather.problem.inputs if x.table] == [(B * T, 1)]
    assert all(gr.kernel in ("nova", "none") for gr in planned.groups)


def test_a_reduction_never_joins_a_gather():
    """A row sum of gathered values is a rows kernel of its own: its prologue computes no gather."""
    g = Graph("gathered_sum")
    t, i = g.input(TensorType((64,), "f32"), "t"), g.input(TensorType((8, 16), "i64"), "i")
    x = g.op("mul", g.op("index_select", t, i, axis=0), g.op("constant", value=2.0, dtype="f32"))
    g.output(g.op("sum", x, axes=(1,)), "s")
    planned = check_runs(g)
    kinds = {gr.kind: [n.op for n in gr.nodes] for gr in planned.groups if gr.kernel == "nova"}
    assert "index_select" in kinds["pointwise"] and kinds["reduction"] == ["sum"]


# --------------------------------------------------------------------------- the Hugging Face models
EXPLAINED = [("hf-gpt2-42m", None), ("hf-llama-42m", None), ("hf-gpt2-42m", "padded")]


@pytest.mark.parametrize("model, recipe", EXPLAINED, ids=["gpt2", "llama", "gpt2-padded-bf16"])
def test_hugging_face_steps_run_no_aten_kernel(model, recipe):
    """``explain train`` of the Hugging Face models (small batch): every kernel is Nova's, the glue
    included (position ids, the label shift, RoPE's tables and rotate-half gradients, the padding
    mask's gather); the rotate-half concats launch nothing (folded into the kernels that read them)."""
    pytest.importorskip("transformers")
    from nova.compiler.explain import explain_train
    from nova.models import TrainRecipe
    r = TrainRecipe(autocast="bf16", padded=True) if recipe else None
    report = explain_train(model, 2, 64, recipe=r)
    assert not [(k["name"], k["reason"]) for k in report["kernels"] if k["kernel"] == "aten"]
    concats = [k for k in report["kernels"] if k["reason"].startswith("concat on")]
    shift = [] if recipe else ["concat on i64[2,64]"]      # the label shift only (masked: written in place)
    assert [k["reason"].split(":")[0] for k in concats] == shift
    assert not [k for k in report["kernels"] if k["reason"].startswith("reshape of")]
    if recipe:
        gathers = [k for k in report["kernels"] if "gather" in k["name"] and k["kind"] == "pointwise"]
        assert len(gathers) == 1 and gathers[0]["kernel"] == "nova"
    # the loss and its gradient in one kernel (under autocast each reads the logits through its own cast
    # of its own reshape: two views of one buffer)
    losses = [k["name"].split(" ")[0] for k in report["kernels"] if k["name"].startswith("cross_entropy")]
    assert losses and set(losses) == {"cross_entropy_forward_backward"}, losses


def test_autocasts_rope_backward_reads_dq_in_bf16_once_and_writes_no_fp32_copy():
    """Under bf16 autocast RoPE's backward casts the bf16 dq to FP32 and reads it whole (``dq * cos``) and
    by halves (rotate-half): the halves sink through the cast (``sink_slices.py``), so one kernel per q
    and k reads dq in bf16 and no FP32 copy of a bf16 gradient is written."""
    from nova.compiler.explain import plan_training_step
    from nova.models import TrainRecipe
    planned = plan_training_step("llama-tiny", 2, 16, recipe=TrainRecipe(autocast="bf16"))[0]
    rope = [g for g in planned.groups if g.kind == "pointwise" and "folded" in g.reason
            and any(n.op == "concat" for n in g.nodes)]
    assert len(rope) == 2 * 2 * 2, [g.reason for g in rope]   # q and k of each of the 2 layers, forward and backward
    widened = [v for g in planned.groups if g.kind == "pointwise" for v in g.outputs
               if v.producer is not None and v.producer.op == "cast" and v.dtype == "f32" and v.type.rank == 4
               and v.producer.inputs[0].dtype == "bf16"]
    assert not widened, [str(v.type) for v in widened]


@pytest.mark.parametrize("which, padded", [("gpt2", False), ("gpt2", True), ("llama", False), ("llama", True)])
def test_the_gpu_tests_steps_plan_no_aten_kernel(which, padded):
    """The tiny Hugging Face steps tests/test_pointwise_indexing_gpu.py compiles (heads of 64: Nova's
    attention too) plan no ATen kernel, and their glue is on the kernels this file checks."""
    pytest.importorskip("transformers")
    from pointwise_indexing_support import hf_tiny_planned
    from nova.compiler.explain import kernel_reports
    from nova.hwmodel import get_target
    planned = hf_tiny_planned(which, padded)
    assert not [k.name for k in kernel_reports(planned, get_target("h200")) if k.kernel == "aten"]
    problems = [g.problem for g in planned.groups if isinstance(g.problem, PointwiseProblem)]
    # windows: RoPE's folded concats, the unmasked label shift (masked, the where writes it in place)
    assert any(x.window is not None for p in problems for x in p.inputs) == (which == "llama" or not padded)
    assert any(x.table for p in problems for x in p.inputs) == padded


def test_a_concat_of_many_pieces_narrows_its_vector_to_fit_a_threads_registers():
    """48 bf16 row blocks (the chunked loss's input gradient under autocast): at 16-byte vectors a
    thread would hold 8 x 49 words; the vector halves until 32 + vector x words fit 255 registers."""
    from nova.passes.pointwise_from_ir import concat_problem
    g = Graph("rows")
    pieces = [g.input(TensorType((512, 768), "bf16"), f"p{i}") for i in range(48)]
    cat = g.op("concat", *pieces, axis=0)
    cfg = configure_pointwise(concat_problem(cat.producer, lambda v: (768, 1)))
    words = 49
    assert cfg.schedule.vector == 4 and 32 + cfg.schedule.vector * words <= 255
    assert cfg.schedule.grid > 0 and any("halved until a thread" in s.reason for s in cfg.derivation)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_tensors_a_problem_was_planned_for_bind_to_it(case):
    """The check the executor runs before it binds a kernel on the GPU (``launch.mismatch``), on the
    CPU: the tensors a problem was built from are that problem's -- a RoPE table half read per batch
    and head (a window that is also broadcast) failed it, so the GPU ran the IR reference instead."""
    from nova.kernels.pointwise.launch import mismatch
    tensors = case.tensors("cpu", torch.Generator().manual_seed(0))
    assert mismatch(case.problem(tensors), case.operands(tensors), [case.output("cpu", tensors)]) == ""
