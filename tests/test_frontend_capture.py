"""Capture: the whole GPT/Llama training step as one functional IR graph, its inputs, outputs and
origins; the user's objects untouched by capturing; unsupported constructs refused in one line."""
import dataclasses

import pytest
import torch
import torch.nn as nn

import nova
from nova.frontend import NovaUnsupportedError, capture
from nova.ir import OPS, verify
from nova.models.gpt import GPT
from nova.models.gpt import CONFIGS as GPT_CONFIGS
from nova.models.llama import Llama
from nova.models import make_train_step

GPT1 = dataclasses.replace(GPT_CONFIGS["tiny"], n_layer=1)


def tokens(model, shape=(2, 8)):
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, model.config.vocab_size, shape, generator=g),
            torch.randint(0, model.config.vocab_size, shape, generator=g))


@pytest.fixture(scope="module")
def gpt_capture():
    model = GPT("tiny")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt, capture(make_train_step(model, opt), tokens(model))


@pytest.fixture(scope="module")
def llama_capture():
    model = Llama("tiny")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, opt, capture(make_train_step(model, opt), tokens(model))


@pytest.mark.parametrize("which", ["gpt", "llama"])
def test_the_step_is_one_functional_graph_of_ir_ops(which, gpt_capture, llama_capture):
    model, opt, captured = gpt_capture if which == "gpt" else llama_capture
    g = captured.graph
    verify(g)
    ops = g.op_counts()
    assert set(ops) <= set(OPS) and "aten" not in ops and not captured.stats.opaque
    assert ops["attention"] == ops["attention_backward"] == model.config.n_layer
    n_params = len(list(model.parameters()))
    assert ops["adamw" if which == "gpt" else "sgd"] == n_params
    # every parameter is an input and comes back as an output that updates it
    params = [i for i in g.inputs if i.role == "param"]
    assert [i.name for i in params] == [n for n, _ in model.named_parameters()]
    updated = {g.inputs[o.updates].name for o in g.outputs if o.role == "param"}
    assert updated == {i.name for i in params}
    # zero_grad(set_to_none=True) after the step: no grads come out; the loss is the only result
    assert [o.role for o in g.outputs].count("grad") == 0
    assert [o.name for o in g.outputs if o.role == "result"] == ["result"]
    assert all(i.name in ("idx", "targets") for i in g.inputs if i.role == "data")


def test_gpt_step_structure(gpt_capture):
    model, opt, captured = gpt_capture
    g = captured.graph
    ops = g.op_counts()
    assert ops["layer_norm"] == ops["layer_norm_backward"] == 2 * model.config.n_layer + 1
    assert ops["index_select"] == ops["scatter_add"] == 2          # token and position embeddings
    assert ops["nll_loss"] == ops["nll_loss_backward"] == 1
    assert ops["gelu_tanh"] == ops["gelu_tanh_backward"] == model.config.n_layer
    # optimizer state: step, exp_avg, exp_avg_sq per parameter, each updated
    # and one hyper-parameter vector per parameter group, an input the update reads (never updated)
    state = [i for i in g.inputs if i.role == "opt_state" and not i.name.endswith(".hyper")]
    hyper = [i for i in g.inputs if i.name.endswith(".hyper")]
    assert len(state) == 3 * len(list(model.parameters()))
    assert [i.name for i in hyper] == ["opt.param_groups[0].hyper"] and hyper[0].value.type.shape == (5,)
    steps = [i for i in state if i.name.endswith(".step")]
    assert all(i.value.type.shape == () and i.value.type.dtype == "f32" for i in steps)
    assert sum(o.role == "opt_state" and o.updates is not None for o in g.outputs) == len(state)
    adamw = [n for n in g.nodes if n.op == "adamw"]
    assert all(n.attrs == {"decoupled": True} and n.inputs[5] is hyper[0].value for n in adamw)
    binding = next(b for b in captured.bindings.inputs if b.kind == "hyper")
    assert binding.fetch([], []).tolist() == [1e-3, 0.9, 0.999, 1e-8, 0.01]


def test_llama_step_structure(llama_capture):
    model, opt, captured = llama_capture
    g = captured.graph
    ops = g.op_counts()
    assert ops["silu"] == ops["silu_backward"] == model.config.n_layer
    assert ops["rsqrt"] >= 2 * model.config.n_layer + 1                  # RMSNorm, decomposed
    assert {"sin", "cos"}.isdisjoint(ops)                                # rotary tables are buffers ...
    assert {i.name for i in g.inputs if i.role == "const"} == {"rope_cos", "rope_sin"}   # ... read as inputs
    # first SGD step: the momentum buffer starts as the gradient: outputs only, created on write-back
    assert [i.name for i in g.inputs if i.role == "opt_state"] == ["opt.param_groups[0].hyper"]   # lr, momentum, ...
    assert sum(o.role == "opt_state" and o.updates is None for o in g.outputs) == len(list(model.parameters()))


def test_every_node_names_where_it_came_from(gpt_capture):
    _, _, captured = gpt_capture
    nodes = captured.graph.nodes
    assert all(n.origin for n in nodes if n.op not in ("constant",))
    by_op = {}
    for n in nodes:
        by_op.setdefault(n.op, n.origin)
    assert by_op["attention"].startswith("transformer.h.0.attn (gpt.py:")
    assert by_op["attention_backward"].startswith("transformer.h.1.attn (gpt.py:")   # backward runs last layer first
    assert by_op["attention_backward"].endswith("[backward]")
    assert by_op["layer_norm"].startswith("transformer.h.0.ln_1 (common.py:")   # applied by the shared PreNormBlock
    assert by_op["adamw"] == "optimizer opt (AdamW)"


def test_capture_leaves_the_users_objects_untouched():
    model = GPT(GPT1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    step = make_train_step(model, opt)
    captured = capture(step, tokens(model))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters()) and len(opt.state) == 0
    assert all(isinstance(p, nn.Parameter) for p in model.parameters())
    assert "step" not in opt.__dict__ and "zero_grad" not in opt.__dict__
    assert model.lm_head.weight is model.transformer.wte.weight
    assert captured.graph.nodes


def test_capturing_a_meta_model_allocates_nothing():
    with torch.device("meta"):
        model = GPT(GPT1)
        idx = torch.zeros(4, 16, dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters())
    captured = capture(make_train_step(model, opt), (idx, idx))
    assert captured.graph.inputs[-1].value.type.shape == (4, 16)
    assert "aten" not in captured.graph.op_counts()


def _error(fn, *args):
    with pytest.raises(NovaUnsupportedError) as info:
        nova.compile(fn, backend="reference")(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def test_host_reads_and_data_dependent_control_flow_are_refused():
    m = Tiny()
    x = torch.randn(3, 4)

    def item(x):
        return m(x) * m(x).sum().item()

    def branch(x):
        y = m(x)
        if y.sum() > 0:
            return y
        return -y
    assert "data-dependent" in _error(item, x) and "test_frontend_capture.py:" in _error(item, x)
    assert "data-dependent" in _error(branch, x)


def test_unknown_optimizers_options_hooks_and_mutations_are_refused():
    m = Tiny()
    x = torch.randn(3, 4)

    def with_opt(opt):
        def step(x):
            m(x).sum().backward()
            opt.step()
        return step
    assert "RMSprop is not supported" in _error(with_opt(torch.optim.RMSprop(m.parameters())), x)
    assert "amsgrad=True" in _error(with_opt(torch.optim.AdamW(m.parameters(), amsgrad=True)), x)

    bn = nn.BatchNorm1d(4)
    assert "mutates its buffer 'running_mean'" in _error(lambda x: bn(x), x)
    assert "mutates its argument 'x'" in _error(lambda x: x.add_(1), x)

    hooked = Tiny()
    hooked.lin.register_forward_hook(lambda *a: None)
    assert "lin (Linear) has a forward hook" in _error(lambda x: hooked(x), x)

    stray = torch.randn(4)
    assert "neither a parameter or buffer" in _error(lambda x: m(x) + stray, x)

    hidden = {"opt": torch.optim.SGD(m.parameters(), lr=0.1)}       # reached through a call Nova cannot see

    def uses_hidden(x, get=lambda: hidden["opt"]):
        m(x).sum().backward()
        get().step()
    assert "did not find" in _error(uses_hidden, x)
    assert all(p.grad is None for p in m.parameters())             # nothing ran on the real tensors


def test_eval_mode_dropout_and_batchnorm_are_fine():
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4)).eval()
    x = torch.randn(3, 4)
    step = nova.compile(lambda x: net(x), backend="reference")
    assert torch.allclose(step(x), net(x), atol=1e-6)
