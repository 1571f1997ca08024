"""Host offload (``nova/passes/offload.py``): saved activations copied to host memory while the
forward runs and back before the backward reads them.  On the CPU: the copies' placement on a
timeline, the rewritten graph against the interpreter, the plan run by the reference runner (which
takes each copy where the copy engine starts it and checks the bytes still hold it where the copy
ends) and by the CPU executor, the budget's report and the option that turns it off."""
from __future__ import annotations

import pytest
import torch

from nova.hwmodel import get_target
from nova.ir import interpreter
from nova.ir.verify import verify
from nova.passes import offload as host
from nova.passes import pipeline
from nova.passes.budget import allocator_headroom
from nova.passes.examples import random_inputs, transformer_step
from nova.passes.memory import validate_memory_plan
from nova.passes.reference import run_planned

GPU = get_target("h200")


@pytest.fixture(autouse=True)
def small_values(monkeypatch):
    """These steps' activations are KiBs, their recomputations fractions of a us: every one is worth a
    copy here, and the copies' toll on the kernels beside them is taken as 1000x below the target's."""
    monkeypatch.setattr(host, "MIN_BYTES", 0)
    per_byte = host.copy_us_per_byte
    monkeypatch.setattr(host, "copy_us_per_byte", lambda gpu: per_byte(gpu) / 1000)


def slow_groups(planned):
    """A timeline where every group takes 1 ms: every copy of these small steps hides."""
    return [1000.0] * len(planned.groups)


def _step(layers=2):
    graph = transformer_step(batch=4, seq=64, dim=64, heads=2, vocab=96, layers=layers)
    return graph, random_inputs(graph, 3, 96)


def _close(got, want, rtol=1e-4, atol=1e-5):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol)


def test_copy_time_is_latency_plus_bytes_over_the_link():
    assert host.copy_us(50_000_000, GPU) == pytest.approx(host.LINK_LATENCY_US + 1000.0)
    assert host.can_offload(GPU) and GPU.host_link_bw == 50e9


def test_an_offloaded_byte_costs_the_kernels_slowdown_over_both_copies(monkeypatch):
    """2 x host_copy_slowdown / host_link_bw: 3% of the 2 x 20 us that a MB spends on a 50 GB/s link."""
    monkeypatch.undo()
    assert GPU.host_copy_slowdown == 0.03
    assert host.copy_us_per_byte(GPU) * 1e6 == pytest.approx(1.2)


def test_copies_queue_first_in_first_out_on_each_direction():
    """Two values written at groups 0 and 1 (1 ms each), copies of 1.51 ms: the second copy to host
    starts when the first ends (2.51 ms), so it is done at 4.02 ms and joins at the group ending at 5 ms;
    the copies back go as late as their readers (groups 8 and 9) allow, latest first: the second
    after group 6 (7 ms + 1.51 <= 9 ms), the first then before that one starts (5 ms + 1.51 <= 7 ms),
    earlier than its own reader alone would ask: the stream is first in, first out."""
    c = [host.Candidate(None, 75_000_000, 0, 0, 8, "a", None), host.Candidate(None, 75_000_000, 1, 1, 9, "b", None)]
    starts = [1000.0 * g for g in range(10)]
    ends = [s + 1000.0 for s in starts]
    placed = host.simulate(c, starts, ends, GPU)
    t = host.copy_us(75_000_000, GPU)
    assert t == pytest.approx(1510.0)
    assert [(o.join, o.issue) for o in placed] == [(2, 4), (4, 6)]
    # no room: a reader right after the writer
    assert host.simulate([host.Candidate(None, 75_000_000, 0, 0, 1, "a", None)], starts, ends, GPU) is None
    # the busiest group must lie after the join and at or before the issue of every copy taken
    assert host.simulate(c, starts, ends, GPU, peak_group=4) is None
    assert host.simulate(c[:1], starts, ends, GPU, peak_group=3) is not None


def test_offloaded_graph_computes_what_the_original_does():
    graph, inputs = _step()
    base = pipeline(graph)
    chosen = host.choose(base, GPU, slow_groups, excess=1 << 40)
    assert chosen, "a 1 ms-per-group timeline hides every copy of this step"
    rewritten, _ = host.offload(base, chosen)
    verify(rewritten)
    ops = [n.op for n in rewritten.nodes]
    assert ops.count("offload") == ops.count("reload") == len(chosen)
    _close(interpreter.run(rewritten, [t.clone() for t in inputs]), interpreter.run(graph, [t.clone() for t in inputs]))


def test_budgeted_plan_offloads_and_runs_like_the_unbudgeted_one():
    graph, inputs = _step()
    base = pipeline(graph)
    want = run_planned(base, [t.clone() for t in inputs])
    budget = int(base.memory.peak_bytes * 0.85) + allocator_headroom(graph)
    planned = pipeline(graph, memory_budget=budget, host_offload=slow_groups)
    report = planned.budget
    assert report.fits and planned.memory.peak_bytes <= budget - report.headroom_bytes
    offloaded = [c for c in report.classes if c.decision == "offloaded"]
    assert offloaded and report.host_bytes == planned.memory.host_bytes == sum(c.nbytes for c in offloaded)
    assert report.offload_us == pytest.approx(report.host_bytes * host.copy_us_per_byte(GPU))
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    _close(run_planned(planned, [t.clone() for t in inputs]), want)
    # each value's device bytes die at its offload; the copy back comes later, before the first reader
    order = {n: i for i, n in enumerate(planned.order)}
    users = planned.graph.users()
    for off, rel in host.transfers(planned):
        assert planned.memory.values[off.outputs[0]].kind == "host"
        assert planned.memory.values[off.inputs[0]].live[1] == order[off]
        assert order[off] < order[rel] < min(order[u] for u in users[rel.outputs[0]])
    assert all(o.stall_us == 0 for o in host.check(planned, GPU, slow_groups(planned)))


def test_cpu_program_runs_the_copies():
    from nova.compiler.executor import build
    graph, inputs = _step()
    base = pipeline(graph)
    planned = pipeline(graph, memory_budget=int(base.memory.peak_bytes * 0.85) + allocator_headroom(graph),
                       host_offload=slow_groups)
    assert planned.memory.host_bytes
    program = build(planned, "cpu", poison=True)
    got = program.run([t.clone() for t in inputs])
    _close(got, interpreter.run(graph, [t.clone() for t in inputs]))
    assert program.stats["host_bytes"] >= planned.memory.host_bytes
    assert sum(launch.kind == "transfer" for launch in program.launches) == 2 * len(host.transfers(planned))


def test_the_reference_runner_catches_bytes_reused_before_the_copy_ends():
    """The copy to host reads the value from its writer's end to the offload: run the offload group
    last, after later values took the bytes the plan freed at it, and the runner says so."""
    graph, inputs = _step()
    base = pipeline(graph)
    planned = pipeline(graph, memory_budget=int(base.memory.peak_bytes * 0.85) + allocator_headroom(graph),
                       host_offload=slow_groups)
    off, _ = host.transfers(planned)[0]
    x = planned.memory.values[off.inputs[0]]
    reused = [p for p in planned.memory.values.values() if p.kind == "arena" and p.live[0] > x.live[1]
              and p.offset < x.offset + x.nbytes and x.offset < p.offset + p.nbytes]
    assert reused, "the bytes an offload frees are taken by a later value"
    late = next(g for g in planned.groups if off in g.nodes)
    planned.groups = [g for g in planned.groups if g is not late] + [late]
    with pytest.raises(AssertionError, match="changed before its copy to host ended"):
        run_planned(planned, [t.clone() for t in inputs])


def test_without_a_timeline_or_a_host_link_nothing_is_offloaded():
    graph, _ = _step()
    base = pipeline(graph)
    budget = int(base.memory.peak_bytes * 0.85) + allocator_headroom(graph)
    assert pipeline(graph, memory_budget=budget).memory.host_bytes == 0
    assert host.choose(base, get_target("h200"), slow_groups, 0) == []


def test_the_option_turns_it_off_and_is_part_of_the_plan_key(monkeypatch):
    from nova import options
    from nova.compiler.explain import host_offload
    from nova.compiler.plan_cache import plan_key
    monkeypatch.setenv("NOVA_HOST_OFFLOAD", "0")
    assert options.current().host_offload is False
    assert host_offload(False, "h200") is None and host_offload(True, "h200") is not None
    assert plan_key("g", "h200", "cuda", host_offload=True) != plan_key("g", "h200", "cuda", host_offload=False)


@pytest.mark.parametrize("name,recipe", [("tiny", None), ("llama-tiny", None), ("llama-tiny", "bf16")])
def test_captured_models_offload_and_run_like_the_unbudgeted_plan(name, recipe):
    """Built-in models captured from PyTorch (RoPE's slices and concats, grouped-query attention,
    autocast's casts): a budget that needs offloads; the plan gives the bits of the same budget's
    plan without offloads (copies and recomputation are exact; both chunk the loss alike)."""
    from torch.utils import _pytree as pytree
    from nova.frontend import capture
    from nova.models import build, make_train_step
    from nova.models.recipe import TrainRecipe
    model = build(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = make_train_step(model, opt, TrainRecipe(autocast=recipe))
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, model.config.vocab_size, (16, 16), generator=gen)
    targets = torch.randint(0, model.config.vocab_size, (16, 16), generator=gen)
    captured = capture(step, (idx, targets))
    inputs, _ = captured.bindings.gather(pytree.tree_flatten(((idx, targets), {}))[0])
    graph = captured.graph
    base = pipeline(graph)
    budget = int(base.memory.peak_bytes * 0.9) + allocator_headroom(graph)
    planned = pipeline(graph, memory_budget=budget, host_offload=slow_groups)
    kept = pipeline(graph, memory_budget=budget)
    assert planned.memory.host_bytes > 0 and kept.memory.host_bytes == 0
    assert planned.budget.loss_chunks == kept.budget.loss_chunks
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    got = run_planned(planned, [t.detach().clone() for t in inputs])
    for a, b in zip(got, run_planned(kept, [t.detach().clone() for t in inputs])):
        assert torch.equal(a, b)
    _close(got, run_planned(base, [t.detach().clone() for t in inputs]), *((1e-2, 1e-3) if recipe else ()))


def test_the_budget_keeps_the_cheaper_of_offloading_and_recomputing_alone(monkeypatch):
    """Both ways are planned; copies priced dearer than any recomputation lose to recomputing."""
    graph, inputs = _step()
    base = pipeline(graph)
    budget = int(base.memory.peak_bytes * 0.85) + allocator_headroom(graph)
    assert pipeline(graph, memory_budget=budget, host_offload=slow_groups).memory.host_bytes > 0
    monkeypatch.setattr(host, "copy_us_per_byte", lambda gpu: 1.0)     # 1 us a byte
    planned = pipeline(graph, memory_budget=budget, host_offload=slow_groups)
    assert planned.memory.host_bytes == 0 and planned.budget.fits
    assert not any(c.decision == "offloaded" for c in planned.budget.classes)


def test_explain_lists_each_offload():
    from nova.compiler.explain import explain_planned
    graph, _ = _step()
    base = pipeline(graph)
    planned = pipeline(graph, memory_budget=int(base.memory.peak_bytes * 0.85) + allocator_headroom(graph),
                       host_offload=slow_groups)
    memory = explain_planned(graph, planned, "h200")["memory"]
    assert memory["host_bytes"] == planned.memory.host_bytes
    assert len(memory["offloads"]) == len(host.transfers(planned))
    for o in memory["offloads"]:
        assert o["written_by_group"] < o["offload_group"] < o["reload_group"] < o["first_reader_group"]
        assert o["copy_us"] >= host.LINK_LATENCY_US and o["wait_us"] >= 0
    assert any(c["decision"] == "offloaded" for c in memory["budget"]["classes"])


class _PaddedLM(torch.nn.Module):
    """A language model as real scripts feed it: token ids and a ``[batch, seq]`` padding mask turned
    into the attention's mask with index tensors (Hugging Face's ``sdpa_mask``), a GELU MLP, labels
    padded with -100."""

    def __init__(self, vocab=96, dim=64, heads=2):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc1, self.fc2 = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids, padding_mask, labels):
        x = self.embed(ids)
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        rows = torch.arange(t)
        mask = (rows[None, None, None, :] <= rows[None, None, :, None]) \
            & padding_mask.bool()[torch.arange(b)[:, None, None, None], rows[None, None, None, :]]
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        x = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x)), approximate="tanh"))
        logits = self.head(x)
        return torch.nn.functional.cross_entropy(logits.view(b * t, -1), labels.view(-1), ignore_index=-100)


def test_a_real_script_under_a_budget_offloads_and_trains_like_eager(monkeypatch):
    """``nova.compile(step, memory_budget=)`` on what a real script does: a padding mask, padded labels,
    ``clip_grad_norm_`` and a warmup LR schedule stepped inside the function (no capture for its
    steps), with a budget the plan meets by offloading saved activations; the CPU program runs the
    copies, and every loss and the parameters after six steps match eager's (SGD: an update linear in
    the gradient, so the comparison is tight)."""
    import copy
    import nova
    from nova.compiler import explain
    monkeypatch.setattr(explain, "group_times_us", lambda planned, target, reports=None: slow_groups(planned))
    monkeypatch.setenv("NOVA_PLAN_CACHE", "0")

    def make(model, opt, sched):
        def train_step(ids, padding_mask, labels):
            loss = model(ids, padding_mask, labels)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        return train_step

    torch.manual_seed(0)
    models = [_PaddedLM()]
    models += [copy.deepcopy(models[0]) for _ in range(2)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1) for m in models]
    steps = [make(m, o, torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 3)))
             for m, o in zip(models, opts)]
    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(6):
        ids = torch.randint(0, 96, (8, 64), generator=gen)
        lengths = torch.randint(16, 65, (8,), generator=gen)
        padding_mask = (torch.arange(64)[None, :] < lengths[:, None]).long()
        batches.append((ids, padding_mask, ids.masked_fill(padding_mask == 0, -100)))
    unbudgeted = nova.compile(steps[2], backend="executor")
    unbudgeted(*batches[0])
    peak = next(iter(unbudgeted._cache.values())).engine.program.stats["peak_bytes"]
    step = nova.compile(steps[0], backend="executor", memory_budget=int(peak * 0.9) + allocator_headroom(unbudgeted.graph))
    for batch in batches:
        torch.testing.assert_close(step(*batch), steps[1](*batch), rtol=1e-5, atol=1e-6)
    assert step.stats.captures == 2 and "state" in step.stats.last_recapture_reason   # the momentum buffers' creation
    program = step._last.engine.program
    assert program.stats["host_bytes"] > 0 and program.stats["peak_bytes"] < peak
    for p, q in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_the_default_policy_offloads_what_hides_and_runs_like_the_fastest_plan():
    """Without a budget the memory policy tries the offload after the loss chunks and before the
    recomputation: taken where its price (the plan's, plus the copies' waits and their toll on the kernels beside them) is within
    the allowance, refused at an allowance of nothing; the plan runs like the fastest one."""
    from nova.passes.memory_policy import MemoryPolicy
    graph, inputs = _step()
    base = pipeline(graph)
    want = run_planned(base, [t.clone() for t in inputs])
    planned = pipeline(graph, memory_policy=MemoryPolicy(0.5, lambda planned: 1e6), host_offload=slow_groups)
    trials = [t for t in planned.policy.trials if t.saving.startswith("host offload")]
    assert len(trials) == 1 and trials[0].decision == "taken" and trials[0].freed_bytes > 0
    assert trials[0].cost_us == pytest.approx(host.cost_us(planned, GPU, host.check(planned, GPU, slow_groups(planned))),
                                              abs=1e-3)
    kinds = [t.saving.split(",")[0].split(" ")[0] for t in planned.policy.trials if t.decision != "not tried"]
    assert "recompute" not in kinds[:kinds.index("host")]          # the offload before any recomputation
    assert planned.memory.host_bytes > 0 and planned.memory.peak_bytes < base.memory.peak_bytes
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    _close(run_planned(planned, [t.clone() for t in inputs]), want)
    nothing = pipeline(graph, memory_policy=MemoryPolicy(0.0, lambda planned: 1e6), host_offload=slow_groups)
    assert [t.decision for t in nothing.policy.trials if t.saving.startswith("host offload")] == ["refused"]
    assert nothing.memory.host_bytes == 0
    plain = pipeline(graph, memory_policy=MemoryPolicy(0.5, lambda planned: 1e6))
    assert not any(t.saving.startswith("host offload") for t in plain.policy.trials) and not plain.memory.host_bytes
