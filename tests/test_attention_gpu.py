"""Fused attention on a GPU: outputs and all three input gradients against a float64 reference.

Fresh random data every case, NaN-poisoned output buffers (every element must be written), T never
a multiple of a tile, T = 1, causal and not, D 64 and 128, TF32/BF16/FP16, GQA, Tq != Tk; strided
operands read and written in place (q/k/v views of a fused projection, a transposed dout, outputs
into views; nothing outside an output view written) and strides the kernels cannot address (copied);
and the memory check: nothing beyond O(B*H*T) besides inputs and outputs.  Run on the device from a
precompiled cache (bench/attention_device.sh); the cases are nova.bench.attention.GPU_TEST_CASES and
STRIDED_GPU_CASES (their 16-bit ones once more with the Hopper kernels forced, ``hopper_cases``: on an
H200 the configurator takes the Hopper forward and backward by its model, which leaves small problems
such as T = 1 on mma.sync; forced, dK/dV and dQ run on wgmma too), and ``python -m nova.bench.attention --precompile --target h200`` (on a host with
MLIR, into $NOVA_CACHE_DIR) compiles every kernel they use (``python tests/test_attention_gpu.py``
lists them).
"""
from __future__ import annotations

import math

import pytest

from nova.bench.attention import (FLASH_CASES, GPU_TEST_CASES, MEMORY_CASE, SPLIT_SCORE_GPU_CASES, STRIDED_GPU_CASES, hopper_cases,
                                  hopper_mode, score_precision, strided_operands)

pytestmark = pytest.mark.gpu

# relative Frobenius error bounds: (out, grads).  TF32 rounds operands to 10-bit mantissas, BF16 to 7,
# FP16 to 10 (and the backward's P and dS are rounded to the operand type before their matmuls).
TOL = {"tf32": (4e-3, 1e-2), "fp16": (4e-3, 1e-2), "bf16": (2.5e-2, 5e-2)}


def _torch():
    return pytest.importorskip("torch")


def _reference(q, k, v, do, causal, scale):
    torch = _torch()
    qd, kd, vd = (x.double().detach().requires_grad_() for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    kk, vv = kd.repeat_interleave(g, dim=1), vd.repeat_interleave(g, dim=1)
    s = (qd @ kk.transpose(-1, -2)) * scale
    if causal:
        tq, tk = s.shape[-2:]
        mask = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ vv
    out.backward(do.double())
    return out.detach(), lse.detach(), qd.grad, kd.grad, vd.grad


def _rel(a, b, floor=1e-30):
    """Relative Frobenius error; ``floor`` bounds the denominator where the exact result is 0 (dQ and
    dK with a single key: the softmax is constant, so they are pure rounding noise)."""
    a, b = a.double(), b.double()
    assert not a.isnan().any(), "NaN in the result (an element was never written?)"
    return float((a - b).norm() / max(float(b.norm()), floor))


@pytest.mark.parametrize("case", GPU_TEST_CASES, ids=lambda c: "B{}H{}kv{}T{}x{}D{}{}-{}".format(
    *c[:6], "-causal" if c[6] else "", c[7]))
def test_forward_and_gradients_match_float64(case):
    torch = _torch()
    import nova
    B, H, Hkv, Tq, Tk, D, causal, dtype = case
    dt = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(hash(case) & 0xFFFF)
    q = torch.randn(B, H, Tq, D, device="cuda", dtype=dt, generator=gen)
    k = torch.randn(B, Hkv, Tk, D, device="cuda", dtype=dt, generator=gen)
    v = torch.randn(B, Hkv, Tk, D, device="cuda", dtype=dt, generator=gen)
    do = torch.randn(B, H, Tq, D, device="cuda", dtype=dt, generator=gen)
    scale = 1 / math.sqrt(D)
    nan = float("nan")
    out = torch.full_like(q, nan)
    lse = torch.full((B, H, Tq), nan, device="cuda")
    nova.attention(q, k, v, causal=causal, out=out, lse=lse)
    dq, dk, dv = torch.full_like(q, nan), torch.full_like(k, nan), torch.full_like(v, nan)
    nova.attention_backward(do, q, k, v, out, lse, causal=causal, dq=dq, dk=dk, dv=dv)
    torch.cuda.synchronize()
    _check_against_float64(dtype, (q, k, v, do), (out, lse, dq, dk, dv), causal, scale)


def _check_against_float64(dtype, inputs, results, causal, scale):
    q, k, v, do = inputs
    out, lse, dq, dk, dv = results
    r_out, r_lse, r_dq, r_dk, r_dv = _reference(q, k, v, do, causal, scale)
    t_out, t_grad = TOL[dtype]
    # where the exact dQ and dK are 0 (a single key: the softmax is constant) the relative error is measured
    # against the gradients' natural magnitude, |dV|/10: D = rowsum(dO*O) is exact FP32 while dP = dO V^T
    # runs on rounded operands, so dS = P (dP - D) carries ~2^-11 |dO||V| of rounding noise (TF32: 2.6e-4 |dV|
    # measured on the H200; the 1e-2 |dV| of phase 1 was never run and is below that noise)
    floor = 0.1 * float(r_dv.double().norm())
    errs = {"out": _rel(out, r_out), "lse": _rel(lse, r_lse), "dq": _rel(dq, r_dq, floor),
            "dk": _rel(dk, r_dk, floor), "dv": _rel(dv, r_dv)}
    assert errs["out"] < t_out and errs["lse"] < t_out, errs
    assert max(errs["dq"], errs["dk"], errs["dv"]) < t_grad, errs


@pytest.mark.parametrize("case", STRIDED_GPU_CASES, ids=lambda c: "B{}H{}kv{}T{}x{}D{}{}-{}-{}".format(
    *c[:6], "-causal" if c[6] else "", c[7], c[8]))
def test_strided_operands_in_place_match_float64(case):
    """q, k, v, dout and the four outputs as views (``strided_operands``): read and written in place
    (``padded``: copied), only the outputs' own elements written, the results those of float64."""
    torch = _torch()
    import nova
    from nova.kernels.attention.launch import plan_operands
    B, H, Hkv, Tq, Tk, D, causal, dtype, layout = case
    gen = torch.Generator(device="cuda").manual_seed(hash(case) & 0xFFFF)
    t = strided_operands(case, torch, "cuda", gen)
    q, k, v, do, out, dq, dk, dv = (t[n] for n in ("q", "k", "v", "dout", "out", "dq", "dk", "dv"))
    nan = float("nan")
    bases = {id(o._base): o._base for o in (out, dq, dk, dv)}       # every output is a view of a poisoned buffer
    for base in bases.values():
        base.fill_(nan)
    _, copies = plan_operands(q, k, v, causal, out=out, dout=do, dq=dq, dk=dk, dv=dv)
    assert bool(copies) == (layout == "padded"), copies
    lse = torch.full((B, H, Tq), nan, device="cuda")
    nova.attention(q, k, v, causal=causal, out=out, lse=lse)
    nova.attention_backward(do, q, k, v, out, lse, causal=causal, dq=dq, dk=dk, dv=dv)
    torch.cuda.synchronize()
    _check_against_float64(dtype, (q, k, v, do), (out, lse, dq, dk, dv), causal, 1 / math.sqrt(D))
    for base in bases.values():                  # written exactly where an output view is (none overlap)
        views = sum(o.numel() for o in (out, dq, dk, dv) if o._base is base)
        assert int((~base.isnan()).sum()) == views, "an output wrote outside its view"


@pytest.mark.parametrize("case", SPLIT_SCORE_GPU_CASES, ids=lambda c: "B{}H{}kv{}T{}x{}D{}{}".format(
    *c[:6], "-causal" if c[6] else ""))
def test_split_scores_are_fp32_accurate(case):
    """3xtf32 scores: on large-logit data (scores of standard deviation ~9) the LSE, which depends on the
    score product alone, is FP32-accurate (max error < 1e-4 against float64 on LSEs of ~30: ~3e-6
    relative; measured 4.2e-5), at least 20x closer than single-TF32 scores on the same data (measured
    7.7e-3, 180x), and outputs and gradients stay within the TF32 bounds."""
    torch = _torch()
    import nova
    B, H, Hkv, Tq, Tk, D, causal = case
    gen = torch.Generator(device="cuda").manual_seed(hash(case) & 0xFFFF)
    q = 3 * torch.randn(B, H, Tq, D, device="cuda", generator=gen)
    k = 3 * torch.randn(B, Hkv, Tk, D, device="cuda", generator=gen)
    v = torch.randn(B, Hkv, Tk, D, device="cuda", generator=gen)
    do = torch.randn(B, H, Tq, D, device="cuda", generator=gen)
    scale = 1 / math.sqrt(D)
    r_lse = _reference(q, k, v, do, causal, scale)[1]
    lse_err = {}
    for precision in ("tf32", "3xtf32"):
        nan = float("nan")
        out, lse = torch.full_like(q, nan), torch.full((B, H, Tq), nan, device="cuda")
        dq, dk, dv = torch.full_like(q, nan), torch.full_like(k, nan), torch.full_like(v, nan)
        with score_precision(precision):
            nova.attention(q, k, v, causal=causal, out=out, lse=lse)
            nova.attention_backward(do, q, k, v, out, lse, causal=causal, dq=dq, dk=dk, dv=dv)
        torch.cuda.synchronize()
        lse_err[precision] = float((lse.double() - r_lse).abs().max())
        _check_against_float64("tf32", (q, k, v, do), (out, lse, dq, dk, dv), causal, scale)
    assert lse_err["3xtf32"] < 1e-4, lse_err
    assert lse_err["3xtf32"] * 20 < lse_err["tf32"], lse_err


@pytest.mark.parametrize("case", SPLIT_SCORE_GPU_CASES, ids=lambda c: "B{}H{}kv{}T{}x{}D{}{}".format(
    *c[:6], "-causal" if c[6] else ""))
def test_fp32_precision_is_as_accurate_as_fp32(case):
    """Precision "fp32" (every product as three TF32 products), on the same large-logit data: the
    output, the LSE and all three gradients within 2e-5 relative of float64 (FP32 arithmetic's
    ~1e-6 per operation over D and T sums; single TF32 is ~4e-4 on ordinary data), NaN-poisoned
    outputs all written."""
    torch = _torch()
    import nova
    B, H, Hkv, Tq, Tk, D, causal = case
    gen = torch.Generator(device="cuda").manual_seed((hash(case) + 1) & 0xFFFF)
    q = 3 * torch.randn(B, H, Tq, D, device="cuda", generator=gen)
    k = 3 * torch.randn(B, Hkv, Tk, D, device="cuda", generator=gen)
    v = torch.randn(B, Hkv, Tk, D, device="cuda", generator=gen)
    do = torch.randn(B, H, Tq, D, device="cuda", generator=gen)
    scale = 1 / math.sqrt(D)
    r_out, r_lse, r_dq, r_dk, r_dv = _reference(q, k, v, do, causal, scale)
    nan = float("nan")
    out, lse = torch.full_like(q, nan), torch.full((B, H, Tq), nan, device="cuda")
    dq, dk, dv = torch.full_like(q, nan), torch.full_like(k, nan), torch.full_like(v, nan)
    with score_precision("fp32"):
        nova.attention(q, k, v, causal=causal, out=out, lse=lse)
        nova.attention_backward(do, q, k, v, out, lse, causal=causal, dq=dq, dk=dk, dv=dv)
    torch.cuda.synchronize()
    errors = {name: _rel(got, ref) for name, got, ref in (("out", out, r_out), ("lse", lse, r_lse), ("dq", dq, r_dq),
                                                         ("dk", dk, r_dk), ("dv", dv, r_dv))}
    assert all(e < 2e-5 for e in errors.values()), errors


@pytest.mark.parametrize("case, strided", hopper_cases(), ids=["B{}H{}kv{}T{}x{}D{}{}-{}".format(
    *c[:6], "-causal" if c[6] else "", c[7]) + (f"-{c[8]}" if strided else "") for c, strided in hopper_cases()])
def test_hopper_forward_forced_matches_float64(case, strided):
    """The same checks with ``NOVA_ATTENTION_HOPPER=force``: on an sm_90 device every forward runs on
    the TMA + wgmma kernel (T = 1, ragged T, GQA, Tq != Tk, strided views; TF32 with its V^T copy), and
    with NOVA_ATTENTION_HOPPER_BWD=1 (the default) the backward's dK/dV and dQ too (TF32 with their
    transposes; at D128 TF32's dK/dV with one consumer warpgroup); bwd_pre stays on its mma.sync-path kernel."""
    torch = _torch()
    import nova.options
    from nova.kernels.attention.derive import HOPPER_DTYPES
    from nova.kernels.attention.launch import plan_operands, resolve
    with hopper_mode("force"):
        if strided:
            test_strided_operands_in_place_match_float64(case)
        else:
            test_forward_and_gradients_match_float64(case)
        B, H, Hkv, Tq, Tk, D, causal, dtype = case[:8]
        dt = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        q = torch.empty(B, H, Tq, D, device="cuda", dtype=dt)
        k = torch.empty(B, Hkv, Tk, D, device="cuda", dtype=dt)
        p, _ = plan_operands(q, k, k, causal)
        if torch.cuda.get_device_capability() >= (9, 0) and not strided:
            sched = resolve(p, q.device.index, None, ("fwd",)).schedule
            assert sched.tma                                                     # the Hopper forward ran
            # and the Hopper backward (16-bit dK/dV at D128 with 32-row query tiles: 64 would need 240 registers;
            # TF32 D128: dK/dV with one consumer warpgroup, dQ with 32-key tiles)
            want = nova.options.current().attention_hopper_backward and dtype in HOPPER_DTYPES
            assert sched.bwd_dkv.hopper == want and sched.bwd_dq.hopper == want
            if want and dtype == "tf32" and D == 128:
                assert sched.bwd_dkv.consumer_warpgroups == 1


@pytest.mark.parametrize("case", FLASH_CASES, ids=lambda c: "B{}H{}kv{}T{}x{}D{}{}-{}".format(
    *c[:6], "-causal" if c[6] else "", c[7]))
def test_16_bit_error_no_worse_than_torch_flash(case):
    """Relative error against float64 of O and dQ/dK/dV: Nova's within 1.25x of torch's flash kernel
    on the same inputs (both round P and dS to the operand type; the accumulation order differs)."""
    torch = _torch()
    import nova
    from torch.nn.attention import SDPBackend, sdpa_kernel
    B, H, Hkv, Tq, Tk, D, causal, dtype = case
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt, generator=gen) for T in (Tq, Tk, Tk, Tq))
    scale = 1 / math.sqrt(D)
    r_out, _, r_dq, r_dk, r_dv = _reference(q, k, v, do, causal, scale)
    out, lse = nova.attention(q, k, v, causal=causal)
    dq, dk, dv = nova.attention_backward(do, q, k, v, out, lse, causal=causal)
    qf, kf, vf = (x.detach().clone().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        of = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal, scale=scale)
    of.backward(do)
    torch.cuda.synchronize()
    for name, mine, theirs, ref in (("out", out, of, r_out), ("dq", dq, qf.grad, r_dq),
                                    ("dk", dk, kf.grad, r_dk), ("dv", dv, vf.grad, r_dv)):
        e_nova, e_flash = _rel(mine, ref), _rel(theirs, ref)
        assert e_nova <= 1.25 * e_flash, (name, e_nova, e_flash)


def test_memory_is_linear_in_sequence_length():
    torch = _torch()
    import nova
    B, H, Hkv, T, _, D, causal, dtype = MEMORY_CASE
    dt = torch.bfloat16
    q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt) for _ in range(4))
    out, lse = nova.attention(q, k, v, causal=causal)          # load the kernels first
    nova.attention_backward(do, q, k, v, out, lse, causal=causal)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out, lse = nova.attention(q, k, v, causal=causal)
    dq, dk, dv = nova.attention_backward(do, q, k, v, out, lse, causal=causal)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    outputs = sum(t.numel() * t.element_size() for t in (out, lse, dq, dk, dv))
    scratch = extra - outputs
    # a split kernel's FP32 slabs (splits x its outputs: linear in T too), each alive during its role
    from nova.kernels.attention.launch import partial_sizes, plan_operands, resolve
    p, _ = plan_operands(q, k, v, causal)
    sched = resolve(p, q.device.index, None, ("fwd",)).schedule
    slabs = sum(4 * sum(partial_sizes(sched, p, role)) for role in ("fwd", "bwd_dq", "bwd_dkv"))
    assert scratch <= 4 * B * H * T + slabs + (1 << 20), (extra, outputs, slabs)   # D (one FP32 a row), slabs, slack
    assert scratch - slabs < 4 * B * H * T * T / 8                     # beside them, nowhere near a T x T buffer


def test_rejects_bad_inputs():
    torch = _torch()
    import nova
    q = torch.randn(1, 2, 8, 64, device="cuda")
    with pytest.raises(ValueError):
        nova.attention(q, q.half(), q)
    with pytest.raises(Exception, match="head_dim"):
        x = torch.randn(1, 2, 8, 96, device="cuda")
        nova.attention(x, x, x)


if __name__ == "__main__":
    import sys
    from nova.bench.attention import all_kernels, mode_kernels
    print("# the kernels of these tests (and of the attention benchmark), compiled on a host with MLIR by:")
    print("#   NOVA_CACHE_DIR=.nova-cache python -m nova.bench.attention --precompile --target h200")
    for problem, roles in all_kernels():
        print(f"{problem.describe()}  [{', '.join(roles)}]")
    for problem, roles, mode in mode_kernels():
        print(f"{problem.describe()}  [{', '.join(roles)}] NOVA_ATTENTION_HOPPER={mode}")
    sys.exit(0)
