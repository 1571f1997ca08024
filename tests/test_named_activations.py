"""``named_activations``: an activation written op by op becomes the named op, the same numbers."""
import math

import torch

from nova.ir import Graph, TensorType
from nova.ir import interpreter
from nova.passes.named_activations import name_activations


def F(*shape):
    return TensorType(shape, "f32")


def _graph(body, keep_intermediate=False):
    g = Graph()
    x = g.input(F(8, 16), "x")
    out, inner = body(g, x)
    g.output(out, "out")
    if keep_intermediate:
        g.output(inner, "inner")               # read outside the chain: must be written, the chain stays
    return g


def gelu_new(g, x):
    c = lambda v: g.op("constant", value=v, dtype="f32")
    cube = g.op("pow", x, c(3.0))
    inner = g.op("tanh", g.op("mul", c(math.sqrt(2 / math.pi)), g.op("add", x, g.op("mul", c(0.044715), cube))))
    return g.op("mul", g.op("mul", c(0.5), x), g.op("add", c(1.0), inner)), inner


def silu_by_hand(g, x):
    den = g.op("add", g.op("constant", value=1.0, dtype="f32"), g.op("exp", g.op("neg", x)))
    return g.op("div", x, den), den


def gelu_exact_by_hand(g, x):
    """``x * 0.5 * (1 + erf(x / sqrt(2)))``: the exact GELU as some model code writes it."""
    c = lambda v: g.op("constant", value=v, dtype="f32")
    cdf = g.op("mul", c(0.5), g.op("add", c(1.0), g.op("erf", g.op("div", x, c(math.sqrt(2.0))))))
    return g.op("mul", x, cdf), cdf


def _check(body, op):
    g = _graph(body)
    named = name_activations(g)
    assert [n.op for n in named.nodes] == [op]
    x = torch.randn(8, 16)
    torch.testing.assert_close(interpreter.run(named, [x])[0], interpreter.run(g, [x])[0], rtol=1e-5, atol=1e-6)


def test_gelu_written_op_by_op_is_gelu_tanh():
    _check(gelu_new, "gelu_tanh")


def test_the_exact_gelu_written_op_by_op_is_gelu_erf():
    _check(gelu_exact_by_hand, "gelu_erf")


def test_x_over_one_plus_exp_of_minus_x_is_silu():
    _check(silu_by_hand, "silu")


def test_a_chain_whose_intermediate_is_read_elsewhere_stays():
    g = _graph(gelu_new, keep_intermediate=True)
    assert name_activations(g) is g


def test_a_chain_of_two_inputs_is_not_an_activation():
    g = Graph()
    x, y = g.input(F(8, 16), "x"), g.input(F(8, 16), "y")
    g.output(g.op("mul", x, g.op("sigmoid", y)), "out")
    assert name_activations(g) is g


# ------------------------------------------------------------------ backward chains
def _gelu_new_backward(g, dy, x, cubic=0.044715, dtype="f32"):
    """autograd's backward of ``gelu_new`` (the forward recomputed from x, as recompute.py leaves it),
    each op's result in ``dtype`` (autocast: bf16 between the ops)."""
    c = lambda v: g.op("constant", value=v, dtype=dtype)           # noqa: E731
    k = math.sqrt(2 / math.pi)
    t = g.op("tanh", g.op("mul", c(k), g.op("add", x, g.op("mul", c(cubic), g.op("pow", x, c(3.0))))))
    left = g.op("mul", dy, g.op("mul", c(0.5), g.op("add", c(1.0), t)))
    dt = g.op("tanh_backward", g.op("mul", dy, g.op("mul", c(0.5), x)), t)
    du = g.op("mul", c(k), g.op("add", c(1.0), g.op("mul", c(3 * cubic), g.op("pow", x, c(2.0)))))
    return g.op("add", left, g.op("mul", dt, du))


def _backward_graph(**kw):
    dtype = kw.get("dtype", "f32")
    g = Graph()
    dy, x = g.input(TensorType((8, 16), dtype), "dy"), g.input(TensorType((8, 16), dtype), "x")
    g.output(_gelu_new_backward(g, dy, x, **kw), "dx")
    return g


def test_autograds_gelu_backward_written_op_by_op_becomes_gelu_tanh_backward():
    g = _backward_graph()
    named = name_activations(g)
    assert [n.op for n in named.nodes] == ["gelu_tanh_backward"]
    assert list(named.nodes[0].inputs) == [named.inputs[0].value, named.inputs[1].value]   # (dy, x), in that order
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(8, 16, generator=gen), torch.randn(8, 16, generator=gen) * 3]
    torch.testing.assert_close(interpreter.run(named, xs)[0], interpreter.run(g, xs)[0], rtol=1e-5, atol=1e-6)


def test_a_backward_chain_with_another_constant_stays():
    """Another constant (0.04 for 0.044715) is another function: the chain stays as written."""
    g = _backward_graph(cubic=0.04)
    assert name_activations(g) is g


def test_a_backward_chain_that_rounds_to_16_bits_is_the_gradient_rounded_once():
    """Under autocast every op of the chain rounds to bf16; as math it is still gelu_tanh's gradient,
    and the named op (FP32 inside, one rounding) is at least as close to the float64 gradient as the
    chain rounded op by op (eager's numbers)."""
    g = _backward_graph(dtype="bf16")
    named = name_activations(g)
    assert [n.op for n in named.nodes] == ["gelu_tanh_backward"]
    gen = torch.Generator().manual_seed(5)
    dy, x = torch.randn(8, 16, generator=gen), torch.randn(8, 16, generator=gen) * 3
    ins = [dy.bfloat16(), x.bfloat16()]
    dy64, x64 = (t.double() for t in ins)
    k = math.sqrt(2 / math.pi)
    u = k * (x64 + 0.044715 * x64 ** 3)
    t = torch.tanh(u)
    exact = dy64 * (0.5 * (1 + t) + 0.5 * x64 * (1 - t ** 2) * k * (1 + 3 * 0.044715 * x64 ** 2))
    once, by_op = interpreter.run(named, ins)[0], interpreter.run(g, ins)[0]
    assert once.dtype == by_op.dtype == torch.bfloat16
    err_once, err_by_op = ((t.double() - exact).abs().max().item() for t in (once, by_op))
    assert err_once <= err_by_op
    torch.testing.assert_close(once.double(), exact, rtol=8e-3, atol=8e-3 * exact.abs().max().item())
