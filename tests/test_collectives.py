"""The collective IR ops, their lowering from torch's functional collectives, the gradient buckets
and the interconnect model, in one process (the two-rank runs: tests/test_data_parallel.py)."""
import pytest
import torch

from nova.ir import Graph, TensorType, interpreter
from nova.ir.types import IRError
from nova.passes.buckets import bucket_all_reduces, plan_buckets


def _attrs(world_size=4, **kw):
    return {"group": "0", "world_size": world_size, **kw}


def test_collective_types_and_reference():
    g = Graph("c")
    x = g.input(TensorType((8, 3), "f32"), "x")
    r = g.op("all_reduce", x, reduce_op="sum", **_attrs())
    a = g.op("all_reduce", x, reduce_op="avg", **_attrs())
    gathered = g.op("all_gather", x, **_attrs())
    scattered = g.op("reduce_scatter", x, reduce_op="sum", **_attrs())
    assert (gathered.shape, scattered.shape) == ((32, 3), (2, 3))
    for v, n in ((r, "r"), (a, "a"), (gathered, "g"), (scattered, "s")):
        g.output(v, n)
    t = torch.randn(8, 3)
    got = interpreter.run(g, [t])
    # every rank holding t, as rank 0 sees it
    torch.testing.assert_close(got[0], 4 * t)
    torch.testing.assert_close(got[1], t)
    torch.testing.assert_close(got[2], torch.cat([t] * 4))
    torch.testing.assert_close(got[3], 4 * t[:2])
    with pytest.raises(IRError, match="reduce_op"):
        g.op("all_reduce", x, reduce_op="max", **_attrs())
    with pytest.raises(IRError, match="divide evenly"):
        g.op("reduce_scatter", x, reduce_op="sum", **_attrs(world_size=3))


def test_interpreter_runs_bound_implementations():
    g = Graph("c")
    x = g.input(TensorType((5,), "f32"), "x")
    g.output(g.op("all_reduce", x, reduce_op="sum", **_attrs(world_size=2)), "y")
    seen = []

    def fake_all_reduce(torch_, t, reduce_op, group, world_size):
        seen.append((reduce_op, group, world_size))
        return t + 1
    t = torch.zeros(5)
    assert torch.equal(interpreter.run(g, [t], implementations={"all_reduce": fake_all_reduce})[0], t + 1)
    assert seen == [("sum", "0", 2)]


def _gradient_graph(shapes, world_size=2):
    """A graph whose 'gradients' (one matmul each, in order) are all-reduced, then used by sgd."""
    g = Graph("grads")
    hyper = g.input(TensorType((4,), "f64"), "hyper", "opt_state")
    xs = []
    for i, shape in enumerate(shapes):
        p = g.input(TensorType(shape, "f32"), f"p{i}", "param")
        a = g.input(TensorType((shape[0], 2), "f32"), f"a{i}")
        b = g.input(TensorType((2, shape[1]), "f32"), f"b{i}")
        xs.append((p, g.op("matmul", a, b)))
    for i, (p, grad) in enumerate(xs):
        reduced = g.op("all_reduce", grad, reduce_op="avg", **_attrs(world_size))
        g.output(g.op("sgd", p, reduced, hyper), f"p{i}", "param", updates=1 + 3 * i)
    return g


def test_buckets_by_size_in_production_order_and_same_values():
    shapes = [(4, 8), (8, 8), (2, 8), (16, 8), (4, 4)]
    g = _gradient_graph(shapes)
    limit = 100 * 4                             # bytes: a bucket closes at 100 f32 elements or more
    buckets = plan_buckets(g, limit)
    sizes = [[m.inputs[0].shape for m in b.members] for b in buckets]
    assert sizes == [[(4, 8), (8, 8), (2, 8)], [(16, 8)], [(4, 4)]]
    assert all(b.nbytes >= limit for b in buckets[:-1])
    new, _ = bucket_all_reduces(g, limit)
    assert new.op_counts()["all_reduce"] == 3
    inputs = [torch.tensor([0.1, 0.9, 0.0, 0.0], dtype=torch.float64)]
    for shape in shapes:
        inputs += [torch.randn(shape), torch.randn(shape[0], 2), torch.randn(2, shape[1])]
    inputs = [inputs[0]] + inputs[1:]
    order = [spec.name for spec in g.inputs]
    assert order == [spec.name for spec in new.inputs]
    for a, b in zip(interpreter.run(g, inputs), interpreter.run(new, inputs)):
        assert torch.equal(a, b)


def test_bucket_is_placed_after_its_last_gradient_and_updates_follow():
    g = _gradient_graph([(4, 8), (8, 8), (2, 8)])
    new, buckets = bucket_all_reduces(g, 4 * 8 * 4 + 8 * 8 * 4)        # first two together, then the third
    ops = [n.op for n in new.nodes]
    first_reduce = ops.index("all_reduce")
    assert ops[:first_reduce].count("matmul") == 2              # right after the second gradient
    assert ops.index("sgd") < len(ops) - 1 - ops[::-1].index("matmul")     # an update before the last gradient


def test_dependent_all_reduces_are_not_bucketed_together():
    g = Graph("chain")
    x = g.input(TensorType((4,), "f32"), "x")
    first = g.op("all_reduce", x, reduce_op="sum", **_attrs())
    second = g.op("all_reduce", g.op("mul", first, first), reduce_op="sum", **_attrs())
    g.output(second, "y")
    assert [len(b.members) for b in plan_buckets(g, None)] == [1, 1]
    new, _ = bucket_all_reduces(g, None)
    t = torch.randn(4)
    assert torch.equal(interpreter.run(new, [t])[0], interpreter.run(g, [t])[0])


def test_bucket_size_is_the_closed_form_and_latency_share_holds():
    from nova.hwmodel import get_target
    from nova.hwmodel.interconnect import collective_time_us, gradient_bucket_size, latency_us
    h200 = get_target("h200")
    assert gradient_bucket_size(h200, 1) is None
    for p in (2, 4, 8):
        size = gradient_bucket_size(h200, p)
        alpha = latency_us("all_reduce", p, h200)
        transfer = collective_time_us("all_reduce", size.bytes, p, h200) - alpha
        assert alpha <= 0.1 * transfer * (1 + 1e-9)
        smaller = collective_time_us("all_reduce", size.bytes * 0.9, p, h200) - alpha
        assert alpha > 0.1 * smaller                        # the smallest such bucket
    assert gradient_bucket_size(h200, 8).bytes > gradient_bucket_size(h200, 2).bytes


def test_functional_collectives_lower_to_ir_ops():
    """A world of one gloo process: make_fx traces _c10d_functional ops, lowered to the IR's."""
    import os
    import torch.distributed as dist
    from tests.distributed_support import free_port
    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        import nova
        w = torch.nn.Linear(3, 2)

        def step(x):
            y = w(x).sum(0)
            dist.all_reduce(y)                                        # in place: traced as functional + copy
            out = torch.empty(2)
            dist.all_gather_into_tensor(out, y)
            return y + out

        compiled = nova.compile(step)
        x = torch.randn(4, 3)
        with torch.no_grad():
            want = 2 * w(x).sum(0)
        torch.testing.assert_close(compiled(x), want)
        counts = compiled.graph.op_counts()
        assert counts.get("all_reduce") == 1 and counts.get("all_gather") == 1

        def bad(x):
            y = w(x)
            dist.all_reduce(y, op=dist.ReduceOp.MAX)
            return y
        with pytest.raises(nova.NovaUnsupportedError, match="MAX|reduction"):
            nova.compile(bad)(x)
    finally:
        dist.destroy_process_group()
