"""Precompiling a ``torch.compile(model, backend="nova")`` run on a host without a GPU: the graphs
traced on the CPU with CUDA's attention kernel, planned by the backend's own ``plan_for_gpu``; the
kernels the precompile compiles are those the CUDA path's plans launch; one-line errors; the
``nova precompile dynamo`` command and the Inductor comparison's host side."""
from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")

from nova.compiler.aten_kernels import torch_dtype  # noqa: E402
from nova.compiler.precompile import step_kernels  # noqa: E402
from nova.hwmodel import get_target  # noqa: E402
from nova.integrations import dynamo, dynamo_precompile  # noqa: E402
from nova.integrations.dynamo_precompile import DynamoPrecompileError, plan_dynamo  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
H200 = get_target("h200")


class Attention(torch.nn.Module):
    """A causal self-attention block with head dimension 64 (Nova's attention kernels) and a loss."""

    def __init__(self, dim=128, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return (self.proj(y.transpose(1, 2).contiguous().view(b, t, c)) ** 2).mean()


def make_attention():
    torch.manual_seed(0)
    return Attention(), (torch.randn(2, 64, 128),)


def kernels_of(planned) -> dict:
    return {k: list(v) for k, v in step_kernels(planned)._asdict().items()}


def test_the_cuda_attention_kernel_is_traced_and_both_graphs_planned():
    model, inputs = make_attention()
    plans = plan_dynamo(model, inputs, H200, training=True)
    assert [g.name.split()[0] for g in plans.graphs] == ["forward", "backward"]
    assert all(g.planned is not None for g in plans.graphs), [g.reason for g in plans.graphs]
    forward, backward = (kernels_of(g.planned) for g in plans.graphs)
    assert len(forward["attention"]) == 1 and len(backward["attention"]) == 1
    assert forward["gemms"] and backward["gemms"]


def test_precompiled_kernels_are_those_the_cuda_path_plans(monkeypatch):
    """Each graph the precompile traces, handed to the backend's CUDA engine (``_engine`` on a cuda
    device, the target resolved as the GPU resolves it): its program's plan launches exactly the
    kernels the precompile compiles."""
    from nova.runtime import matmul
    monkeypatch.setattr(matmul, "resolve_target", lambda: H200)
    lowered_graphs = []
    lower = dynamo.lower_graph
    monkeypatch.setattr(dynamo, "lower_graph", lambda *a: lowered_graphs.append(lower(*a)) or lowered_graphs[-1])
    model, inputs = make_attention()
    plans = plan_dynamo(model, inputs, H200, training=True)
    assert len(lowered_graphs) == len(plans.planned) == 2
    for lowered, planned in zip(lowered_graphs, plans.planned):
        program, name = dynamo._engine(lowered, torch.device("cuda"), dynamo.BackendOptions())
        assert name == "executor"
        assert kernels_of(program.planned) == kernels_of(planned)


class TiedGPT(torch.nn.Module):
    """A one-block GPT whose output head is its token embedding (tied, as GPT-2's): the backward
    sums the embedding's two gradients.  Head dimension 64 (Nova's attention kernels)."""

    def __init__(self, vocab=512, dim=128, heads=2, seq=64):
        super().__init__()
        self.heads = heads
        self.wte, self.wpe = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(seq, dim)
        self.ln_1, self.ln_2, self.ln_f = (torch.nn.LayerNorm(dim) for _ in range(3))
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.fc, self.fc_proj = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx, targets):
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(self.ln_1(x)).chunk(3, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        x = x + self.fc_proj(torch.nn.functional.gelu(self.fc(self.ln_2(x)), approximate="tanh"))
        logits = self.head(self.ln_f(x))
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def kernel_set(planned) -> set:
    """The Nova kernels a plan's CUDA program launches, as ``(family, problem)`` pairs."""
    return {(family, item) for family, items in step_kernels(planned)._asdict().items() for item in items}


def cuda_path_kernels(model, inputs, monkeypatch) -> tuple[set, int]:
    """The kernels the backend's CUDA path asks for, and how many programs asked: ``model`` run (forward
    and backward) through ``torch.compile(backend=nova_backend)`` with its graphs compiled for a cuda
    device and the target the GPU resolves; each program, at its first run, records its plan's
    kernels in place of building and launching them.  On the GPU torch's dispatcher itself picks
    CUDA's attention kernel; on the CPU the trace calls it in (``with_cuda_attention``)."""
    from nova.runtime import matmul
    monkeypatch.setattr(matmul, "resolve_target", lambda: H200)
    monkeypatch.setattr(dynamo, "_device", lambda example_inputs: torch.device("cuda"))
    requested, programs = set(), []

    def first_run(program, tensors):
        requested.update(kernel_set(program.planned))
        programs.append(program)
        return [torch.zeros(o.value.type.shape, dtype=torch_dtype(o.value.type.dtype))
                for o in program.planned.graph.outputs]
    monkeypatch.setattr(dynamo._Program, "__call__", first_run)

    def backend(gm, example_inputs):
        dynamo_precompile.with_cuda_attention(gm, 90)
        return dynamo.nova_backend(gm, example_inputs)
    torch._dynamo.reset()
    try:
        torch.compile(model, backend=backend, dynamic=False)(*inputs).backward()
    finally:
        torch._dynamo.reset()
    return requested, len(programs)


@pytest.mark.parametrize("built_on", ["meta", "cpu"])
def test_the_precompile_builds_every_kernel_the_cuda_path_asks_for(built_on, monkeypatch):
    """A GPT with a tied embedding: the precompile, given the model built on ``built_on`` (the meta
    device, as ``nova precompile dynamo`` and the Inductor comparison build it), plans every kernel
    the backend's CUDA path asks for, the tied embedding's gradient sum included."""
    torch.manual_seed(0)
    model = TiedGPT()
    idx, targets = (torch.randint(0, 512, (2, 64)) for _ in range(2))
    requested, programs = cuda_path_kernels(model, (idx, targets), monkeypatch)
    assert programs == 2                   # the forward and the backward, both on Nova's executor
    with torch.device(built_on):
        torch.manual_seed(0)
        precompiled_model = TiedGPT()
    assert precompiled_model.head.weight is precompiled_model.wte.weight
    plans = plan_dynamo(precompiled_model, (idx.to(built_on), targets.to(built_on)), H200, training=True)
    precompiled = set().union(*(kernel_set(p) for p in plans.planned))
    missing = [f"{family}: {problem}" for family, problem in requested - precompiled]
    assert not missing, missing


def test_the_forward_hands_the_attention_seeds_over_as_placeholders():
    """CUDA's memory-efficient attention returns random seeds the backward reads (without dropout:
    never); the forward graph returns placeholders for them instead of falling back to torch."""
    lowered_graphs = []
    lower = dynamo.lower_graph
    model, inputs = make_attention()
    try:
        dynamo.lower_graph = lambda *a: lowered_graphs.append(lower(*a)) or lowered_graphs[-1]
        plan_dynamo(model, inputs, H200, training=True)
    finally:
        dynamo.lower_graph = lower
    kinds = [kind for kind, _ in lowered_graphs[0].results]
    assert kinds.count("placeholder") == 2, kinds
    seed = next(what for kind, what in lowered_graphs[0].results if kind == "placeholder")
    assert dynamo._placeholder(*seed).shape == () and dynamo._placeholder(*seed).device.type == "cpu"


@pytest.mark.parametrize("dtype,mask,on_hopper", [(torch.float32, False, "efficient"), (torch.bfloat16, False, "cudnn"),
                                                  (torch.bfloat16, True, "efficient")])
def test_the_attention_kernel_cuda_picks(dtype, mask, on_hopper):
    q = torch.empty(2, 4, 64, 64, dtype=dtype, device="meta")
    bias = torch.empty(64, 64, dtype=dtype, device="meta") if mask else None
    assert dynamo_precompile.cuda_attention_kernel(q, q, q, bias, sm=90) == on_hopper   # torch prefers cuDNN there
    on_ampere = "flash" if on_hopper == "cudnn" else on_hopper
    assert dynamo_precompile.cuda_attention_kernel(q, q, q, bias, sm=80) == on_ampere
    assert dynamo_precompile.cuda_attention_kernel(q, q, q, bias, sm=90, prefer_cudnn=False) == on_ampere
    assert dynamo_precompile.cuda_attention_kernel(q, q, q, bias, sm=75) == \
        ("efficient" if on_ampere == "flash" else on_ampere)     # flash and cuDNN need compute capability 8.0


def test_an_fp32_attention_of_a_short_sequence_hands_its_padded_log_sum_exp_over():
    """fp32 runs torch's memory-efficient kernel, whose log-sum-exp pads T to a multiple of 32 (T = 16
    here): the forward returns Nova's padded so, the backward slices it; both graphs on Nova."""
    model, _ = make_attention()
    plans = plan_dynamo(model, (torch.randn(2, 16, 128),), H200, training=True)
    assert all(g.planned is not None for g in plans.graphs), [g.reason for g in plans.graphs]
    forward, backward = (kernels_of(g.planned) for g in plans.graphs)
    assert len(forward["attention"]) == 1 and len(backward["attention"]) == 1


def test_a_bf16_attention_traced_for_hopper_runs_cudnns_op_on_novas_kernels():
    """bf16 on sm_90: the trace calls cuDNN's attention op (as torch does there); both graphs lower it
    to Nova's attention kernels."""
    model, inputs = make_attention()
    model, inputs = model.to(torch.bfloat16), tuple(x.to(torch.bfloat16) for x in inputs)
    targets, lower = [], dynamo.lower_graph
    try:
        dynamo.lower_graph = lambda gm, *a: targets.extend(str(n.target) for n in gm.graph.nodes) or lower(gm, *a)
        plans = plan_dynamo(model, inputs, H200, training=True)
    finally:
        dynamo.lower_graph = lower
    assert all(g.planned is not None for g in plans.graphs), [g.reason for g in plans.graphs]
    forward, backward = (kernels_of(g.planned) for g in plans.graphs)
    assert len(forward["attention"]) == 1 and len(backward["attention"]) == 1
    assert any("cudnn_attention.default" in t for t in targets) and any("cudnn_attention_backward" in t for t in targets)


def test_a_graph_the_backend_leaves_to_torch_has_no_plan():
    """A random op (dropout in training): the forward graph runs on torch, its reason the
    backend's own line; the backward still has its plan."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 16))
    plans = plan_dynamo(model, (torch.randn(8, 16),), H200, training=True)
    forward = plans.graphs[0]
    assert forward.planned is None and "native_dropout" in forward.reason


def test_bad_inputs_are_one_line():
    with pytest.raises(DynamoPrecompileError, match="must be a torch.nn.Module"):
        plan_dynamo(lambda x: x, (torch.randn(2),), H200)
    with pytest.raises(DynamoPrecompileError, match="example_inputs must be a tuple"):
        plan_dynamo(torch.nn.Linear(2, 2), {"x": torch.randn(2)}, H200)
    frozen = torch.nn.Linear(4, 4).requires_grad_(False)
    with pytest.raises(DynamoPrecompileError, match="does not require a gradient"):
        plan_dynamo(frozen, (torch.randn(2, 4),), H200, training=True)


def test_precompile_without_mlir_is_one_line(monkeypatch, tmp_path):
    from nova.runtime import cache
    from nova.runtime.cache import CompilerUnavailableError
    monkeypatch.setattr(cache, "mlir_available", lambda: False)
    model, inputs = make_attention()
    with pytest.raises(CompilerUnavailableError) as info:
        dynamo_precompile.precompile(model, inputs, target="h200", cache_dir=tmp_path, log=lambda line: None)
    assert "\n" not in str(info.value).strip()


def test_precompile_fills_the_cache_the_offline_lookups_find(tmp_path):
    """Every kernel of every plan, compiled; each then found offline (``missing_kernels``)."""
    from nova.compiler.precompile import missing_kernels
    from nova.runtime.cache import KernelCache, mlir_available
    if not mlir_available():
        pytest.skip("no MLIR")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
    inputs = (torch.randn(16, 32),)
    lines = []
    counts = dynamo_precompile.precompile(model, inputs, target="h200", cache_dir=tmp_path, log=lines.append)
    assert counts["failed"] == 0 and counts["compiled"] > 0 and counts["graphs"] == 2 and counts["on_torch"] == 0
    plans = plan_dynamo(model, inputs, H200, training=True)
    for planned in plans.planned:
        assert missing_kernels(planned, H200, KernelCache(tmp_path)) == []


FACTORY = """
import torch
def make(batch=4):
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()), (torch.empty(batch, 8),)
def not_a_model():
    return 3
"""


def nova_cli(*argv) -> int:
    from nova.cli.main import main
    return main(list(argv))


def test_cli_bad_factory_is_a_usage_line(tmp_path, capsys):
    (tmp_path / "factories.py").write_text(FACTORY)
    spec = f"{tmp_path / 'factories.py'}:not_a_model"
    assert nova_cli("precompile", "dynamo", "--step", spec, "--target", "h200", "--cache-dir", str(tmp_path / "c")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "expected (model, example_inputs)" in err[0], err
    assert nova_cli("precompile", "dynamo", "--target", "h200", "--cache-dir", str(tmp_path / "c")) == 2
    assert "needs --step" in capsys.readouterr().err
    assert nova_cli("precompile", "dynamo", "--step", f"{tmp_path / 'factories.py'}:make", "--target", "h200", "--optimizer", "sgd") == 2
    assert "optimizer stays eager" in capsys.readouterr().err


def test_cli_precompiles_a_factory(tmp_path, capsys):
    from nova.runtime.cache import mlir_available
    if not mlir_available():
        pytest.skip("no MLIR")
    (tmp_path / "factories.py").write_text(FACTORY)
    assert nova_cli("precompile", "dynamo", "--step", f"{tmp_path / 'factories.py'}:make", "--batch", "8",
                    "--target", "h200", "--cache-dir", str(tmp_path / "c")) == 0
    out = capsys.readouterr().out
    assert "2 graphs (0 on torch)" in out and "gemm 8x8x8" in out


def test_bench_arguments_and_report(tmp_path):
    from nova.bench import dynamo_vs_inductor as bench
    from nova.bench.train import BenchError
    args = bench.parser().parse_args(["--model", "gpt42m", "--batch", "32"])
    bench.check(args)
    assert args.seq == 512 and args.backend is None
    with pytest.raises(BenchError, match="--seq 4096 is longer"):
        bench.check(bench.parser().parse_args(["--seq", "4096"]))
    with pytest.raises(BenchError, match="--batch must be a positive"):
        bench.check(bench.parser().parse_args(["--batch", "0"]))
    run = {"timing": {"tokens_per_s": 123456.0, "step_ms_median": 12.5}, "memory": {"peak_allocated_bytes": 2**31},
           "first_step_s": 30.0, "nova_graphs_on_torch": ["forward graph 0 ..."],
           "agreement": {"loss_rel_error": 1e-6, "grad_rel_error_max": 2e-4, "grad_worst_parameter": "wte.weight"}}
    text = bench.report(tmp_path, "gpt42m", 32, {"inductor": run, "nova": None})
    assert "| inductor | 123,456 | 12.50 | 2.00 |" in text and "| nova | failed" in text
    assert (tmp_path / "dynamo-gpt42m-b32.md").read_text() == text


def test_bench_agreement_on_cpu():
    """The first-batch comparison, on the CPU with the compiled model standing for itself."""
    import copy
    from nova.bench.dynamo_vs_inductor import agreement
    from nova.models import gpt
    model = gpt.GPT(gpt.CONFIGS["tiny"])
    idx = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(0))
    a = agreement(model, copy.deepcopy(model), idx, idx)
    assert a["loss_rel_error"] == 0.0 and a["grad_rel_error_max"] == 0.0 and a["grads_missing"] == []
    assert all(p.grad is None for p in model.parameters())
