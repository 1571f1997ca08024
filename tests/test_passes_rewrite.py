"""DCE, CSE and canonicalization: counts, the rewrites they promise, and semantics preserved
(the interpreter gives the same outputs on random inputs before and after)."""
import pytest
import torch

from nova.ir import Graph, TensorType, structural_hash, verify
from nova.ir import interpreter
from nova.passes import canonicalize, cse, dce
from nova.passes.examples import random_inputs, transformer_step

F = lambda *shape: TensorType(shape, "f32")          # noqa: E731


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def same_results(before, after, seed=0, int_high=2):
    inputs = random_inputs(before, seed, int_high)
    for a, b in zip(interpreter.run(before, inputs), interpreter.run(after, inputs)):
        torch.testing.assert_close(a, b, equal_nan=True)


def ops(graph):
    return [n.op for n in graph.nodes]


# ---------------------------------------------------------------- DCE
def test_dce_drops_what_no_output_needs_and_keeps_every_input():
    g = Graph()
    x = g.input(F(4, 8), "x")
    unused = g.input(F(3), "unused")
    a = g.op("exp", x)
    g.op("tanh", a)                                   # dead
    g.op("sum", g.op("mul", a, a), axes=(0,))         # dead chain of two
    g.output(g.op("neg", a), "y")
    before = structural_hash(g)
    out = dce(g)
    verify(out)
    assert ops(out) == ["exp", "neg"]
    assert [i.name for i in out.inputs] == ["x", "unused"] and out.inputs[1].value.type == unused.type
    assert structural_hash(g) == before and len(g.nodes) == 5          # the input graph is untouched
    same_results(g, out)


def test_dce_keeps_a_multi_result_node_when_one_result_is_used():
    g = Graph()
    x = g.input(F(2, 3, 8), "x")
    y, mean, rstd = g.op("layer_norm", x, normalized_shape=(8,), eps=1e-5, has_weight=False, has_bias=False)
    g.output(rstd, "rstd")
    assert ops(dce(g)) == ["layer_norm"]


# ---------------------------------------------------------------- CSE
def test_cse_merges_same_op_same_inputs_same_attrs():
    g = Graph()
    x = g.input(F(4, 8), "x")
    w = g.input(F(8, 8), "w")
    a1 = g.op("add", x, x)
    a2 = g.op("add", x, x)                            # duplicate
    m1 = g.op("matmul", a1, w, transpose_b=True)
    m2 = g.op("matmul", a2, w, transpose_b=True)      # duplicate once a2 is a1
    m3 = g.op("matmul", a2, w)                        # other attrs: kept
    s1 = g.op("mul", m1, m3)
    s2 = g.op("mul", m3, m2)                          # commutative duplicate of s1
    g.output(g.op("sub", s1, s2), "y")
    out = cse(g)
    verify(out)
    assert ops(out) == ["add", "matmul", "matmul", "mul", "sub"]
    same_results(g, out)


def test_cse_deduplicates_constants_by_value_dtype_and_shape_only():
    g = Graph()
    x = g.input(F(4), "x")
    consts = [g.op("constant", value=1.0, dtype="f32"), g.op("constant", value=1.0, dtype="f32"),
              g.op("constant", value=1, dtype="f32"), g.op("constant", value=1.0, dtype="f32", shape=(4,)),
              g.op("constant", value=1, dtype="i32"), g.op("constant", value=-0.0, dtype="f32"),
              g.op("constant", value=0.0, dtype="f32"), g.op("constant", value=2.0, dtype="f32")]
    acc = x
    for c in consts:
        acc = g.op("add", acc, c)
    g.output(acc, "y")
    out = cse(g)
    # the three f32[] fills of one merge; other shape, dtype, sign of zero or value stay apart
    assert ops(out).count("constant") == 6
    same_results(g, out)


def test_cse_never_merges_opaque_aten_ops():
    g = Graph()
    x = g.input(F(4), "x")
    spec = dict(target="aten.rand_like.default", args=(("$", 0),), result_types=(((4,), "f32"),))
    g.output(g.op("sub", g.op("aten", x, **spec), g.op("aten", x, **spec)), "y")
    assert ops(cse(g)).count("aten") == 2


# ---------------------------------------------------------------- canonicalization
def test_identity_views_and_view_chains_fold():
    g = Graph()
    x = g.input(F(2, 3, 4), "x")
    a = g.op("reshape", g.op("reshape", x, shape=(6, 4)), shape=(3, 8))          # chain -> one reshape
    b = g.op("reshape", x, shape=(2, 3, 4))                                      # identity
    c = g.op("permute", g.op("permute", x, perm=(1, 2, 0)), perm=(2, 0, 1))      # composes to identity
    d = g.op("slice", x, axis=1, start=0, end=3)                                 # full slice
    e = g.op("expand", g.op("expand", x, shape=(2, 3, 4)), shape=(5, 2, 3, 4))   # identity, then one expand
    f = g.op("slice", g.op("slice", x, axis=2, start=1, end=4), axis=2, start=1, end=3, step=2)
    p = g.op("permute", g.op("permute", x, perm=(1, 0, 2)), perm=(0, 2, 1))      # composes to (1, 2, 0)
    for i, v in enumerate((a, b, c, d, e, f, p)):
        g.output(v, f"o{i}")
    out = canonicalize(g)
    verify(out)
    assert sorted(ops(out)) == ["expand", "permute", "reshape", "slice"]
    by_op = {n.op: n for n in out.nodes}
    assert by_op["reshape"].inputs[0] is out.inputs[0].value and by_op["reshape"].attrs["shape"] == (3, 8)
    assert by_op["permute"].attrs["perm"] == (1, 2, 0)
    assert (by_op["slice"].attrs["start"], by_op["slice"].attrs["step"]) == (2, 2)
    assert [o.value for o in out.outputs[1:4]] == [out.inputs[0].value] * 3
    same_results(g, out)


def linear_step_graph():
    """Forward and backward of one linear layer as autograd writes them (t, mm, t of mm)."""
    g = Graph("linear")
    x = g.input(F(6, 8), "x")
    w = g.input(F(4, 8), "w", "param")
    dy = g.input(F(6, 4), "dy")
    wt = g.op("permute", w, perm=(1, 0))
    y = g.op("matmul", x, wt)
    dx = g.op("matmul", dy, g.op("permute", wt, perm=(1, 0)))
    dw = g.op("permute", g.op("matmul", g.op("permute", x, perm=(1, 0)), dy), perm=(1, 0))
    for name, v in (("y", y), ("dx", dx), ("dw", dw)):
        g.output(v, name)
    return g


def test_transposes_are_absorbed_into_gemm_operand_layouts():
    g = linear_step_graph()
    out = canonicalize(g)
    verify(out)
    assert ops(out) == ["matmul"] * 3, ops(out)
    x, w, dy = (i.value for i in out.inputs)
    y, dx, dw = (o.value.producer for o in out.outputs)
    assert y.inputs == (x, w) and y.attrs == {"transpose_b": True}
    assert dx.inputs == (dy, w) and dx.attrs == {}
    assert dw.inputs == (dy, x) and dw.attrs == {"transpose_a": True}      # (xᵀ dy)ᵀ = dyᵀ x
    same_results(g, out)


def test_a_product_read_elsewhere_keeps_its_transpose():
    g = Graph()
    a = g.input(F(3, 5), "a")
    b = g.input(F(5, 4), "b")
    m = g.op("matmul", a, b)
    g.output(g.op("permute", m, perm=(1, 0)), "mt")
    g.output(m, "m")
    assert ops(canonicalize(g)) == ["matmul", "permute"]


def test_transposed_operand_behind_a_batch_reshape_is_absorbed():
    g = Graph()
    y = g.input(F(2, 3, 5, 4), "y")
    b = g.input(F(6, 5, 7), "b")
    a = g.op("reshape", g.op("permute", y, perm=(0, 1, 3, 2)), shape=(6, 4, 5))
    g.output(g.op("matmul", a, b), "out")
    out = canonicalize(g)
    assert ops(out) == ["reshape", "matmul"]
    assert out.nodes[0].attrs["shape"] == (6, 5, 4) and out.nodes[1].attrs == {"transpose_a": True}
    same_results(g, out)


def test_batched_transpose_is_absorbed_but_other_permutes_are_not():
    g = Graph()
    q = g.input(F(2, 2, 5, 4), "q")
    k = g.input(F(2, 2, 5, 4), "k")
    g.output(g.op("matmul", q, g.op("permute", k, perm=(0, 1, 3, 2))), "scores")
    g.output(g.op("matmul", q, g.op("permute", k, perm=(1, 0, 3, 2))), "other")   # also swaps batch axes
    out = canonicalize(g)
    assert ops(out) == ["matmul", "permute", "matmul"]
    assert out.nodes[0].attrs == {"transpose_b": True}
    same_results(g, out)


def test_trivial_constants_fold():
    g = Graph()
    x = g.input(F(4, 8), "x")
    two = g.op("constant", value=2.0, dtype="f32")
    three = g.op("cast", g.op("constant", value=3, dtype="i32"), dtype="f32")
    five = g.op("expand", g.op("add", two, three), shape=(4, 8))
    one = g.op("constant", value=1.0, dtype="f32")
    y = g.op("mul", g.op("mul", x, five), one)        # x * 5 * 1
    g.output(g.op("div", y, one), "y")                # / 1
    out = canonicalize(g)
    assert ops(out) == ["constant", "mul"]
    c = out.nodes[0]
    assert c.attrs["value"] == 5.0 and c.attrs["shape"] == (4, 8) and isinstance(c.attrs["value"], float)
    same_results(g, out)


def test_multiplying_by_one_that_broadcasts_is_kept():
    g = Graph()
    x = g.input(F(8), "x")
    g.output(g.op("mul", x, g.op("constant", value=1.0, dtype="f32", shape=(4, 8))), "y")
    assert "mul" in ops(canonicalize(g))


def test_every_rewriting_pass_preserves_the_training_step():
    g = transformer_step()
    before = structural_hash(g)
    current = g
    for rewrite in (dce, cse, canonicalize, cse):
        current = rewrite(current)
        verify(current)
        same_results(g, current, seed=1, int_high=32)
    assert structural_hash(g) == before
    counts = current.op_counts()
    assert counts["matmul"] == 15
    feeding_matmuls = [v.producer.op for n in current.nodes if n.op == "matmul" for v in n.inputs
                       if v.producer is not None]
    assert "permute" not in feeding_matmuls              # every linear layer's transpose is absorbed
    assert len(current.nodes) < len(g.nodes) - 20


@pytest.mark.parametrize("op, keepdim", [("sum", True), ("sum", False), ("mean", True)])
def test_a_reduction_over_a_flattening_reads_the_unflattened_value(op, keepdim):
    """Autograd's bias gradient ``sum(reshape(dy, [B*T, C]), 0, keepdim)`` becomes a reduction of
    ``dy`` over its leading axes (a view back to the kept shape with keepdim); a reshape that changes
    the trailing axis, or a reduction over a trailing axis, is left as it is."""
    g = Graph()
    dy = g.input(F(3, 5, 4), "dy")
    flat = g.op("reshape", dy, shape=(15, 4))
    g.output(g.op(op, flat, axes=(0,), keepdim=keepdim), "db")
    g.output(g.op("sum", g.op("reshape", dy, shape=(5, 12)), axes=(0,)), "other_split")   # trailing axis changes
    g.output(g.op("sum", flat, axes=(1,)), "rows")                                         # not the leading axes
    out = canonicalize(g)
    verify(out)
    reductions = [n for n in out.nodes if n.op in ("sum", "mean")]
    direct = [n for n in reductions if n.inputs[0] is out.inputs[0].value]
    assert len(direct) == 1 and direct[0].op == op and direct[0].attrs["axes"] == (0, 1)
    assert out.outputs[0].value.shape == ((1, 4) if keepdim else (4,))
    assert len(reductions) == 3
    same_results(g, out)
