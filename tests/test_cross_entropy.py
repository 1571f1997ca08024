"""cross_entropy / cross_entropy_backward: the IR ops against torch, the pass that fuses
log_softmax -> nll_loss (+ backward) into them, the executor's kernels (CPU, one and several row
chunks), the planner writing dlogits over the logits, and explain's prediction."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from nova.compiler import cost
from nova.compiler.executor import build
from nova.ir import Graph, IRError, TensorType, interpreter, opdef, verify
from nova.ir.ops import infer
from nova.passes import pipeline, validate_memory_plan
from nova.passes.cross_entropy import find, find_backward, fuse_cross_entropy

CE = opdef("cross_entropy").reference
CE_BACKWARD = opdef("cross_entropy_backward").reference
PATTERN = ("log_softmax", "nll_loss", "nll_loss_backward", "log_softmax_backward")


def _problem(n=9, c=13, ignore_index=-100, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, c, generator=g, dtype=torch.float64) * 3).to(dtype)
    t = torch.randint(0, c, (n,), generator=g)
    t[1] = t[4] = ignore_index
    return x, t


# ------------------------------------------------------------------ the ops
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_reference_matches_torch_forward_and_gradient(reduction, ignore_index):
    x, t = _problem(ignore_index=ignore_index)
    xr = x.clone().requires_grad_()
    loss_t = F.cross_entropy(xr, t, reduction=reduction, ignore_index=ignore_index)
    dloss = torch.tensor(0.37, dtype=torch.float64)
    loss_t.backward(dloss)
    loss, lse = CE(torch, x, t, reduction=reduction, ignore_index=ignore_index)
    torch.testing.assert_close(loss, loss_t.detach(), rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(lse, torch.logsumexp(x, -1), rtol=1e-14, atol=1e-14)
    dx = CE_BACKWARD(torch, dloss, x, t, lse, reduction=reduction, ignore_index=ignore_index)
    torch.testing.assert_close(dx, xr.grad, rtol=1e-13, atol=1e-15)
    assert dx[1].abs().max() == 0 and dx[4].abs().max() == 0          # ignored rows


def test_reference_when_every_row_is_ignored_and_in_fp32():
    x, t = _problem()
    t[:] = -100
    loss, lse = CE(torch, x, t)
    assert torch.isnan(loss) and torch.isnan(F.cross_entropy(x, t))
    assert CE_BACKWARD(torch, torch.tensor(1.0, dtype=torch.float64), x, t, lse).abs().max() == 0
    x32, t = _problem(dtype=torch.float32)
    loss, lse = CE(torch, x32, t)
    assert loss.dtype == lse.dtype == torch.float32
    torch.testing.assert_close(loss, F.cross_entropy(x32, t))


def test_type_rules():
    logits, target = TensorType((6, 5), "f32"), TensorType((6,), "i64")
    loss, lse = infer("cross_entropy", [logits, target], {"reduction": "sum", "ignore_index": -1})
    assert (loss, lse) == (TensorType((), "f32"), TensorType((6,), "f32"))
    assert infer("cross_entropy", [TensorType((6, 5), "f64"), target], {})[1] == TensorType((6,), "f64")
    assert infer("cross_entropy", [TensorType((6, 5), "bf16"), target], {})[1] == TensorType((6,), "f32")
    assert infer("cross_entropy_backward", [loss, logits, target, lse], {}) == [logits]
    for types, attrs in [([logits, target], {"reduction": "none"}),
                         ([TensorType((2, 3, 5), "f32"), TensorType((2, 3), "i64")], {}),
                         ([logits, TensorType((6,), "f32")], {}),
                         ([logits, TensorType((5,), "i64")], {})]:
        with pytest.raises(IRError, match="cross_entropy"):
            infer("cross_entropy", types, attrs)
    with pytest.raises(IRError, match="dloss"):
        infer("cross_entropy_backward", [TensorType((1,), "f32"), logits, target, lse], {})


# ------------------------------------------------------------------ the pass
def loss_graph(n=8, c=12, reduction="mean", ignore_index=-100, backward=True, dtype="f32", head=True):
    """logits = h @ w^T (when ``head``: the logits then die at the loss's backward) -> log_softmax ->
    nll_loss (-> nll_loss_backward -> log_softmax_backward -> the head's gradients)."""
    g = Graph("xent")
    t = g.input(TensorType((n,), "i64"), "target", "data")
    if head:
        h = g.input(TensorType((n, 6), dtype), "h", "data")
        w = g.input(TensorType((c, 6), dtype), "w", "param")
        x = g.op("matmul", h, w, transpose_b=True)
    else:
        x = g.input(TensorType((n, c), dtype), "x", "data")
    logp = g.op("log_softmax", x, axis=-1)
    loss, tw = g.op("nll_loss", logp, t, reduction=reduction, ignore_index=ignore_index)
    g.output(loss, "loss")
    if backward:
        dloss = g.op("constant", value=0.5, dtype=dtype)
        dlogp = g.op("nll_loss_backward", dloss, logp, t, tw, reduction=reduction, ignore_index=ignore_index)
        dx = g.op("log_softmax_backward", dlogp, logp, axis=1)
        if head:
            g.output(g.op("matmul", dx, w), "h.grad", "grad")
            g.output(g.op("matmul", dx, h, transpose_a=True), "w.grad", "grad")
        else:
            g.output(dx, "x.grad", "grad")
    return g


def graph_inputs(graph, ignore_index=-100, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in graph.inputs:
        ty = spec.value.type
        if ty.dtype == "i64":
            t = torch.randint(0, 12, ty.shape, generator=gen)
            t[::3] = ignore_index
            out.append(t)
        else:
            out.append((torch.randn(ty.shape, generator=gen, dtype=torch.float64) * 2).to(
                torch.float64 if ty.dtype == "f64" else torch.float32))
    return out


def assert_same(got, want, **tol):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("reduction,ignore_index,backward", [("mean", -100, True), ("sum", 3, True),
                                                             ("mean", 0, False), ("sum", -100, False)])
def test_pass_rewrites_the_pattern_and_keeps_the_semantics(reduction, ignore_index, backward):
    g = loss_graph(reduction=reduction, ignore_index=ignore_index, backward=backward, dtype="f64")
    new = fuse_cross_entropy(g)
    verify(new)
    ops = new.op_counts()
    assert not set(PATTERN) & set(ops)
    assert ops["cross_entropy"] == 1 and ops.get("cross_entropy_backward", 0) == int(backward)
    ce = next(n for n in new.nodes if n.op == "cross_entropy")
    assert ce.attrs == {"reduction": reduction, "ignore_index": ignore_index}
    inputs = graph_inputs(g, ignore_index)
    assert_same(interpreter.run(new, inputs), interpreter.run(g, inputs), rtol=1e-12, atol=1e-12)
    assert [(o.name, o.role) for o in new.outputs] == [(o.name, o.role) for o in g.outputs]


def _rebuild(mutate):
    """loss_graph without the head, with ``mutate(g, nodes)`` applied before its outputs matter."""
    g = loss_graph(head=False)
    mutate(g, {n.op: n for n in g.nodes})
    return g


@pytest.mark.parametrize("case", ["logp_output", "logp_other_reader", "total_weight_output", "dlogp_other_reader",
                                  "reduction_none", "first_axis", "other_target", "bf16"])
def test_pass_leaves_other_uses_alone(case):
    if case == "reduction_none":
        g = loss_graph(head=False, backward=False, reduction="none")
    elif case == "bf16":
        g = loss_graph(head=False, dtype="bf16")
    elif case == "first_axis":
        g = Graph("axis0")
        x = g.input(TensorType((8, 8), "f32"), "x")
        t = g.input(TensorType((8,), "i64"), "t")
        g.output(g.op("nll_loss", g.op("log_softmax", x, axis=0), t)[0], "loss")
    elif case == "other_target":
        g = Graph("two_targets")
        x = g.input(TensorType((8, 12), "f32"), "x")
        t = g.input(TensorType((8,), "i64"), "t")
        t2 = g.input(TensorType((8,), "i64"), "t2")
        logp = g.op("log_softmax", x, axis=1)
        loss, tw = g.op("nll_loss", logp, t)
        dlogp = g.op("nll_loss_backward", g.op("constant", value=1.0, dtype="f32"), logp, t2, tw)
        g.output(loss, "loss")
        g.output(g.op("log_softmax_backward", dlogp, logp, axis=1), "dx")
    else:
        def mutate(g, nodes):
            if case == "logp_output":
                g.output(nodes["log_softmax"].outputs[0], "logp")
            elif case == "logp_other_reader":
                g.output(g.op("exp", nodes["log_softmax"].outputs[0]), "p")
            elif case == "total_weight_output":
                g.output(nodes["nll_loss"].outputs[1], "total_weight")
            else:
                g.output(g.op("neg", nodes["nll_loss_backward"].outputs[0]), "minus_dlogp")
        g = _rebuild(mutate)
    assert not find(g)
    if case in ("dlogp_other_reader", "reduction_none", "first_axis", "bf16"):
        assert not find_backward(g) and fuse_cross_entropy(g) is g
        return
    # the whole pattern is blocked, but the backward's pair is still rewritten on its own
    new = fuse_cross_entropy(g)
    ops = new.op_counts()
    assert ops["log_softmax"] == ops["nll_loss"] == ops["cross_entropy_backward"] == 1
    assert "nll_loss_backward" not in ops and "log_softmax_backward" not in ops
    inputs = graph_inputs(g)
    assert_same(interpreter.run(new, inputs), interpreter.run(g, inputs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction,ignore_index", [("mean", -100), ("sum", 3), ("mean", 0)])
def test_a_backward_alone_becomes_cross_entropy_backward_over_the_saved_logp(reduction, ignore_index):
    """AOTAutograd's backward graph: logp (saved by the forward) is an input; the nll_loss_backward +
    log_softmax_backward pair becomes one cross_entropy_backward reading logp with a zero
    log-sum-exp, the same gradient, and no [N, C] dlogp."""
    n, c = 9, 13
    g = Graph("backward")
    logp = g.input(TensorType((n, c), "f64"), "logp", "data")
    t = g.input(TensorType((n,), "i64"), "target", "data")
    tw = g.input(TensorType((), "f64"), "total_weight", "data")
    dloss = g.input(TensorType((), "f64"), "tangent", "data")
    dlogp = g.op("nll_loss_backward", dloss, logp, t, tw, reduction=reduction, ignore_index=ignore_index)
    g.output(g.op("log_softmax_backward", dlogp, logp, axis=1), "dx", "grad")
    assert not find(g) and len(find_backward(g)) == 1
    new = fuse_cross_entropy(g)
    verify(new)
    assert new.op_counts() == {"constant": 1, "cross_entropy_backward": 1}
    x, target = _problem(n, c, ignore_index)
    target[target == -100] = ignore_index
    keep = (target != ignore_index).sum().to(torch.float64)
    inputs = [torch.log_softmax(x, -1), target, keep, torch.tensor(0.37, dtype=torch.float64)]
    xr = x.clone().requires_grad_()
    F.cross_entropy(xr, target, reduction=reduction, ignore_index=ignore_index).backward(inputs[3])
    (dx,) = interpreter.run(new, inputs)
    torch.testing.assert_close(dx, xr.grad, rtol=1e-12, atol=1e-14)
    assert_same(interpreter.run(new, inputs), interpreter.run(g, inputs), rtol=1e-12, atol=1e-14)


def test_pass_on_the_captured_tiny_gpt_step():
    from nova.frontend import capture
    from nova.models import make_train_step
    from nova.models.gpt import GPT
    model = GPT("tiny")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)    # linear in the gradients (Adam's
                                                                        # first step is sign(g): noise-bound)
    step = make_train_step(model, opt)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 96, (2, 8), generator=gen)
    targets = torch.randint(0, 96, (2, 8), generator=gen)
    targets[0, :3] = -1                                   # GPT's ignore_index
    captured = capture(step, (idx, targets))
    g = captured.graph
    assert all(op in g.op_counts() for op in PATTERN)
    new = fuse_cross_entropy(g)
    verify(new)
    assert not set(PATTERN) & set(new.op_counts())
    assert new.op_counts()["cross_entropy"] == new.op_counts()["cross_entropy_backward"] == 1
    inputs, _ = captured.bindings.gather(pytree.tree_flatten(((idx, targets), {}))[0])
    inputs = [t.detach().clone() for t in inputs]
    want = interpreter.run(g, [t.clone() for t in inputs])
    assert_same(interpreter.run(new, [t.clone() for t in inputs]), want, rtol=2e-5, atol=2e-6)
    # the whole pipeline, executed on CPU over one poisoned arena, dlogits over the logits
    planned = pipeline(g)
    assert planned.stats["cross_entropy"] == planned.stats["canonicalize"] - 2
    backward = next(n for n in planned.graph.nodes if n.op == "cross_entropy_backward")
    assert planned.memory[backward.outputs[0]].reuses is not None
    got = build(planned, "cpu", poison=True).run([t.clone() for t in inputs])
    assert_same(got, want, rtol=2e-5, atol=2e-6)


# ------------------------------------------------------------------ planner and executor
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("reduction,ignore_index", [("mean", -100), ("sum", 5)])
@pytest.mark.parametrize("chunk_rows", [None, 3])
def test_executor_runs_the_planned_ops_with_dlogits_over_the_logits(dtype, reduction, ignore_index, chunk_rows,
                                                                      monkeypatch):
    g = loss_graph(n=10, reduction=reduction, ignore_index=ignore_index, dtype=dtype)
    if chunk_rows:                                            # several row chunks, the last one short
        monkeypatch.setattr(cost, "CROSS_ENTROPY_CHUNK_BYTES", chunk_rows * 12 * (8 if dtype == "f64" else 4))
    planned = pipeline(g)
    ops = [n.op for n in planned.order]
    assert "cross_entropy" in ops and "cross_entropy_backward" in ops and "log_softmax" not in ops
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    backward = next(n for n in planned.graph.nodes if n.op == "cross_entropy_backward")
    logits, dlogits = backward.inputs[1], backward.outputs[0]
    p = planned.memory[dlogits]
    assert p.kind == "arena" and p.reuses is logits and p.offset == planned.memory[logits].offset
    program = build(planned, "cpu", poison=True)
    chunks = -(-10 // chunk_rows) if chunk_rows else 1
    assert f"{chunks} row chunk(s)" in program.describe() and program.stats["copies"] == 0
    inputs = graph_inputs(g, ignore_index)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == "f64" else dict(rtol=1e-5, atol=1e-6)
    want = interpreter.run(g, inputs)
    for _ in range(2):                                        # the arena's bytes are reused by the next step
        assert_same(program.run([t.clone() for t in inputs]), want, **tol)


def test_executor_kernels_match_the_reference_outputs_directly():
    g = Graph("ops")
    x = g.input(TensorType((7, 11), "f64"), "x")
    t = g.input(TensorType((7,), "i64"), "t")
    dl = g.input(TensorType((), "f64"), "dloss")
    loss, lse = g.op("cross_entropy", x, t, reduction="mean", ignore_index=4)
    dx = g.op("cross_entropy_backward", dl, x, t, lse, reduction="mean", ignore_index=4)
    for v, name in ((loss, "loss"), (lse, "lse"), (dx, "dx")):
        g.output(v, name)
    xs, ts = _problem(7, 11, ignore_index=4)
    ts[0] = 4
    inputs = [xs, ts, torch.tensor(-1.5, dtype=torch.float64)]
    got = build(pipeline(g), "cpu", poison=True).run([v.clone() for v in inputs])
    assert_same(got, interpreter.run(g, inputs), rtol=1e-12, atol=1e-13)
    ts[:] = 4                                                 # every row ignored: nan loss, zero gradient
    got = build(pipeline(g), "cpu", poison=True).run([xs, ts, inputs[2]])
    assert torch.isnan(got[0]) and got[2].abs().max() == 0


def test_explain_prices_the_cross_entropy_kernels_by_bytes_and_launches(monkeypatch):
    """The closed form, which prices them where the target has no calibration of ATen's kernels
    (with the H200's they are priced kind by kind: tests/test_calibrate_aten.py), when they run on ATen
    (here forced: by default the rows kernels run them, priced by their configurator: tests/test_rows.py)."""
    from nova.compiler.explain import kernel_reports
    from nova.hwmodel import get_target
    import nova.passes.fusion
    monkeypatch.setattr(cost, "aten_calibration", lambda target: None)
    monkeypatch.setattr(nova.passes.fusion, "select_rows", lambda group, layouts: "")
    monkeypatch.setattr(nova.passes.fusion._Fuser, "_loss_forward", lambda self, node: None)
    g = loss_graph(n=4096, c=1024, head=False)
    planned = pipeline(g)
    reports = {k.name: k for k in kernel_reports(planned, get_target("h200"))}
    fwd, bwd = reports["cross_entropy"], reports["cross_entropy_backward"]
    logits = 4096 * 1024 * 4
    chunks = logits // cost.CROSS_ENTROPY_CHUNK_BYTES
    assert f"{2 * chunks + 10} x" in fwd.formula and f"{2 * chunks + 8} x" in bwd.formula
    assert f"{(logits + 4096 * 8 + 4 + 4096 * 4) / 1e6:.1f} MB" in fwd.formula
    assert bwd.predicted_us > fwd.predicted_us          # the backward also writes dlogits


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_kernels_launch_what_explain_counts_and_allocate_nothing(reduction, monkeypatch):
    from torch.utils._python_dispatch import TorchDispatchMode
    monkeypatch.setattr(cost, "CROSS_ENTROPY_CHUNK_BYTES", 3 * 12 * 4)           # 4 chunks of 10 rows
    g = loss_graph(n=10, reduction=reduction, head=False)
    program = build(pipeline(g), "cpu")
    program.run(graph_inputs(g))
    views = {"slice", "unsqueeze", "select", "view", "alias", "expand", "as_strided", "detach"}
    for launch in program.launches:
        op = launch.nodes[0].op
        if not op.startswith("cross_entropy"):
            continue
        calls = []

        class Log(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.__name__.split(".")[0] not in views:
                    calls.append(func.__name__)
                return func(*args, **(kwargs or {}))
        with Log(), torch.no_grad():
            launch()
        # on CPU a group runs its nodes one by one (the forward and its backward share a rows group)
        assert len(calls) == sum(cost.cross_entropy_launches(n.op, 10, 12 * 4, reduction) for n in launch.nodes)
        assert not [c for c in calls if c.startswith(("empty", "zeros", "full", "clone", "_to_copy"))]


def _loss_pair_graph(dloss_from: str):
    """cross_entropy + its backward over [16, 24] f32 logits, the loss's gradient from a graph input (a
    loss scale), a constant, or the loss itself (a gradient that depends on the loss's value)."""
    g = Graph("pair")
    x = g.input(TensorType((16, 24), "f32"), "x", "data")
    t = g.input(TensorType((16,), "i64"), "t", "data")
    if dloss_from == "constant-with-a-total":     # scalar work open first (a step counter), then a total
        c = g.input(TensorType((), "f32"), "c", "data")
        g.output(g.op("add", c, g.op("constant", value=1.0, dtype="f32")), "c1")
    loss, lse = g.op("cross_entropy", x, t, reduction="mean", ignore_index=-100)
    g.output(loss, "loss")
    if dloss_from == "constant-with-a-total":     # read from the loss: a scalar that may join the counter's group
        g.output(g.op("add", loss, c), "total")
    if dloss_from == "input":
        dloss = g.input(TensorType((), "f32"), "scale", "data")
    elif dloss_from in ("constant", "constant-with-a-total"):
        dloss = g.op("constant", value=0.5, dtype="f32")
    else:
        dloss = g.op("mul", loss, loss)
    g.output(g.op("cross_entropy_backward", dloss, x, t, lse, reduction="mean", ignore_index=-100), "x.grad", "grad")
    return g


@pytest.mark.parametrize("dloss_from, fused", [("input", True), ("constant", True), ("constant-with-a-total", True),
                                               ("loss", False)])
def test_the_loss_and_its_gradient_share_a_kernel_only_when_the_gradient_is_known_first(dloss_from, fused):
    """fusion.py: a cross_entropy_backward joins its forward's group when nothing has read the loss yet
    (scalar work that reads the loss waits for it: the chunked loss's total after the last chunk); a
    gradient computed from the loss itself must wait for the forward (two kernels).  Either way the
    CPU program (node by node) matches the interpreter."""
    g = _loss_pair_graph(dloss_from)
    planned = pipeline(g)
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    kinds = [gr.problem.kind for gr in planned.groups if gr.kernel == "nova" and gr.kind == "composite"]
    assert ("cross_entropy_forward_backward" in kinds) == fused
    assert (kinds.count("cross_entropy") == kinds.count("cross_entropy_backward") == 1) == (not fused)
    gen = torch.Generator().manual_seed(3)
    inputs = [torch.randn(16, 24, generator=gen), torch.randint(0, 24, (16,), generator=gen)]
    inputs[1][::5] = -100
    if dloss_from == "input":
        inputs.append(torch.tensor(0.75))
    if dloss_from == "constant-with-a-total":
        inputs.insert(2, torch.tensor(3.0))
    assert_same(build(planned, "cpu", poison=True).run([v.clone() for v in inputs]),
                interpreter.run(g, inputs), rtol=1e-5, atol=1e-6)
