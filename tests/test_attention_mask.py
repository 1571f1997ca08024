"""The attention mask as the IR attention's additive bias operand, on the host: the IR reference
against eager's masked softmax (rows that keep a key: equal; fully masked rows: 0 and no gradient),
the capture of a padded SDPA mask, the problem's bias strides in its key and description, the
launcher's plan on meta tensors, the derivation's kernel choice, the masked mma.sync kernels assembled
by ptxas for sm_90 and sm_80 (no spills, the predicted occupancy) and the masked Hopper kernels (no
spills, no serialised wgmma, every access in bounds)."""
from __future__ import annotations

import math
import shutil

import pytest

torch = pytest.importorskip("torch")

from nova.hwmodel import PRESETS  # noqa: E402
from nova.ir.ops import ATTENTION_BIAS_FLOOR, _ref_attention, _ref_attention_backward  # noqa: E402
from nova.kernels.attention import AttentionProblem, AttentionProblemError, configure_attention  # noqa: E402

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")


def eager(q, k, v, bias, causal, scale):
    """Eager's masked attention in float64 (softmax of scale q k^T + bias, causal as -inf), per row."""
    s = (q.double() @ k.double().mT) * scale + bias.double()
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), -math.inf)
    return torch.softmax(s, -1) @ v.double()


def padding_bias(lengths, t, fill=-math.inf):
    keep = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    return torch.where(keep, 0.0, fill).reshape(len(lengths), 1, 1, t)


@pytest.mark.parametrize("fill", [-math.inf, torch.finfo(torch.float32).min], ids=["-inf", "finfo.min"])
@pytest.mark.parametrize("causal", [False, True])
def test_reference_matches_eager_where_a_row_keeps_a_key(fill, causal):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 2, 7, 8, generator=g, dtype=torch.float64) for _ in range(3))
    bias = padding_bias([7, 4, 1], 7, fill)                      # every row keeps key 0
    out, lse = _ref_attention(torch, q, k, v, bias, scale=0.3, causal=causal)
    torch.testing.assert_close(out, eager(q, k, v, bias, causal, 0.3), rtol=1e-12, atol=1e-12)
    assert torch.isfinite(lse).all()


def test_fully_masked_rows_give_zero_and_no_gradient():
    """A left-padded causal batch: its first rows see only padding keys.  The IR attention gives them
    out 0 and lse +inf (torch's SDPA gives 0 there), so the backward from that lse sends them no
    gradient -- what eager's autograd of SDPA with the rows' outputs zeroed gives; the rest of the
    batch as eager, forward and backward."""
    g = torch.Generator().manual_seed(2)
    q, k, v, do = (torch.randn(1, 2, 6, 8, generator=g, dtype=torch.float64) for _ in range(4))
    keep = torch.arange(6) >= 2                                   # keys 0, 1 are padding
    bias = torch.where(keep, 0.0, -math.inf).reshape(1, 1, 1, 6)
    out, lse = _ref_attention(torch, q, k, v, bias, scale=0.5, causal=True)
    assert torch.isfinite(out).all()
    assert (out[0, :, :2] == 0).all() and torch.isinf(lse[0, :, :2]).all() and (lse[0, :, :2] > 0).all()
    assert torch.isfinite(lse[0, :, 2:]).all()
    torch.testing.assert_close(out[0, :, 2:], eager(q, k, v, bias, True, 0.5)[0, :, 2:])
    grads = _ref_attention_backward(torch, do, q, k, v, out, lse, bias, scale=0.5, causal=True)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    rows_kept = torch.arange(6)[None, None, :, None] >= 2
    finite = bias.double().masked_fill(~keep.reshape(1, 1, 1, 6), -1e300)     # eager: no NaN to zero out
    ref = torch.where(rows_kept, eager(*leaves, finite, True, 0.5), 0.0)
    ref.backward(do)
    for got, leaf in zip(grads, leaves):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, leaf.grad, rtol=1e-10, atol=1e-10)
    assert (grads[0][0, :, :2] == 0).all()


def test_reference_backward_matches_eager_autograd():
    """With a finfo.min padding mask (rows keep keys): dq, dk, dv equal eager's autograd."""
    g = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64) for _ in range(4))
    k2, v2 = k[:, ::2].clone(), v[:, ::2].clone()                 # grouped-query: 2 K/V heads
    bias = padding_bias([9, 5], 9, torch.finfo(torch.float32).min)
    out, lse = _ref_attention(torch, q, k2, v2, bias, scale=0.35, causal=True)
    grads = _ref_attention_backward(torch, do, q, k2, v2, out, lse, bias, scale=0.35, causal=True)
    leaves = [x.clone().requires_grad_() for x in (q, k2, v2)]
    ref = eager(leaves[0], leaves[1].repeat_interleave(2, 1), leaves[2].repeat_interleave(2, 1), bias, True, 0.35)
    ref.backward(do)
    for got, leaf in zip(grads, leaves):
        torch.testing.assert_close(got, leaf.grad, rtol=1e-10, atol=1e-10)


def test_a_padded_sdpa_mask_is_captured_as_the_bias_operand():
    """A runtime boolean mask given to SDPA: the IR attention with a bias, no T x T composition; the
    compiled step's loss and gradient equal eager's."""
    import copy

    import torch.nn.functional as F

    import nova
    torch.manual_seed(0)
    proj = torch.nn.Linear(8, 3 * 8)
    ref_proj = copy.deepcopy(proj)

    def step_of(proj):
        def step(x, mask):
            q, k, v = proj(x).reshape(2, 5, 3, 1, 8).permute(2, 0, 3, 1, 4)
            loss = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).square().sum()
            loss.backward()
            return loss
        return step
    x = torch.randn(2, 5, 8)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 3])[:, None]).reshape(2, 1, 1, 5).expand(2, 1, 5, 5)
    compiled = nova.compile(step_of(proj), backend="reference")
    got = compiled(x, mask.contiguous())
    expected = step_of(ref_proj)(x, mask.contiguous())
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(proj.weight.grad, ref_proj.weight.grad, rtol=1e-4, atol=1e-6)
    ops = compiled.graph.op_counts()
    assert ops.get("attention") == 1 and ops.get("attention_backward") == 1 and "softmax" not in ops
    node = next(n for n in compiled.graph.nodes if n.op == "attention")
    assert tuple(node.inputs[3].shape) == (2, 1, 5, 5) and not node.attrs["causal"]


# ------------------------------------------------------------------------------------- the problem
def test_bias_strides_are_normalised_keyed_and_described():
    plain = AttentionProblem(2, 4, 100, 100, 64, causal=True, dtype="bf16")
    pad = AttentionProblem(2, 4, 100, 100, 64, causal=True, dtype="bf16", bias=(100, 7, 3, 1))
    assert pad.bias == (100, 7, 3, 1)                              # strides as given where the axes are real
    key_pad = AttentionProblem(2, 4, 100, 100, 64, causal=True, dtype="bf16", bias=(100, 0, 0, 1))
    assert "bias" not in plain.to_dict() and key_pad.to_dict()["bias"] == [100, 0, 0, 1]
    assert " bias[2,1,1,100](100,0,0,1)" in key_pad.describe() and "bias" not in plain.describe()
    assert key_pad.for_role("bwd_pre").bias == () and key_pad.for_role("bwd_dq").bias == key_pad.bias
    one_head = AttentionProblem(2, 1, 100, 100, 64, bias=(100, 5, 0, 1))
    assert one_head.bias == (100, 0, 0, 1)                       # a size-1 axis has no stride
    assert key_pad.bias_bytes == 4 * 2 * 100 and key_pad.bias_extent == 2 * 100


@pytest.mark.parametrize("bias", [(1, 2, 3), (1, -1, 0, 1), (1.5, 0, 0, 1)])
def test_bad_bias_strides_are_one_line(bias):
    with pytest.raises(AttentionProblemError, match=r"^bias needs 4 non-negative integer strides") as e:
        AttentionProblem(2, 4, 100, 100, 64, bias=bias)
    assert "\n" not in str(e.value)


def test_launcher_plans_the_bias_view_in_place_or_copies_it():
    from nova.kernels.attention.launch import plan_operands
    q = torch.empty(2, 4, 77, 64, dtype=torch.bfloat16, device="meta")
    k = v = torch.empty(2, 2, 77, 64, dtype=torch.bfloat16, device="meta")
    pad = torch.empty(2, 77, device="meta")[:, None, None, :]
    p, copies = plan_operands(q, k, v, True, None, bias=pad)
    assert p.bias == (77, 0, 0, 1) and not copies
    full = torch.empty(4, 77, 77, device="meta")                  # [H, Tq, Tk]: broadcast over the batch
    assert plan_operands(q, k, v, False, None, bias=full)[0].bias == (0, 77 * 77, 77, 1)
    p, copies = plan_operands(q, k, v, True, None, bias=pad.to(torch.bfloat16))
    assert p.bias == (77, 0, 0, 1) and "float32" in copies["bias"]
    with pytest.raises(ValueError, match=r"^bias of shape \[2, 1, 1, 76\] does not broadcast"):
        plan_operands(q, k, v, True, None, bias=pad[..., :76])


def test_a_padding_mask_runs_on_the_hopper_kernels_and_a_bias_per_score_backward_on_mma_sync():
    """A padding mask (one value a key) takes the Hopper kernels where the unbiased problem does; a bias
    of its own per score keeps the Hopper forward and runs its backward on mma.sync, saying why."""
    from nova.kernels.attention.derive import BIAS_PER_SCORE_BLOCKER
    shape = dict(causal=True, dtype="bf16")
    plain = AttentionProblem(8, 16, 2048, 2048, 128, **shape)
    padded = AttentionProblem(8, 16, 2048, 2048, 128, **shape, bias=(2048, 0, 0, 1))
    full = AttentionProblem(8, 16, 2048, 2048, 128, **shape, bias=(16 * 2048 * 2048, 2048 * 2048, 2048, 1))
    h200 = PRESETS["h200"]
    hopper = lambda s: (s.tma, s.bwd_dkv.hopper, s.bwd_dq.hopper)  # noqa: E731
    assert hopper(configure_attention(plain, h200).schedule) == (True, True, True)
    assert hopper(configure_attention(padded, h200).schedule) == (True, True, True)
    cfg = configure_attention(full, h200)
    assert hopper(cfg.schedule) == (True, False, False)
    notes = [st.reason for st in cfg.derivation if st.step.startswith("11 ") and st.step.endswith(" path")]
    assert len(notes) == 2 and all(BIAS_PER_SCORE_BLOCKER in n for n in notes), notes


# ------------------------------------------------------------------------------------- the kernels
MASK_PTX_CASES = [("fwd", "bf16", 64, "h200", "pad"), ("bwd_dkv", "bf16", 64, "h200", "pad"),
                  ("bwd_dq", "bf16", 64, "h200", "pad"), ("fwd", "tf32", 64, "a100", "pad"),
                  ("bwd_dkv", "tf32", 128, "a100", "full"), ("bwd_dq", "fp16", 128, "h200", "full"),
                  ("fwd", "bf16", 128, "a100", "heads")]
# the Hopper kernels (NOVA_ATTENTION_HOPPER=force): a padding mask in every role and dtype, a bias per
# score in the forward (its backward runs on mma.sync: derive.BIAS_PER_SCORE_BLOCKER)
HOPPER_MASK_CASES = [("fwd", "bf16", 64, "pad"), ("bwd_dkv", "bf16", 64, "pad"), ("bwd_dq", "fp16", 128, "pad"),
                     ("fwd", "tf32", 128, "pad"), ("bwd_dkv", "tf32", 64, "pad"), ("bwd_dq", "tf32", 128, "pad"),
                     ("bwd_dkv", "bf16", 128, "pad"), ("bwd_dkv", "fp16", 128, "queries"),
                     ("bwd_dq", "bf16", 128, "queries"), ("fwd", "fp16", 128, "full"), ("fwd", "tf32", 64, "heads")]
BIASES = {"pad": lambda b, h, t: (t, 0, 0, 1), "full": lambda b, h, t: (h * t * t, t * t, t, 1),
          "heads": lambda b, h, t: (0, t * t, t, 1), "queries": lambda b, h, t: (t, 0, 1, 0)}


@needs_ptxas
@pytest.mark.parametrize("role, dtype, D, target, form", MASK_PTX_CASES)
def test_masked_kernels_assemble_without_spills(role, dtype, D, target, form):
    """The bias adds registers (measured +2..+44 at these schedules) but no spill; the predicted
    occupancy holds; the bias is the kernel's last parameter."""
    from nova.kernels.attention.compile import compile_kernel
    kw = dict(causal=True, dtype=dtype, kv_heads=2)
    p = AttentionProblem(2, 4, 333, 333, D, **kw, bias=BIASES[form](2, 4, 333))
    gpu = PRESETS[target]
    s = configure_attention(p, gpu).schedule
    art = compile_kernel(p, s, role)
    base = compile_kernel(AttentionProblem(2, 4, 333, 333, D, **kw), s, role).resources
    r = art.resources
    assert f".target {gpu.arch}" in art.ptx and art.params[-1] == "bias"
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    k = s.kernel(role)
    per_warp = -(-r["registers"] * 32 // 256) * 256
    assert k.blocks_per_sm * k.warps * per_warp <= gpu.regs_per_sm, (r["registers"], k.blocks_per_sm)
    assert r["registers"] <= base["registers"] + 48, (r["registers"], base["registers"])


@needs_ptxas
@pytest.mark.parametrize("role, dtype, D, form", HOPPER_MASK_CASES)
def test_masked_hopper_kernels_assemble_without_spills_or_wgmma_hazards(role, dtype, D, form, monkeypatch):
    """The Hopper kernels with a bias: no spill, no serialised wgmma (``WGMMA_HAZARDS``), every memory
    access in bounds for every block, thread and iteration (``bounds``: the bias's loads against its
    extent), the bias the kernel's last parameter (the builder's signature and the launch order alike).
    D128 16-bit dK/dV spilled until the register estimate took the bias (``HOPPER_BWD_BIAS_REGS``)."""
    import re

    from nova.codegen.ptxas import wgmma_hazards
    from nova.kernels.attention.bounds import check_attention_kernel
    from nova.kernels.attention.compile import compile_kernel
    from nova.kernels.attention.module import build_module, kernel_params
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    p = AttentionProblem(2, 4, 333, 333, D, causal=True, dtype=dtype, kv_heads=2, bias=BIASES[form](2, 4, 333))
    s = configure_attention(p, PRESETS["h200"]).schedule
    assert s.kernel(role).hopper
    text = build_module(p.for_role(role), s, role)
    signature = re.search(r"gpu\.func @\w+\((.*?)\) kernel", text, re.S).group(1)
    names = tuple(re.findall(r"%(\w+):", signature))
    assert names == kernel_params(s, role, p) and names[-1] == "bias" and "memref.load %bias[" in text
    art = compile_kernel(p, s, role)
    r = art.resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    assert not wgmma_hazards(r)
    assert check_attention_kernel(p, s, role) == []


def test_the_bounds_check_sees_a_bias_read_past_its_extent(monkeypatch):
    """The padding mask's Hopper forward with its bias memref one element short: reported."""
    from nova.kernels.attention.bounds import check_bounds, tensor_map_dims
    from nova.kernels.attention.build_hopper import build_hopper_fwd
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    p = AttentionProblem(2, 4, 333, 333, 64, causal=True, dtype="bf16", bias=(333, 0, 0, 1))
    s = configure_attention(p, PRESETS["h200"]).schedule
    text = build_hopper_fwd(p.for_role("fwd"), s)
    short = text.replace(f"memref<{p.bias_extent}xf32>", f"memref<{p.bias_extent - 1}xf32>")
    kt = s.fwd
    assert check_bounds(text, kt.grid, kt.threads, kt.smem_bytes, tensor_map_dims(p)) == []
    errors = check_bounds(short, kt.grid, kt.threads, kt.smem_bytes, tensor_map_dims(p))
    assert errors and all("bias" in e for e in errors), errors


def test_unbiased_kernels_keep_their_text():
    """The bias changes nothing of an unbiased kernel: no bias parameter, no bias load."""
    from nova.kernels.attention.module import build_module
    p = AttentionProblem(2, 4, 100, 100, 64, causal=True, dtype="bf16")
    s = configure_attention(p, PRESETS["a100"]).schedule
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        text = build_module(p, s, role)
        assert "%bias" not in text
        biased = build_module(AttentionProblem(2, 4, 100, 100, 64, causal=True, dtype="bf16", bias=(100, 0, 0, 1)),
                              s, role)
        assert "%bias: memref<200xf32>" in biased and "memref.load %bias[" in biased
        # the forward masks a row whose every key sits at the floor: O = 0, LSE = +inf (0x7F800000)
        assert ("arith.cmpf ole" in biased and "0x7F800000" in biased) == (role == "fwd")
        assert "arith.cmpf ole" not in text and "0x7F800000" not in text


def test_the_kernels_clamp_at_the_ir_ops_floor():
    from nova.ir.ops import ATTENTION_BIAS_FLOOR
    from nova.kernels.attention.problem import BIAS_FLOOR
    assert BIAS_FLOOR == ATTENTION_BIAS_FLOOR
