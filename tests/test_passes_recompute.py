"""Pointwise recomputation (``nova/passes/recompute.py``) and the horizontal group of scalar work:
GELU written op by op (Hugging Face's ``gelu_new``) plans to the bytes of ``F.gelu(approximate=
"tanh")``, the step still computes eager's numbers, and an optimizer's step counters are one launch."""
import copy
import math

import pytest
import torch
import torch.nn as nn

import nova
from nova.frontend import capture
from nova.ir import Graph, TensorType
from nova.passes import fuse, pipeline
from nova.passes.schedule import is_topological
from nova.passes.remat import RECOMPUTED_TAG

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class MLP(nn.Module):
    def __init__(self, op_by_op: bool):
        super().__init__()
        torch.manual_seed(0)
        self.fc, self.proj = nn.Linear(16, 64), nn.Linear(64, 16)
        self.op_by_op = op_by_op

    def forward(self, x):
        h = self.fc(x)
        h = gelu_new(h) if self.op_by_op else nn.functional.gelu(h, approximate="tanh")
        return self.proj(h).square().mean()


def step_of(model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(x):
        loss = model(x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step, opt


def planned(op_by_op: bool):
    model = MLP(op_by_op)
    step, opt = step_of(model)
    x = torch.randn(8, 16)
    return pipeline(capture(step, (x,), models=[model], optimizers=[opt]).graph, "h200")


def forward_pointwise_writes(p) -> int:
    """Bytes the forward's pointwise groups write (the GEMM epilogue's output not counted)."""
    return sum(v.type.nbytes for g in p.groups if g.kind == "pointwise"
               and not any(n.origin.endswith(("[backward]", RECOMPUTED_TAG)) for n in g.nodes)
               and math.prod(g.nodes[0].outputs[0].shape) > 1 for v in g.outputs)


def test_op_by_op_gelu_saves_nothing_more_than_f_gelu():
    by_ops, named = planned(True), planned(False)
    assert by_ops.recomputed, "the op-by-op chain's saved intermediates are recomputed"
    assert all("recomputed in the backward's pointwise kernel" in d.describe() for d in by_ops.recomputed)
    assert forward_pointwise_writes(by_ops) == forward_pointwise_writes(named)
    assert memory_bound_traffic(by_ops) <= 1.05 * memory_bound_traffic(named)
    # the constants CSE shares between the forward and its recomputed backward are literals
    # (named_activations reads them so), so the op-by-op forward is one gelu_tanh node, and it runs
    # in the GEMM's epilogue as F.gelu's does, its input written beside it for the backward; autograd's
    # backward chain (with the recomputed forward) is one gelu_tanh_backward node, which the dgrad
    # GEMM applies in its epilogue as it does F.gelu's backward
    for p in (by_ops, named):
        assert not any(n.op in ("tanh", "tanh_backward") for n in p.graph.nodes)
        assert [n.op for n in p.graph.nodes].count("gelu_tanh_backward") == 1
    epilogues = [[g.epilogue.describe() for g in p.groups if g.kind == "gemm" and g.epilogue.activation != "none"]
                 for p in (by_ops, named)]
    assert epilogues[0] == epilogues[1] == ["bias+gelu+preact", "dgelu(pre-activation)"]


def memory_bound_traffic(p) -> int:
    """Bytes the pointwise and reduction groups read and write."""
    return sum(v.type.nbytes for g in p.groups if g.kind in ("pointwise", "reduction")
               for v in list(g.inputs) + list(g.outputs))


def test_recomputed_step_matches_eager_on_the_cpu_executor():
    model, twin = MLP(True), None
    twin = copy.deepcopy(model)
    step, _ = step_of(model)
    eager, _ = step_of(twin)
    compiled = nova.compile(step, backend="executor")
    for i in range(3):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(i))
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_nothing_is_recomputed_without_a_backward():
    model = MLP(True)
    p = pipeline(capture(lambda x: model(x).detach(), (torch.randn(8, 16),), models=[model]).graph, "h200")
    assert p.recomputed == []


def test_independent_scalar_work_is_one_launch():
    """Each counter ``s_i + 1`` is read by a row-sized op right away (as an optimizer update reads
    its step); without the horizontal rule each counter's group closes and launches on its own."""
    g = Graph()
    one = g.input(TensorType((), "f32"), "one")
    for i in range(12):
        s = g.input(TensorType((), "f32"), f"step{i}")
        x = g.input(TensorType((64,), "f32"), f"x{i}")
        new = g.op("add", s, one)
        g.output(new, f"step{i}_new")
        g.output(g.op("softmax", g.op("mul", x, new), axis=0), f"y{i}")
    groups = fuse(g)
    scalar = [grp for grp in groups if grp.kind == "pointwise" and grp.nodes[0].outputs[0].shape == ()]
    assert len(scalar) == 1 and [n.op for n in scalar[0].nodes] == ["add"] * 12
    assert scalar[0].kernel == "nova" and len(scalar[0].outputs) == 12
    assert is_topological(groups)
