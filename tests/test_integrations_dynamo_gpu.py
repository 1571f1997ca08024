"""``torch.compile(model, backend="nova")`` on the GPU: forward and backward graphs on Nova's
executor (Nova GEMMs and attention, CUDA graph) against a float64 eager twin (run on the device;
skipped without a GPU).  Every graph must run on Nova (no fallback warning)."""
from __future__ import annotations

import copy
import logging

import pytest

pytestmark = pytest.mark.gpu


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.mark.parametrize("model_name", ["mlp", "tiny", "gpt42m"])
def test_training_steps_on_nova_match_float64_eager(model_name, caplog):
    torch = pytest.importorskip("torch")
    from nova.integrations.dynamo import nova_backend
    from nova.models.gpt import GPT
    torch._dynamo.reset()
    torch.manual_seed(0)
    if model_name == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
        batches = [(torch.randn(512, 256, device="cuda"),) for _ in range(3)]
        loss_of = lambda y: (y ** 2).mean()        # noqa: E731
    else:
        model = GPT(model_name, seed=0).cuda()
        vocab, seq = model.config.vocab_size, min(model.config.block_size, 256)
        batches = [(torch.randint(0, vocab, (4, seq), device="cuda"), torch.randint(0, vocab, (4, seq), device="cuda"))
                   for _ in range(3)]
        loss_of = lambda loss: loss                # noqa: E731
    twin = copy.deepcopy(model).double()
    compiled = torch.compile(model, backend=nova_backend)
    opts = [torch.optim.SGD(m.parameters(), lr=1e-2) for m in (model, twin)]
    with caplog.at_level(logging.INFO, logger="nova"):
        for step, args in enumerate(batches):
            for p in model.parameters():              # cleared: this step's backward must write every gradient
                p.grad = None
            loss = loss_of(compiled(*args))
            loss.backward()
            ref = loss_of(twin(*[a.double() if a.is_floating_point() else a for a in args]))
            ref.backward()
            assert _rel(loss.detach(), ref.detach()) < 2e-3, f"step {step} loss"
            worst = max((_rel(p.grad, q.grad), n) for (n, p), q in zip(model.named_parameters(), twin.parameters()))
            assert worst[0] < 1e-2, f"step {step}: gradient of {worst[1]}: relative error {worst[0]:.2e}"
            for opt in opts:
                opt.step()
                opt.zero_grad()
    messages = [r.message for r in caplog.records]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], messages
    assert any("forward graph" in m and "executor on cuda" in m for m in messages), messages
    assert any("backward graph" in m and "executor on cuda" in m for m in messages), messages
