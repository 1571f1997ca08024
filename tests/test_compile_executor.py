"""``nova.compile(..., backend="executor")`` on CPU: the planned program (passes + executor, one
arena, donation) against eager PyTorch over several AdamW steps: the CI twin of the GPU path."""
import copy

import pytest

torch = pytest.importorskip("torch")

from nova.models import make_train_step  # noqa: E402  (needs torch)


@pytest.mark.parametrize("model_name", ["gpt", "llama"])
def test_executor_steps_match_eager(model_name):
    import nova
    if model_name == "gpt":
        from nova.models.gpt import GPT as Model
    else:
        from nova.models.llama import Llama as Model
    model = Model("tiny", seed=0)
    twin = copy.deepcopy(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_ref = torch.optim.AdamW(twin.parameters(), lr=1e-3)
    pointers = [p.data_ptr() for p in model.parameters()]
    start = [p.detach().clone() for p in twin.parameters()]

    train_step = make_train_step(model, opt)
    step = nova.compile(train_step, backend="executor")
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    for _ in range(4):
        idx = torch.randint(0, vocab, (2, 16), generator=gen)
        targets = torch.randint(0, vocab, (2, 16), generator=gen)
        loss = step(idx, targets)
        ref = twin(idx, targets)
        ref.backward()
        opt_ref.step()
        opt_ref.zero_grad(set_to_none=True)
        assert torch.allclose(loss, ref, rtol=1e-5, atol=1e-6)
    assert [p.data_ptr() for p in model.parameters()] == pointers
    # Adam turns rounding noise in near-zero gradients (the key bias: exactly zero in exact arithmetic)
    # into +-lr steps, so single tensors can differ by O(lr); the whole model's difference must stay a
    # tiny fraction of how far the parameters moved.
    diff = sum(float((p - q).pow(2).sum()) for p, q in zip(model.parameters(), twin.parameters())) ** 0.5
    moved = sum(float((q - q0).pow(2).sum()) for q, q0 in zip(twin.parameters(), start)) ** 0.5
    assert diff < 1e-3 * moved
    program = step._last.engine.program
    assert program.stats["donated_outputs"] > 0


def test_a_true_bmm_is_one_batched_nova_gemm_in_the_plan():
    """``torch.bmm``/``baddbmm`` in a captured training step: the plan gives each batched matmul
    (forward and the weight gradient, read transposed in place) one batched Nova GEMM, and the
    executor's program (torch.matmul on CPU) matches eager."""
    import nova
    from torch import nn

    class Experts(nn.Module):                     # a batch of 4 independent [6 -> 5] linear maps
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 6, 5) * 0.3)
            self.b = nn.Parameter(torch.randn(4, 1, 5) * 0.1)

        def forward(self, x, target):             # x [4, 3, 6], target [4, 3, 3]
            y = torch.baddbmm(self.b, x, self.w)
            return (torch.bmm(y, y.transpose(1, 2)) - target).square().mean()

    torch.manual_seed(0)
    model = Experts()
    twin = copy.deepcopy(model)
    opt, opt_ref = (torch.optim.SGD(m.parameters(), lr=1e-2) for m in (model, twin))
    step, eager = nova.compile(make_train_step(model, opt), backend="executor"), make_train_step(twin, opt_ref)
    gen = torch.Generator().manual_seed(1)
    for _ in range(2):
        x, target = torch.randn(4, 3, 6, generator=gen), torch.randn(4, 3, 3, generator=gen)
        assert torch.allclose(step(x, target), eager(x, target), rtol=1e-5, atol=1e-6)
    groups = [g for g in step._last.engine.program.plan.groups if g.kind == "gemm"]
    batched = [g.reason for g in groups if g.gemm is not None and g.reason.startswith("gemm 4x")]   # "gemm 4x3x5x6 ..."
    assert len(batched) >= 3, [g.reason for g in groups]
    assert any(" TN " in r for r in batched) and any(" NT " in r for r in batched)     # dW = x^T dY, y y^T


def test_host_inputs_mirrors_start_on_aligned_rows():
    """The device mirrors of host inputs (the CPU step counts of non-capturable optimizers, the
    hyper-parameter vectors) are rows of one pack, each starting on an arena slot boundary (``memory.ALIGNMENT`` bytes apart): a kernel
    that reads or writes them with vectors, or checks their alignment, takes them as planned."""
    from nova.compiler.step import ProgramEngine
    from nova.passes.memory import ALIGNMENT

    class Graph:
        inputs, outputs = [], []
    engine = ProgramEngine.__new__(ProgramEngine)
    engine.graph, engine.device = Graph, torch.device("cpu")
    host = [torch.tensor(float(i)) for i in range(5)] + [torch.arange(5.0, dtype=torch.float64) + i for i in range(3)]
    engine._prepare(host, tuple(range(len(host))))
    for idx, buffer, _ in engine._packs:
        buffer.copy_(torch.stack([host[i] for i in idx]))
        base = engine._mirror_of[idx[0]].data_ptr()
        assert all((engine._mirror_of[i].data_ptr() - base) % ALIGNMENT == 0 for i in idx)
    assert all(torch.equal(engine._mirror_of[i], t) for i, t in enumerate(host))


def test_a_released_program_allocates_again_and_runs_the_same():
    """``Program.release`` frees its device memory; the next run allocates, binds and computes the same."""
    from nova.compiler.executor import build
    from nova.compiler.outside_arena import account
    from nova.passes import pipeline
    from nova.passes.examples import random_inputs, transformer_step
    graph = transformer_step(layers=1)
    program = build(pipeline(graph, outside_arena=account), "cpu")
    inputs = random_inputs(graph, 0, 32)
    first = program.run([t.clone() for t in inputs])
    program.release()
    assert program.store is None and program._launches is None
    again = program.run([t.clone() for t in inputs])
    assert program.store is not None
    for a, b in zip(first, again):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_under_a_budget_a_recapture_releases_the_earlier_program():
    """A loop that zeroes the gradients before backward: the first step creates ``.grad``, so the
    second captures again; under a memory budget the first program's memory is freed first (two
    arenas never live at once), and the steps still match eager."""
    import nova
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    twin = copy.deepcopy(model)
    opt, opt_ref = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))

    def make(m, o):
        def train_step(x, y):
            o.zero_grad(set_to_none=False)
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            o.step()
            return loss.detach()
        return train_step
    step = nova.compile(make(model, opt), backend="executor", memory_budget="1GiB")
    eager = make(twin, opt_ref)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        x, y = torch.randn(5, 8, generator=gen), torch.randn(5, 4, generator=gen)
        torch.testing.assert_close(step(x, y), eager(x, y))
    assert step.stats.captures == 2 and "grad" in step.stats.last_recapture_reason
    first, second = list(step._cache.values())
    assert first.engine.program.store is None and second.engine.program.store is not None


def test_a_cpu_program_binds_its_hyper_parameters_once_and_follows_a_schedule():
    """The optimizer's hyper-parameters reach the program as one f64 vector per group, the same
    tensor at every call (its values written in place): a CPU program reads it by pointer, so it binds
    once, and a learning-rate schedule still moves every step as eager's does."""
    import torch
    import nova
    from nova import models
    torch.manual_seed(0)
    model = models.build("tiny", seed=0)
    twin = copy.deepcopy(model)
    start = [p.detach().clone() for p in twin.parameters()]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, twin)]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: (s + 1) / 4) for o in opts]
    step, eager = nova.compile(make_train_step(model, opts[0]), backend="executor"), make_train_step(twin, opts[1])
    cfg = models.config("tiny")
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        idx, tgt = (torch.randint(0, cfg.vocab_size, (2, 8), generator=gen) for _ in range(2))
        assert torch.allclose(step(idx, tgt), eager(idx, tgt), rtol=1e-5, atol=1e-6)
        for s in scheds:
            s.step()
    program = step._last.engine.program
    assert step.stats.captures == 1 and program.stats["rebinds"] == 0, program.stats["rebinds"]
    assert opts[0].param_groups[0]["lr"] == opts[1].param_groups[0]["lr"] == 1.25e-3   # 5/4 x 1e-3
    # Adam's first updates are near sign(g) * lr: the parameters follow eager's within a small part of their move
    diff = sum(float((p - q).pow(2).sum()) for p, q in zip(model.parameters(), twin.parameters())) ** 0.5
    moved = sum(float((q - q0).pow(2).sum()) for q, q0 in zip(twin.parameters(), start)) ** 0.5
    assert diff < 1e-3 * moved, (diff, moved)


def test_host_computed_step_counts_are_evaluated_once_per_expression():
    """The outputs a CUDA program's engine computes on the host (every parameter's ``step + 1``) are
    grouped by expression and evaluated once over their inputs stacked: the same values, bit for bit,
    as evaluating each output alone."""
    import torch
    import nova
    from nova import models
    from nova.compiler.step import ProgramEngine, _evaluate
    from torch.utils import _pytree as pytree
    model = models.build("tiny", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = nova.compile(make_train_step(model, opt), backend="executor")
    cfg = models.config("tiny")
    idx = torch.randint(0, cfg.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        step(idx, idx)
    entry = step._last
    inputs, _ = entry.captured.bindings.gather(pytree.tree_flatten(((idx, idx), {}))[0])

    class Program:
        graph = entry.captured.graph
    engine = ProgramEngine(Program(), torch.device("meta"))
    engine._prepare(inputs, tuple(i for i, t in enumerate(inputs) if t.dim() == 0))   # the CPU step counts
    assert len(engine._host_outputs) == len(list(model.parameters()))
    (group,) = engine._host_groups
    assert sorted(group[1]) == sorted(engine._host_outputs)                  # one expression: step + 1
    got = engine._host_values(inputs)
    env = {spec.value: inputs[i] for i, spec in enumerate(engine.graph.inputs)}
    for k in engine._host_outputs:
        alone = _evaluate(engine.graph.outputs[k].value, None, dict(env))
        assert torch.equal(got[k], alone) and got[k].dtype == alone.dtype and float(alone) == 4.0
