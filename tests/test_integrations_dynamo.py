"""``torch.compile(model, backend="nova")`` against eager on the CPU: a small MLP and GPT-tiny,
inference and training steps (forward and backward through the backend, the optimizer eager);
fallbacks logged on the ``nova`` logger; the backend resolves by name through its entry point."""
from __future__ import annotations

import copy
import logging
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from nova.integrations.dynamo import NovaBackendError, nova_backend  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.LayerNorm(32), torch.nn.Linear(32, 5))


def gpt_tiny():
    from nova.models import gpt
    return gpt.GPT(gpt.CONFIGS["tiny"])


def assert_close(actual, expected, what: str, tol: float = 1e-5):
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, what
    error = (actual - expected).abs().max().item()
    assert error <= tol * max(1.0, expected.abs().max().item()), f"{what}: max error {error:.3g}"


def train_against_eager(model, batches, engine: str, lr: float = 1e-2):
    """Steps of forward + backward through the backend (optimizer eager) beside eager's, from the
    same weights: the losses and every gradient agree at each step."""
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend=nova_backend, options={"engine": engine})
    optimizers = [torch.optim.AdamW(m.parameters(), lr=lr) for m in (model, reference)]
    for step, (args, loss_of) in enumerate(batches):
        losses = [loss_of(fn(*args)) for fn in (compiled, reference)]
        for loss in losses:
            loss.backward()
        assert_close(losses[0].detach(), losses[1].detach(), f"step {step} loss")
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            assert p.grad is not None, f"step {step}: {name} has no grad"
            assert_close(p.grad, q.grad, f"step {step} grad of {name}")
        for opt in optimizers:
            opt.step()
            opt.zero_grad()


@pytest.mark.parametrize("engine", ["reference", "executor"])
def test_mlp_inference_matches_eager(engine, caplog):
    model = mlp()
    compiled = torch.compile(model, backend=nova_backend, options={"engine": engine})
    x = torch.randn(7, 12)
    with caplog.at_level(logging.INFO, logger="nova"), torch.no_grad():
        assert_close(compiled(x), model(x), "output")
        assert_close(compiled(x * 2), model(x * 2), "second call")
    assert any("inference graph" in r.message and "runs on" in r.message for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("engine", ["reference", "executor"])
def test_mlp_training_matches_eager(engine, caplog):
    g = torch.Generator().manual_seed(1)
    batches = [((torch.randn(9, 12, generator=g),), lambda y: (y ** 2).mean()) for _ in range(3)]
    with caplog.at_level(logging.INFO, logger="nova"):
        train_against_eager(mlp(), batches, engine)
    messages = [r.message for r in caplog.records]
    assert any("forward graph" in m for m in messages) and any("backward graph" in m for m in messages)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], messages


def test_gpt_tiny_inference_matches_eager():
    model = gpt_tiny().eval()
    compiled = torch.compile(model, backend=nova_backend)
    idx = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert_close(compiled(idx), model(idx), "logits")


@pytest.mark.parametrize("engine", ["reference", "executor"])
def test_gpt_tiny_training_matches_eager(engine, caplog):
    g = torch.Generator().manual_seed(3)
    batches = [((torch.randint(0, 96, (2, 16), generator=g), torch.randint(0, 96, (2, 16), generator=g)),
                lambda loss: loss) for _ in range(3)]
    with caplog.at_level(logging.INFO, logger="nova"):
        train_against_eager(gpt_tiny(), batches, engine)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.message for r in caplog.records]


def gpt_grads(model, idx, targets):
    """Eager's loss and gradients for one batch, the model's own grads left as they were."""
    reference = copy.deepcopy(model)
    reference.zero_grad(set_to_none=True)
    loss = reference(idx, targets)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in reference.named_parameters()}


def tiny_batches(count: int, seed: int = 4):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 96, (2, 16), generator=g), torch.randint(0, 96, (2, 16), generator=g))
            for _ in range(count)]


@pytest.mark.parametrize("engine", ["reference", "executor"])
@pytest.mark.parametrize("order", ["first backward first", "second backward first"])
def test_two_forwards_before_their_backwards(engine, order):
    """Two forwards, then both backwards (in either order): each backward reads its own forward's
    saved activations (per-call output buffers: the second forward does not overwrite the first's),
    and the gradients are the sum of eager's for the two batches."""
    model = gpt_tiny()
    (a, b) = tiny_batches(2)
    loss_a, grads_a = gpt_grads(model, *a)
    loss_b, grads_b = gpt_grads(model, *b)
    compiled = torch.compile(model, backend=nova_backend, options={"engine": engine})
    for _ in range(2):                           # the second round runs on kept bindings
        model.zero_grad(set_to_none=True)
        first, second = compiled(*a), compiled(*b)
        assert_close(first.detach(), loss_a, "first loss")
        assert_close(second.detach(), loss_b, "second loss")
        for loss in ((first, second) if order == "first backward first" else (second, first)):
            loss.backward()
        for name, p in model.named_parameters():
            assert_close(p.grad, grads_a[name] + grads_b[name], f"grad of {name}")


@pytest.mark.parametrize("engine", ["reference", "executor"])
def test_forwards_without_backward_and_inference_between_training_steps(engine):
    """A forward whose graph is dropped without a backward, and inference under no_grad, between
    training steps: every step's loss and gradients still match eager's."""
    model = gpt_tiny()
    batches = tiny_batches(3, seed=6)
    compiled = torch.compile(model, backend=nova_backend, options={"engine": engine})
    for step, (idx, targets) in enumerate(batches):
        compiled(idx, targets)                               # forward only: its saved tensors dropped
        with torch.no_grad():
            assert_close(compiled(idx, targets), model(idx, targets), f"step {step}: inference loss")
        loss_ref, grads = gpt_grads(model, idx, targets)
        model.zero_grad(set_to_none=True)
        loss = compiled(idx, targets)
        loss.backward()
        assert_close(loss.detach(), loss_ref, f"step {step}: loss")
        for name, p in model.named_parameters():
            assert_close(p.grad, grads[name], f"step {step}: grad of {name}")
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.05 * p.grad


@pytest.mark.parametrize("engine", ["reference", "executor"])
def test_two_compiled_models_interleaved(engine):
    """Two models compiled side by side (same shapes, their own programs and bindings), their
    forwards and backwards interleaved: each trains as eager does."""
    models = [gpt_tiny(), gpt_tiny()]
    with torch.no_grad():
        for p in models[1].parameters():
            p.mul_(0.5)
    compiled = [torch.compile(m, backend=nova_backend, options={"engine": engine}) for m in models]
    for step, (idx, targets) in enumerate(tiny_batches(2, seed=8)):
        expected = [gpt_grads(m, idx, targets) for m in models]
        for m in models:
            m.zero_grad(set_to_none=True)
        losses = [c(idx, targets) for c in compiled]
        for loss in reversed(losses):
            loss.backward()
        for m, loss, (loss_ref, grads) in zip(models, losses, expected):
            assert_close(loss.detach(), loss_ref, f"step {step}: loss")
            for name, p in m.named_parameters():
                assert_close(p.grad, grads[name], f"step {step}: grad of {name}")


def test_backward_with_retain_graph_twice():
    """``backward(retain_graph=True)`` twice: AOTAutograd donates nothing to such a backward, and
    the saved tensors read in place are still whole for the second one: gradients doubled."""
    model = gpt_tiny()
    idx, targets = tiny_batches(1, seed=9)[0]
    _, grads = gpt_grads(model, idx, targets)
    compiled = torch.compile(model, backend=nova_backend, options={"engine": "executor"})
    loss = compiled(idx, targets)
    loss.backward(retain_graph=True)
    loss.backward()
    for name, p in model.named_parameters():
        assert_close(p.grad, 2 * grads[name], f"grad of {name}")


class SavesAParameterCopy(torch.nn.Module):
    """The forward returns a copy of its weight (Nova's value semantics lower ``clone`` to the
    weight itself) and a result that the backward also saves."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)

    def forward(self, x):
        y = torch.tanh(self.linear(x))
        return y, self.linear.weight.clone()


def test_a_result_the_trace_made_fresh_is_never_an_input():
    """The returned ``weight.clone()`` must not be the parameter itself: writing to it leaves the
    parameter as it was (``dynamo_handoff.output_copies``)."""
    model = SavesAParameterCopy()
    compiled = torch.compile(model, backend=nova_backend, options={"engine": "executor"})
    x = torch.randn(3, 6)
    y, w = compiled(x)
    assert w.data_ptr() != model.linear.weight.data_ptr()
    before = model.linear.weight.detach().clone()
    with torch.no_grad():
        w.add_(1.0)
    assert torch.equal(model.linear.weight.detach(), before)
    y.sum().backward()
    y_ref = torch.tanh(torch.nn.functional.linear(x, before, model.linear.bias))
    assert_close(y.detach(), y_ref.detach(), "output")


class DropoutCumsum(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.dropout = torch.nn.Dropout(0.5)

    def forward(self, x):
        return torch.cumsum(self.dropout(self.linear(x)), 1).relu()


def test_unsupported_graph_runs_on_torch_and_is_logged(caplog):
    """A random op (dropout in training) makes the forward graph run as torch would (same random
    stream as eager), named in a warning; an op without a lowering (cumsum) runs inside Nova's
    graph as an opaque ATen node, named in the info line."""
    model = DropoutCumsum()
    compiled = torch.compile(model, backend=nova_backend)
    x = torch.randn(4, 8)
    with caplog.at_level(logging.INFO, logger="nova"):
        torch.manual_seed(5)
        out = compiled(x)
        torch.manual_seed(5)
        expected = model(x)
        assert_close(out.detach(), expected.detach(), "output with dropout")
        out.sum().backward()
        grad = model.linear.weight.grad.clone()
        model.zero_grad()
        expected.sum().backward()
        assert_close(grad, model.linear.weight.grad, "grad through dropout")
        model.eval()
        with torch.no_grad():
            assert_close(compiled(x), model(x), "eval output")
    warnings = [r.message for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "forward graph" in warnings[0] and "aten.native_dropout" in warnings[0] \
        and "runs on torch" in warnings[0], warnings
    infos = [r.message for r in caplog.records if r.levelno == logging.INFO]
    assert any("inference graph" in m and "aten.cumsum.default x1" in m for m in infos), infos


def test_a_graph_whose_run_fails_frees_its_program(monkeypatch, caplog):
    """A program that fails on its first run (offline: a kernel missing from the cache): the graph
    runs on torch from then on, as eager computes it, and its program (arena, staged inputs) is no
    longer held."""
    import weakref
    from nova.compiler import executor
    programs = []
    build = executor.build

    def failing_build(*args, **kwargs):
        program = build(*args, **kwargs)
        programs.append(weakref.ref(program))
        return program

    def failing_run(program, tensors):
        raise RuntimeError("not precompiled: a kernel of this program")
    monkeypatch.setattr(executor, "build", failing_build)
    monkeypatch.setattr(executor.Program, "run", failing_run)
    model = mlp()
    compiled = torch.compile(model, backend=nova_backend, options={"engine": "executor"})
    x = torch.randn(5, 12)
    with caplog.at_level(logging.WARNING, logger="nova"), torch.no_grad():
        assert_close(compiled(x), model(x), "output on torch")
        assert_close(compiled(x * 2), model(x * 2), "second call on torch")
    assert len(programs) == 1 and programs[0]() is None
    warnings = [r.message for r in caplog.records]
    assert len(warnings) == 1 and "fell back to torch after a failed run" in warnings[0], warnings


def test_bad_option_is_one_line():
    with pytest.raises(NovaBackendError, match="unknown option 'tile'"):
        nova_backend(None, [], options={"tile": 3})
    with pytest.raises(NovaBackendError, match="engine must be one of"):
        nova_backend(None, [], options={"engine": "fast"})


@pytest.fixture
def nova_entry_point(tmp_path, monkeypatch):
    """The distribution metadata an install of pyproject.toml writes (its torch_dynamo_backends
    entry points), on sys.path, with torch's backend registry rediscovering entry points."""
    from torch._dynamo.backends import registry
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"]["torch_dynamo_backends"]
    info = tmp_path / "nova_entry_point_check-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nova-entry-point-check\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text("[torch_dynamo_backends]\n" +
                                           "".join(f"{k} = {v}\n" for k, v in declared.items()))
    monkeypatch.syspath_prepend(str(tmp_path))

    def forget():
        for table in (registry._BACKENDS, registry._COMPILER_FNS):
            for name in declared:
                table.pop(name, None)
        registry._discover_entrypoint_backends.cache_clear()
        registry._lazy_import.cache_clear()
    forget()
    yield declared
    forget()


def test_backend_resolves_by_name(nova_entry_point):
    from torch._dynamo.backends.registry import list_backends, lookup_backend
    assert nova_entry_point == {"nova": "nova.integrations.dynamo:nova_backend"}
    assert "nova" in list_backends()
    assert lookup_backend("nova") is nova_backend
    model = mlp()
    x = torch.randn(3, 12)
    with torch.no_grad():
        assert_close(torch.compile(model, backend="nova")(x), model(x), "output by name")


def test_a_training_loop_runs_each_program_at_one_binding(monkeypatch):
    """GPT-tiny through the backend (the executor's per-call programs, on the CPU), AdamW, a new batch
    every step and every step's loss kept (as a loop logs it): after the first steps neither program
    binds anew -- the arena, the output buffers and every input read in place sit where they sat."""
    from nova.integrations import dynamo
    from nova.models.gpt import GPT
    programs = []
    init = dynamo._Program.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        programs.append(self)
    monkeypatch.setattr(dynamo._Program, "__init__", spy)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = GPT("tiny", seed=0)
    vocab = model.config.vocab_size
    compiled = torch.compile(model, backend=nova_backend, options={"engine": "executor"})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = torch.randint(0, vocab, (6, 2, 4, 16), generator=torch.Generator().manual_seed(1))
    losses, rebinds = [], []
    for step in range(6):
        opt.zero_grad(set_to_none=True)
        loss = compiled(batches[step, 0], batches[step, 1])
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        if step == 1:
            rebinds = [p.program.stats["rebinds"] for p in programs]
    torch._dynamo.reset()
    assert len(programs) == 2 and all(p.program.stats["runs"] == 6 for p in programs)
    assert [p.program.stats["rebinds"] for p in programs] == rebinds      # none after the second step
    assert len({float(x) for x in losses}) == 6                          # every kept loss its own value


AS_STRIDED = {
    "after a transposed copy": lambda x: x.t().contiguous().as_strided((3, 4), (1, 3)),
    "after a clone, with an offset": lambda x: x.t().clone(memory_format=torch.contiguous_format).as_strided((2, 5), (5, 1), 1),
    "after a channels-last copy": lambda x: x.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last)
    .as_strided((6,), (1,)),
    "after an expanded copy": lambda x: x[:1].expand(3, 6).contiguous().as_strided((2, 2), (6, 1), 1),
}


@pytest.mark.parametrize("engine", ["reference", "executor"])
@pytest.mark.parametrize("case", AS_STRIDED)
def test_as_strided_reads_the_storage_eager_laid_out(engine, case):
    """``as_strided`` indexes storage, not values: it runs as an opaque ATen op on a fresh tensor laid
    out as eager's input was (a copy's own layout, channels-last included).  It read the IR's dense
    value (or the un-copied input) before: a silent wrong result."""
    fn = AS_STRIDED[case]
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    compiled = torch.compile(fn, backend=nova_backend, options={"engine": engine})
    torch.testing.assert_close(compiled(x.clone()), fn(x.clone()), rtol=0, atol=0)


@pytest.mark.parametrize("engine", ["reference", "executor"])
def test_overlapping_chunks_by_as_strided_train_like_eager(engine):
    """Longformer's chunking: overlapping windows of a projection by ``as_strided`` with an offset,
    and its backward (``as_strided_scatter`` into a fresh zero tensor): the executor read the arena's
    start for the absolute offset, and the input gradient came back wrong."""
    torch.manual_seed(0)
    weight = torch.randn(6, 9, requires_grad=True)

    def chunks(x):
        h = x @ weight
        return (h.as_strided((3, 3, 9), (9, 9, 1), 1) * torch.arange(1.0, 4.0).view(3, 1, 1)).sum(0)
    x = torch.randn(6, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    compiled = torch.compile(chunks, backend=nova_backend, options={"engine": engine})
    out, ref = compiled(x), chunks(x_ref)
    torch.testing.assert_close(out, ref)
    weight.grad = None
    (out * ref.detach()).sum().backward()
    grad_w = weight.grad.clone()
    weight.grad = None
    (ref * ref.detach()).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(grad_w, weight.grad)


def test_as_strided_of_a_view_into_a_larger_tensor_runs_on_torch_with_the_reason_logged(caplog):
    """A view's storage holds elements its value does not (``x[1:]`` starts 6 elements in): Nova
    does not model that, so the graph runs on torch, the one-line reason logged."""
    def fn(x):
        return (x * 2)[1:].as_strided((2, 2), (1, 1), 7)
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    with caplog.at_level(logging.INFO, logger="nova"):
        out = torch.compile(fn, backend=nova_backend)(x)
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)
    assert any("reads the storage of a view into a larger tensor" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("engine", ["reference", "executor"])
@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_hugging_face_models_run_on_nova_through_the_backend(which, engine, caplog):
    """A Hugging Face causal LM (tiny config, random init) with a right-padded mask, inference and a
    training step, every graph on Nova: the lowering runs outside AOTAutograd's fake-tensor mode (a
    mask's constant pattern is evaluated for real) and the constant tensors the graphs hold (the
    mask's patterns) become program inputs.  Before, every forward graph ran on torch, with a
    fake-tensor error as the reason."""
    pytest.importorskip("transformers", reason="transformers is not installed (pip install -e .[dev])")
    import test_frontend_hf as hf
    model, reference = hf.make_model(which)
    ids, mask, labels = hf.batch(5, padded=True)
    compiled = torch.compile(model, backend=nova_backend, options={"engine": engine})
    with caplog.at_level(logging.INFO, logger="nova"):
        model.eval(), reference.eval()
        with torch.no_grad():
            got = compiled(input_ids=ids, attention_mask=mask, use_cache=False).logits
            want = reference(input_ids=ids, attention_mask=mask, use_cache=False).logits
        assert_close(got, want, "logits")
        model.train(), reference.train()
        losses = [m(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss for m in (compiled, reference)]
        for loss in losses:
            loss.backward()
    assert_close(losses[0].detach(), losses[1].detach(), "loss")
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert_close(p.grad, q.grad, f"grad of {name}", tol=1e-4)
    fell_back = [r.getMessage() for r in caplog.records if "runs on torch" in r.getMessage()]
    assert not fell_back, fell_back


@pytest.mark.parametrize("engine", ["reference", "executor"])
def test_an_opaque_op_gets_its_input_dense_and_a_bf16_layer_norm_runs_on_the_executor(engine, caplog):
    """``group_norm`` of a transposed input: eager's graph copies it dense first, the IR keeps the
    view, and ATen's CPU kernel refused it (the graph fell back after a failed run); a bf16 LayerNorm:
    ATen's CPU kernel keeps the statistics in bf16 where the IR's are FP32 (it failed too)."""
    def group(x):
        return torch.nn.functional.group_norm(x.t().reshape(2, 4, 3), 2)
    norm = torch.nn.LayerNorm(16).to(torch.bfloat16)
    x, h = torch.randn(3, 8), torch.randn(4, 16, dtype=torch.bfloat16)
    with caplog.at_level(logging.INFO, logger="nova"):
        torch.testing.assert_close(torch.compile(group, backend=nova_backend, options={"engine": engine})(x), group(x))
        with torch.no_grad():
            got = torch.compile(norm, backend=nova_backend, options={"engine": engine})(h)
            torch.testing.assert_close(got, norm(h), rtol=1e-2, atol=2e-2)      # bf16: one rounding apart
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]


def bytes_in_donated_inputs(monkeypatch) -> list:
    """``[(graph name, bytes its program places in dead donated inputs)]``, one entry per program the
    executor lays out from now on in this test."""
    from nova.compiler import executor
    placed = []
    layout = executor.Program._layout

    def spy(self):
        layout(self)
        placed.append((self.graph.name, sum(v.type.nbytes for v in self.in_donor)))
    monkeypatch.setattr(executor.Program, "_layout", spy)
    return placed


def test_gradients_take_the_bytes_of_the_donated_saved_tensors(monkeypatch, caplog):
    """Saved activations larger than the staged ones are read in place and donated by AOTAutograd;
    the backward writes its weight gradients into their bytes once they are dead
    (``memory._place_in_donors``), no output buffers of their own.  The CPU executor runs that plan:
    three AdamW steps against eager, losses and every gradient alike."""
    placed = bytes_in_donated_inputs(monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512),
                                torch.nn.GELU(), torch.nn.Linear(512, 256))
    g = torch.Generator().manual_seed(5)
    batches = [((torch.randn(1024, 256, generator=g),), lambda y: (y ** 2).mean()) for _ in range(3)]
    with caplog.at_level(logging.INFO, logger="nova"):
        train_against_eager(model, batches, "executor")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.message for r in caplog.records]
    backward = [n for name, n in placed if name.startswith("backward")]
    assert backward and backward[0] >= 256 * 1024 * 4, placed     # at least the first layer's weight gradient


def test_a_value_in_a_donated_input_is_a_view_of_its_bytes_or_a_one_line_refusal():
    """A value the plan places at a byte of a donated input is a view of that storage, in its own
    type; one that would not start on an element of its type is refused in one line (the hand-over
    copies a CUDA input that does not start on the plan's 256-byte alignment, which the executor
    checks too)."""
    from nova.compiler.executor import ExecutorError, bytes_view
    from nova.integrations.dynamo_handoff import DONATED_ALIGNMENT
    from nova.passes.memory import ALIGNMENT
    assert DONATED_ALIGNMENT == ALIGNMENT
    x = torch.zeros(1024)
    assert bytes_view(x, 256, torch.float32, (8,), (1,)).data_ptr() == x.data_ptr() + 256
    with pytest.raises(ExecutorError, match="not aligned"):
        bytes_view(x[1:], 0, torch.float64, (8,), (1,))        # 4 bytes in: not an f64 element's start


def test_gradients_in_donated_bytes_accumulate_over_micro_batches(monkeypatch):
    """Gradients accumulated over micro-batches (no zero_grad between backwards): the first backward's
    gradients lie in its forward's saved buffers, which the next forward must not take again while
    the gradients hold them (the output pool's use count); the sums equal eager's."""
    placed = bytes_in_donated_inputs(monkeypatch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend=nova_backend, options={"engine": "executor"})
    g = torch.Generator().manual_seed(6)
    for step in range(2):
        for _ in range(3):                                   # three micro-batches into one gradient
            x = torch.randn(1024, 256, generator=g)
            for m, fn in ((model, compiled), (reference, reference)):
                (fn(x) ** 2).mean().backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            assert_close(p.grad, q.grad, f"step {step} accumulated grad of {name}")
        for m in (model, reference):
            with torch.no_grad():
                for p in m.parameters():
                    p -= 1e-2 * p.grad
            m.zero_grad(set_to_none=True)
    assert any(n for _, n in placed), placed                 # the backward placed its gradients so


def test_hugging_face_gpt2_with_a_mask_and_a_schedule_places_gradients_in_donated_bytes(monkeypatch):
    """A model the project did not write, the way scripts train it: Hugging Face's GPT-2 from a config,
    right-padded batches (labels -100 where the mask is 0), AdamW under a LambdaLR schedule, through
    the backend's CPU executor.  Its backward places its buffers in the dead saved tensors; three
    steps' losses and every gradient as eager's."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e .[dev])")
    placed = bytes_in_donated_inputs(monkeypatch)
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=512, n_positions=128, n_embd=256, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    reference = copy.deepcopy(lm)
    compiled = torch.compile(lm, backend=nova_backend, options={"engine": "executor"})
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (8, 128), generator=g)
    mask = torch.ones(8, 128, dtype=torch.long)
    mask[1, 100:], mask[3, 40:] = 0, 0
    labels = ids.masked_fill(mask == 0, -100)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (lm, reference)]
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s)) for o in optimizers]
    for step in range(3):
        losses = [fn(input_ids=ids, attention_mask=mask, labels=labels).loss for fn in (compiled, reference)]
        for loss in losses:
            loss.backward()
        assert_close(losses[0].detach(), losses[1].detach(), f"step {step} loss")
        for (name, p), q in zip(lm.named_parameters(), reference.parameters()):
            assert_close(p.grad, q.grad, f"step {step} grad of {name}", tol=1e-4)
        for opt, schedule in zip(optimizers, schedules):
            opt.step()
            opt.zero_grad()
            schedule.step()
    assert any(n for name, n in placed if name.startswith("backward")), placed
