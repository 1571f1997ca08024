"""The default memory policy (``nova/passes/memory_policy.py``): its rule on small models priced by
explain's step-time model and by stub prices, the plan it makes run through the executor on CPU
against eager PyTorch, the chunked loss's autocast form, GEMM pieces written into a concat's
buffer, the budget starting from the policy's plan, the option and explain's report."""
import copy
import json

import pytest
import torch
from torch.utils import _pytree as pytree

from nova.compiler.explain import memory_policy, predicted_step_us
from nova.compiler.outside_arena import account
from nova.frontend import capture
from nova.ir import interpreter
from nova.ir.graph import Graph
from nova.ir.types import TensorType
from nova.ir.verify import verify
from nova.models import GPT, GPTConfig, Llama, LlamaConfig, TrainRecipe, make_train_step
from nova.options import MEMORY_LEAN, OptionError, parse
from nova.passes import pipeline
from nova.passes.budget import allocator_headroom
from nova.passes.chunked_loss import chunk_loss, find
from nova.passes.memory import validate_memory_plan
from nova.passes.memory_policy import MemoryPolicy


def _model(kind: str, vocab: int, width: int, layers: int, seq: int):
    if kind == "gpt":
        return GPT(GPTConfig(vocab_size=vocab, n_embd=width, n_layer=layers, n_head=4, block_size=seq))
    return Llama(LlamaConfig(vocab_size=vocab, dim=width, n_layer=layers, n_head=4, n_kv_head=2,
                             hidden_dim=4 * width, max_seq_len=seq))


def _meta_graph(kind="gpt", vocab=32768, width=256, layers=1, batch=16, seq=256, recipe=TrainRecipe()):
    """A training step (AdamW) captured on the meta device: a model whose LM head and loss dominate."""
    with torch.device("meta"):
        model = _model(kind, vocab, width, layers, seq)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.zeros((batch, seq), dtype=torch.long, device="meta")
    return capture(make_train_step(model, opt, recipe), (idx, idx.clone()), models=[model], optimizers=[opt]).graph


def _count(graph, op) -> int:
    return sum(n.op == op for n in graph.nodes)


# ------------------------------------------------------------------ the option
def test_the_option_takes_lean_fast_or_a_fraction():
    assert parse({}).memory_policy == MEMORY_LEAN
    assert parse({"NOVA_MEMORY_POLICY": "lean"}).memory_policy == MEMORY_LEAN
    assert parse({"NOVA_MEMORY_POLICY": "FAST"}).memory_policy is None
    assert parse({"NOVA_MEMORY_POLICY": "0.02"}).memory_policy == 0.02
    for bad in ("0.5", "-0.01", "nan", "lots"):
        with pytest.raises(OptionError) as e:
            parse({"NOVA_MEMORY_POLICY": bad})
        assert "\n" not in str(e.value) and "NOVA_MEMORY_POLICY" in str(e.value)
    assert memory_policy(None, "h200") is None and memory_policy(0.01, "h200").fraction == 0.01


def test_the_plan_cache_keys_the_policy():
    from nova.compiler.plan_cache import plan_key
    keys = {plan_key("g", "h200", "cuda", memory_policy=p) for p in (None, MEMORY_LEAN, 0.01)}
    assert len(keys) == 3


# ------------------------------------------------------------------ the rule, priced by explain's model
@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_every_decision_follows_the_rule(kind):
    graph = _meta_graph(kind)
    fastest = pipeline(graph, "h200", outside_arena=account)
    for fraction in (0.07, MEMORY_LEAN):
        policy = memory_policy(fraction, "h200")
        planned = pipeline(graph, "h200", outside_arena=account, memory_policy=policy)
        report = planned.policy
        assert report.fastest_peak_bytes == fastest.memory.peak_bytes
        assert report.fastest_step_us == pytest.approx(predicted_step_us(fastest, "h200"))
        assert report.step_us == pytest.approx(predicted_step_us(planned, "h200"))
        assert report.peak_bytes == planned.memory.peak_bytes <= fastest.memory.peak_bytes
        assert report.cost_us <= report.allowance_us == pytest.approx(fraction * report.fastest_step_us)
        planned_trials = [t for t in report.trials if t.decision != "not tried"]
        assert planned_trials and planned_trials[0].saving == "chunked loss, 2 row chunks"
        for t in planned_trials:
            allowed = t.freed_bytes > 0 and t.total_us <= report.allowance_us
            assert t.decision == ("taken" if allowed else "refused"), t
        for t in report.trials:
            if t.decision == "not tried":
                assert t.total_us is None and t.freed_bytes == 0
        assert _count(planned.graph, "cross_entropy") == report.loss_chunks
        assert report.loss_chunks == 1 + sum(t.decision == "taken" and t.saving.startswith("chunked") for t in report.trials)
        validate_memory_plan(planned.graph, planned.groups, planned.memory)
        if fraction == 0.07:            # the loss dominates: chunking it costs 5-6 % of this small step
            assert report.loss_chunks >= 2 and report.peak_bytes < report.fastest_peak_bytes


def test_fast_plans_the_fastest_graph():
    graph = _meta_graph(layers=1, batch=8)
    planned = pipeline(graph, "h200", outside_arena=account, memory_policy=None)
    assert planned.policy is None and _count(planned.graph, "cross_entropy") == 1


# ------------------------------------------------------------------ the algorithm, with stub prices
def _recomputed(planned) -> int:
    """Recomputed nodes that move data (views aside)."""
    from nova.ir.ops import kind
    return sum(n.origin.endswith("[recomputed]") and kind(n.op) != "view" for n in planned.graph.nodes)


def test_free_chunks_are_all_taken_and_a_class_in_part():
    """Chunks priced free, each recomputed node 10 us on a 1000 us step, 2.5 % allowed: every count is
    taken; classes are priced until the allowance is spent, one refused whole then taken in part
    (the prefix its priced cost per tensor fits in what is left)."""
    graph = _meta_graph(layers=4, batch=16)

    def price(planned):
        return 1000.0 + 10.0 * _recomputed(planned)
    planned = pipeline(graph, "h200", outside_arena=account, memory_policy=MemoryPolicy(0.025, price))
    report = planned.policy
    chunks = [t for t in report.trials if t.saving.startswith("chunked")]
    assert report.loss_chunks == 16 * 256 // 512 == 1 + len(chunks) and all(t.decision == "taken" for t in chunks)
    spent = 0.0
    parts = 0
    for i, t in enumerate(report.trials):
        if t.decision == "not tried":
            continue
        assert t.decision == ("taken" if t.freed_bytes > 0 and t.total_us <= 25.0 else "refused"), t
        if " of " in t.saving and t.decision == "taken":
            whole = report.trials[i - 1]
            assert whole.decision == "refused" and whole.total_us > 25.0
            per_tensor = whole.cost_us / int(whole.saving.split("(")[1].split(" ")[0])
            assert int(t.saving.split("(")[1].split(" ")[0]) == int((25.0 - spent) // per_tensor)
            parts += 1
        if t.decision == "taken":
            spent = t.total_us
    assert parts >= 1 and report.step_us == price(planned) == 1000.0 + spent <= 1025.0


def _revisit_plan(monkeypatch, ln_1_us: float):
    """Four GPT layers, chunks priced free, 2 us allowed on a 1000 us step; closed forms stubbed so the
    GELU outputs rank first (3 us a tensor: more than the 2 us left, 12 us more than twice it: not
    tried) and ``ln_1``'s outputs after them (1.75 us a tensor: one fits).  Each recomputed ``ln_1``
    node is priced ``ln_1_us``, each GELU node 2 us."""
    import dataclasses
    from nova.passes import remat
    real = remat.candidates

    def stubbed(graph, gpu):
        return [dataclasses.replace(c, recompute_us=3.0) if c.name.startswith("gelu")
                else c for c in real(graph, gpu)]
    monkeypatch.setattr(remat, "candidates", stubbed)

    def recomputed(planned, op, where=""):
        return sum(n.origin.endswith("[recomputed]") and n.op == op and where in n.origin for n in planned.graph.nodes)

    def price(planned):
        return 1000.0 + ln_1_us * recomputed(planned, "layer_norm", ".ln_1") + 2.0 * recomputed(planned, "gelu_tanh")
    planned = pipeline(_meta_graph(layers=4, batch=16), "h200", outside_arena=account,
                       memory_policy=MemoryPolicy(0.002, price))
    return planned.policy, recomputed(planned, "gelu_tanh")


def test_a_saving_that_gives_time_back_reopens_the_classes_skipped_for_want_of_it(monkeypatch):
    """The GELU class, skipped while 2 us were left, is priced after one ``ln_1`` recompute gave 10 us
    back (12 us left: its 4 x 2 us fit) and taken; with ``ln_1`` priced above nothing it stays not tried."""
    report, gelus = _revisit_plan(monkeypatch, ln_1_us=-10.0)
    remats = [t for t in report.trials if t.saving.startswith("recompute")]
    assert remats[0].saving.startswith("recompute layer_norm at transformer.h.*.ln_1 (1 of 4 tensors")
    assert remats[0].decision == "taken" and remats[0].cost_us == pytest.approx(-10.0)
    gelu = [t for t in remats if t.saving.startswith("recompute gelu_tanh")]
    assert len(gelu) == 1 and gelu[0].decision == "taken" and gelu[0].cost_us == pytest.approx(8.0)
    assert remats.index(gelu[0]) > 0 and gelus == 4
    assert report.cost_us == pytest.approx(-2.0)

    report, gelus = _revisit_plan(monkeypatch, ln_1_us=1.0)
    gelu = [t for t in report.trials if t.saving.startswith("recompute gelu_tanh")]
    assert [t.decision for t in gelu] == ["not tried"] and gelus == 0


def test_a_saving_priced_above_nothing_is_refused_at_fraction_zero():
    graph = _meta_graph(layers=1, batch=8)

    def price(planned):
        return 1000.0 + _count(planned.graph, "cross_entropy") + _recomputed(planned)
    planned = pipeline(graph, "h200", outside_arena=account, memory_policy=MemoryPolicy(0.0, price))
    assert planned.policy.loss_chunks == 1 and _recomputed(planned) == 0
    assert planned.policy.trials[0].decision == "refused" and planned.policy.peak_bytes == planned.policy.fastest_peak_bytes


# ------------------------------------------------------------------ parity on CPU
def _cpu_step(kind, recipe=TrainRecipe(), batch=128, seq=16, vocab=512):
    model = _model(kind, vocab, 32, 2, seq)
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, vocab, (batch, seq), generator=gen)
    targets = torch.randint(0, vocab, (batch, seq), generator=gen)
    targets[0, :5] = model.IGNORE_INDEX if hasattr(model, "IGNORE_INDEX") else -100
    captured = capture(make_train_step(model, opt, recipe), (idx, targets))
    inputs, _ = captured.bindings.gather(pytree.tree_flatten(((idx, targets), {}))[0])
    return captured.graph, [t.detach().clone() for t in inputs], twin, (idx, targets)


@pytest.mark.parametrize("kind", ["gpt", "llama"])
def test_the_policy_plan_runs_like_eager_through_the_executor(kind):
    """Every saving priced free (a constant price, 10 % allowed): the loss in 4 chunks, activation
    classes recomputed; the CPU executor (Nova's GEMM contract emulated) gives eager PyTorch's loss
    and SGD update."""
    from test_executor import EmulatedNova
    from nova.compiler.executor import build
    graph, inputs, twin, (idx, targets) = _cpu_step(kind)
    planned = pipeline(graph, None, outside_arena=account, memory_policy=MemoryPolicy(0.1, lambda planned: 1e6))
    assert planned.policy.loss_chunks == 4 and any(n.origin.endswith("[recomputed]") for n in planned.graph.nodes)
    validate_memory_plan(planned.graph, planned.groups, planned.memory)
    assert any("the GEMM writes each input in place" in g.reason for g in planned.groups if g.nodes[0].op == "concat")
    program = build(planned, "cpu", poison=True, gemm=EmulatedNova())
    got = program.run([t.clone() for t in inputs])

    opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    loss = twin(idx, targets)
    loss.backward()
    opt.step()
    by_value = dict(zip([o.name for o in planned.graph.outputs], got))
    torch.testing.assert_close(by_value["result"], loss.detach(), rtol=1e-5, atol=1e-6)
    updated = [g for o, g in zip(planned.graph.outputs, got) if o.updates is not None and o.role == "param"]
    params = list(twin.parameters())
    assert len(updated) == len(params)
    for a, b in zip(updated, params):
        torch.testing.assert_close(a, b.detach(), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ the autocast form
def _autocast_loss_graph(n, classes, reduction, narrow="bf16", wide="f32"):
    """bf16 head, f32 cross-entropy through casts (one per reader, as rows_casts.py places them),
    the f32 gradient narrowed back for the head's GEMMs (rows and contracted forms); with
    ``narrow = wide = "f64"`` the same step in float64 (the reference)."""
    g = Graph("autocast_head")
    x = g.input(TensorType((n, 8), narrow), "x", "data")
    w = g.input(TensorType((classes, 8), narrow), "w", "param")
    target = g.input(TensorType((n,), "i64"), "target", "data")
    logits = g.op("matmul", x, w, transpose_b=True)
    loss, lse = g.op("cross_entropy", g.op("cast", logits, dtype=wide), target, reduction=reduction, ignore_index=-100)
    dloss = g.op("constant", value=1.0, dtype=wide)
    dlogits = g.op("cross_entropy_backward", dloss, g.op("cast", logits, dtype=wide), target, lse,
                   reduction=reduction, ignore_index=-100)
    grad = g.op("cast", dlogits, dtype=narrow)
    g.output(loss, "loss")
    g.output(g.op("cast", g.op("matmul", grad, w), dtype=wide), "dx")
    g.output(g.op("cast", g.op("matmul", grad, x, transpose_a=True), dtype=wide), "dw")
    return g


def _relative(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_autocast_form_is_chunked_and_sums_the_weight_gradient_in_f32(reduction):
    n, classes = 40, 24
    g = _autocast_loss_graph(n, classes, reduction)
    (match,) = find(g)
    assert match.loss_cast is not None and match.backward_cast is not None and match.gradient_cast is not None
    assert sorted(f for _, f in match.readers) == ["contract", "rows"]
    chunked = chunk_loss(g, 4)
    verify(chunked)
    pieces = [node for node in chunked.nodes if node.op == "matmul" and node.attrs.get("out_dtype") == "f32"]
    assert len(pieces) == 4                                   # the weight gradient's pieces, summed wide
    gen = torch.Generator().manual_seed(2)
    target = torch.randint(0, classes, (n,), generator=gen)
    target[:3] = -100
    inputs = [torch.randn(n, 8, generator=gen).bfloat16(), torch.randn(classes, 8, generator=gen).bfloat16(), target]
    exact = interpreter.run(_autocast_loss_graph(n, classes, reduction, "f64", "f64"),
                            [inputs[0].double(), inputs[1].double(), target])
    want = interpreter.run(g, inputs)
    got = interpreter.run(chunked, inputs)
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-6)
    for a, b, ref in zip(got[1:], want[1:], exact[1:]):    # rounded to bf16 once, as the unchunked GEMM
        assert _relative(a, ref) <= 2 * _relative(b, ref) + 2 ** -12


def test_an_autocast_step_is_chunked_under_a_budget():
    graph, inputs, _, _ = _cpu_step("gpt", TrainRecipe(autocast="bf16"))
    base = pipeline(graph)
    (match,) = find(base.graph)
    assert match.loss_cast is not None and match.gradient_cast is not None
    planned = pipeline(graph, memory_budget=base.memory.peak_bytes - base.memory.arena_bytes // 4)
    assert planned.budget.loss_chunks > 1 and _count(planned.graph, "cross_entropy") == planned.budget.loss_chunks
    validate_memory_plan(planned.graph, planned.groups, planned.memory)


# ------------------------------------------------------------------ the budget starts from the policy's plan
def test_a_budget_keeps_the_policys_chunks():
    graph = _meta_graph(layers=1, batch=16)
    free = MemoryPolicy(0.0, lambda planned: 1.0 + _recomputed(planned))       # chunks free, recomputing not
    lean = pipeline(graph, "h200", outside_arena=account, memory_policy=free)
    assert lean.policy.loss_chunks > 1
    headroom = allocator_headroom(graph)                  # kept for the caching allocator (budget.py)
    fits = pipeline(graph, "h200", outside_arena=account, memory_policy=free,
                    memory_budget=lean.memory.peak_bytes + headroom)
    assert fits.budget.fits and fits.memory.peak_bytes == lean.memory.peak_bytes
    assert fits.budget.loss_chunks == lean.policy.loss_chunks and fits.policy is not None
    tighter = lean.memory.peak_bytes - 4 * 2**20           # one recomputed activation makes the room
    squeezed = pipeline(graph, "h200", outside_arena=account, memory_policy=free, memory_budget=tighter + headroom)
    assert squeezed.memory.peak_bytes <= tighter and squeezed.budget.loss_chunks >= lean.policy.loss_chunks


# ------------------------------------------------------------------ rematerialization's closed forms
def test_norms_are_candidates_and_gemm_chains_are_priced_by_the_configurator():
    from nova.configurator import configure
    from nova.passes.remat import candidates, gpu_model, node_time_us
    graph, _, _, _ = _cpu_step("llama", batch=64)
    planned = pipeline(graph)
    gpu = gpu_model("h200")
    cands = candidates(planned.graph, gpu)
    assert any(c.name.startswith("rms_norm") for c in cands)
    gemms = [g for g in planned.groups if g.kind == "gemm" and g.kernel == "nova" and len(g.nodes) == 1]
    assert gemms
    for group in gemms:                       # the time explain gives the same GEMM
        cfg = configure(group.problem, gpu)
        assert node_time_us(group.nodes[0], gpu) == (cfg.calibrated_time_us or cfg.prediction.time_us)


# ------------------------------------------------------------------ explain
def test_explain_train_shows_the_policy(capsys, monkeypatch):
    from nova.cli.config import main
    assert main(["explain", "train", "tiny", "--batch", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    policy = report["memory"]["policy"]
    assert policy["policy"] == "lean" and policy["fraction"] == MEMORY_LEAN
    assert report["memory"]["peak_bytes"] == policy["peak_bytes"] <= policy["fastest_peak_bytes"]
    assert round(policy["step_us"] / 1e3, 4) == pytest.approx(report["prediction"]["step_ms"], abs=2e-4)
    assert main(["explain", "train", "tiny", "--batch", "4"]) == 0
    text = capsys.readouterr().out
    assert "memory policy lean" in text and "of the step slower than the fastest plan" in text
    monkeypatch.setenv("NOVA_MEMORY_POLICY", "fast")
    assert main(["explain", "train", "tiny", "--batch", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["policy"] is None


# ------------------------------------------------------------------ on the GPU
def _chunked_gpu_plan(target: str = "h200"):
    """The GPU test's step and plan: GPT at vocab 4096, every saving priced free (the loss in 4 chunks)."""
    graph, inputs, _, _ = _cpu_step("gpt", batch=128, seq=16, vocab=4096)
    return graph, inputs, pipeline(graph, target, outside_arena=account,
                                   memory_policy=MemoryPolicy(0.0, lambda planned: 1.0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
def test_a_chunked_loss_runs_on_the_gpu_like_the_interpreter_and_fits_its_plan():
    """The loss in 4 chunks (every saving priced free): Nova's GEMMs write the input gradient's
    row pieces into the concat's buffer; outputs as the interpreter's (FP32 reference, TF32 GEMMs),
    measured peak within the plan's arena plus what it lists outside."""
    from nova.compiler.executor import build
    from nova.runtime.cache import is_offline, mlir_available
    if not is_offline() and not mlir_available():
        pytest.skip("no MLIR here: precompile and run with NOVA_OFFLINE=1 NOVA_CACHE_DIR=<carried cache>")
    graph, inputs, planned = _chunked_gpu_plan()
    assert planned.policy.loss_chunks == 4
    want = interpreter.run(graph, [t.clone() for t in inputs])
    state = [t.cuda() for t in inputs]
    torch.cuda.synchronize()
    program = build(planned, "cuda")
    got = program.run(state)
    torch.cuda.synchronize()
    for o, a, b in zip(graph.outputs, got, want):
        a, b = a.double().cpu(), b.double()
        assert float((a - b).norm() / b.norm().clamp_min(1e-30)) < 5e-3, o.name
    s = program.stats
    predicted = s["arena_bytes"] + s["outside_arena_bytes"] - s["outside_arena_driver_bytes"]
    phases = "; ".join(f"{m['phase']}: allocated {m['allocated_bytes'] >> 10} KiB, peak {m['max_allocated_bytes'] >> 10} KiB"
                       for m in program.memory_phases)
    assert s["arena_bytes"] <= s["measured_peak_bytes"] <= predicted + (2 << 20), program.describe() + "\n" + phases


def build_kernels(target: str, cache_dir=None, log=print) -> dict:
    """Compile the GPU test's kernels for ``target`` into the kernel cache (``NOVA_CACHE_DIR`` or
    ``cache_dir``): the chunked-loss step's plan, as ``tests/gpu_build.py --all`` runs it."""
    from nova.compiler.precompile import precompile_planned
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    return precompile_planned(_chunked_gpu_plan(target)[2], get_target(target), KernelCache(cache_dir), log)


if __name__ == "__main__":
    from gpu_build import main
    main(build_kernels)


def test_llama42m_recomputes_swiglu_products_in_their_backward_kernel_within_the_allowance():
    """The built-in Llama-42M (b32 x 512, H200, priced by explain's step-time model): the host offload
    is refused (its copies' toll on the kernels beside them, ~1.3 ms a GiB, is over the allowance) and
    the SwiGLU products are recomputed in the SwiGLU backward's kernel instead; the whole plan stays
    within the 0.5 % allowed and takes a fifth off the fastest plan's peak."""
    from nova.compiler.explain import explain_train
    report = explain_train("llama42m", 32, target="h200")
    policy = report["memory"]["policy"]
    taken = [t for t in policy["trials"] if t["decision"] == "taken"]
    swiglu = [t for t in taken if t["saving"].startswith("recompute mul at ") and "kernel of the backward's" in t["saving"]]
    assert swiglu, [t["saving"] for t in policy["trials"]]
    offload = [t for t in policy["trials"] if t["saving"].startswith("host offload")]
    assert offload and offload[0]["decision"] == "refused" and offload[0]["cost_us"] > policy["allowance_us"]
    assert policy["step_us"] - policy["fastest_step_us"] <= policy["allowance_us"] + 1e-6
    assert report["memory"]["peak_bytes"] < 0.82 * policy["fastest_peak_bytes"]
