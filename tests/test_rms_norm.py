"""RMSNorm recognised from the math (``nova/passes/rms_norm.py``): the built-in Llama's ``nn.RMSNorm``
and Hugging Face's ``LlamaRMSNorm`` spelling (f32, and bf16 with its casts) become one ``rms_norm``
and one ``rms_norm_backward`` each, stated as the rows family's kinds; look-alikes are left alone;
the CPU program of the rewritten Llama-tiny and GPT-tiny steps matches eager (loss and every gradient)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from nova.passes import pipeline
from nova.passes.polynomial import evaluate


class HFRMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm, as its modeling file writes it."""

    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Block(nn.Module):
    """Residual stream -> norm -> linear, twice: what a decoder's pre-norm layers look like."""

    def __init__(self, n, norm, dtype=torch.float32):
        super().__init__()
        self.n1, self.n2 = norm(n), norm(n)
        self.l1, self.l2 = nn.Linear(n, n, bias=False), nn.Linear(n, 3, bias=False)
        self.to(dtype)
        with torch.no_grad():
            for m in (self.n1, self.n2):
                m.weight.copy_(torch.linspace(0.5, 1.5, n))

    def forward(self, x):
        x = x + self.l1(self.n1(x))
        return self.l2(self.n2(x)).float().square().mean()


def _plan(model, x):
    from nova.frontend import capture

    def step(x):
        loss = model(x)
        loss.backward()
        return loss
    return pipeline(capture(step, (x,), models=[model]).graph)


def _ops(planned):
    return [n.op for n in planned.graph.nodes]


@pytest.mark.parametrize("norm", ["torch", "hf"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_forward_and_backward_are_recognised(norm, dtype):
    make = (lambda n: nn.RMSNorm(n, eps=1e-6)) if norm == "torch" else HFRMSNorm
    model = Block(24, make, dtype)
    planned = _plan(model, torch.randn(2, 5, 24, dtype=dtype))
    ops = _ops(planned)
    assert ops.count("rms_norm") == 2 and ops.count("rms_norm_backward") == 2, ops
    assert "rsqrt" not in ops                                          # nothing of the old ops is left
    for node in planned.graph.nodes:
        if node.op == "rms_norm":
            assert node.attrs["eps"] == pytest.approx(1e-6) and node.attrs["has_weight"]
            assert node.inputs[0].shape == (2, 5, 24) and node.inputs[1].shape == (24,)
        if node.op == "rms_norm_backward":
            assert node.attrs["weight_grad"] and len(node.outputs) == 2
    groups = [g for g in planned.groups if g.kernel == "nova" and g.problem is not None
              and getattr(g.problem, "kind", "").startswith("rms_norm")]
    kinds = sorted(g.problem.kind for g in groups)
    assert kinds == ["rms_norm", "rms_norm", "rms_norm_backward", "rms_norm_backward"]
    bwd = next(g.problem for g in groups if g.problem.kind == "rms_norm_backward")
    assert [o.name for o in bwd.inputs] == ["dy", "x", "rstd", "weight"]
    assert [o.name for o in bwd.outputs] == ["dx", "dweight"] and bwd.operand("dweight").layout == "col"


def test_look_alikes_are_left_alone():
    """mean of |x| instead of x^2, a mean over another axis, a sum instead of the mean: not RMSNorm."""
    class NotNorms(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(16))

        def forward(self, x):
            a = x * torch.rsqrt(x.abs().mean(-1, keepdim=True) + 1e-5) * self.w
            b = x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-5)
            c = x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-5) * self.w
            return (a + b + c).square().mean()
    planned = _plan(NotNorms(), torch.randn(6, 16))
    assert "rms_norm" not in _ops(planned) and "rms_norm_backward" not in _ops(planned)


def test_polynomials_compare_the_math_not_the_spelling():
    from nova.ir.graph import Graph
    g = Graph("g")
    x = g.input(_type((4, 8)), "x")
    two = g.op("constant", dtype="f32", value=2.0)
    a = g.op("mean", g.op("pow", x, two), axes=(1,), keepdim=True)
    b = g.op("div", g.op("sum", g.op("mul", x, x), axes=(-1,), keepdim=True), g.op("constant", dtype="f32", value=8.0))
    c = g.op("mean", g.op("mul", x, x), axes=(1,), keepdim=False)        # keepdim False: another atom
    polys, _ = evaluate(g)
    assert polys[a] == polys[b] and polys[a] != polys[c]


def _type(shape):
    from nova.ir.types import TensorType
    return TensorType(shape, "f32")


# ------------------------------------------------------------------ whole steps on the CPU program
@pytest.mark.parametrize("model_name", ["llama", "gpt"])
def test_cpu_program_matches_eager_loss_and_every_gradient(model_name):
    """The planned program (rows groups on their nodes' references on the CPU, one arena) of a Llama-tiny
    and a GPT-tiny forward + backward against eager PyTorch: the loss and every parameter's gradient."""
    import nova
    from nova.models import GPT, Llama
    model = Llama("tiny", seed=0) if model_name == "llama" else GPT("tiny", seed=0)
    twin = copy.deepcopy(model)

    def step(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        return loss
    compiled = nova.compile(step, backend="executor")
    gen = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    for _ in range(2):
        idx, targets = (torch.randint(0, vocab, (2, 16), generator=gen) for _ in range(2))
        for p, q in zip(model.parameters(), twin.parameters()):
            p.grad = q.grad = None
        loss = compiled(idx, targets)
        ref = twin(idx, targets)
        ref.backward()
        assert torch.allclose(loss, ref, rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            assert p.grad is not None, name
            assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6), name
    planned = compiled._last.engine.program.planned if hasattr(compiled._last.engine.program, "planned") else None
    if model_name == "llama" and planned is not None:
        ops = [n.op for n in planned.graph.nodes]
        assert ops.count("rms_norm") == ops.count("rms_norm_backward") == 2 * 2 + 1


def test_llama_tiny_plan_runs_each_rms_norm_as_one_rows_kernel():
    from nova.frontend import capture
    from nova.models import Llama, make_train_step
    torch.manual_seed(0)
    model = Llama("tiny", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 80, (2, 16))
    planned = pipeline(capture(make_train_step(model, opt), (idx, idx.clone()), models=[model],
                               optimizers=[opt]).graph)
    kinds = [g.problem.kind for g in planned.groups if g.kernel == "nova" and hasattr(g.problem, "kind")]
    layers = model.config.n_layer
    assert kinds.count("rms_norm") == kinds.count("rms_norm_backward") == 2 * layers + 1
    ops = [n.op for n in planned.graph.nodes]
    assert "rsqrt" not in ops and ops.count("pow") == 0
    assert planned.stats["rms_norm"] < planned.stats["cross_entropy"]


def test_eps_is_the_f32_value_the_kernel_adds():
    """Two torch versions trace the same eps as a Python float or as an f32 tensor's value: one
    attribute (one kernel key) for both below f64; f64 keeps it exact."""
    from nova.passes.rms_norm import _eps
    f32_value = float(torch.tensor(1e-5, dtype=torch.float32))
    assert f32_value != 1e-5 and _eps(1e-5, "f32") == _eps(f32_value, "f32") == f32_value
    assert _eps(1e-5, "bf16") == f32_value and _eps(1e-5, "f64") == 1e-5
