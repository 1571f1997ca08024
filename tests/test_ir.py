"""The graph IR: building, printing, verifying, hashing and interpreting small graphs."""
import pytest
import torch

from nova.ir import Graph, IRError, TensorType, format_graph, structural_hash, verify
from nova.ir import interpreter


def linear_gelu(name="g", input_name="x"):
    g = Graph(name)
    x = g.input(TensorType((4, 8), "f32"), input_name)
    w = g.input(TensorType((16, 8), "f32"), "w", role="param")
    y = g.op("matmul", x, w, transpose_b=True)
    z = g.op("gelu_tanh", y)
    g.output(g.op("sum", z, axes=(0, 1)), "loss")
    return g


def test_types_are_inferred_and_printed():
    g = linear_gelu()
    verify(g)
    text = format_graph(g)
    assert "matmul(%0, %1) {transpose_b=True} : f32[4,16]" in text
    assert "sum(%3) {axes=(0, 1)} : f32[]" in text


def test_hash_ignores_names_but_not_structure():
    assert structural_hash(linear_gelu("a", "x")) == structural_hash(linear_gelu("b", "tokens"))
    other = linear_gelu()
    other.nodes[1].op = "gelu_erf"
    assert structural_hash(other) != structural_hash(linear_gelu())


def test_bad_shapes_fail_with_the_op_named():
    g = Graph()
    a = g.input(TensorType((4, 8), "f32"), "a")
    b = g.input(TensorType((7, 16), "f32"), "b")
    with pytest.raises(IRError, match="matmul: inner dimensions differ"):
        g.op("matmul", a, b)


def test_verifier_catches_use_before_definition():
    g = linear_gelu()
    g.nodes.reverse()
    with pytest.raises(IRError, match="defined later"):
        verify(g)


def test_interpreter_matches_torch():
    g = linear_gelu()
    x, w = torch.randn(4, 8), torch.randn(16, 8)
    (loss,) = interpreter.run(g, [x, w])
    torch.testing.assert_close(loss, torch.nn.functional.gelu(x @ w.T, approximate="tanh").sum())


def test_attention_reference_matches_sdpa_and_its_backward():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    g = Graph()
    qi, ki, vi = (g.input(TensorType((2, 3, 5, 4), "f64"), n) for n in "qkv")
    out, lse = g.op("attention", qi, ki, vi, scale=0.5, causal=True)
    dout = g.input(TensorType((2, 3, 5, 4), "f64"), "dout")
    dq, dk, dv = g.op("attention_backward", dout, qi, ki, vi, out, lse, scale=0.5, causal=True)
    for value, name in ((out, "out"), (dq, "dq"), (dk, "dk"), (dv, "dv")):
        g.output(value, name)
    verify(g)
    d = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    got = interpreter.run(g, [q.detach(), k.detach(), v.detach(), d])
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5)
    grads = torch.autograd.grad(ref, (q, k, v), d)
    for a, b in zip(got, (ref, *grads)):
        torch.testing.assert_close(a, b.detach())
