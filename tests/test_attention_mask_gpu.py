"""Fused attention with an additive bias (the attention mask) on a GPU: out, lse and the three input
gradients against a float64 reference of the stated semantics (problem.py: scale q k^T + bias clamped
at -1e4, the causal mask on top, the clamp's gradient the identity; a row whose every visible key is
at the floor gives out 0, lse +inf and no gradient).  Fresh random data, NaN-poisoned
outputs; key-padding masks [B, 1, 1, T] with padding at the end (right) and at the start (left, causal:
fully masked rows), a batch entry with no key at all, a bias broadcast over the batch [1, H, T, T], a
full [B, H, T, T] bias, a finfo.min mask given in bf16 (copied to float32), T never a multiple of a
tile, grouped-query heads; and a Hugging Face GPT-2 / Llama training step on a padded batch through
``nova.compile`` against eager.  Each case runs twice: on the kernels the derivation picks, and with
``NOVA_ATTENTION_HOPPER=force`` on the Hopper kernels wherever they can run (sm_90; a bias of its own
per score keeps its backward on mma.sync).

Build on a host with MLIR, then run on the GPU offline::

    NOVA_CACHE_DIR=/tmp/cache python tests/test_attention_mask_gpu.py --target h200 --build
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=/tmp/cache python -m pytest -q -m gpu tests/test_attention_mask_gpu.py
"""
from __future__ import annotations

import math
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

# relative Frobenius error bounds (out and lse, gradients): tests/test_attention_gpu.py's
TOL = {"tf32": (4e-3, 1e-2), "fp16": (4e-3, 1e-2), "bf16": (2.5e-2, 5e-2)}
DT = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
FLOOR = -1.0e4          # nova.ir.ops.ATTENTION_BIAS_FLOOR, restated: the test states the semantics itself

# (B, H, Hkv, T, D, dtype, causal, mask)
CASES = [
    (3, 4, 4, 77, 64, "bf16", True, "right"),
    (3, 4, 2, 130, 64, "tf32", True, "right"),
    (2, 4, 2, 77, 128, "fp16", True, "left"),
    (3, 2, 2, 65, 64, "tf32", False, "empty"),
    (2, 4, 4, 100, 64, "bf16", False, "heads"),
    (2, 2, 1, 70, 64, "tf32", True, "full"),
    (2, 4, 4, 93, 128, "bf16", True, "min-bf16"),
    (1, 2, 2, 1, 64, "tf32", False, "right"),
    (2, 2, 2, 1700, 128, "tf32", False, "right"),     # the Hopper forward split 2 ways: a split past a row's keys
]


# the kernel families each case runs on: the derivation's pick, and the Hopper kernels forced
KERNELS = {"derived": {}, "hopper": {"NOVA_ATTENTION_HOPPER": "force"}}


def case_id(c):
    return "B{}H{}kv{}T{}D{}-{}{}-{}".format(*c[:6], "-causal" if c[6] else "", c[7])


def lengths(batch: int, t: int) -> list[int]:
    """Valid keys per batch entry: all, then shorter ones (at least 1)."""
    return [max(1, t - (t * i) // (batch + 1)) for i in range(batch)]


def bias_of(case, device, gen=None):
    """The case's bias tensor (its layout is part of the kernel's key: the same on meta and CUDA)."""
    B, H, _, T, _, _, _, mask = case
    f32 = torch.float32
    if mask in ("right", "left", "empty", "min-bf16"):
        n = torch.tensor(lengths(B, T), device=device)
        pos = torch.arange(T, device=device)
        keep = pos[None, :] < n[:, None] if mask != "left" else pos[None, :] >= (T - n)[:, None]
        if mask == "empty":
            keep[-1] = False                                   # a batch entry with no key: every row fully masked
        fill = torch.finfo(f32).min if mask == "min-bf16" else -math.inf
        bias = torch.where(keep, 0.0, fill).to(f32)[:, None, None, :]
        return bias.to(torch.bfloat16) if mask == "min-bf16" else bias
    shape = (1, H, T, T) if mask == "heads" else (B, H, T, T)
    if device == "meta":
        return torch.empty(shape, device="meta")
    return torch.randn(shape, device=device, generator=gen) * 2


def operands(case, device):
    B, H, Hkv, T, D, dtype, _, _ = case
    dt = DT[dtype]
    gen = torch.Generator(device=device).manual_seed(hash(case) & 0xFFFF) if device != "meta" else None
    make = lambda *shape: torch.randn(*shape, device=device, dtype=dt, generator=gen)  # noqa: E731
    return make(B, H, T, D), make(B, Hkv, T, D), make(B, Hkv, T, D), make(B, H, T, D), bias_of(case, device, gen)


def reference(q, k, v, do, bias, causal, scale):
    """float64: softmax(max(scale q k^T + bias, FLOOR), causal -inf) v; the clamp passes gradients."""
    qd, kd, vd = (x.double().detach().requires_grad_() for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kk, vv = kd.repeat_interleave(g, dim=1), vd.repeat_interleave(g, dim=1)
    scores = (qd @ kk.mT) * scale
    clamped = (scores.detach() + bias.double()).clamp_min(FLOOR)   # a -inf bias clamps to FLOOR, never NaN
    s = clamped + (scores - scores.detach())                    # clamped value, the scores' gradient
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril(), -math.inf)
    masked = s.detach().amax(-1, keepdim=True) <= FLOOR          # every visible key at the floor: 0, no gradient
    lse = torch.logsumexp(s, -1).masked_fill(masked[..., 0], math.inf)
    out = torch.where(masked, 0.0, torch.softmax(s, -1) @ vv)
    out.backward(do.double())
    return out.detach(), lse.detach(), qd.grad, kd.grad, vd.grad


def rel(a, b, floor=1e-30):
    a, b = a.double(), b.double()
    assert not a.isnan().any(), "NaN in the result (an element never written, or a masked row)"
    return float((a - b).norm() / max(float(b.norm()), floor))


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_masked_attention_matches_float64(case, kernels, monkeypatch):
    import nova
    for name, value in KERNELS[kernels].items():
        monkeypatch.setenv(name, value)
    B, H, Hkv, T, D, dtype, causal, mask = case
    q, k, v, do, bias = operands(case, "cuda")
    scale = 1 / math.sqrt(D)
    nan = float("nan")
    out, lse = torch.full_like(q, nan), torch.full((B, H, T), nan, device="cuda")
    nova.attention(q, k, v, causal=causal, bias=bias, out=out, lse=lse)
    dq, dk, dv = torch.full_like(q, nan), torch.full_like(k, nan), torch.full_like(v, nan)
    nova.attention_backward(do, q, k, v, out, lse, causal=causal, bias=bias, dq=dq, dk=dk, dv=dv)
    torch.cuda.synchronize()
    r_out, r_lse, r_dq, r_dk, r_dv = reference(q, k, v, do, bias, causal, scale)
    floor = 0.1 * float(r_dv.norm())
    masked = r_lse.isinf()
    assert torch.equal(lse.isinf().cpu() & (lse > 0).cpu(), masked.cpu()), "masked rows' lse is not +inf"
    assert not out[masked].any(), "a masked row's output is not 0"
    errs = {"out": rel(out, r_out), "lse": rel(lse[~masked], r_lse[~masked]), "dq": rel(dq, r_dq, floor),
            "dk": rel(dk, r_dk, floor), "dv": rel(dv, r_dv)}
    t_out, t_grad = TOL[dtype]
    assert errs["out"] < t_out and errs["lse"] < t_out, errs
    assert max(errs["dq"], errs["dk"], errs["dv"]) < t_grad, errs


@pytest.mark.parametrize("case", [CASES[0], CASES[6]], ids=case_id)
def test_planned_masked_calls_match_float64(case, monkeypatch):
    """A masked signature's later calls take its call plan (a float32 bias in place; a bf16 one through
    its float32 copy): the same tensors with new values, then new tensors, each against float64."""
    from nova.kernels.attention import launch
    import nova
    launch.reset()
    resolves = []
    real_resolve = launch.resolve
    monkeypatch.setattr(launch, "resolve", lambda *a, **k: resolves.append(1) or real_resolve(*a, **k))
    B, H, Hkv, T, D, dtype, causal, _ = case
    q, k, v, do, bias = operands(case, "cuda")
    for step in range(3):
        if step == 1:                                   # same tensors, new values (the bias kept)
            for x in (q, k, v, do):
                x.copy_(torch.randn_like(x))
        elif step == 2:                                 # new tensors, the same signature
            q, k, v, do, _ = operands(case, "cuda")
            q, k, v, do = (torch.randn_like(x) for x in (q, k, v, do))
            bias = bias.clone()
        out, lse = nova.attention(q, k, v, causal=causal, bias=bias)
        dq, dk, dv = nova.attention_backward(do, q, k, v, out, lse, causal=causal, bias=bias)
        torch.cuda.synchronize()
        r_out, r_lse, r_dq, r_dk, r_dv = reference(q, k, v, do, bias, causal, 1 / math.sqrt(D))
        masked = r_lse.isinf()
        floor = 0.1 * float(r_dv.norm())
        t_out, t_grad = TOL[dtype]
        assert rel(out, r_out) < t_out and rel(lse[~masked], r_lse[~masked]) < t_out, step
        assert max(rel(dq, r_dq, floor), rel(dk, r_dk, floor), rel(dv, r_dv)) < t_grad, step
    assert len(resolves) == 2                           # the first forward and backward; the later calls planned
    assert len(launch._plans) == 2 and {p.bias_copy for p in launch._plans.values()} == {bias.dtype != torch.float32}


def test_forced_hopper_runs_a_padding_mask_on_the_hopper_kernels(monkeypatch):
    from nova.kernels.attention.launch import _memo, reset
    import nova
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    reset()                   # the earlier tests' kernels of the same problem, derived without the option
    case = CASES[0]
    q, k, v, do, bias = operands(case, "cuda")
    out, lse = nova.attention(q, k, v, causal=True, bias=bias)
    nova.attention_backward(do, q, k, v, out, lse, causal=True, bias=bias)
    torch.cuda.synchronize()
    hits = [r for r in _memo.values() if r.problem.bias and r.problem.seq_q == case[3]]
    assert hits and all(r.schedule.tma and r.schedule.bwd_dkv.hopper and r.schedule.bwd_dq.hopper for r in hits)


# ------------------------------------------------------------------------------- a Hugging Face step
def hf_models():
    transformers = pytest.importorskip("transformers")
    gpt2 = lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(  # noqa: E731
        vocab_size=96, n_positions=64, n_embd=128, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0))
    llama = lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(  # noqa: E731
        vocab_size=96, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))
    return {"gpt2": gpt2, "llama": llama}


def hf_batch(device, seed=0, batch=3, t=45):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 96, (batch, t), generator=g)
    mask = torch.ones(batch, t, dtype=torch.long)
    for i, n in enumerate(lengths(batch, t)):
        mask[i, n:] = 0
    return ids.to(device), mask.to(device), ids.masked_fill(mask == 0, -100).to(device)


def hf_step(model):
    def step(ids, mask, labels):
        out = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
        out.loss.backward()
        return out.loss
    return step


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_hugging_face_padded_step_matches_eager(which):
    import copy

    import nova
    torch.manual_seed(0)
    model = hf_models()[which]().cuda().train()
    reference = copy.deepcopy(model)
    data = hf_batch("cuda")
    compiled = nova.compile(hf_step(model))
    loss = compiled(*data)
    expected = hf_step(reference)(*data)
    assert abs(float(loss) - float(expected)) <= 5e-3 * abs(float(expected))
    for (name, p), q in zip(reference.named_parameters(), model.parameters()):
        assert rel(q.grad, p.grad, 1e-30) < 2e-2, name
    nodes = [n for n in compiled.graph.nodes if n.op == "attention"]
    assert nodes and all(len(n.inputs) == 4 and n.attrs["causal"] for n in nodes)


# ------------------------------------------------------------------------------- the host build
def build(target: str, cache_dir=None) -> int:
    """Compile every kernel these tests launch into the cache (a host with MLIR, no GPU)."""
    import nova
    from nova.hwmodel import get_target
    from nova.kernels.attention import precompile_attention
    from nova.kernels.attention.launch import plan_operands
    from nova.runtime.cache import KernelCache
    import os
    from unittest import mock
    gpu, cache = get_target(target), KernelCache(cache_dir)
    for kernels, env in KERNELS.items():
        with mock.patch.dict(os.environ, env):
            for case in CASES:
                q, k, v, do, bias = operands(case, "meta")
                problem, _ = plan_operands(q, k, v, case[6], None, bias=bias, out=torch.empty_like(q))
                for role, key, status in precompile_attention(problem, gpu, cache):
                    print(f"{case_id(case)} {kernels} {role}: {status} ({key[:12]})")
    failed = 0
    for which, make in hf_models().items():
        torch.manual_seed(0)
        model = make().train()
        counts = nova.precompile(hf_step(model), *hf_batch("cpu"), target=gpu, models=[model], cache_dir=cache_dir)
        failed += counts.get("failed", 0)
    return 1 if failed else 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="build the kernels of these GPU tests into NOVA_CACHE_DIR (needs MLIR)")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--build", action="store_true", help="compile them (else list the cases)")
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()
    if not args.build:
        print("\n".join(case_id(c) for c in CASES))
        sys.exit(0)
    sys.exit(build(args.target, args.cache_dir))
