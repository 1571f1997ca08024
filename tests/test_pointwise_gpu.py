"""Fused pointwise kernels on the GPU against a float64 reference on fresh random data, outputs
NaN-poisoned first: odd sizes, broadcast and strided (non-contiguous) inputs, f32/bf16/f16; and a
compiled GPT-tiny step whose pointwise groups run on them, against eager."""
import copy

import pytest

torch = pytest.importorskip("torch")

from nova.kernels.pointwise.launch import bind  # noqa: E402
from nova.kernels.pointwise.problem import PointwiseProblem  # noqa: E402
from nova.ir import Graph, TensorType  # noqa: E402
from nova.ir.ops import opdef  # noqa: E402

pytestmark = pytest.mark.gpu
TOL = {"f32": 2e-5, "bf16": 1.6e-2, "f16": 2e-3}
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def run_case(build, shapes, dtype, views=None, seed=0):
    """``build(g, *inputs)`` -> result value; inputs of ``shapes`` (``views[k](shape, generator, dtype)``
    makes input k a strided view of a bigger tensor); the group's kernel vs the IR reference in float64."""
    g = Graph()
    xs = [g.input(TensorType(s, dtype), f"x{k}") for k, s in enumerate(shapes)]
    out = build(g, *xs)
    g.output(out, "y")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tensors = []
    for k, s in enumerate(shapes):
        if views and k in views:                # a strided view of shape s over a bigger tensor
            tensors.append(views[k](s, gen, TORCH[dtype]))
        else:
            tensors.append(torch.randn(s, generator=gen, device="cuda").to(TORCH[dtype]))
    strides = {v: t.stride() for v, t in zip(xs, tensors)}
    problem = PointwiseProblem.from_nodes(g.nodes, xs, [out], strides.__getitem__)
    result = torch.full(out.shape, float("nan"), device="cuda", dtype=TORCH[out.dtype])
    bind(problem, tensors, [result])()
    torch.cuda.synchronize()
    env = {v: t.double().cpu() for v, t in zip(xs, tensors)}
    for n in g.nodes:
        env[n.outputs[0]] = opdef(n.op).reference(torch, *[env[v] for v in n.inputs], **n.attrs)
    ref = env[out].double()
    got = result.double().cpu()
    assert not got.isnan().any()
    err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert err < TOL[dtype], err


def c(g, value):
    return g.op("constant", value=value, dtype="f32")


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1001), (64, 4096), (5, 17, 33)])
def test_gelu_bias_residual(dtype, shape):
    run_case(lambda g, x, b, r: g.op("add", g.op("gelu_tanh", g.op("add", x, b)), r),
             [shape, shape[-1:], shape], dtype)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_strided_and_broadcast_inputs(dtype):
    # x: every other column of a wider tensor (strided), y: a transpose (gathered), s: broadcast over columns
    run_case(lambda g, x, y, s: g.op("mul", g.op("silu", g.op("sub", x, y)), s),
             [(129, 300), (129, 300), (129, 1)], dtype,
             views={0: lambda s, gen, dt: torch.randn(129, 700, generator=gen, device="cuda").to(dt)[:, :600:2],
                    1: lambda s, gen, dt: torch.randn(300, 129, generator=gen, device="cuda").to(dt).t()})


@pytest.mark.parametrize("op", ["gelu_tanh_backward", "gelu_erf_backward", "silu_backward", "sigmoid_backward",
                                "tanh_backward", "relu_backward"])
def test_backward_ops(op):
    run_case(lambda g, dy, x: g.op(op, dy, x), [(333, 77), (333, 77)], "f32")


def test_math_chain_with_constants_and_where():
    def build(g, x, y):
        big = g.op("gt", x, y)
        a = g.op("mul", g.op("exp", g.op("neg", g.op("abs", x))), c(0.25))
        b = g.op("rsqrt", g.op("add", g.op("mul", y, y), c(1.0)))
        return g.op("where", big, a, g.op("tanh", b))
    run_case(build, [(1023,), (1023,)], "f32")


def test_compiled_gpt_tiny_step_matches_eager():
    import nova
    from nova.models import make_train_step
    from nova.models.gpt import GPT
    model = GPT("tiny", seed=0).cuda()
    twin = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_ref = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    step = nova.compile(make_train_step(model, opt), backend="executor")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        idx = torch.randint(0, model.config.vocab_size, (2, 16), generator=gen, device="cuda")
        loss = step(idx, idx)
        ref = twin(idx, idx)
        ref.backward()
        opt_ref.step()
        opt_ref.zero_grad(set_to_none=True)
        assert abs(loss.item() - ref.item()) < 1e-3 * abs(ref.item())
    program = step._last.engine.program
    assert any("nova pointwise kernel" in k.what for launch in program.launches for k in launch.kernels)
    assert not [f for f in program.stats["fallbacks"] if "pointwise" in f]
