"""Planning under a memory budget: sizes, the chunked loss, rematerialization, refusal, explain.

Budgeted plans run on CPU through ``run_planned`` (one poisoned arena, the plan's offsets) and must
give the unbudgeted plan's loss and every gradient (SGD with momentum: the momentum buffers are the
gradients, linear in them, unlike Adam's first step).
"""
import json

import pytest
import torch
from torch.utils import _pytree as pytree

from nova.frontend import capture
from nova.ir import interpreter
from nova.ir.graph import Graph
from nova.ir.types import TensorType
from nova.ir.verify import verify
from nova.models import build, make_train_step
from nova.passes import pipeline
from nova.passes.budget import MemoryBudgetError, allocator_headroom, parse_size
from nova.passes.chunked_loss import chunk_bounds, chunk_loss, find
from nova.passes.memory import validate_memory_plan
from nova.passes.reference import run_planned
from nova.passes.remat import candidates, gpu_model, rematerialize


# ------------------------------------------------------------------ sizes
@pytest.mark.parametrize("text,nbytes", [("12GiB", 12 * 2**30), ("11.5GB", 11_500_000_000), ("800MiB", 800 * 2**20),
                                         ("4096", 4096), ("1 kib", 1024), (2048, 2048)])
def test_sizes(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["12Gx", "GiB", "-3GiB", "0", "", "twelve"])
def test_bad_sizes_are_one_line(text):
    with pytest.raises(MemoryBudgetError) as e:
        parse_size(text)
    assert "\n" not in str(e.value) and "memory budget" in str(e.value)


# ------------------------------------------------------------------ steps
def _step(name, batch=16, seq=16, ignore=True):
    model = build(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = make_train_step(model, opt)
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size if hasattr(model, "config") else 80
    idx = torch.randint(0, vocab, (batch, seq), generator=gen)
    targets = torch.randint(0, vocab, (batch, seq), generator=gen)
    if ignore:
        targets[0, :5] = -1 if name == "tiny" else targets[0, :5]
    captured = capture(step, (idx, targets))
    inputs, _ = captured.bindings.gather(pytree.tree_flatten(((idx, targets), {}))[0])
    return captured.graph, [t.detach().clone() for t in inputs]


@pytest.fixture(scope="module", params=["tiny", "llama-tiny"])
def step(request):
    return request.param, *_step(request.param)


def _same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_budgeted_plan_runs_like_the_unbudgeted_one_and_fits(step):
    name, graph, inputs = step
    base = pipeline(graph)
    want = run_planned(base, [t.clone() for t in inputs])
    budget = int(base.memory.peak_bytes * 0.8) + allocator_headroom(graph)     # the plan gets 0.8x the peak
    planned = pipeline(graph, memory_budget=budget)
    report = planned.budget
    assert planned.memory.peak_bytes <= budget - report.headroom_bytes and report.fits and report.peak_bytes == planned.memory.peak_bytes
    assert report.unbudgeted_peak_bytes == base.memory.peak_bytes
    assert any(c.decision == "recomputed" for c in report.classes)
    assert any("[recomputed]" in n.origin for n in planned.graph.nodes)
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    _same(run_planned(planned, [t.clone() for t in inputs]), want)


def test_a_budget_the_plan_meets_changes_nothing(step):
    _, graph, _ = step
    base = pipeline(graph)
    planned = pipeline(graph, memory_budget=base.memory.peak_bytes + allocator_headroom(graph))
    assert planned.budget.fits and planned.budget.loss_chunks == 1 and not planned.budget.classes
    assert len(planned.graph.nodes) == len(base.graph.nodes)


def test_a_budget_below_the_floor_is_refused_in_one_line(step):
    _, graph, _ = step
    base = pipeline(graph)
    with pytest.raises(MemoryBudgetError) as e:
        pipeline(graph, memory_budget=base.memory.external_bytes)
    msg = str(e.value)
    assert "\n" not in msg and "the smallest plan is" in msg and "parameters+optimizer state" in msg
    assert msg.endswith("raise the budget or lower the batch")
    assert base.memory.external_bytes < e.value.floor_bytes <= base.memory.peak_bytes


def test_the_floor_is_reachable():
    graph, inputs = _step("tiny")
    with pytest.raises(MemoryBudgetError) as e:
        pipeline(graph, memory_budget=1024)
    planned = pipeline(graph, memory_budget=e.value.floor_bytes)
    assert planned.memory.peak_bytes <= e.value.floor_bytes


# ------------------------------------------------------------------ the chunked loss
@pytest.mark.parametrize("chunks", [2, 3, 7])
def test_chunked_loss_equals_the_unchunked_loss_ignored_rows_included(chunks):
    graph, inputs = _step("tiny", batch=4, seq=8)
    base = pipeline(graph)
    (match,) = find(base.graph)
    assert match.backward is not None and {f for _, f in match.readers} == {"rows", "contract"}
    chunked = chunk_loss(base.graph, chunks)
    verify(chunked)
    ops = chunked.op_counts()
    assert ops["cross_entropy"] == ops["cross_entropy_backward"] == len(chunk_bounds(32, chunks))
    _same(interpreter.run(chunked, [t.clone() for t in inputs]), interpreter.run(base.graph, [t.clone() for t in inputs]))


def _loss_graph(n, classes, reduction, ignore_index):
    g = Graph("head")
    x = g.input(TensorType((n, 8), "f64"), "x", "data")
    w = g.input(TensorType((classes, 8), "f64"), "w", "param")
    target = g.input(TensorType((n,), "i64"), "target", "data")
    logits = g.op("matmul", x, w, transpose_b=True)
    loss, lse = g.op("cross_entropy", logits, target, reduction=reduction, ignore_index=ignore_index)
    dloss = g.op("constant", value=1.0, dtype="f64")
    dlogits = g.op("cross_entropy_backward", dloss, logits, target, lse, reduction=reduction,
                   ignore_index=ignore_index)
    g.output(loss, "loss")
    g.output(g.op("matmul", dlogits, w), "dx")
    g.output(g.op("matmul", dlogits, x, transpose_a=True), "dw")
    g.output(g.op("matmul", x, dlogits, transpose_a=True), "dw_t")
    g.output(g.op("matmul", w, dlogits, transpose_a=True, transpose_b=True), "dx_t")
    return g


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignored", [0, 3, 10])
def test_chunked_loss_semantics_on_every_reader_form(reduction, ignored):
    n = 10
    g = _loss_graph(n, 6, reduction, -100)
    gen = torch.Generator().manual_seed(1)
    target = torch.randint(0, 6, (n,), generator=gen)
    target[:ignored] = -100
    inputs = [torch.randn(n, 8, generator=gen, dtype=torch.float64),
              torch.randn(6, 8, generator=gen, dtype=torch.float64), target]
    (match,) = find(g)
    assert sorted(f for _, f in match.readers) == ["cols", "contract", "contract", "rows"]
    want = interpreter.run(g, inputs)
    got = interpreter.run(chunk_loss(g, 3), inputs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)
    if ignored == n and reduction == "mean":
        assert torch.isnan(got[0])                                 # 0/0, as torch


# ------------------------------------------------------------------ rematerialization
def test_remat_candidates_put_gemm_outputs_last_and_recompute_exactly():
    graph, inputs = _step("tiny")
    g = pipeline(graph).graph
    cands = candidates(g, gpu_model("h200"))
    rates = {c.name: c.bytes_per_us for c in cands}
    assert rates["gelu_tanh at transformer.h.*.mlp"] > rates["matmul+bias at transformer.h.*.mlp.c_fc"]
    rewritten, env = rematerialize(g, [r for c in cands for r in c.roots])
    verify(rewritten)
    assert len(rewritten.nodes) > len(g.nodes)
    _same(interpreter.run(rewritten, [t.clone() for t in inputs]), interpreter.run(g, [t.clone() for t in inputs]))


def test_swiglu_product_is_recomputed_in_its_backward_kernel_and_exactly():
    """SwiGLU's product ``silu(gate) * up``, read first by the down projection's weight-gradient GEMM:
    its copy joins the SwiGLU backward's kernel (which reads gate and up anyway) as one more output,
    the GEMM runs after it, and the step computes what it computed."""
    from nova.passes.pipeline import plan_graph
    graph, inputs = _step("llama-tiny")
    g = pipeline(graph).graph
    cands = [c for c in candidates(g, gpu_model("h200")) if c.sibling]
    assert cands and all(c.name.startswith("mul at ") for c in cands), [c.name for c in cands]
    one = cands[0]
    assert one.recompute_us == pytest.approx(one.nbytes / gpu_model("h200").dram_bw * 1e6)   # its write alone
    rewritten, env = rematerialize(g, list(one.roots))
    verify(rewritten)
    _same(interpreter.run(rewritten, [t.clone() for t in inputs]), interpreter.run(g, [t.clone() for t in inputs]))
    planned = plan_graph(rewritten, "h200")
    copy = [n for n in planned.order if n.origin.endswith("[recomputed]") and n.op == "mul"]
    assert len(copy) == 1
    group = next(grp for grp in planned.groups if copy[0] in grp.nodes)
    assert group.kind == "pointwise" and group.kernel == "nova"
    assert "silu_backward" in [n.op for n in group.nodes], [n.op for n in group.nodes]
    position = {n: i for i, n in enumerate(planned.order)}
    readers = [u for v in copy[0].outputs for u in rewritten.users().get(v, ())]
    assert all(position[u] > position[copy[0]] for u in readers)


def test_recomputed_groups_run_just_in_time():
    graph, _ = _step("tiny")
    base = pipeline(graph)
    planned = pipeline(graph, memory_budget=int(base.memory.peak_bytes * 0.8) + allocator_headroom(graph))
    position = {n: i for i, n in enumerate(planned.order)}
    users = planned.graph.users()
    for node in planned.order:
        if node.origin.endswith("[recomputed]") and node.op != "reshape":
            first_use = min(position[u] for v in node.outputs for u in users.get(v, ()))
            backward = [i for i, n in enumerate(planned.order) if n.origin.endswith("[backward]")]
            assert position[node] > backward[0]                    # not recomputed in the forward
            assert first_use > position[node]


# ------------------------------------------------------------------ compile, cache, explain
def test_the_budget_is_part_of_the_plan_key():
    from nova.compiler.plan_cache import plan_key
    keys = {plan_key("g", "h200", "cuda"), plan_key("g", "h200", "cuda", memory_budget=12 * 2**30),
            plan_key("g", "h200", "cuda", memory_budget=11 * 2**30)}
    assert len(keys) == 3


def test_compile_parses_the_budget_at_once():
    import nova
    with pytest.raises(MemoryBudgetError):
        nova.compile(lambda x: x, memory_budget="12 parsecs")
    assert nova.compile(lambda x: x, memory_budget="1GiB").memory_budget == 2**30


def test_explain_train_under_a_budget(capsys):
    from nova.cli.config import main
    from nova.compiler.outside_arena import account
    base = pipeline(_step("tiny", batch=16, seq=16, ignore=False)[0], outside_arena=account)   # as explain plans
    budget = f"{(base.memory.peak_bytes - 0.15 * base.memory.arena_bytes) / 2**20:.3f}MiB"   # the arena makes room
    assert main(["explain", "train", "tiny", "--batch", "16", "--optimizer", "sgd", "--memory-budget", budget,
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    b = report["memory"]["budget"]
    assert b["fits"] and b["peak_bytes"] <= parse_size(budget) and report["memory"]["peak_bytes"] == b["peak_bytes"]
    assert {c["decision"] for c in b["classes"]} >= {"recomputed", "kept"}
    assert b["extra_step_us"] > 0
    assert main(["explain", "train", "tiny", "--batch", "16", "--optimizer", "sgd", "--memory-budget", budget]) == 0
    text = capsys.readouterr().out
    assert "memory budget" in text and "recomputed" in text and "saved activations by tensor class" in text
    assert main(["explain", "train", "tiny", "--batch", "16", "--memory-budget", "1KiB"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the smallest plan is" in err
    assert main(["explain", "train", "tiny", "--batch", "16", "--memory-budget", "lots"]) == 2


def test_explain_train_plots_memory_over_the_schedule_before_and_under_the_budget(capsys, tmp_path):
    """``--plot``: the plan's memory over its schedule (the report's ``over_schedule``: its largest
    point, over what the step holds throughout, is the plan's peak) beside the plan without the
    budget, written as a PNG."""
    from nova.cli.config import main
    from nova.compiler.outside_arena import account
    base = pipeline(_step("tiny", batch=16, seq=16, ignore=False)[0], outside_arena=account)
    budget = f"{(base.memory.peak_bytes - 0.15 * base.memory.arena_bytes) / 2**20:.3f}MiB"
    png = tmp_path / "memory.png"
    assert main(["explain", "train", "tiny", "--batch", "16", "--optimizer", "sgd", "--memory-budget", budget,
                 "--plot", str(png), "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert err.strip() == f"memory over the schedule: {png}" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    under, before = report["memory"]["over_schedule"], report["memory"]["over_schedule_unbudgeted"]
    for prof, peak in ((under, report["memory"]["peak_bytes"]), (before, base.memory.peak_bytes)):
        assert prof["peak_bytes"] == peak and 0 < len(prof["live_bytes"]) <= prof["positions"]
        assert abs(max(prof["live_bytes"]) + prof["base_bytes"] - peak) <= 0.01 * peak
    assert under["peak_bytes"] < before["peak_bytes"]
    assert main(["explain", "train", "tiny", "--batch", "2", "--gpus", "2", "--plot", str(png)]) == 2


def test_an_explicit_target_brings_its_memory_as_the_budget(capsys):
    from nova.cli.config import main
    assert main(["explain", "train", "tiny", "--batch", "2", "--target", "rtx3060", "--json"]) == 0
    b = json.loads(capsys.readouterr().out)["memory"]["budget"]
    assert b["budget_bytes"] == 12 * 2**30 and b["fits"]
    assert main(["explain", "train", "tiny", "--batch", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["budget"] is None


# ------------------------------------------------------------------ GPT-144M on meta
@pytest.mark.slow
def test_gpt144m_b16_fits_12gib_on_meta():
    from nova.compiler.explain import plan_training_step
    planned, _ = plan_training_step("gpt144m", 16, memory_budget="12GiB")
    assert planned.memory.peak_bytes <= 12 * 2**30 < planned.budget.unbudgeted_peak_bytes
    assert planned.budget.loss_chunks > 1
    recomputed = [c for c in planned.budget.classes if c.decision == "recomputed"]
    assert recomputed and not any(c.name.startswith("matmul") for c in recomputed)   # GEMM outputs last
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
