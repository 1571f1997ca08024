"""Hugging Face causal LMs (random init from tiny configs, nothing downloaded) train through
``nova.compile`` like eager: ``use_cache=False``, with and without a padded ``attention_mask``, the
``labels=`` loss (shift, pad with -100, cross-entropy with ``ignore_index``).  Loss and every
gradient after one step within 1e-4 of eager (float32, CPU reference engine), parameters after
three optimizer steps; the attention stays on the IR ``attention`` op when the mask transformers
builds is the constant causal one, and for a padded batch too: the causal factor of transformers'
``causal & padding`` mask folds into ``causal`` and the padding becomes the op's ``[B, 1, 1, T]`` bias."""
import copy

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e .[dev])")

import nova  # noqa: E402
from nova.frontend.tracing import compiling  # noqa: E402

VOCAB, T = 48, 8


def gpt2():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config)


def llama():
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    return transformers.LlamaForCausalLM(config)


def qwen2():
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16)
    return transformers.Qwen2ForCausalLM(config)


MODELS = {"gpt2": gpt2, "llama": llama, "qwen2": qwen2}


def batch(seed: int, padded: bool):
    """Token ids, a right-padded attention mask (row 1 keeps 5 tokens, row 2 keeps 3) and labels
    with the padded positions at -100."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, T), generator=g)
    mask = torch.ones(3, T, dtype=torch.long)
    if padded:
        mask[1, 5:] = 0
        mask[2, 3:] = 0
    return ids, mask, ids.masked_fill(mask == 0, -100)


def make_model(which: str):
    torch.manual_seed(0)
    model = MODELS[which]()
    model.train()
    return model, copy.deepcopy(model)


def forward_backward(model, padded: bool):
    def step(ids, mask, labels):
        out = model(input_ids=ids, attention_mask=mask if padded else None, labels=labels, use_cache=False)
        out.loss.backward()
        return out.loss
    return step


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "padded"])
@pytest.mark.parametrize("which,backend", [("gpt2", "reference"), ("llama", "reference"), ("qwen2", "reference"),
                                           ("gpt2", "executor"), ("llama", "executor")])
def test_loss_and_every_gradient_match_eager(which, backend, padded):
    model, reference = make_model(which)
    compiled = nova.compile(forward_backward(model, padded), backend=backend)
    ids, mask, labels = batch(1, padded)
    loss = compiled(ids, mask, labels)
    expected = forward_backward(reference, padded)(ids, mask, labels)
    assert relative(loss, expected) < 1e-4
    names = [n for n, _ in reference.named_parameters()]
    for name, p, q in zip(names, model.parameters(), reference.parameters()):
        assert p.grad is not None and relative(p.grad, q.grad) < 1e-4, name
    ops = compiled.graph.op_counts()
    assert not compiled.captured.stats.opaque, compiled.captured.stats.opaque
    layers = model.config.num_hidden_layers
    assert ops["attention"] == ops["attention_backward"] == layers
    nodes = [n for n in compiled.graph.nodes if n.op in ("attention", "attention_backward")]
    assert all(n.attrs["causal"] for n in nodes)
    if padded:        # causal & padding: the causal factor folded, the padding the [B, 1, 1, T] bias operand
        biases = [n.inputs[3] if n.op == "attention" else n.inputs[6] for n in nodes]
        assert {(tuple(b.shape), b.dtype) for b in biases} == {((ids.shape[0], 1, 1, T), "f32")}
    else:             # transformers' mask from arange position ids is the causal one: folded
        assert {len(n.inputs) for n in nodes} == {3, 6}
    if backend == "executor":   # every kernel of the plan is Nova's: position ids, the loss's label shift,
        # the padding mask's gather, RoPE's tables and the rotate-half gradients included (but the attention:
        # heads of 8 are below Nova's attention kernels; the 42M models' are, tests/test_cli_train.py)
        report = compiled.explain("h200", json=True)
        assert not [(k["name"], k["reason"]) for k in report["kernels"] if k["kernel"] == "aten"
                    and k["name"] not in ("attention", "attention_backward")]


# GPT-2 with SGD: its attention's key bias has a gradient that is zero up to rounding (softmax is
# shift-invariant), which Adam's normalisation would blow up to lr-sized noise on either side.
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "padded"])
@pytest.mark.parametrize("which,optimizer", [("gpt2", "sgd"), ("llama", "adamw")])
def test_three_optimizer_steps_match_eager(which, optimizer, padded):
    model, reference = make_model(which)
    initial = [p.detach().clone() for p in reference.parameters()]

    def train_step(model, opt):
        def step(ids, mask, labels):
            out = model(input_ids=ids, attention_mask=mask if padded else None, labels=labels, use_cache=False)
            out.loss.backward()
            opt.step()
            opt.zero_grad()
            return out.loss
        return step
    def make(params):
        if optimizer == "sgd":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9)
        return torch.optim.AdamW(params, lr=1e-2)
    opt, ref_opt = make(model.parameters()), make(reference.parameters())
    compiled, eager = nova.compile(train_step(model, opt)), train_step(reference, ref_opt)
    for seed in range(3):
        data = batch(seed, padded)
        assert relative(compiled(*data), eager(*data)) < 1e-4
    for p, q, p0 in zip(model.parameters(), reference.parameters(), initial):
        assert p.grad is None
        assert relative(p - p0, q - p0) < 1e-3          # the update itself, not just the weights
        torch.testing.assert_close(p, q, rtol=1e-4, atol=ELEMENT_ATOL[optimizer])


# Per element after three steps: Adam normalises each element's gradient, so an element whose gradient
# is at the rounding level of its tensor's (Llama's layer-0 k_proj[9, 3] on the padded batch: 3e-8 where
# the tensor's rms is 2.5e-4) takes an lr-sized step of rounding noise; 1e-3 of lr bounds that, SGD's
# steps stay proportional to the gradient.
ELEMENT_ATOL = {"sgd": 1e-6, "adamw": 1e-5}


def test_capture_looks_like_compiling_to_libraries_and_restores_the_flag():
    seen = []
    model, _ = make_model("llama")

    def step(ids):
        seen.append(torch.compiler.is_compiling())
        out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        return out.loss
    compiled = nova.compile(step)
    compiled(batch(0, False)[0])
    assert seen == [True] and not torch.compiler.is_compiling()

    def failing(ids):
        raise ValueError("the user's own error")
    with pytest.raises(Exception):
        nova.compile(failing)(batch(0, False)[0])
    assert not torch.compiler.is_compiling()
    with compiling():
        with compiling():
            assert torch.compiler.is_compiling()
        assert torch.compiler.is_compiling()
    assert not torch.compiler.is_compiling()


def test_padded_llama_under_cpu_autocast_matches_eager():
    model, reference = make_model("llama")

    def step_of(model):
        def step(ids, mask, labels):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
            out.loss.backward()
            return out.loss
        return step
    data = batch(2, True)
    compiled = nova.compile(step_of(model))
    assert relative(compiled(*data), step_of(reference)(*data)) < 1e-3
    for (name, p), q in zip(reference.named_parameters(), model.parameters()):
        assert relative(q.grad, p.grad) < 5e-2, name                 # bf16 gradients
    projections = [n for n in compiled.graph.nodes if n.op == "matmul" and n.inputs[0].shape[-1] == 32]
    assert projections and all(v.dtype == "bf16" for n in projections for v in n.inputs)


def test_gradient_checkpointing_trains_like_eager():
    """``gradient_checkpointing_enable()`` installs a forward hook on the embeddings
    (``enable_input_require_grads``) whose whole effect is on the tensor it sees: traced, not refused;
    three SGD steps match eager (checkpointing recomputes the same values)."""
    torch.manual_seed(0)
    model = llama().train()
    model.gradient_checkpointing_enable()
    twin = copy.deepcopy(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, twin)]

    def make_step(m, opt):
        def step(ids):
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss.detach()
        return step
    compiled, eager = nova.compile(make_step(model, opts[0])), make_step(twin, opts[1])
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        ids = torch.randint(0, VOCAB, (2, T), generator=gen)
        torch.testing.assert_close(compiled(ids), eager(ids), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
