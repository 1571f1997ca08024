"""Fusion: GEMM epilogues, pointwise regions, reductions, composites and views, on small graphs and
on the hand-built GPT-block training step."""
import pytest
import torch

from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.rows import RowsProblem
from nova.ir import Graph, TensorType
from nova.ir import interpreter
from nova.ir.ops import kind
from nova.passes import canonicalize, fuse, pipeline
from nova.passes.examples import linear_bias_gelu, random_inputs, transformer_step
from nova.passes.reference import run_planned
from nova.passes.schedule import is_topological

F = lambda *shape: TensorType(shape, "f32")          # noqa: E731


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ops_of(group):
    return [n.op for n in group.nodes]


def check_partition(graph, groups):
    nodes = [n for g in groups for n in g.nodes]
    assert len(nodes) == len(graph.nodes) and set(nodes) == set(graph.nodes)
    assert is_topological(groups)


def test_gemm_bias_gelu_is_one_nova_kernel_with_an_epilogue():
    g = canonicalize(linear_bias_gelu(64, 32, 48))
    groups = fuse(g)
    check_partition(g, groups)
    (gemm,) = groups
    assert gemm.kind == "gemm" and gemm.kernel == "nova" and gemm.fused
    assert ops_of(gemm) == ["matmul", "add", "gelu_tanh"]
    assert gemm.epilogue.bias is g.inputs[2].value and gemm.epilogue.activation == "gelu"
    p = gemm.problem
    assert (p.M, p.N, p.K, p.dtype, p.trans_a, p.trans_b, p.bias, p.activation) == \
        (64, 48, 32, "tf32", False, True, True, "gelu")
    assert gemm.inputs == [v.value for v in g.inputs] and gemm.outputs == [g.outputs[0].value]
    assert "gelu_tanh fused into the GEMM epilogue" in gemm.reason
    planned = pipeline(linear_bias_gelu(64, 32, 48))
    assert [v.kind for v in planned.memory.values.values()].count("fused") == 2   # product, biased product
    inputs = random_inputs(planned.graph, 3)
    torch.testing.assert_close(run_planned(planned, [t.clone() for t in inputs])[0],
                               interpreter.run(linear_bias_gelu(64, 32, 48), inputs)[0])


@pytest.mark.parametrize("case", ["matrix_bias", "bias_wrong_dtype", "activation_first", "product_read_twice",
                                  "two_activations"])
def test_epilogue_only_what_the_gemm_kernel_computes(case):
    g = Graph()
    x = g.input(F(8, 4), "x")
    w = g.input(F(4, 6), "w")
    y = g.op("matmul", x, w)
    if case == "matrix_bias":
        out = g.op("add", y, g.input(F(8, 6), "b"))               # not a [N] vector: a residual
        expect = ["matmul", "add"]
    elif case == "bias_wrong_dtype":
        out = g.op("add", y, g.input(TensorType((6,), "f16"), "b"))
        expect = ["matmul"]
    elif case == "activation_first":
        out = g.op("add", g.op("relu", y), g.input(F(6), "b"))   # act(acc) + bias is not act(acc + bias)
        expect = ["matmul", "relu"]
    elif case == "product_read_twice":
        out = g.op("mul", g.op("silu", y), y)                     # the product's kernel computes silu from y
        expect = ["matmul"]
    else:
        out = g.op("silu", g.op("relu", y))
        expect = ["matmul", "relu"]
    g.output(out, "out")
    groups = fuse(g)
    check_partition(g, groups)
    assert ops_of(groups[0]) == expect


def test_a_pointwise_region_fuses_and_notes_values_read_outside():
    g = Graph()
    x = g.input(F(256, 128), "x")
    y = g.input(F(256, 128), "y")
    b = g.input(F(128), "b")
    a = g.op("add", x, y)
    t = g.op("gelu_tanh", a)
    c = g.op("mul", t, g.op("add", b, g.op("constant", value=1.0, dtype="f32")))   # [N] branch stays apart
    g.output(c, "c")
    g.output(g.op("matmul", t, w := g.input(F(128, 16), "w")), "t_w")               # t is also read by a GEMM
    groups = fuse(g)
    check_partition(g, groups)
    region = next(gr for gr in groups if "gelu_tanh" in ops_of(gr))
    assert region.kind == "pointwise" and ops_of(region) == ["add", "gelu_tanh", "mul"]
    assert region.outputs == [t, c]                     # t written once for the GEMM
    # unfused: add 3, gelu 2, mul 3 transfers; fused: read x, y, [N] once, write t, c: saves 3 of 128 KiB
    assert "3 pointwise ops on f32[256,128]" in region.reason and "saves 3 round trips (384 KiB)" in region.reason
    assert "also read outside" in region.reason
    small = next(gr for gr in groups if gr.nodes[-1].op == "add" and gr.nodes[-1].outputs[0].shape == (128,))
    assert ops_of(small) == ["constant", "add"]         # the scalar fill is inlined into its only reader


def test_a_reduction_fuses_with_its_pointwise_producers_even_if_another_reader_comes_first():
    g = Graph()
    a = g.input(F(64, 32), "a")
    b = g.input(F(64, 32), "b")
    s = g.op("add", a, b)
    e = g.op("exp", s)
    g.output(g.op("matmul", e, g.input(F(32, 8), "w")), "mm")     # another reader of e, first in program order
    g.output(g.op("sum", e, axes=(0,)), "colsum")
    groups = fuse(g)
    check_partition(g, groups)
    red = next(gr for gr in groups if gr.kind == "reduction")
    assert ops_of(red) == ["add", "exp", "sum"] and red.outputs == [e, g.outputs[1].value]
    assert "with 2 pointwise producers fused" in red.reason


def test_a_bias_gradient_fuses_with_the_add_that_produces_its_input():
    """The residual gradient ``dy = a + b`` read by the input-gradient GEMM (through a flattening)
    before its column sum: after canonicalization the sum reads ``dy`` itself, joins the add's group
    and writes ``dy`` on the way (one kernel, ``dy`` read once)."""
    g = Graph()
    a, b = g.input(F(4, 8, 16), "a"), g.input(F(4, 8, 16), "b")
    dy = g.op("add", a, b)
    flat = g.op("reshape", dy, shape=(32, 16))
    g.output(g.op("matmul", flat, g.input(F(16, 16), "w")), "dx")
    g.output(g.op("sum", flat, axes=(0,), keepdim=True), "db")
    g.output(dy, "dy")
    c = canonicalize(g)
    groups = fuse(c)
    check_partition(c, groups)
    red = next(gr for gr in groups if gr.kind == "reduction")
    assert ops_of(red) == ["add", "sum"] and red.kernel == "nova"
    assert isinstance(red.problem, RowsProblem) and red.problem.prologue.store
    assert not [gr for gr in groups if gr.kind == "pointwise"]


def test_siblings_reading_one_input_share_a_kernel():
    """SwiGLU's backward: ``du = dh * silu(gate)`` and ``dgate = silu_backward(dh * up, gate)`` both
    read ``dh`` and ``gate`` at their full size: one kernel reads them once and writes both.  A
    sibling sharing only a small broadcast table, or a GEMM result computed after the group opened,
    stays apart."""
    g = Graph()
    dh, gate, up = (g.input(F(64, 96), n) for n in ("dh", "gate", "up"))
    du = g.op("mul", dh, g.op("silu", gate))
    dgate = g.op("silu_backward", g.op("mul", dh, up), gate)
    table = g.input(F(96), "table")
    other = g.op("mul", g.input(F(64, 96), "z"), table)            # shares only [96]: no
    late = g.op("matmul", g.input(F(64, 32), "a"), g.input(F(32, 96), "w"))
    after_gemm = g.op("mul", g.op("add", dh, late), table)          # reads dh, but also a later GEMM
    for name, v in (("du", du), ("dgate", dgate), ("other", other), ("after", after_gemm)):
        g.output(v, name)
    groups = fuse(g)
    check_partition(g, groups)
    swiglu = next(gr for gr in groups if "silu_backward" in ops_of(gr))
    assert ops_of(swiglu) == ["silu", "mul", "mul", "silu_backward"] and swiglu.kernel == "nova"
    assert swiglu.outputs == [du, dgate] and len(swiglu.inputs) == 3
    assert next(gr for gr in groups if other.producer in gr.nodes) is not swiglu
    assert next(gr for gr in groups if after_gemm.producer in gr.nodes) is not swiglu
    planned = pipeline(g)
    inputs = random_inputs(planned.graph, 5)
    for got, want in zip(run_planned(planned, [t.clone() for t in inputs]), interpreter.run(g, inputs)):
        torch.testing.assert_close(got, want)


def test_swiglu_computes_its_activation_where_the_product_is_taken():
    """``silu(x @ Wg) * (x @ Wu)`` with the gate also read later (the backward's): the gate's GEMM writes
    the gate once, and ``silu`` joins the product's kernel (opened before the up GEMM, it keeps nothing
    live that is not read later anyway) instead of the GEMM epilogue writing both silu(gate) and gate.
    Read by a GEMM instead, the activation stays in the epilogue with its input written beside it."""
    g = Graph()
    x, wg, wu = g.input(F(64, 32), "x"), g.input(F(32, 96), "wg"), g.input(F(32, 96), "wu")
    gate = g.op("matmul", x, wg)
    h = g.op("mul", g.op("silu", gate), g.op("matmul", x, wu))
    g.output(h, "h")
    g.output(g.op("exp", gate), "later")                    # the backward reads the gate
    groups = fuse(g)
    check_partition(g, groups)
    (gate_gemm,) = [gr for gr in groups if gr.kind == "gemm" and gr.nodes[0].inputs[1] is wg]
    assert gate_gemm.epilogue.activation == "none" and not gate_gemm.problem.preactivation
    assert any({"silu", "mul"} <= set(ops_of(gr)) and gr.kind == "pointwise" and gr.kernel == "nova" for gr in groups)
    g2 = Graph()
    x, wg, wd = g2.input(F(64, 32), "x"), g2.input(F(32, 96), "wg"), g2.input(F(96, 32), "wd")
    gate = g2.op("matmul", x, wg)
    g2.output(g2.op("matmul", g2.op("silu", gate), wd), "y")
    g2.output(g2.op("exp", gate), "later")
    (first, *_) = [gr for gr in fuse(g2) if gr.kind == "gemm"]
    assert first.epilogue.activation == "silu" and first.problem.preactivation


def test_the_exact_gelu_fuses_into_the_gemm_epilogue():
    """``F.gelu(x @ W + b)`` (erf): bias and activation in the GEMM's epilogue, like the tanh form."""
    g = Graph()
    x, w, b = g.input(F(64, 32), "x"), g.input(F(32, 48), "w"), g.input(F(48), "b")
    g.output(g.op("gelu_erf", g.op("add", g.op("matmul", x, w), b)), "y")
    (gemm,) = fuse(g)
    assert ops_of(gemm) == ["matmul", "add", "gelu_erf"] and gemm.problem.activation == "gelu_erf"
    planned = pipeline(g)
    inputs = random_inputs(planned.graph, 4)
    torch.testing.assert_close(run_planned(planned, [t.clone() for t in inputs])[0], interpreter.run(g, inputs)[0])


def test_fusion_does_not_close_a_cycle_through_another_kernel():
    g = Graph()
    x = g.input(F(16, 16), "x")
    a = g.op("exp", x)
    m = g.op("matmul", a, a)                            # reads a
    g.output(g.op("add", g.op("tanh", a), m), "y")      # tanh(a) + m: may not join a's group before m
    groups = fuse(g)
    check_partition(g, groups)
    for gr in groups:
        if "matmul" not in ops_of(gr):
            assert not ({"exp", "add"} <= set(ops_of(gr)))


def test_batched_matmuls_are_one_batched_nova_gemm_and_f64_runs_on_aten():
    g = Graph()
    a = g.input(F(2, 8, 4), "a")
    b = g.input(F(2, 4, 6), "b")
    c = g.input(TensorType((8, 4), "f64"), "c")
    d = g.input(TensorType((4, 6), "f64"), "d")
    x = g.input(F(2, 8, 4), "x")
    w = g.input(F(4, 6), "w")
    q = g.input(F(2, 3, 8, 4), "q")                     # [B, H, T, D] against one [1, 1, T, D] key: broadcast
    k = g.input(F(1, 1, 5, 4), "k")
    kv = g.input(F(2, 4, 5, 4), "kv")
    y = g.input(F(2, 1, 5, 6), "y")
    g.output(g.op("matmul", a, b), "batched")
    g.output(g.op("matmul", c, d), "f64")
    g.output(g.op("matmul", x, w), "folded")            # [2,8,4] x [4,6]: batch folds into M
    g.output(g.op("matmul", q, k, transpose_b=True), "scores")
    # heads 0..2 of 4: (b, h) at b * 80 + h * 20, not one stride apart over the flat (b, h)
    g.output(g.op("matmul", q, g.op("slice", kv, axis=1, start=0, end=3), transpose_b=True), "sliced")
    # head 0 of each batch element, read transposed: batch stride 80
    g.output(g.op("matmul", g.op("slice", kv, axis=1, start=0, end=1), y, transpose_a=True), "head_t")
    groups = [gr for gr in fuse(g) if gr.kind == "gemm"]
    assert [gr.kernel for gr in groups] == ["nova", "aten", "nova", "nova", "aten", "nova"]
    batched, _, folded, scores, sliced, head_t = groups
    assert batched.problem == GemmProblem(8, 6, 4, "tf32", batch=2)
    assert (folded.problem.M, folded.problem.N, folded.problem.K, folded.problem.batch) == (16, 6, 4, 1)
    # packed q against one broadcast key: one [6*8, 4] x [4, 5] GEMM (GemmProblem normalises it)
    assert scores.problem == GemmProblem(48, 5, 4, "tf32", trans_b=True)
    assert "the batch axes of b" in sliced.reason and "not one stride apart" in sliced.reason
    assert head_t.problem == GemmProblem(4, 6, 5, "tf32", trans_a=True, batch=2, batch_stride_a=80, batch_stride_b=30)


def test_training_step_groups():
    planned = pipeline(transformer_step())
    g, groups = planned.graph, planned.groups
    check_partition(g, groups)
    by_kind = {}
    for gr in groups:
        by_kind.setdefault(gr.kind, []).append(gr)
    gemms = by_kind["gemm"]
    assert len(gemms) == 15 and all(gr.kernel == "nova" for gr in gemms)
    biased = [gr for gr in gemms if gr.epilogue.bias is not None]
    assert len(biased) == 4
    # gelu's input feeds its backward: written beside it (the pre-activation); the residual adds fused
    assert [gr.epilogue.describe() for gr in biased] == ["bias", "bias+residual", "bias+gelu+preact", "bias+residual"]
    assert sum(gr.problem.trans_a for gr in gemms) == 5          # the weight gradients: 4 linears and the head
    updates = [gr for gr in by_kind["composite"] if gr.nodes[0].op == "adamw"]
    from nova.passes.fusion import update_batch_key                     # one multi-tensor update per key
    keys = [{update_batch_key(n) for n in gr.nodes} for gr in updates]
    assert all(len(k) == 1 for k in keys) and len({next(iter(k)) for k in keys}) == len(updates)
    assert sum(len(gr.nodes) for gr in updates) > 2 * len(updates)
    (loss,) = [gr for gr in by_kind["composite"] if gr.nodes[0].op == "cross_entropy"]
    assert [n.op for n in loss.nodes] == ["cross_entropy", "cross_entropy_backward"] and loss.kernel == "nova"
    assert loss.problem.kind == "cross_entropy_forward_backward" and "one pass over the logits" in loss.reason
    norm_residual = [gr for gr in by_kind["composite"] if ops_of(gr)[0] == "layer_norm_backward" and len(gr.nodes) > 1]
    assert any(ops_of(gr)[:2] == ["layer_norm_backward", "add"] and gr.kernel == "nova" and gr.problem.has("residual")
               and "adds" in gr.reason for gr in norm_residual)     # the residual stream's gradient added in
    assert any(ops_of(gr)[-1] == "sum" and gr.problem.has("dxsum") and "sums" in gr.reason
               for gr in norm_residual)                              # and the bias gradient summed there
    tied = [gr for gr in by_kind["composite"] if ops_of(gr) == ["scatter_add", "add"]]
    assert len(tied) == 1 and tied[0].problem.base == "f32"        # the tied embedding's gradient: one kernel
    assert all(len(gr.nodes) == 1 for gr in by_kind["composite"]
               if gr not in updates and gr is not loss and gr not in norm_residual and gr not in tied)
    assert sorted({gr.nodes[0].op for gr in by_kind["composite"]}) == [
        "adamw", "attention", "attention_backward", "concat", "cross_entropy",
        "index_select", "layer_norm", "layer_norm_backward", "scatter_add"]   # the loss fused (cross_entropy.py), its
                                                                              # backward in the forward's kernel
    # the head merges after permutes would copy; the attention kernels write those results in the
    # merged layout instead (storage.py), and dq, dk, dv into the concat's buffer: nothing copies
    assert all(gr.kernel == "none" for gr in by_kind["view"])
    merges = [gr for gr in by_kind["view"] if "written in place by the attention" in gr.reason]
    assert len(merges) == 4 and all(gr.nodes[0].op == "reshape" for gr in merges)
    (concat,) = [gr for gr in by_kind["composite"] if gr.nodes[0].op == "concat"]
    assert concat.kernel == "none" and "launches nothing" in concat.reason
    # GELU's backward runs in the epilogue of the GEMM that computes its dy (dh = dy @ W2: the kernel reads
    # the saved pre-activation as R and writes gelu_backward(dh, pre)); the bias gradient then sums that
    # result, a column reduction of its own; the residual add went to the LayerNorm backward (above)
    (dgelu,) = [gr for gr in gemms if "gelu_tanh_backward" in ops_of(gr)]
    assert ops_of(dgelu) == ["matmul", "gelu_tanh_backward"] and dgelu.problem.activation_grad
    assert dgelu.problem.residual and dgelu.problem.activation == "gelu" and not dgelu.problem.trans_a
    assert dgelu.epilogue.residual is dgelu.nodes[1].inputs[1] and dgelu.epilogue.describe() == "dgelu(pre-activation)"
    assert not [gr for gr in by_kind["reduction"] + by_kind["pointwise"] if "gelu_tanh_backward" in ops_of(gr)]
    # rows kernels (nova/passes/rows.py): the norms and the loss, and the reductions whose producers are prologue ops
    rows_ops = ("layer_norm", "layer_norm_backward", "cross_entropy", "cross_entropy_backward")
    rows = [gr for gr in groups if gr.kind == "reduction" or gr.kind == "composite" and gr.nodes[0].op in rows_ops]
    assert all(isinstance(gr.problem, RowsProblem) and gr.bindings for gr in rows)
    # embedding kernels (nova/passes/embedding.py): the gathers and scatter-adds; fills alone: constants of the step
    embedding = [gr for gr in by_kind["composite"] if gr.nodes[0].op in ("index_select", "scatter_add")]
    constants = [gr for gr in groups if all(kind(n.op) == "creation" for n in gr.nodes)]
    assert len(embedding) == 4 and len(constants) >= 1
    for gr in groups:
        assert gr.reason and "\n" not in gr.reason
        nova = gr.kind == "gemm" or (gr.kind == "pointwise" and any(kind(n.op) == "pointwise" for n in gr.nodes)) \
            or gr in updates or gr in rows or gr in embedding
        free = gr in by_kind["view"] or gr is concat or gr in constants
        assert gr.kernel == ("nova" if nova else "none" if free else "aten")
        assert (gr.problem is not None) == nova           # a Nova group carries its problem
    from nova.kernels.optimizer import MultiTensorProblem
    assert all(isinstance(gr.problem, MultiTensorProblem) and gr.problem.tensors == len(gr.nodes) for gr in updates)


def test_attention_runs_on_nova_where_the_plan_says_so():
    """The plan decides who runs attention (``nova/passes/attention.py``): Nova's kernels with the
    problem on the group where they cover it, ATen with the reason otherwise (head dimension,
    ``NOVA_ATTENTION=aten``, causal cross attention); explain prices what the plan chose."""
    from executor_support import attention_block, grouped_attention
    from nova.compiler.executor import build
    from nova.compiler.explain import kernel_reports
    from nova.hwmodel import get_target
    from nova.kernels.attention import AttentionProblem
    from nova.kernels.switch import KernelSwitch

    def attention_groups(planned):
        return [g for g in planned.groups if g.nodes[0].op in ("attention", "attention_backward")]

    covered = attention_block(B=2, T=24, heads=2, D=64).graph
    planned = pipeline(covered)
    groups = attention_groups(planned)
    assert len(groups) == 2 and all(g.kernel == "nova" and isinstance(g.problem, AttentionProblem) for g in groups)
    assert (groups[0].problem.head_dim, groups[0].problem.seq_q, groups[0].problem.causal) == (64, 24, True)
    assert "Nova's fused attention kernels" in groups[0].reason
    launched = [k for launch in build(planned, "meta").launches for k in launch.kernels if k.attention]
    # the launches bind the plan's problems to the arena views' strides (q, k, v: slices of the projection)
    import dataclasses
    assert [dataclasses.replace(k.attention[0], strides=()) for k in launched] == [g.problem for g in groups]
    h200 = get_target("h200")
    models = {r.name: r.model for r in kernel_reports(planned, h200) if r.name.startswith("attention")}
    assert set(models.values()) == {"attention configurator"}, models

    off = pipeline(covered, kernels=KernelSwitch(attention=False))
    assert all(g.kernel == "aten" and g.problem is None and "NOVA_ATTENTION=aten" in g.reason
               for g in attention_groups(off))
    assert not [k for launch in build(off, "meta").launches for k in launch.kernels if k.attention]
    models = {r.name: r.model for r in kernel_reports(off, h200) if r.name.startswith("attention")}
    assert set(models.values()) == {"fp32 attention"}, models

    small = attention_groups(pipeline(attention_block(B=2, T=24, heads=2, D=4).graph))
    assert all(g.kernel == "aten" and "do not cover f32[2,2,24,4]" in g.reason for g in small)
    cross = attention_groups(pipeline(grouped_attention(Tq=6, Tk=10, D=64).graph))
    assert cross and all(g.kernel == "aten" and "T_q != T_k" in g.reason for g in cross)


def test_a_residual_add_joins_the_gemm_computed_after_its_other_operand():
    """``p1 + p2`` of two GEMMs: the add is the second GEMM's residual epilogue (R = p1, already
    written when it runs), never the first's: that GEMM would wait for the second one, its operands
    live the while (two loss chunks' weight gradients summed)."""
    g = Graph()
    a1, b1, a2, b2 = (g.input(F(16, 8), "a1"), g.input(F(8, 12), "b1"), g.input(F(16, 8), "a2"),
                      g.input(F(8, 12), "b2"))
    p1 = g.op("matmul", a1, b1)
    p2 = g.op("matmul", a2, b2)
    g.output(g.op("add", p1, p2), "sum")
    groups = fuse(g)
    check_partition(g, groups)
    first, second = groups
    assert ops_of(first) == ["matmul"] and ops_of(second) == ["matmul", "add"]
    assert second.epilogue.residual is p1 and second.problem.residual and not second.problem.preactivation
    assert second.inputs == [a2, b2, p1]


def test_an_epilogue_goes_on_through_the_reshape_of_a_linear_layer_and_a_lone_reshape_leaves():
    """[B, T, C] @ W^T + b, reshaped back to [B, T, H]: the gelu after the reshape fuses, its input
    (read by another op too) written beside it through the reshape's root; a reshape with nothing
    fused after it is a free view group again."""
    g = Graph()
    x = g.input(F(8, 8), "x")
    w = g.input(F(16, 8), "w")
    b = g.input(F(16), "b")
    pre = g.op("add", g.op("matmul", x, w, transpose_b=True), b)
    view = g.op("reshape", pre, shape=(2, 4, 16))
    g.output(g.op("gelu_tanh", view), "act")
    g.output(g.op("mul", view, view), "square")                  # another reader of the pre-activation
    lone = g.op("reshape", g.op("matmul", x, w, transpose_b=True), shape=(2, 4, 16))
    g.output(g.op("exp", lone), "exp")
    groups = fuse(g)
    check_partition(g, groups)
    gemm = next(gr for gr in groups if ops_of(gr) == ["matmul", "add", "reshape", "gelu_tanh"])
    assert gemm.epilogue.preactivation is view and gemm.problem.preactivation and gemm.problem.activation == "gelu"
    assert pre in gemm.outputs                                   # the kernel writes P at the root it views
    bare = next(gr for gr in groups if gr.kind == "gemm" and gr is not gemm)
    assert ops_of(bare) == ["matmul"] and any(ops_of(gr) == ["reshape"] and gr.kernel == "none" for gr in groups)


def test_slices_sink_through_a_pointwise_op_only_when_they_partition_it():
    """``slice(f(a))`` -> ``f(slice(a))`` when slices along one axis over disjoint ranges are all that
    read ``f(a)`` (each element still computed once); overlapping slices keep ``f(a)``."""
    from nova.passes.sink_slices import sink_slices
    for ranges, sinks in (([(0, 4), (4, 8)], True), ([(0, 6), (2, 8)], False)):
        g = Graph()
        e = g.op("exp", g.input(F(3, 8), "a"))
        for k, (start, end) in enumerate(ranges):
            g.output(g.op("slice", e, axis=1, start=start, end=end), f"s{k}")
        sunk = sink_slices(g)
        assert (sunk is not g) == sinks
        assert [n.op for n in sunk.nodes].count("exp") == (2 if sinks else 1)
        x = torch.randn(3, 8)
        for got, want in zip(interpreter.run(sunk, [x]), interpreter.run(g, [x])):
            torch.testing.assert_close(got, want)


def _norm_backward_graph(n: int, residual_after: bool = False):
    """A LayerNorm backward over [64, n] whose dx the residual stream's gradient ``r`` is added to, and
    the column sum of that (a bias gradient); ``residual_after``: ``r`` computed after the norm's
    backward (from its dx), so the add cannot join it."""
    g = Graph()
    dy, x, r = (g.input(F(64, n), name) for name in ("dy", "x", "r"))
    mean, rstd = g.input(F(64, 1), "mean"), g.input(F(64, 1), "rstd")
    w, b = g.input(F(n), "w"), g.input(F(n), "b")
    dx, dw, db = g.op("layer_norm_backward", dy, x, mean, rstd, w, b, normalized_shape=(n,))
    if residual_after:
        r = g.op("exp", g.op("mul", dx, r))                  # read dx too: the add is not its only reader
    s = g.op("add", dx, r)
    g.output(s, "s")
    g.output(g.op("sum", s, axes=(0,)), "bias_grad")
    g.output(dw, "dw")
    g.output(db, "db")
    return g


@pytest.mark.parametrize("n, summed", [(512, True), (768, True), (65536, False)])
def test_a_norm_backward_takes_its_residual_add_and_the_bias_sum_where_the_sums_fit(n, summed):
    """The add of dx and the residual joins the norm's backward; the column sum of the result joins too
    when the rows configurator keeps the three column sums in the row pass (512 columns: 48 sums a
    thread on the H200; 768: two warps a row, 36), not at 65536 columns (a CTA's 1024 threads would
    keep 192 sums each, and the row is not kept in registers: a column stage would re-read dy and x)."""
    g = _norm_backward_graph(n)
    groups = fuse(canonicalize(g), target="h200")
    (norm,) = [gr for gr in groups if ops_of(gr)[0] == "layer_norm_backward"]
    assert ops_of(norm)[:2] == ["layer_norm_backward", "add"] and norm.problem.has("residual")
    assert (ops_of(norm)[-1] == "sum") == summed and norm.problem.has("dxsum") == summed
    planned = pipeline(g)
    inputs = random_inputs(planned.graph, 6)
    for got, want in zip(run_planned(planned, [t.clone() for t in inputs]), interpreter.run(g, inputs)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_residual_computed_from_the_norms_own_dx_stays_out():
    groups = fuse(canonicalize(_norm_backward_graph(512, residual_after=True)), target="h200")
    (norm,) = [gr for gr in groups if ops_of(gr)[0] == "layer_norm_backward"]
    assert ops_of(norm) == ["layer_norm_backward"] and not norm.problem.has("residual")
