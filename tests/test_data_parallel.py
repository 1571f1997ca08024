"""Data-parallel training compiled by Nova against eager DistributedDataParallel: two CPU processes
over gloo (tests/distributed_support.py), a small MLP, several steps; after them every rank holds
the same parameters, equal to eager DDP's.  Covered: a DDP-wrapped model (the gradient all-reduce
bucketed, several buckets), a step that all-reduces its gradients and its loss itself with
``dist.all_reduce``, and gradient accumulation under ``no_sync``."""
import pytest
import torch

from tests.distributed_support import run_ranks

STEPS = 3


def _mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 4))


def _batches(rank: int, count: int):
    g = torch.Generator().manual_seed(100 + rank)          # every rank its own data
    return [(torch.randn(8, 12, generator=g), torch.randn(8, 4, generator=g)) for _ in range(count)]


def _assert_same_on_every_rank(tensors) -> None:
    import torch.distributed as dist
    for t in tensors:
        gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, t.detach().contiguous())
        for other in gathered[1:]:
            assert torch.equal(gathered[0], other), "ranks disagree"


def _assert_close(nova_model, eager_model) -> None:
    for (name, a), b in zip(nova_model.named_parameters(), eager_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"parameter {name}")


def _two_models(make_optimizer):
    from torch.nn.parallel import DistributedDataParallel as DDP
    eager, nova_model = DDP(_mlp(0)), DDP(_mlp(0))
    return eager, nova_model, make_optimizer(eager.parameters()), make_optimizer(nova_model.parameters())


def _ddp_wrapped(rank: int, world_size: int, backend: str = "auto") -> None:
    import nova
    eager, model, eager_opt, opt = _two_models(lambda ps: torch.optim.AdamW(ps, lr=1e-2))

    def step(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    compiled = nova.compile(step, bucket_bytes=2048, backend=backend)     # several buckets for this small model
    for x, y in _batches(rank, STEPS):
        eager_opt.zero_grad()
        want = torch.nn.functional.mse_loss(eager(x), y)
        want.backward()
        eager_opt.step()
        got = compiled(x, y)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    graph = compiled.graph
    assert graph.op_counts().get("all_reduce") == len(list(model.parameters()))    # one per gradient, captured
    assert len(compiled.buckets) > 1 and sum(len(b.members) for b in compiled.buckets) == len(list(model.parameters()))
    assert compiled.stats.cache_hits == STEPS - 2        # the first two calls capture (grads, state appear)
    _assert_close(model.module, eager.module)
    _assert_same_on_every_rank(list(model.parameters()))


def _explicit_all_reduce(rank: int, world_size: int) -> None:
    import torch.distributed as dist
    import nova
    torch.manual_seed(0)
    eager, model = _mlp(0), _mlp(0)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def make_step(net, optimizer):
        def step(x, y):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            for p in net.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world_size
            logged = loss.detach().clone()
            dist.all_reduce(logged, op=dist.ReduceOp.SUM)
            optimizer.step()
            return logged / world_size
        return step

    eager_step, compiled = make_step(eager, eager_opt), nova.compile(make_step(model, opt))
    for x, y in _batches(rank, STEPS):
        want = eager_step(x, y)
        got = compiled(x, y)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    _assert_same_on_every_rank([got])
    _assert_close(model, eager)
    _assert_same_on_every_rank(list(model.parameters()))


def _no_sync_accumulation(rank: int, world_size: int) -> None:
    import nova
    eager, model, eager_opt, opt = _two_models(lambda ps: torch.optim.SGD(ps, lr=0.05))

    def make_step(net, optimizer):
        def step(x0, y0, x1, y1):
            optimizer.zero_grad()
            with net.no_sync():                                      # accumulate locally
                torch.nn.functional.mse_loss(net(x0), y0).backward()
            loss = torch.nn.functional.mse_loss(net(x1), y1)       # this backward averages the sums
            loss.backward()
            optimizer.step()
            return loss
        return step

    eager_step, compiled = make_step(eager, eager_opt), nova.compile(make_step(model, opt))
    data = _batches(rank, 2 * STEPS)
    for i in range(STEPS):
        (x0, y0), (x1, y1) = data[2 * i], data[2 * i + 1]
        torch.testing.assert_close(compiled(x0, y0, x1, y1), eager_step(x0, y0, x1, y1), rtol=1e-5, atol=1e-6)
    # one all-reduce per gradient: the accumulating backward has none
    assert compiled.graph.op_counts().get("all_reduce") == len(list(model.parameters()))
    _assert_close(model.module, eager.module)
    _assert_same_on_every_rank(list(model.parameters()))


def _ddp_wrapped_executor(rank: int, world_size: int) -> None:
    """The planned program (fusion, memory plan, the executor's collective kernels) on CPU."""
    _ddp_wrapped(rank, world_size, backend="executor")


@pytest.mark.parametrize("body", [_ddp_wrapped, _ddp_wrapped_executor, _explicit_all_reduce, _no_sync_accumulation],
                         ids=["ddp_wrapped", "ddp_wrapped_executor", "explicit_all_reduce", "no_sync"])
def test_two_ranks_match_eager_ddp(body):
    run_ranks(body, world_size=2, timeout_s=90)
