"""The grouped-query pass (``nova/passes/grouped_query.py``): attention reading K/V head repeats
(head h reads K/V head h // G) and autograd's group sums of their gradients become attention ops at
the K/V heads; everything else is left alone.  Hand-built graphs against the interpreter, then whole
Llama steps (the built-in one and Hugging Face's) through the CPU program against eager."""
import copy
import math

import pytest
import torch

from nova.ir import Graph, TensorType, interpreter, structural_hash, verify
from nova.passes.grouped_query import KV_INPUTS as KV_OPS, find, head_repeat, read_kv_heads

pytestmark = pytest.mark.usefixtures("one_torch_thread")

B, H, HKV, T, D = 2, 6, 2, 5, 8          # G = 3 != Hkv: a tile and a repeat differ in every shape
G = H // HKV
SCALE = 1 / math.sqrt(D)


def f32(*shape):
    return TensorType(shape, "f32")


def repeat(g: Graph, x, order="interleave"):
    """torch's ``repeat_kv`` (order interleave: head h reads h // G) or a tile (head h reads h % Hkv)."""
    if order == "interleave":
        x = g.op("expand", g.op("reshape", x, shape=(B, HKV, 1, T, D)), shape=(B, HKV, G, T, D))
    else:
        x = g.op("expand", g.op("reshape", x, shape=(B, 1, HKV, T, D)), shape=(B, G, HKV, T, D))
    return g.op("reshape", x, shape=(B, H, T, D))


def group_sum(g: Graph, grad, order="interleave", keepdim=True):
    """autograd's backward of ``repeat``: the repeated heads' gradients summed back."""
    split, axis = ((B, HKV, G, T, D), 2) if order == "interleave" else ((B, G, HKV, T, D), 1)
    total = g.op("sum", g.op("reshape", grad, shape=split), axes=(axis,), keepdim=keepdim)
    return g.op("reshape", total, shape=(B, HKV, T, D)) if keepdim else total


def gqa_step(*, order="interleave", sum_order=None, keepdim=True, bias_shape=None, backward=True,
             k_also_read=False, dk_also_output=False, same_kv=False, v_heads=HKV):
    """out, dq, dk, dv of grouped-query attention written the way a Llama capture records it."""
    g = Graph("gqa")
    q = g.input(f32(B, H, T, D), "q")
    k = g.input(f32(B, HKV, T, D), "k")
    v = g.input(f32(B, v_heads, T, D), "v")
    dout = g.input(f32(B, H, T, D), "dout")
    extra = [g.input(f32(*bias_shape), "bias")] if bias_shape else []
    kr = repeat(g, k, order)
    vr = kr if same_kv else repeat(g, v, order) if v_heads == HKV else v
    out, lse = g.op("attention", q, kr, vr, *extra, scale=SCALE, causal=True)
    g.output(out, "out")
    if k_also_read:
        g.output(g.op("mul", kr, kr), "kr_squared")
    if backward:
        dq, dkr, dvr = g.op("attention_backward", dout, q, kr, vr, out, lse, *extra, scale=SCALE, causal=True)
        g.output(dq, "dq")
        g.output(group_sum(g, dkr, sum_order or order, keepdim), "dk")
        if v_heads == HKV and not same_kv:
            g.output(group_sum(g, dvr, sum_order or order, keepdim), "dv")
        if dk_also_output:
            g.output(dkr, "dk_per_query_head")
    verify(g)
    return g


def random_inputs(g: Graph, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(i.value.shape, generator=gen, dtype=torch.float64).float() for i in g.inputs]


def kv_heads_read(g: Graph):
    """The K/V head count of every attention op of ``g``."""
    at = {"attention": 1, "attention_backward": 2}
    return [n.inputs[at[n.op]].shape[1] for n in g.nodes if n.op in at]


# ------------------------------------------------------------------ the rewrite
@pytest.mark.parametrize("keepdim", [True, False], ids=["keepdim", "dropdim"])
@pytest.mark.parametrize("bias_shape", [None, (B, 1, 1, T), (1, H, T, T)], ids=["no-bias", "padding", "per-head"])
def test_repeats_and_group_sums_become_attention_at_the_kv_heads(keepdim, bias_shape):
    """The rewritten graph computes the same out, dq, dk, dv with attention ops reading K/V of Hkv
    heads, and neither a repeat (expand) nor a group sum is left.  A bias is on the query heads'
    scores, per head or not, and stays as it is."""
    g = gqa_step(keepdim=keepdim, bias_shape=bias_shape)
    before = structural_hash(g)
    new = read_kv_heads(g)
    verify(new)
    assert structural_hash(g) == before and new is not g
    assert kv_heads_read(g) == [H, H] and kv_heads_read(new) == [HKV, HKV]
    ops = new.op_counts()
    assert "expand" not in ops and "sum" not in ops and "reshape" not in ops, ops
    inputs = random_inputs(g)
    if bias_shape:      # a padding-like bias: some keys masked out (large negative), others shifted
        inputs[4] = torch.where(inputs[4] > 1.0, torch.full_like(inputs[4], -1e9), inputs[4])
    for want, got in zip(interpreter.run(g, inputs), interpreter.run(new, inputs)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def autocast_gqa_step():
    """Autocast's form (the built-in Llama under ``torch.autocast``): FP32 K (after RoPE) repeated, then
    cast to the bf16 of Q and V by the attention; its gradient cast back to FP32 before the group sum."""
    bf16 = lambda *shape: TensorType(shape, "bf16")  # noqa: E731
    g = Graph("gqa-autocast")
    q, k, v = g.input(bf16(B, H, T, D), "q"), g.input(f32(B, HKV, T, D), "k"), g.input(bf16(B, HKV, T, D), "v")
    dout = g.input(bf16(B, H, T, D), "dout")
    kr, vr = g.op("cast", repeat(g, k), dtype="bf16"), repeat(g, v)
    out, lse = g.op("attention", q, kr, vr, scale=SCALE, causal=True)
    dq, dkr, dvr = g.op("attention_backward", dout, q, kr, vr, out, lse, scale=SCALE, causal=True)
    for value, name in ((out, "out"), (dq, "dq"), (group_sum(g, g.op("cast", dkr, dtype="f32")), "dk"),
                        (group_sum(g, dvr), "dv")):
        g.output(value, name)
    verify(g)
    return g


def test_autocasts_cast_repeat_is_read_at_the_kv_heads():
    """A cast after the repeat commutes with it: the rewrite casts the un-repeated K and the attention
    reads it at its heads, its dK cast back for the group sum; out and dq as before, dK and dV within
    one bf16 rounding (the kernel rounds the group's sum once; eager rounds each head's gradient,
    then adds them)."""
    g = autocast_gqa_step()
    new = read_kv_heads(g)
    verify(new)
    assert kv_heads_read(new) == [HKV, HKV]
    ops = new.op_counts()
    assert "expand" not in ops and "sum" not in ops and ops["cast"] == 2, ops
    casts = [n for n in new.nodes if n.op == "cast"]
    assert [tuple(c.outputs[0].shape) for c in casts] == [(B, HKV, T, D)] * 2      # K cast at its own heads
    inputs = [x.to(i.value.type.dtype == "bf16" and torch.bfloat16 or torch.float32)
              for x, i in zip(random_inputs(g, seed=2), g.inputs)]
    want, got = interpreter.run(g, inputs), interpreter.run(new, inputs)
    for name, w, x in zip(["out", "dq", "dk", "dv"], want, got):
        assert x.dtype == w.dtype, name
        tol = 2 ** -8 if name in ("dk", "dv") else 1e-6
        torch.testing.assert_close(x.float(), w.float(), rtol=tol, atol=tol * w.float().abs().max().item())


def test_a_forward_alone_and_dead_gradients_are_rewritten_too():
    forward = read_kv_heads(gqa_step(backward=False))
    assert kv_heads_read(forward) == [HKV] and "expand" not in forward.op_counts()
    g = gqa_step()                         # dV dead: only dq and dk are outputs
    g.outputs = [o for o in g.outputs if o.name != "dv"]
    new = read_kv_heads(g)
    assert kv_heads_read(new) == [HKV, HKV] and "sum" not in new.op_counts()
    inputs = random_inputs(g, seed=1)
    for want, got in zip(interpreter.run(g, inputs), interpreter.run(new, inputs)):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_the_repeat_order_is_torchs_repeat_kv():
    """What the pass calls a repeat is ``repeat_interleave(G, dim=1)`` (Hugging Face's ``repeat_kv``);
    the tile is ``repeat(1, G, 1, 1)``."""
    g = Graph("orders")
    k = g.input(f32(B, HKV, T, D), "k")
    g.output(repeat(g, k, "interleave"), "interleave")
    g.output(repeat(g, k, "tile"), "tile")
    x = torch.randn(B, HKV, T, D)
    interleave, tile = interpreter.run(g, [x])
    assert torch.equal(interleave, x.repeat_interleave(G, dim=1))
    assert torch.equal(tile, x.repeat(1, G, 1, 1)) and not torch.equal(tile, interleave)
    assert head_repeat(g.outputs[0].value).groups == G and head_repeat(g.outputs[1].value) is None


# ------------------------------------------------------------------ left alone
@pytest.mark.parametrize("case", [
    dict(order="tile"),                           # head h reads h % Hkv: another map
    dict(sum_order="tile"),                       # the gradient summed in another grouping
    dict(k_also_read=True),                       # the repeated K is read by something else
    dict(dk_also_output=True),                    # the per-query-head dK is wanted too
    dict(same_kv=True),                           # one repeat as both K and V
    dict(v_heads=H),                              # V has every query head (no repeat): K alone cannot shrink
], ids=["tile", "tile-sum", "k-read-elsewhere", "dk-per-head-output", "k-is-v", "v-not-repeated"])
def test_anything_but_the_exact_pattern_is_left_alone(case):
    g = gqa_step(**case)
    assert find(g) == [] and read_kv_heads(g) is g


def test_a_single_group_is_no_repeat():
    g = Graph("g1")
    k = g.input(f32(B, HKV, T, D), "k")
    x = g.op("expand", g.op("reshape", k, shape=(B, HKV, 1, T, D)), shape=(B, HKV, 1, T, D))
    assert head_repeat(g.op("reshape", x, shape=(B, HKV, T, D))) is None


# ------------------------------------------------------------------ whole steps on the CPU program
def _relative(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _planned_graph(compiled):
    return compiled._last.engine.program.graph


def test_llama_tiny_program_matches_eager_loss_and_every_gradient():
    import nova
    from nova.models import Llama
    model = Llama("tiny", seed=0)
    twin = copy.deepcopy(model)
    cfg = model.config
    assert cfg.n_kv_head < cfg.n_head

    def step(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        return loss
    compiled = nova.compile(step, backend="executor")
    gen = torch.Generator().manual_seed(2)
    idx, targets = (torch.randint(0, cfg.vocab_size, (2, 16), generator=gen) for _ in range(2))
    loss = compiled(idx, targets)
    ref = twin(idx, targets)
    ref.backward()
    assert _relative(loss, ref) < 1e-5
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert p.grad is not None and _relative(p.grad, q.grad) < 1e-4, name
    planned = _planned_graph(compiled)
    assert kv_heads_read(planned) == [cfg.n_kv_head] * (2 * cfg.n_layer)
    assert "expand" not in planned.op_counts() and "sum" not in planned.op_counts()


def test_llama_tiny_autocast_step_reads_kv_heads_and_computes_the_captured_step():
    """Under bf16 autocast (the attention casts the FP32 K that RoPE returns): every attention op reads
    the K/V heads, no group sum is left on ATen, and the CPU program of the plan computes the captured
    step's loss, gradients and updates (the interpreter on the graph as captured; bf16 GEMMs, so to 1%)."""
    from nova.compiler.executor import build
    from nova.compiler.explain import training_step
    from nova.frontend import capture
    from nova.models import TrainRecipe
    from nova.passes import pipeline
    from step_parity import captured_step_inputs
    fn, args, model, opt, _ = training_step("llama-tiny", 2, 16, recipe=TrainRecipe(autocast="bf16"))
    captured = capture(fn, args, models=[model], optimizers=[opt], name="llama-tiny-autocast").graph
    assert "expand" in captured.op_counts()
    planned = pipeline(captured, "h200")
    cfg = model.config
    assert kv_heads_read(planned.graph) == [cfg.n_kv_head] * (2 * cfg.n_layer)
    aten = [g.reason for g in planned.groups if g.kernel == "aten" and g.nodes[0].op not in KV_OPS]
    assert not aten, aten                       # (the tiny model's head dimension 8 keeps attention on ATen)
    xs = captured_step_inputs(captured, 5, int_high=cfg.vocab_size)
    ref = interpreter.run(captured, [x.clone() for x in xs])
    got = build(planned, "cpu", poison=True).run([x.clone() for x in xs])
    for o, a, b in zip(captured.outputs, got, ref):
        assert not torch.isnan(a.float()).any(), o.name
        a, b = a.double(), b.double()
        assert (a - b).norm() <= 1e-2 * b.norm() + 1e-6, o.name


@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "padded"])
def test_hugging_face_llama_program_matches_eager_loss_and_every_gradient(padded):
    """transformers' ``repeat_kv`` before SDPA, with and without the padding bias."""
    pytest.importorskip("transformers")
    import nova
    from test_frontend_hf import batch, forward_backward, make_model, relative
    model, reference = make_model("llama")
    compiled = nova.compile(forward_backward(model, padded), backend="executor")
    data = batch(1, padded)
    loss = compiled(*data)
    expected = forward_backward(reference, padded)(*data)
    assert relative(loss, expected) < 1e-4
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.grad is not None and relative(p.grad, q.grad) < 1e-4, name
    cfg = model.config
    assert cfg.num_key_value_heads < cfg.num_attention_heads
    assert kv_heads_read(_planned_graph(compiled)) == [cfg.num_key_value_heads] * (2 * cfg.num_hidden_layers)


def _explain_llama_tiny(capsys) -> dict:
    import json
    from nova.cli.config import main as config_main
    assert config_main(["explain", "train", "llama-tiny", "--batch", "2", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_llama_plan_has_no_repeat_copies_or_group_sums_on_aten(capsys, monkeypatch):
    """``explain train llama-tiny``: no ATen reshape copy or sum of the K/V repeat (llama.py's
    ``expand ... reshape`` lines) is left, and the predicted step is shorter than without the pass."""
    import importlib
    import inspect
    from nova.models import llama
    pipeline_module = importlib.import_module("nova.passes.pipeline")     # the module, not its function
    lines = [i for i, text in enumerate(inspect.getsource(llama).splitlines(), 1) if ".expand(" in text]
    repeat_lines = {f"llama.py:{i}" for i in lines}
    assert len(repeat_lines) == 2
    report = _explain_llama_tiny(capsys)
    aten = [k for k in report["kernels"] if k["kernel"] == "aten"]
    assert not [k for k in aten if k["name"] == "sum"], aten
    assert not [k for k in aten if any(line in k["origin"] for line in repeat_lines)], aten
    assert report["passes"]["grouped_query"] < report["passes"]["rms_norm"]
    monkeypatch.setattr(pipeline_module, "read_kv_heads", lambda g: g)
    without = _explain_llama_tiny(capsys)
    assert [k for k in without["kernels"] if k["kernel"] == "aten" and k["name"] == "sum"]
    assert report["prediction"]["step_ms"] < without["prediction"]["step_ms"]
    assert report["prediction"]["launches"] < without["prediction"]["launches"]


# ------------------------------------------------------------------ on the GPU: Nova's grouped-query kernels
GPU_CONFIG = dict(vocab_size=96, dim=256, n_layer=2, n_head=4, n_kv_head=2, hidden_dim=256, max_seq_len=128)
GPU_BATCH = 2                     # head dimension 64: the attention runs on Nova's kernels with kv_heads = 2


def gpu_llama_step(device="cuda"):
    """A Llama whose attention Nova's kernels cover (head dimension 64, 2 K/V heads for 4 query heads):
    (its forward + backward step, example arguments, the model)."""
    from nova.models.llama import Llama, LlamaConfig
    model = Llama(LlamaConfig(**GPU_CONFIG), seed=0).to(device)

    def step(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        return loss
    idx = torch.zeros(GPU_BATCH, GPU_CONFIG["max_seq_len"], dtype=torch.long, device=device)
    return step, (idx, idx.clone()), model


@pytest.mark.gpu
def test_gpu_llama_step_runs_grouped_query_attention_on_nova_kernels():
    """The compiled step against a float64 eager twin: the loss and every gradient within TF32's bounds
    (tests/test_attention_gpu.py's 1e-2 for attention's gradients; a wrong head map is off by O(1)),
    with every attention op on Nova's kernels at the K/V heads.  Kernels: ``python
    tests/test_grouped_query.py --target h200`` on a host precompiles them."""
    import nova
    torch.backends.cuda.matmul.allow_tf32 = False
    step, (idx, _), model = gpu_llama_step()
    twin = copy.deepcopy(model).double()
    compiled = nova.compile(step)
    gen = torch.Generator(device="cuda").manual_seed(4)
    vocab = GPU_CONFIG["vocab_size"]
    idx, targets = (torch.randint(0, vocab, idx.shape, device="cuda", generator=gen) for _ in range(2))
    loss = compiled(idx, targets)
    ref = twin(idx, targets)
    ref.backward()
    assert _relative(loss.double(), ref) < 2e-3
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert p.grad is not None and not p.grad.isnan().any(), name
        assert _relative(p.grad.double(), q.grad) < 2e-2, name
    program = compiled._last.engine.program
    assert kv_heads_read(program.graph) == [GPU_CONFIG["n_kv_head"]] * (2 * GPU_CONFIG["n_layer"])
    launched = [k for launch in program.launches for k in launch.kernels if k.attention is not None]
    assert len(launched) == 2 * GPU_CONFIG["n_layer"], program.stats["fallbacks"]


if __name__ == "__main__":
    import argparse
    import nova
    ap = argparse.ArgumentParser(description="precompile the GPU test's kernels into $NOVA_CACHE_DIR (no GPU needed)")
    ap.add_argument("--target", default="h200")
    target = ap.parse_args().target
    step, args, model = gpu_llama_step("meta")
    print(nova.precompile(step, *args, target=target, models=[model]))
