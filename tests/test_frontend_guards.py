"""The guard key's one-walk signatures and the write-back's identity fast path: the same contents
as torch's own iterators, and every change that must recapture still seen."""
import torch
import torch.nn as nn

from nova.frontend.bindings import Bindings, OutputBinding
from nova.frontend.discover import discover, modules_of
from nova.frontend.guards import guard_key, model_signature


class Block(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.shared = shared
        self.proj = nn.Linear(4, 4)
        self.register_module("absent", None)
        self.register_buffer("scale", torch.ones(4))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        shared = nn.Linear(4, 4)
        self.blocks = nn.ModuleList([Block(shared), Block(shared)])
        self.head = nn.Linear(4, 4, bias=False)
        self.embed = nn.Embedding(4, 4)
        self.head.weight = self.embed.weight                 # tied
        self.blocks[1].register_buffer("scale", self.blocks[0].scale)   # a shared buffer


def test_modules_of_walks_like_named_modules():
    net = Net()
    assert [(p, id(m)) for p, m in modules_of(net)] == [(p, id(m)) for p, m in net.named_modules()]


def test_model_signature_lists_parameters_and_buffers_as_torch_names_them():
    net = Net()
    _, _, params, buffers, training, hooks = model_signature("net", net)
    assert [(p[0], p[1]) for p in params] == [(n, id(p)) for n, p in net.named_parameters()]
    assert [(b[0], b[1]) for b in buffers] == [(n, id(b)) for n, b in net.named_buffers()]
    assert len(training) == len(list(net.modules())) and hooks == 0


def test_every_change_that_recaptures_changes_the_key():
    net = Net()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)

    def step(x):
        loss = net.head(net.blocks[0].proj(x)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    x = torch.randn(2, 4)
    step(x)
    found = discover(step)

    def key():
        return guard_key(found, (x,), {}, step)

    changes = [
        (lambda: setattr(net.head.weight, "grad", torch.zeros(4, 4)), "grad created"),
        (lambda: net.blocks[0].proj.weight.requires_grad_(False), "requires_grad"),
        (lambda: setattr(net.blocks[0].proj.bias, "data", torch.zeros(5)), "changed shape"),
        (lambda: net.blocks[1].eval(), "training mode"),
        (lambda: net.blocks[0].proj.register_forward_hook(lambda *a: None), "hooks changed"),
        (lambda: setattr(net.blocks[0], "scale", torch.ones(4, dtype=torch.float64)), "buffers changed"),
        (lambda: opt.state[net.head.weight].update(exp_avg=torch.zeros(4, 4, dtype=torch.float64)),
         "parameter groups or state changed"),
    ]
    before = key()
    assert key() == before                          # nothing changed: the same key
    for change, said in changes:
        change()
        after = key()
        assert after != before
        assert said in after.describe_change(before), (said, after.describe_change(before))
        before = after


def _param_bindings(*params):
    return Bindings(inputs=[], outputs=[OutputBinding("param", f"p{i}", p) for i, p in enumerate(params)]
                    + [OutputBinding("result", "result", result_index=0)],
                    result_spec=torch.utils._pytree.tree_flatten(0)[1], result_leaves=[("output", 0)])


def test_outputs_that_are_their_targets_are_not_copied():
    a, b = torch.randn(3), torch.randn(3)
    versions = (a._version, b._version)
    loss = torch.tensor(1.5)
    out = _param_bindings(a, b).scatter([a, b, loss], [], [])
    assert (a._version, b._version) == versions and out is loss


def test_an_output_reading_a_written_target_is_read_before_it_is_written():
    a, b = torch.arange(3.0), torch.arange(3.0) + 10
    # the step swaps the two parameters: a's new value is b's old memory, b's new value is fresh
    new_a, new_b = b, torch.tensor([7.0, 8.0, 9.0])
    result = b[:1]                                   # the returned value is a view of b (written)
    _param_bindings(a, b).scatter([new_a, new_b, result], [], [])
    assert a.tolist() == [10.0, 11.0, 12.0] and b.tolist() == [7.0, 8.0, 9.0]


def test_an_output_that_is_another_outputs_target_is_read_before_that_target_is_written():
    a, b = torch.arange(3.0), torch.arange(3.0) + 10
    # written in the order b, a: b's new value is fresh, a's new value is b's old one (b itself)
    _param_bindings(b, a).scatter([torch.tensor([7.0, 8.0, 9.0]), b, torch.tensor(0.0)], [], [])
    assert a.tolist() == [10.0, 11.0, 12.0] and b.tolist() == [7.0, 8.0, 9.0]
