"""``nova.compile`` on what real training scripts do, against eager (float32/float64 on CPU, the
reference engine): masks built like Hugging Face's (index tensors, ``&``, constant causal masks
folded onto the IR attention), padded labels with ``ignore_index``, one-line errors, gradient
clipping and accumulation, autocast."""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import nova


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def forward_backward(model, loss_fn):
    def step(*args):
        loss = loss_fn(model, *args)
        loss.backward()
        return loss
    return step


def assert_step_matches_eager(model, loss_fn, *args, tolerance=1e-10):
    """One forward/backward compiled and eager on copies of ``model``: the loss and every gradient."""
    reference = copy.deepcopy(model)
    compiled = nova.compile(forward_backward(model, loss_fn))
    loss = compiled(*args)
    expected = forward_backward(reference, loss_fn)(*args)
    assert relative(loss, expected) < tolerance
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.grad is not None and relative(p.grad, q.grad) < tolerance, name
    return compiled


# ====================================================================== masks
class MaskedAttention(nn.Module):
    """Attention with the mask built the way Hugging Face's ``sdpa_mask`` builds it: index tensors
    into a 2-D padding mask (``padding_mask[batch_idx, kv_idx]``), ``&`` with the causal pattern;
    or, without padding, a causal mask from ``arange`` alone."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, padding_mask=None):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        rows = torch.arange(t)
        batch_idx = torch.arange(b)[:, None, None, None]
        q_idx, kv_idx = rows[None, None, :, None], rows[None, None, None, :]
        mask = kv_idx <= q_idx
        if padding_mask is not None:
            mask = mask & padding_mask.bool()[batch_idx, kv_idx]
        else:
            mask = mask.expand(b, 1, t, t)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


def attention_loss(model, x, padding_mask=None):
    return model(x, padding_mask).square().mean()


def test_padded_mask_from_index_tensors_lowers_without_opaque_ops():
    torch.manual_seed(0)
    model = MaskedAttention().double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    padding = torch.ones(2, 6, dtype=torch.long)
    padding[1, 4:] = 0
    compiled = assert_step_matches_eager(model, attention_loss, x, padding)
    assert not compiled.captured.stats.opaque
    attention = [n for n in compiled.graph.nodes if n.op == "attention"]   # a data mask: the attention's bias operand
    assert len(attention) == 1 and len(attention[0].inputs) == 4


def test_constant_causal_mask_is_folded_onto_the_ir_attention():
    torch.manual_seed(0)
    model = MaskedAttention().double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    compiled = assert_step_matches_eager(model, attention_loss, x)
    ops = compiled.graph.op_counts()
    assert ops["attention"] == ops["attention_backward"] == 1
    assert next(n for n in compiled.graph.nodes if n.op == "attention").attrs["causal"] is True
    assert "iota" not in ops and "le" not in ops                   # the mask's construction is gone


def test_constant_non_causal_mask_is_the_attentions_bias():
    torch.manual_seed(0)
    model = nn.Linear(8, 8).double()

    def loss_fn(model, x):
        q = model(x).view(1, 6, 2, 4).transpose(1, 2)
        rows = torch.arange(6)
        window = (rows[None, :] <= rows[:, None]) & (rows[:, None] - rows[None, :] < 3)    # sliding window
        return F.scaled_dot_product_attention(q, q, q, attn_mask=window).square().sum()
    compiled = assert_step_matches_eager(model, loss_fn, torch.randn(1, 6, 8, dtype=torch.float64))
    attention = [n for n in compiled.graph.nodes if n.op == "attention"]    # neither "all" nor causal: a bias
    assert len(attention) == 1 and len(attention[0].inputs) == 4


def test_multi_index_and_boolean_mask_ops_lower():
    torch.manual_seed(0)
    model = nn.Linear(5, 5).double()

    def loss_fn(model, x, keep):
        y = model(x)                                               # [4, 5]
        rows = torch.tensor([[0], [3], [-1]])
        picked = y[rows, torch.tensor([1, -2, 4])]                 # broadcast [3, 3], negative indices
        both = (keep[rows, torch.tensor([0, 2, 4])] & (picked > 0)) | ~keep[:3, :3] ^ (picked < -1)
        return torch.where(both, picked, 0.5 * picked).sum()
    keep = torch.rand(4, 5, generator=torch.Generator().manual_seed(1)) > 0.4
    compiled = assert_step_matches_eager(model, loss_fn, torch.randn(4, 5, dtype=torch.float64), keep)
    assert not compiled.captured.stats.opaque


# ====================================================================== errors
class Recurrent(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = kind(4, 8, batch_first=True)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y).mean()


def snapshot(model, opt):
    """Everything of the user's a failed capture must leave as it was: the parameter objects and
    values, their grads, the optimizer's state and methods."""
    return ([(p, p.detach().clone(), None if p.grad is None else p.grad.clone()) for p in model.parameters()],
            {id(p): {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
             for p, s in opt.state.items()}, dict(opt.__dict__).keys())


def assert_untouched(model, opt, before):
    params, state, attrs = before
    for (p, value, grad), q in zip(params, model.parameters()):
        assert p is q and not isinstance(q, torch._subclasses.FakeTensor) and torch.equal(q, value)
        assert (q.grad is None) == (grad is None) and (grad is None or torch.equal(q.grad, grad))
    assert {id(p): s for p, s in opt.state.items()}.keys() == state.keys()
    for p, s in opt.state.items():
        assert all(torch.equal(v, state[id(p)][k]) if isinstance(v, torch.Tensor) else v == state[id(p)][k]
                   for k, v in s.items())
    assert dict(opt.__dict__).keys() == attrs and "step" not in opt.__dict__
    assert not torch.compiler.is_compiling()


def trained_once(model):
    """A model and an SGD-with-momentum optimizer after one eager step (grads and state exist)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 4)).backward()
    opt.step()
    return opt


def test_an_lstm_is_one_line_naming_the_op_module_and_line():
    """ATen's fused LSTM kernel keeps a uint8 workspace for its backward, which the IR cannot hold."""
    torch.manual_seed(0)
    model = Recurrent(nn.LSTM)
    opt = trained_once(model)

    def step(x):
        loss = model(x)
        loss.backward()
        opt.step()
        return loss
    before = snapshot(model, opt)
    with pytest.raises(nova.NovaUnsupportedError) as info:
        nova.compile(step)(torch.randn(2, 3, 4))
    message = str(info.value)
    assert "\n" not in message and "Unmodeled" not in message
    assert message.startswith("op aten.") and "rnn" in message         # the ATen op
    assert "nn.LSTMCell" in message                                      # and what traces instead
    assert " at rnn (test_frontend_real_scripts.py:" in message        # module path and source line
    assert_untouched(model, opt, before)


def test_a_gru_decomposes_and_trains_like_eager():
    torch.manual_seed(0)
    compiled = assert_step_matches_eager(Recurrent(nn.GRU).double(), lambda model, x: model(x),
                                         torch.randn(2, 3, 4, dtype=torch.float64))
    assert not compiled.captured.stats.opaque


def test_a_shape_bug_in_the_model_raises_eagers_error_unchanged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(4, 1))     # 5 features into a Linear(4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    before = snapshot(model, opt)

    def step(x):
        loss = model(x).sum()
        loss.backward()
        opt.step()
        return loss
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError) as eager:
        step(x)
    before = snapshot(model, opt)
    with pytest.raises(RuntimeError) as compiled:
        nova.compile(step)(x)
    assert type(compiled.value) is type(eager.value) and str(compiled.value) == str(eager.value)
    assert not isinstance(compiled.value, nova.NovaUnsupportedError)
    assert_untouched(model, opt, before)


def test_the_users_own_exception_passes_through_and_state_is_untouched():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()

    class ConfigError(ValueError):
        pass

    def step(x):
        loss = model(x).sum()
        loss.backward()
        opt.step()
        if x.shape[0] != 8:
            raise ConfigError(f"expected a batch of 8, got {x.shape[0]}")
        return loss
    before = snapshot(model, opt)
    with pytest.raises(ConfigError, match=r"^expected a batch of 8, got 3$") as info:
        nova.compile(step)(torch.randn(3, 4))
    assert type(info.value) is ConfigError
    assert_untouched(model, opt, before)
    step(torch.randn(8, 4))                      # eager still works on the untouched objects


def test_tracing_limitations_stay_one_line_nova_errors():
    model = nn.Linear(4, 1)

    def host_read(x):
        loss = model(x).sum()
        if loss > 0:                             # bool(tensor)
            loss = loss * 2
        return loss

    def numpy_read(x):
        return torch.from_numpy(model(x).detach().numpy()).sum()
    for fn, words in ((host_read, "data-dependent"), (numpy_read, "on the host")):
        with pytest.raises(nova.NovaUnsupportedError, match=words) as info:
            nova.compile(fn)(torch.randn(3, 4))
        assert "\n" not in str(info.value) and "test_frontend_real_scripts.py:" in str(info.value)


@pytest.mark.parametrize("value", [42, "train_step", None])
def test_compiling_something_not_callable_is_a_type_error_at_compile_time(value):
    with pytest.raises(TypeError, match=r"^nova.compile takes a function") as info:
        nova.compile(value) if value is not None else nova.compile(backend="reference")(value or 3)
    assert "\n" not in str(info.value)


# ====================================================================== clipping and accumulation
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3)).double()


def twins(model, optimizer, **hyper):
    """``model``, an eager copy of it, and ``optimizer(**hyper)`` over each: what a compiled step is
    checked against, state for state."""
    reference = copy.deepcopy(model)
    return model, reference, optimizer(model.parameters(), **hyper), optimizer(reference.parameters(), **hyper)


def regression(model, x, y):
    return ((model(x) - y) ** 2).mean() * 50         # large enough that clipping to 1.0 bites


def data(step: int, micro: int = 0, batch: int = 5):
    g = torch.Generator().manual_seed(100 * step + micro)
    return torch.randn(batch, 4, generator=g, dtype=torch.float64), torch.randn(batch, 3, generator=g, dtype=torch.float64)


def assert_same_training_state(model, reference, opt, ref_opt, tolerance=1e-10):
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert relative(p, q) < tolerance, name
        assert (p.grad is None) == (q.grad is None), name
        assert p.grad is None or relative(p.grad, q.grad) < tolerance, name
    for p, q in zip(model.parameters(), reference.parameters()):
        for key, value in ref_opt.state[q].items():
            if isinstance(value, torch.Tensor) and value.dim():
                assert relative(opt.state[p][key], value) < tolerance, key


@pytest.mark.parametrize("foreach", [None, True, False])
def test_clip_grad_norm_inside_the_step_matches_eager(foreach):
    model = mlp()
    reference = copy.deepcopy(model)

    def train_step(model, opt):
        def step(x, y):
            loss = regression(model, x, y)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=foreach)
            opt.step()
            opt.zero_grad()
            return loss, norm
        return step
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    compiled, eager = nova.compile(train_step(model, opt)), train_step(reference, ref_opt)
    for i in range(3):
        (loss, norm), (ref_loss, ref_norm) = compiled(*data(i)), eager(*data(i))
        assert relative(loss, ref_loss) < 1e-10 and relative(norm, ref_norm) < 1e-10
        assert ref_norm > 1.0                                         # the clipping did scale
    assert_same_training_state(model, reference, opt, ref_opt)
    assert not compiled.captured.stats.opaque


@pytest.mark.parametrize("backend", ["reference", "executor"])      # the executor updates in place
def test_clip_grad_norm_error_if_nonfinite_raises_eagers_error_and_writes_nothing(backend):
    model = mlp()
    reference = copy.deepcopy(model)

    def train_step(model, opt):
        def step(x, y):
            loss = regression(model, x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True, foreach=True)
            opt.step()
            opt.zero_grad()
            return loss
        return step
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    compiled, eager = nova.compile(train_step(model, opt), backend=backend), train_step(reference, ref_opt)
    for i in range(2):                                                # finite: trains like eager
        assert relative(compiled(*data(i)), eager(*data(i))) < 1e-10
    assert_same_training_state(model, reference, opt, ref_opt)
    x, y = data(2)
    y[0, 0] = math.inf
    with pytest.raises(RuntimeError) as eager_error:
        eager(x, y)
    before = snapshot(model, opt)
    with pytest.raises(RuntimeError) as compiled_error:
        compiled(x, y)
    assert str(compiled_error.value) == str(eager_error.value) and "non-finite" in str(compiled_error.value)
    assert_untouched(model, opt, before)        # parameters, momentum (and the absent grads) as before
    assert compiled.stats.captures == 2         # the failing call reused the graph of the second step
    ref_opt.zero_grad()                         # eager leaves the failed backward's grads; Nova wrote nothing
    assert relative(compiled(*data(3)), eager(*data(3))) < 1e-10
    assert_same_training_state(model, reference, opt, ref_opt)


def test_accumulation_of_micro_batches_inside_one_step():
    model = mlp()
    reference = copy.deepcopy(model)

    def train_step(model, opt):
        def step(micro_batches):
            total = 0.0
            for x, y in micro_batches:
                loss = regression(model, x, y) / len(micro_batches)
                loss.backward()
                total = total + loss.detach()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            return total
        return step
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    compiled, eager = nova.compile(train_step(model, opt)), train_step(reference, ref_opt)
    for i in range(3):
        micro = [data(i, k) for k in range(3)]
        assert relative(compiled(micro), eager(micro)) < 1e-10
    assert compiled.stats.captures == 1
    assert_same_training_state(model, reference, opt, ref_opt)


@pytest.mark.parametrize("update", ["compiled", "eager"])
def test_accumulation_across_calls_with_the_update_in_another_function(update):
    """``micro`` only runs forward and backward: the grads accumulate in ``p.grad`` across calls
    exactly like eager; every k-th call an update (compiled separately, or eager) clips and steps."""
    model, reference, opt, ref_opt = twins(mlp(), torch.optim.SGD, lr=0.05, momentum=0.9)

    def micro_step(model):
        def micro(x, y):
            loss = regression(model, x, y) / 2
            loss.backward()
            return loss
        return micro

    def update_step(model, opt):
        def update():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
        return update
    micro = nova.compile(micro_step(model))
    update_fn = nova.compile(update_step(model, opt)) if update == "compiled" else update_step(model, opt)
    ref_micro, ref_update = micro_step(reference), update_step(reference, ref_opt)
    for i in range(6):
        assert relative(micro(*data(i)), ref_micro(*data(i))) < 1e-10
        if i % 2 == 1:
            update_fn()
            ref_update()
        assert_same_training_state(model, reference, opt, ref_opt)


def test_one_function_that_steps_every_kth_call():
    model, reference, opt, ref_opt = twins(mlp(), torch.optim.AdamW, lr=1e-2)

    def train_step(model, opt):
        def step(x, y, sync: bool):
            loss = regression(model, x, y) / 3
            loss.backward()
            if sync:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
            return loss
        return step
    compiled, eager = nova.compile(train_step(model, opt)), train_step(reference, ref_opt)
    for i in range(9):
        sync = i % 3 == 2
        assert relative(compiled(*data(i), sync), eager(*data(i), sync)) < 1e-10
        assert_same_training_state(model, reference, opt, ref_opt)
    assert compiled.cache_size <= 4 and compiled.stats.cache_hits >= 4


def test_a_checkpoint_loaded_into_the_same_objects_mid_training_is_what_the_next_step_reads():
    """``model.load_state_dict`` / ``opt.load_state_dict`` between calls (a rollback to an earlier
    checkpoint): the optimizer's state tensors are new objects with the same shapes, so the step keeps
    its capture and reads the loaded values (steps counted from the checkpoint's), as eager does."""
    model, reference, opt, ref_opt = twins(mlp(), torch.optim.AdamW, lr=1e-2)

    def train_step(model, opt):
        def step(x, y):
            loss = regression(model, x, y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss
        return step
    compiled, eager = nova.compile(train_step(model, opt)), train_step(reference, ref_opt)
    for i in range(3):
        compiled(*data(i)), eager(*data(i))
    checkpoint = copy.deepcopy((reference.state_dict(), ref_opt.state_dict()))
    for i in range(3, 5):
        compiled(*data(i)), eager(*data(i))
    for m, o in ((model, opt), (reference, ref_opt)):       # each its own copy: load_state_dict shares tensors
        m.load_state_dict(copy.deepcopy(checkpoint[0]))
        o.load_state_dict(copy.deepcopy(checkpoint[1]))
    for i in range(5, 8):
        assert relative(compiled(*data(i)), eager(*data(i))) < 1e-10
        assert_same_training_state(model, reference, opt, ref_opt)
    assert float(opt.state[next(model.parameters())]["step"]) == 6.0 and compiled.stats.captures == 1


def test_a_grad_scaler_step_is_one_line_naming_the_host_read():
    """fp16 loss scaling (``torch.amp.GradScaler``) skips the update on a non-finite gradient by reading
    it on the host: a data-dependent branch a captured step cannot hold, refused in one line before any
    state is touched (bf16 autocast needs no scaler)."""
    model = mlp().float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    before = [p.detach().clone() for p in model.parameters()]

    def step(x, y):
        loss = regression(model, x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss
    x, y = data(0)
    with pytest.raises(nova.NovaUnsupportedError, match="data-dependent") as info:
        nova.compile(step)(x.float(), y.float())
    assert "\n" not in str(info.value)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


# ====================================================================== mixed precision
def gpt_tiny():
    import dataclasses
    from nova.models.gpt import CONFIGS, GPT
    torch.manual_seed(0)
    return GPT(dataclasses.replace(CONFIGS["tiny"], n_layer=1))


def autocast_step(model, opt, device_type: str):
    def step(idx, targets):
        with torch.autocast(device_type, dtype=torch.bfloat16):
            logits = model(idx)
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    return step


def tokens(step: int, vocab: int, shape=(2, 8), device="cpu"):
    g = torch.Generator().manual_seed(step)
    return (torch.randint(0, vocab, shape, generator=g).to(device),
            torch.randint(0, vocab, shape, generator=g).to(device))


def test_cpu_autocast_step_keeps_fp32_master_weights_and_bf16_gemms():
    model, reference, opt, ref_opt = twins(gpt_tiny(), torch.optim.SGD, lr=0.5, momentum=0.9)
    initial = [p.detach().clone() for p in model.parameters()]
    compiled, eager = nova.compile(autocast_step(model, opt, "cpu")), autocast_step(reference, ref_opt, "cpu")
    for i in range(3):
        batch = tokens(i, model.config.vocab_size)
        assert relative(compiled(*batch), eager(*batch)) < 1e-3             # bf16 GEMMs, FP32 loss
    g = compiled.graph
    gemms = [n for n in g.nodes if n.op == "matmul"]
    assert gemms and all(v.dtype == "bf16" for n in gemms for v in n.inputs)
    assert any(n.op == "cast" for n in g.nodes)                             # autocast's _to_copy
    assert all(i.value.dtype == "f32" for i in g.inputs
               if i.role in ("param", "opt_state") and not i.name.endswith(".hyper"))   # hyper-parameters: f64
    assert all(p.dtype == torch.float32 for p in model.parameters())
    moved = torch.cat([(p - p0).flatten() for p, p0 in zip(model.parameters(), initial)])
    ref_moved = torch.cat([(q - p0).flatten() for q, p0 in zip(reference.parameters(), initial)])
    assert relative(moved, ref_moved) < 1e-2          # bf16 gradients: rounding at a different place


@pytest.fixture
def cuda_autocast_emulated(monkeypatch):
    """Capture as if the step ran on a GPU: the device type capture sees is "cuda", and entering
    autocast sets CUDA's autocast state the way ``torch.autocast("cuda")`` does on a GPU machine
    (on a CPU-only torch, ``torch.autocast("cuda")`` disables itself)."""
    import importlib
    capture_module = importlib.import_module("nova.frontend.capture")
    monkeypatch.setattr(capture_module, "_step_device_type", lambda found, flat_args: "cuda")

    class CudaAutocast:
        def __enter__(self):
            self.saved = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", torch.bfloat16)

        def __exit__(self, *exc):
            torch.set_autocast_enabled("cuda", self.saved[0])
            torch.set_autocast_dtype("cuda", self.saved[1])
    return CudaAutocast


class NormedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.norm, self.down = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 5)

    def forward(self, x):
        return self.down(self.norm(self.up(x)).exp().softmax(-1))


def test_cuda_autocast_policy_applies_to_the_cpu_fakes(cuda_autocast_emulated):
    """Under CUDA autocast, Linear runs in bf16 and layer_norm, exp, softmax and the loss in FP32
    (CPU autocast would keep them in bf16); eager reference: the same casts written out."""
    torch.manual_seed(0)
    model = NormedMLP()
    reference = copy.deepcopy(model)

    def step(x, y):
        with cuda_autocast_emulated():
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        return loss

    def by_hand(x, y):
        m = reference
        h = F.linear(x.bfloat16(), m.up.weight.bfloat16(), m.up.bias.bfloat16())
        h = F.layer_norm(h.float(), (16,), m.norm.weight, m.norm.bias).exp().softmax(-1)
        logits = F.linear(h.bfloat16(), m.down.weight.bfloat16(), m.down.bias.bfloat16())
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        return loss
    x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
    compiled = nova.compile(step)
    assert relative(compiled(x, y), by_hand(x, y)) < 1e-3       # bf16 rounding (addmm vs matmul + bias)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert relative(p.grad, q.grad) < 1e-2, name       # bf16 gradients of the bf16 GEMMs
    g = compiled.graph
    assert all(v.dtype == "bf16" for n in g.nodes if n.op == "matmul" for v in n.inputs)
    assert [n.inputs[0].dtype for n in g.nodes if n.op in ("layer_norm", "softmax", "exp")] == ["f32"] * 3


@pytest.mark.gpu
def test_cuda_autocast_step_matches_eager_on_the_gpu():
    """eps 1e-3: Adam's normalised update turns the sign of a near-zero bf16 gradient (a zero-initialised
    bias's: rounding noise in either program) into a whole lr step, 5e-3 apart after three steps
    (measured); with eps above those gradients the update stays proportional to them."""
    model, reference, opt, ref_opt = twins(gpt_tiny().cuda(), torch.optim.AdamW, lr=1e-3, eps=1e-3)
    compiled, eager = nova.compile(autocast_step(model, opt, "cuda")), autocast_step(reference, ref_opt, "cuda")
    for i in range(3):
        batch = tokens(i, model.config.vocab_size, device="cuda")
        assert relative(compiled(*batch), eager(*batch)) < 1e-2
    gemms = [n for n in compiled.graph.nodes if n.op == "matmul"]
    assert gemms and all(v.dtype == "bf16" for n in gemms for v in n.inputs)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.dtype == torch.float32
        torch.testing.assert_close(p, q, rtol=1e-2, atol=1e-3)


# ====================================================================== ignore_index labels
class TinyLM(nn.Module):
    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.head(torch.tanh(self.embed(ids)))


def shifted_loss(model, ids, labels, ignore_index=-100, items=None):
    """Hugging Face's ``ForCausalLMLoss``: pad the labels by one ``ignore_index`` on the right, shift,
    flatten, cross-entropy ignoring those positions (mean, or sum / number of items)."""
    logits = model(ids).float()
    shift = F.pad(labels, (0, 1), value=ignore_index)[..., 1:].contiguous()
    reduction = "mean" if items is None else "sum"
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), shift.view(-1), ignore_index=ignore_index,
                           reduction=reduction)
    return loss if items is None else loss / items


def padded_labels(ignore_index=-100):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, 11, (3, 7), generator=g)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[1, 4:] = False
    keep[2, 2:] = False
    return ids, ids.masked_fill(~keep, ignore_index)


@pytest.mark.parametrize("ignore_index,items", [(-100, None), (0, None), (-100, 9.0)])
def test_padded_labels_with_ignore_index_match_eager(ignore_index, items):
    torch.manual_seed(0)
    ids, labels = padded_labels(ignore_index)
    compiled = assert_step_matches_eager(TinyLM().double(), lambda m, i, l: shifted_loss(m, i, l, ignore_index, items),
                                         ids, labels)
    assert not compiled.captured.stats.opaque
    nll = [n for n in compiled.graph.nodes if n.op == "nll_loss"]
    assert len(nll) == 1 and nll[0].attrs["ignore_index"] == ignore_index
    assert nll[0].attrs["reduction"] == ("mean" if items is None else "sum")


def test_a_batch_with_every_label_ignored_gives_eagers_nan_and_zero_grads():
    torch.manual_seed(0)
    model = TinyLM().double()
    reference = copy.deepcopy(model)
    ids = torch.randint(1, 11, (2, 5))
    labels = torch.full_like(ids, -100)
    compiled = nova.compile(forward_backward(model, shifted_loss))
    loss, expected = compiled(ids, labels), forward_backward(reference, shifted_loss)(ids, labels)
    assert torch.isnan(loss) and torch.isnan(expected)
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p.grad.isnan(), q.grad.isnan())
        torch.testing.assert_close(p.grad.nan_to_num(), q.grad.nan_to_num(), rtol=0, atol=0)


def test_constant_pad_with_crops_and_several_axes_matches_eager():
    torch.manual_seed(0)
    model = nn.Linear(6, 6).double()

    def loss_fn(model, x):
        y = F.pad(model(x), (2, -1, 1, 0), value=0.5)             # last axis: 2 before, crop 1; rows: 1 before
        return (y * torch.arange(y.numel(), dtype=y.dtype).view(y.shape)).sum()
    compiled = assert_step_matches_eager(model, loss_fn, torch.randn(4, 6, dtype=torch.float64))
    assert not compiled.captured.stats.opaque


def _clipped_step(model, road: str):
    """A step that reaches its parameters by ``road``: through the model, the optimizer's
    param_groups, a list built before compiling, or that list in an L2 penalty as well."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    prebuilt = list(model.parameters())

    def step(x):
        loss = (model(x) ** 2).mean() * 100
        if road == "penalty":
            loss = loss + 0.1 * sum(p.pow(2).sum() for p in prebuilt)
        loss.backward()
        params = {"model": model.parameters(), "param_groups": [p for g in opt.param_groups for p in g["params"]],
                  "list": prebuilt, "penalty": prebuilt}[road]
        torch.nn.utils.clip_grad_norm_(params, 0.01)
        opt.step()
        opt.zero_grad()
        return loss
    return step


@pytest.mark.parametrize("road", ["model", "param_groups", "list", "penalty"])
def test_parameters_reached_outside_the_model_are_the_traced_ones(road):
    """``clip_grad_norm_(opt.param_groups[0]["params"])`` or over a list made before nova.compile read
    the user's original objects: without resolving them to the traced leaves the clipping saw no
    gradients and vanished (parameters 28 apart after one step), and a penalty froze the weights."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    reference = copy.deepcopy(model)
    compiled, eager = nova.compile(_clipped_step(model, road)), _clipped_step(reference, road)
    for _ in range(3):
        x = torch.randn(4, 8)
        assert relative(compiled(x), eager(x)) < 1e-5
    for p, q in zip(model.parameters(), reference.parameters()):
        assert relative(p, q) < 1e-5
    assert any(n.op == "sqrt" for n in compiled.graph.nodes)        # the clipping's norm is in the program


def build_kernels(target: str, cache_dir=None, log=print) -> dict:
    """Compile the kernels of the GPU autocast test's step for ``target`` into the kernel cache
    (``NOVA_CACHE_DIR`` or ``cache_dir``): the step captured on the meta device (its autocast as on
    "cuda") and planned as ``nova.compile`` plans it for a CUDA device."""
    from nova.compiler import plan_cache
    from nova.compiler.precompile import precompile_planned
    from nova.frontend import capture
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    gpu, cache = get_target(target), KernelCache(cache_dir)
    with torch.device("meta"):              # built there: .to("meta") would untie the tied embedding
        model = gpt_tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    captured = capture(autocast_step(model, opt, "cuda"), tokens(0, model.config.vocab_size, device="meta"),
                       models=[model], optimizers=[opt])
    planned, _ = plan_cache.plan(captured.graph, gpu.name, "cuda", target_name=gpu.name)
    return precompile_planned(planned, gpu, cache, log)


if __name__ == "__main__":
    from gpu_build import main
    main(build_kernels)


# ====================================================================== tensors stored by the step
LOSSES = []


class _KeepsLastOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 2)
        self.last_output = None

    def forward(self, x):
        self.last_output = self.linear(x)
        return self.last_output


def test_a_step_storing_its_loss_in_a_python_list_is_one_line_and_the_list_is_left_as_it_was():
    """``losses.append(loss)`` inside the step would run once, at capture, with a placeholder of the
    trace: refused in one line naming the list, the list emptied of what the capture put there."""
    model = nn.Linear(4, 2)
    LOSSES.append(torch.tensor(1.0))

    def train_step(x):
        loss = model(x).square().mean()
        loss.backward()
        LOSSES.append(loss.detach())
        return loss
    with pytest.raises(nova.NovaUnsupportedError, match=r"stores a tensor it computes in global .*LOSSES\[1\]") as e:
        nova.compile(train_step)(torch.randn(3, 4))
    assert "\n" not in str(e.value)
    assert len(LOSSES) == 1 and not isinstance(LOSSES[0], torch._subclasses.functional_tensor.FunctionalTensor)
    LOSSES.clear()


def test_a_module_keeping_its_output_as_an_attribute_is_one_line():
    model = _KeepsLastOutput()
    with pytest.raises(nova.NovaUnsupportedError, match=r"stores a tensor it computes in model\.last_output"):
        nova.compile(forward_backward(model, lambda m, x: m(x).sum()))(torch.randn(3, 4))


def test_a_closure_dict_of_metrics_is_one_line():
    model = nn.Linear(4, 2)
    metrics = {}

    def train_step(x):
        loss = model(x).square().mean()
        metrics["loss"] = loss.detach()
        loss.backward()
        return loss
    with pytest.raises(nova.NovaUnsupportedError, match=r"closure metrics\['loss'\]"):
        nova.compile(train_step)(torch.randn(3, 4))
    assert metrics == {}


# ====================================================================== optimizer state read by the step
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_step_reading_its_optimizer_state_sees_what_eager_sees(optimizer):
    """A step that logs its optimizer's state (a momentum buffer after the update; Adam's second
    moment before it, once it exists): the values eager reads, and the user's ``opt.state`` holds only
    the parameters afterwards (the trace's tensors never enter it: ``state_dict()`` works)."""
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 5))]
    models.append(copy.deepcopy(models[0]))
    make = (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)) if optimizer == "sgd" else \
        (lambda p: torch.optim.Adam(p, lr=1e-2))
    opts = [make(m.parameters()) for m in models]

    def make_step(model, opt):
        weight = model[0].weight

        def step(x, y):
            before = opt.state[weight]["exp_avg_sq"].sum() if "exp_avg_sq" in opt.state.get(weight, {}) \
                else torch.zeros(())
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            key = "momentum_buffer" if optimizer == "sgd" else "exp_avg"
            return loss.detach(), before, opt.state[weight][key].norm()
        return step
    compiled, eager = nova.compile(make_step(models[0], opts[0])), make_step(models[1], opts[1])
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 5, (8,), generator=gen)
        for got, want in zip(compiled(x, y), eager(x, y)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    params = set(map(id, models[0].parameters()))
    assert all(id(p) in params for p in opts[0].state)
    assert opts[0].state_dict()["state"].keys() == opts[1].state_dict()["state"].keys()


# ====================================================================== shapes of real losses
class _LogitScale(nn.Module):
    """A classifier with a learned 0-d temperature (CLIP's logit scale)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 5)
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.fc(x) * self.scale


def _train_step(model, opt, loss_of):
    """``loss_of(model, *batch)``, its backward, the update and ``zero_grad``; returns the loss."""
    def step(*batch):
        loss = loss_of(model, *batch)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    return step


def _masked_loss(model, x, y):
    out = model(x)
    out = torch.where((y != 0)[:, None], out, torch.zeros_like(out))      # a mask over a Linear's output
    weights = torch.ones(x.shape[0])                                       # a constant's reduction
    per = F.cross_entropy(out, y, reduction="none")
    return (per * weights).sum() / weights.sum()


@pytest.mark.parametrize("backend", ["reference", "executor"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_zero_dim_parameter_a_masked_linear_and_a_constant_weight_train_like_eager(backend, optimizer):
    torch.manual_seed(0)
    models = [_LogitScale()]
    models.append(copy.deepcopy(models[0]))
    make = (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)) if optimizer == "sgd" else \
        (lambda p: torch.optim.AdamW(p, lr=1e-2))
    opts = [make(m.parameters()) for m in models]
    compiled = nova.compile(_train_step(models[0], opts[0], _masked_loss), backend=backend)
    eager = _train_step(models[1], opts[1], _masked_loss)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 5, (8,), generator=gen)
        torch.testing.assert_close(compiled(x, y), eager(x, y), rtol=1e-5, atol=1e-6)
    for p, q in zip(*(m.parameters() for m in models)):
        assert p.dtype == q.dtype
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


class _MixedPrecisionHead(nn.Module):
    """A float32 layer and a float64 one: the float64 update runs apart from the float32 batch."""

    def __init__(self):
        super().__init__()
        self.wa = nn.Parameter(torch.randn(6, 6) * 0.3)
        self.wb = nn.Parameter(torch.randn(6, 6, dtype=torch.float64) * 0.3)

    def forward(self, x, y):
        h = torch.tanh(F.linear(x, self.wa))
        return ((F.linear(h.double(), self.wb).float() - y) ** 2).mean()


@pytest.mark.parametrize("optimizer", ["sgd", "sgd-momentum", "adamw"])
def test_an_update_written_over_its_dying_gradient_reads_the_gradient_first(optimizer):
    """The float64 parameter's update is not donated (the backward's dX product still reads the old
    weight after it), so the memory plan puts its result over the dying gradient's bytes (an update
    reads its inputs element for element).  The executor's update once copied the old weight into
    the result first and so read a clobbered gradient: a silent wrong step from the first call."""
    torch.manual_seed(0)
    models = [_MixedPrecisionHead()]
    models.append(copy.deepcopy(models[0]))
    make = {"sgd": lambda p: torch.optim.SGD(p, lr=0.1),
            "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-2),
            "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2)}[optimizer]
    opts = [make(m.parameters()) for m in models]
    steps = [_train_step(m, o, lambda model, x, y: model(x, y)) for m, o in zip(models, opts)]
    compiled, eager = nova.compile(steps[0], backend="executor"), steps[1]
    gen = torch.Generator().manual_seed(3)
    tol = dict(rtol=1e-5, atol=1e-6) if optimizer == "adamw" else dict(rtol=1e-6, atol=1e-7)   # foreach rounding
    for _ in range(3):
        x, y = torch.randn(5, 6, generator=gen), torch.randn(5, 6, generator=gen)
        torch.testing.assert_close(compiled(x, y), eager(x, y), **tol)
        for p, q in zip(*(m.parameters() for m in models)):
            torch.testing.assert_close(p, q, **tol)


def test_two_updates_in_one_call_run_on_the_executor_like_eager():
    """Two forward/backward/update rounds in one compiled call: the second round reads the first
    update's parameters, so the two updates are two multi-tensor batches."""
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 5))]
    models.append(copy.deepcopy(models[0]))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]

    def make_step(model, opt):
        def step(x, y):
            for _ in range(2):
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
            return loss.detach()
        return step
    compiled, eager = nova.compile(make_step(models[0], opts[0]), backend="executor"), make_step(models[1], opts[1])
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 5, (8,), generator=gen)
        torch.testing.assert_close(compiled(x, y), eager(x, y), rtol=1e-5, atol=1e-6)
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_cpu_autocast_layer_norm_runs_on_the_executor():
    """bf16 autocast on the CPU through the planned program: the LayerNorm's backward gets a bf16
    gradient and f32 statistics (ATen's kernel takes one dtype: the widening reference runs it); the
    losses within bf16 rounding of eager autocast's, the executor's within 1e-6 of the interpreter's."""
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 5))
    models = [copy.deepcopy(base) for _ in range(3)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]

    def autocast_loss(model, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.cross_entropy(model(x), y)
    executor = nova.compile(_train_step(models[0], opts[0], autocast_loss), backend="executor")
    reference = nova.compile(_train_step(models[1], opts[1], autocast_loss), backend="reference")
    eager = _train_step(models[2], opts[2], autocast_loss)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(8, 16, generator=gen), torch.randint(0, 5, (8,), generator=gen)
        got, spec, want = executor(x, y), reference(x, y), eager(x, y)
        torch.testing.assert_close(got, spec, rtol=1e-6, atol=1e-6)
        assert abs(got.item() - want.item()) < 2e-3 * abs(want.item())


@pytest.mark.parametrize("backend", ["reference", "executor"])
def test_left_padding_masks_whole_rows_and_they_give_zero_like_eager(backend):
    """Hugging Face's causal & padding mask over a left-padded batch masks every key of the padded
    queries: eager's SDPA returns 0 there and no gradient (a softmax over a floored bias would average V
    and send gradients into q, k and the projections)."""
    torch.manual_seed(0)
    models = [MaskedAttention(dim=8, heads=2)]
    models.append(copy.deepcopy(models[0]))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]

    def make_step(model, opt):
        def step(x, padding_mask):
            out = model(x, padding_mask)
            loss = out.square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.detach(), out.detach()
        return step
    compiled = nova.compile(make_step(models[0], opts[0]), backend=backend)
    eager = make_step(models[1], opts[1])
    gen = torch.Generator().manual_seed(1)
    padding = torch.ones(3, 6, dtype=torch.long)
    padding[0, :2] = 0                                   # left padding: queries 0 and 1 of sequence 0 see no key
    padding[2, :4] = 0
    for _ in range(3):
        x = torch.randn(3, 6, 8, generator=gen)
        (loss, out), (want_loss, want_out) = compiled(x, padding), eager(x, padding)
        torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-7)
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    graph = compiled.graph                               # the attention ops mask those rows themselves
    attention = [n for n in graph.nodes if n.op == "attention"]
    backward = [n for n in graph.nodes if n.op == "attention_backward"]
    assert attention and backward and all(len(n.inputs) == 4 for n in attention)
    assert not [n for n in graph.nodes if n.op == "where" and any(
        x.producer in attention for x in n.inputs)], "a select of the attention's output"
    assert not [n for n in backward if n.inputs[0].producer is not None and n.inputs[0].producer.op == "where"]


class _Queue(nn.Module):
    """MoCo's queue of keys, rebuilt with torch.cat in forward."""

    def __init__(self):
        super().__init__()
        self.key = nn.Linear(8, 5)
        self.register_buffer("queue", torch.zeros(12, 5))

    def forward(self, x):
        k = self.key(x)
        logits = k @ self.queue.t()
        with torch.no_grad():
            self.queue = torch.cat([k.detach(), self.queue[:-k.shape[0]]], 0)
        return logits.square().mean() + k.square().mean()


def test_a_buffer_assigned_anew_in_forward_is_one_line_and_the_buffer_is_kept():
    model = _Queue()
    queue = model.queue
    with pytest.raises(nova.NovaUnsupportedError, match=r"assigns a new tensor to model.queue") as e:
        nova.compile(forward_backward(model, lambda m, x: m(x)))(torch.randn(4, 8))
    assert "\n" not in str(e.value) and model.queue is queue


def test_a_dataclass_batch_is_one_line_naming_the_argument():
    import dataclasses

    @dataclasses.dataclass
    class Batch:
        x: torch.Tensor
    model = nn.Linear(4, 2)
    with pytest.raises(nova.NovaUnsupportedError, match=r"inside \w+ \(Batch\), an argument torch's pytree does not"):
        nova.compile(forward_backward(model, lambda m, batch: m(batch.x).sum()))(Batch(torch.randn(3, 4)))


def _bag_loss(model, ids, y):
    bag, head = model
    return F.cross_entropy(head(bag(ids)), y)


@pytest.mark.parametrize("backend", ["reference", "executor"])
def test_an_embedding_bag_trains_like_eager(backend):
    """``nn.EmbeddingBag(mode="mean")`` runs on ATen: its kernel leaves the max indices empty outside
    max mode where its meta function states their shape (the executor copied the empty result)."""
    torch.manual_seed(0)
    models = [nn.ModuleList([nn.EmbeddingBag(30, 16, mode="mean"), nn.Linear(16, 5)])]
    models.append(copy.deepcopy(models[0]))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]
    compiled = nova.compile(_train_step(models[0], opts[0], _bag_loss), backend=backend)
    eager = _train_step(models[1], opts[1], _bag_loss)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        ids, y = torch.randint(0, 30, (4, 6), generator=gen), torch.randint(0, 5, (4,), generator=gen)
        torch.testing.assert_close(compiled(ids, y), eager(ids, y), rtol=1e-5, atol=1e-6)
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["reference", "executor"])
def test_a_model_cast_to_float64_mid_training_keeps_its_float32_momentum_like_eager(backend):
    """``model.double()`` between calls with SGD momentum: eager updates the float32 momentum buffer
    in place (it stays float32, and the float64 step reads its rounded value).  The traced update
    typed the buffer as its parameter and the capture raised an internal IR error."""
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(8, 4), nn.Tanh(), nn.Linear(4, 3))]
    models.append(copy.deepcopy(models[0]))
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in models]
    steps = [_train_step(m, o, lambda model, x, y: F.cross_entropy(model(x.to(next(model.parameters()).dtype)), y))
             for m, o in zip(models, opts)]
    compiled, eager = nova.compile(steps[0], backend=backend), steps[1]
    gen = torch.Generator().manual_seed(1)
    for i in range(4):
        if i == 2:
            for m in models:
                m.double()
        x, y = torch.randn(6, 8, generator=gen), torch.randint(0, 3, (6,), generator=gen)
        torch.testing.assert_close(compiled(x, y), eager(x, y), rtol=1e-6, atol=1e-7)
    for (p, q), o in zip(zip(*(m.parameters() for m in models)), [opts[0]] * 6):
        assert p.dtype == q.dtype == torch.float64
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
        assert o.state[p]["momentum_buffer"].dtype == torch.float32


@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.Adam])
@pytest.mark.parametrize("backend", ["reference", "executor"])
def test_a_model_cast_to_float64_after_adams_first_step_is_one_line_as_eager_refuses(backend, optimizer):
    """``model.double()`` between calls with Adam or AdamW: the moments stay float32 and eager's
    update refuses them (``lerp_`` of a float32 moment towards a float64 gradient).  The executor
    trained on through its mixed-precision kernel; now the call is refused in one line naming the
    parameter and the moment, before anything is written."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.Tanh(), nn.Linear(4, 3))
    opt = optimizer(model.parameters(), lr=0.1)
    step = _train_step(model, opt, lambda m, x, y: F.cross_entropy(m(x.to(next(m.parameters()).dtype)), y))
    compiled = nova.compile(step, backend=backend)
    x, y = torch.randn(6, 8), torch.randint(0, 3, (6,))
    compiled(x, y)
    model.double()
    with pytest.raises(RuntimeError, match="expected dtype"):
        copy.deepcopy(step)(x, y)           # eager: the same step refuses
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(nova.NovaUnsupportedError, match=r"^optimizer .* parameter 0\.weight is torch\.float64 but "
                                                         r"its exp_avg is torch\.float32") as info:
        compiled(x, y)
    assert "\n" not in str(info.value)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


@pytest.mark.parametrize("backend", ["reference", "executor"])
def test_a_frozen_layer_cast_after_adams_first_step_trains_like_eager(backend):
    """A layer frozen and cast to float64 after AdamW's first step keeps its float32 moments; eager's
    update skips it (no gradient), so the moments' dtype is no reason to refuse the step."""
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(8, 4), nn.Tanh(), nn.Linear(4, 3))]
    models.append(copy.deepcopy(models[0]))
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1) for m in models]

    def head(m, x):
        return m[2](m[1](m[0](x)).to(m[2].weight.dtype)).float()
    steps = [_train_step(m, o, lambda model, x, y: F.cross_entropy(head(model, x), y)) for m, o in zip(models, opts)]
    compiled, eager = nova.compile(steps[0], backend=backend), steps[1]
    x, y = torch.randn(6, 8), torch.randint(0, 3, (6,))
    torch.testing.assert_close(compiled(x, y), eager(x, y))
    for m in models:
        m[2].requires_grad_(False)
        m[2].double()
    for _ in range(2):
        torch.testing.assert_close(compiled(x, y), eager(x, y), rtol=1e-4, atol=1e-5)
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)          # float32 rounding of 3 AdamW steps


@pytest.mark.parametrize("backend", ["reference", "executor"])
def test_parameters_tied_through_data_between_calls_are_one_line_and_untouched(backend):
    """``b.weight.data = a.weight.data`` between calls: two parameters the step updates on one
    storage.  Eager applies both updates to the shared memory; a program computes each from what it
    read (the reference engine's last write won: a silent wrong step).  Refused in one line on the
    call that sees the tie, before anything is written."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 6, bias=False), nn.Tanh(), nn.Linear(6, 6, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = nova.compile(_train_step(model, opt, lambda m, x, y: ((m(x) - y) ** 2).mean()), backend=backend)
    x, y = torch.randn(5, 6), torch.randn(5, 6)
    compiled(x, y)
    model[2].weight.data = model[0].weight.data
    before = model[0].weight.detach().clone()
    with pytest.raises(nova.NovaUnsupportedError, match=r"^parameters 0\.weight and 2\.weight, both updated by the "
                                                         r"step, share one storage") as info:
        compiled(x, y)
    assert "\n" not in str(info.value)
    assert torch.equal(model[0].weight, before)
