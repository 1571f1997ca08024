"""Split attention kernels on the host (no GPU): the derivation's splits (split KV for the forward and
dQ, split Q for dK/dV: where, how many, none empty, never a causal forward or a full grid), the
schedule's dict (unchanged for unsplit problems: their cache keys stay), the combine kernels run on
the CPU emulator against float64 (random partials, NaN-poisoned outputs, masked splits and fully
masked rows, strided outputs), every slab element written before its combine reads it and every
access in bounds (all blocks, threads, iterations), the launcher's argument order, and ptxas: the
split kernels and their combines assemble without spills."""
from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nova.kernels.attention import AttentionProblem, configure_attention
from nova.kernels.attention.build_combine import KERNEL_NAMES, THREADS
from nova.kernels.attention.derive import MAX_SPLITS
from nova.kernels.attention.device_time import block_steps
from nova.kernels.attention.module import build_module
from nova.kernels.attention.problem import score_precision_for
from nova.kernels.attention.schedule import COMBINES, AttentionSchedule

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")


def problem(B, H, Tq, Tk, D, causal=False, dtype="bf16", kv_heads=None, **kw):
    return AttentionProblem(B, H, Tq, Tk, D, causal=causal, dtype=dtype, kv_heads=kv_heads or H,
                            score_precision=score_precision_for(dtype), **kw)


DECODE = problem(2, 2, 3, 5632, 128)           # 4 blocks of 88 key tiles on 132 SMs


# ---- derivation --------------------------------------------------------------------------------
def test_decode_forward_and_dq_are_split_with_their_combines():
    cfg = configure_attention(DECODE, "h200")
    s = cfg.schedule
    for role in ("fwd", "bwd_dq"):
        kt, combine = s.kernel(role), s.kernel(COMBINES[role])
        assert kt.splits > 1 and not kt.hopper and kt.grid == (1, 4, kt.splits)
        assert combine.splits == kt.splits and combine.grid[0] * combine.block_rows >= 2 * 2 * 3
    assert s.with_combines(("fwd",)) == ("fwd", "fwd_combine")
    assert s.with_combines(("bwd_pre", "bwd_dkv", "bwd_dq")) == ("bwd_pre", "bwd_dkv", "bwd_dq", "bwd_dq_combine")
    text = json.dumps([st.to_dict() for st in cfg.derivation])
    assert "7 fwd key splits" in text and "7 bwd_dq key splits" in text and "device time" in text
    # the caller's tile (an experiment) keeps the forward whole: 4 blocks walk all 88 key tiles
    whole = configure_attention(DECODE, "h200", tiles={"fwd": (None, None, None, None)})
    assert whole.schedule.fwd.splits == 1 and whole.schedule.fwd_combine is None
    split_us = cfg.prediction.terms_us["fwd"] + cfg.prediction.terms_us["fwd_combine"]
    assert split_us < 0.25 * whole.prediction.terms_us["fwd"]


@pytest.mark.parametrize("p", [
    problem(2, 2, 3, 5632, 128, causal=True),       # causal: a query tile walks only up to its diagonal
    problem(32, 8, 512, 512, 64, causal=True),      # a full grid
    problem(8, 16, 1024, 1024, 128),                # a full grid, not causal
])
def test_no_split_where_nothing_is_idle_or_causal(p):
    s = configure_attention(p, "h200").schedule
    assert s.fwd.splits == s.bwd_dq.splits == 1 and s.fwd_combine is None and s.bwd_dq_combine is None
    if p.batch * p.heads > 64:                      # full grids: no dK/dV split either, the dict as before
        assert "splits" not in json.dumps(s.to_dict()) and "combine" not in json.dumps(s.to_dict())


@pytest.mark.parametrize("target", ["h200", "a100"])
def test_grouped_query_dkv_is_split_over_its_query_tiles(target):
    """B1 H8/1 T3968 causal TF32 (a held-out problem whose backward ran 1.2 ms on the H100): its dK/dV has
    31 blocks, one per key tile, each walking 8 heads x its query tiles; split Q fills the SMs."""
    p = problem(1, 8, 3968, 3968, 64, causal=True, dtype="tf32", kv_heads=1)
    cfg = configure_attention(p, target)
    s = cfg.schedule
    assert s.bwd_dkv.splits > 1 and s.bwd_dkv.grid[2] == s.bwd_dkv.splits and s.bwd_dkv_combine is not None
    assert s.with_combines(("bwd_pre", "bwd_dkv", "bwd_dq"))[:3] == ("bwd_pre", "bwd_dkv", "bwd_dkv_combine")
    whole = configure_attention(p, target, tiles={"bwd_dkv": (None,) * 4}) if target == "a100" else None
    if whole is not None:
        assert cfg.terms["bwd_dkv"]["time_us"] + cfg.terms["bwd_dkv_combine"]["time_us"] < \
            0.5 * whole.terms["bwd_dkv"]["time_us"]


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 4), H=st.integers(1, 8), Tq=st.integers(1, 40), Tk=st.integers(64, 9000),
       D=st.sampled_from((64, 128)), dtype=st.sampled_from(("tf32", "bf16", "fp16")),
       target=st.sampled_from(("h200", "h100", "a100")))
def test_every_split_is_non_empty_and_the_steps_add_up(B, H, Tq, Tk, D, dtype, target):
    p = problem(B, H, Tq, Tk, D, dtype=dtype)
    s = configure_attention(p, target).schedule
    for role in ("fwd", "bwd_dq"):          # dK/dV's split Q: test_grouped_query_dkv_is_split_over_its_query_tiles
        kt = s.kernel(role)
        if kt.splits == 1:
            continue
        tiles = -(-Tk // kt.block_cols)
        per = -(-tiles // kt.splits)
        assert 2 <= kt.splits <= MAX_SPLITS and (kt.splits - 1) * per < tiles
        steps = block_steps(p, role, kt.block_rows, kt.block_cols, kt.splits)
        assert sum(steps) == -(-Tq // kt.block_rows) * tiles and min(steps) >= 1
        assert AttentionSchedule.from_dict(json.loads(json.dumps(s.to_dict()))) == s


# ---- the combine kernels on the CPU -------------------------------------------------------------
def run_combine(p, role, splits, buffers):
    """Run ``role`` (a combine kernel of ``splits`` slabs) of ``p`` on the CPU emulator."""
    from dataclasses import replace

    from simt_cpu import run_kernel

    from nova.kernels.attention.derive import combine_tile
    source = {v: k for k, v in COMBINES.items()}[role]
    s = replace(configure_attention(DECODE, "h200").schedule, **{role: combine_tile(p, source, splits)})
    kt = s.kernel(role)
    run_kernel(build_module(p, s, role), KERNEL_NAMES[role], kt.grid, THREADS, 0, buffers)


@pytest.mark.parametrize("D, dtype, splits, bias", [(64, "bf16", 5, False), (128, "tf32", 3, False),
                                                    (64, "fp16", 7, True), (128, "bf16", 2, True)])
def test_forward_combine_is_the_float64_merge(D, dtype, splits, bias):
    rng = np.random.default_rng(D + splits)
    B, H, Tq = 2, 3, 5
    rows = B * H * Tq
    kw = {"bias": (0, 0, 0, 1)} if bias else {}
    p = problem(B, H, Tq, 4096, D, dtype=dtype, **kw)
    o_part = rng.standard_normal((splits, rows, D)).astype(np.float32)
    lse_part = (rng.standard_normal((splits, rows)) * 3 + 5).astype(np.float32)
    if bias:                         # a split whose every key is masked, and a row masked in every split
        lse_part[1, 2] = -np.inf
        o_part[1, 2] = 0
        lse_part[:, 7] = -np.inf
        o_part[:, 7] = 0
    out = np.full(rows * D, np.nan, np.float32)
    lse = np.full(rows, np.nan, np.float32)
    run_combine(p, "fwd_combine", splits, {"o_part": o_part.ravel().copy(), "lse_part": lse_part.ravel().copy(),
                                           "out": out, "lse": lse})
    l64 = lse_part.astype(np.float64)
    m = np.max(l64, axis=0)
    live = np.isfinite(m)
    w = np.exp(l64 - np.where(live, m, 0))
    ref_out = np.einsum("sr,srd->rd", w, o_part.astype(np.float64)) / np.where(live, w.sum(0), 1)[:, None]
    ref_lse = np.where(live, m + np.log(np.where(live, w.sum(0), 1)), np.inf)
    got = out.reshape(rows, D).astype(np.float64)
    assert not np.isnan(got).any() and not np.isnan(lse).any()
    tol = {"tf32": 2e-6, "fp16": 1e-3, "bf16": 8e-3}[dtype]
    assert np.abs(got - ref_out).max() <= tol * max(1.0, np.abs(ref_out).max())
    assert np.allclose(lse[live], ref_lse[live], rtol=1e-5, atol=1e-4)
    if bias:
        assert np.all(got[7] == 0) and lse[7] == np.inf


def test_dkv_combine_sums_both_slab_sets():
    rng = np.random.default_rng(5)
    B, Hkv, Tk, D, splits = 2, 2, 70, 128, 4
    rows = B * Hkv * Tk
    p = problem(B, 4, 300, Tk, D, dtype="fp16", kv_heads=Hkv)
    dk_part, dv_part = (rng.standard_normal((splits, rows, D)).astype(np.float32) for _ in range(2))
    dk, dv = np.full(rows * D, np.nan, np.float32), np.full(rows * D, np.nan, np.float32)
    run_combine(p, "bwd_dkv_combine", splits, {"dk_part": dk_part.ravel().copy(), "dv_part": dv_part.ravel().copy(),
                                               "dk": dk, "dv": dv})
    for got, parts in ((dk, dk_part), (dv, dv_part)):
        ref = parts.astype(np.float64).sum(0).ravel()
        assert np.abs(got - ref).max() <= 1e-3 * np.abs(ref).max()


def test_dq_combine_sums_the_slabs_into_strided_rows():
    rng = np.random.default_rng(3)
    B, H, Tq, D, splits = 1, 4, 3, 64, 6
    rows = B * H * Tq
    width = 3 * H * D                              # dq: a head-transposed view of a [B, T, 3, H, D] gradient
    p = problem(B, H, Tq, 4096, D, dtype="bf16", strides={"dq": (Tq * width, D, width)})
    parts = rng.standard_normal((splits, rows, D)).astype(np.float32)
    dq = np.full(B * Tq * width, np.nan, np.float32)
    run_combine(p, "bwd_dq_combine", splits, {"dq_part": parts.ravel().copy(), "dq": dq})
    ref = parts.astype(np.float64).sum(0).reshape(B, H, Tq, D)
    view = np.lib.stride_tricks.as_strided(dq, (B, H, Tq, D), (Tq * width * 4, D * 4, width * 4, 4))
    assert np.abs(view - ref).max() <= 8e-3 * np.abs(ref).max()
    written = np.zeros(dq.shape, bool)
    np.lib.stride_tricks.as_strided(written, (B, H, Tq, D), (Tq * width, D, width, 1))[...] = True
    assert np.isnan(dq[~written]).all()             # nothing outside the view written


# ---- the launcher -------------------------------------------------------------------------------
def recording(p, s, roles):
    """(resolved kernels of ``roles`` and their combines that record their launches, the record)."""
    from nova.kernels.attention.launch import _Resolved
    calls = []

    class Kernel:
        def __init__(self, role):
            self.role = role

        def launch(self, args, stream):
            calls.append((self.role, args))
    return _Resolved(p, s, {role: Kernel(role) for role in s.with_combines(roles)}), calls


def test_split_launch_writes_slabs_then_combines_into_the_outputs():
    torch = pytest.importorskip("torch")
    from nova.kernels.attention.launch import split_launch
    s = configure_attention(DECODE, "h200").schedule
    r, calls = recording(DECODE, s, ("fwd", "bwd_dq"))
    like = torch.empty(1)
    split_launch(r, "fwd", (1, 2, 3), (40, 50), (), 0, like)
    (fwd, fargs), (comb, cargs) = calls
    rows, splits = 2 * 2 * 3, s.fwd.splits
    assert fwd == "fwd" and comb == "fwd_combine" and fargs[:3] == (1, 2, 3)
    assert fargs[4] - fargs[3] == 4 * splits * rows * 128 and cargs == fargs[3:5] + (40, 50)
    calls.clear()
    split_launch(r, "bwd_dq", (1, 2, 3, 4, 5, 6), (70,), (99,), 0, like)
    (dq, dargs), (comb, cargs) = calls
    assert dq == "bwd_dq" and dargs[:6] == (1, 2, 3, 4, 5, 6) and dargs[7] == 99 and cargs == (dargs[6], 70)


# ---- ptxas --------------------------------------------------------------------------------------
@needs_ptxas
@pytest.mark.parametrize("shape, dtype, target", [
    ((2, 2, 3, 5632, 128), "bf16", "h200"), ((1, 4, 10, 6464, 64), "tf32", "h200"),
    ((2, 8, 7, 1920, 64), "fp16", "h100"), ((3, 3, 4, 4544, 128), "tf32", "a100"),
    ((1, 1, 1, 40000, 128), "bf16", "h200"),      # MAX_SPLITS partials a row in the combine
])
def test_split_kernels_and_combines_assemble_without_spills(shape, dtype, target):
    from nova.hwmodel import get_target
    from nova.kernels.attention.compile import compile_kernel
    p = problem(*shape, dtype=dtype)
    s = configure_attention(p, get_target(target)).schedule
    roles = s.with_combines(("fwd", "bwd_dq"))
    assert len(roles) == 4, roles
    for role in roles:
        art = compile_kernel(p, s, role)
        res = art.resources
        assert res["spill_store_bytes"] == 0 and res["spill_load_bytes"] == 0, (role, res)
        kt = s.kernel(role)
        assert res["registers"] <= kt.regs_per_thread or role not in ("fwd_combine", "bwd_dq_combine"), (role, res)
        assert art.grid == kt.grid and math.prod(art.block) == kt.threads


# ---- every memory access in bounds --------------------------------------------------------------
@pytest.mark.parametrize("shape, dtype, bias", [((2, 2, 3, 5632, 128), "bf16", False),
                                                ((1, 4, 10, 1999, 64), "tf32", False),
                                                ((2, 3, 5, 2900, 64), "fp16", True)])
def test_split_kernels_access_memory_in_bounds(shape, dtype, bias):
    """``bounds.check_attention_kernel`` over every block (the split axis z too), thread and iteration:
    the split forward's and dQ's slab stores and K/V loads, the combines' slab loads and output stores."""
    from nova.kernels.attention.bounds import check_attention_kernel
    kw = {"bias": (shape[4], 0, 0, 1)} if bias else {}
    p = problem(*shape, dtype=dtype, **kw)
    s = configure_attention(p, "h200").schedule
    roles = s.with_combines(("fwd", "bwd_dq"))
    assert len(roles) == 4
    for role in roles:
        assert check_attention_kernel(p, s, role) == [], role


def test_the_bounds_check_sees_a_split_past_the_slabs():
    """One split too many on the grid (its slab rows past the workspace): reported."""
    from dataclasses import replace

    from nova.kernels.attention.bounds import check_bounds
    s = configure_attention(DECODE, "h200").schedule
    kt = s.fwd
    text = build_module(DECODE, s, "fwd")
    assert check_bounds(text, kt.grid, kt.threads, kt.smem_bytes) == []
    assert check_bounds(text, (1, 4, kt.splits + 1), kt.threads, kt.smem_bytes)


@pytest.mark.parametrize("shape, dtype", [((2, 2, 3, 5632, 128), "bf16"), ((1, 4, 10, 1999, 64), "tf32"),
                                          ((1, 8, 1, 4100, 64), "fp16")])
def test_every_slab_element_is_written_before_the_combine_reads_it(shape, dtype):
    """The workspace is not initialised: the split kernels' stores (``bounds.written``, every block,
    thread and iteration evaluated) cover every element of every slab, and the combines every element
    of the output and LSE."""
    from nova.kernels.attention.bounds import written
    p = problem(*shape, dtype=dtype)
    s = configure_attention(p, "h200").schedule
    for role, names in (("fwd", ("o_part", "lse_part")), ("bwd_dq", ("dq_part",)),
                        ("fwd_combine", ("out", "lse")), ("bwd_dq_combine", ("dq",))):
        kt = s.kernel(role)
        text = build_module(p.for_role(role), s, role)
        for name in names:
            cover = written(text, kt.grid, kt.threads, name)
            assert cover.all(), (role, name, int((~cover).sum()), cover.size)


@pytest.mark.parametrize("shape, kv, dtype, causal, target", [
    ((1, 8, 640, 640, 64), 2, "bf16", True, "h200"),      # Hopper dK/dV, GQA, causal: empty splits write zeros
    ((1, 4, 1000, 1000, 64), 1, "tf32", True, "h200"),    # Hopper TF32 (transposer warps), multi-query
    ((1, 8, 777, 777, 128), 2, "fp16", False, "a100"),    # mma.sync dK/dV
])
def test_split_dkv_writes_every_slab_element_in_bounds_without_spills(shape, kv, dtype, causal, target):
    from nova.hwmodel import get_target
    from nova.kernels.attention.bounds import check_attention_kernel, tensor_map_dims, written
    from nova.kernels.attention.compile import compile_kernel
    p = problem(*shape, causal=causal, dtype=dtype, kv_heads=kv)
    s = configure_attention(p, get_target(target)).schedule
    assert s.bwd_dkv.splits > 1 and s.bwd_dkv.hopper == (target == "h200")
    for role, names in (("bwd_dkv", ("dk_part", "dv_part")), ("bwd_dkv_combine", ("dk", "dv"))):
        kt = s.kernel(role)
        assert check_attention_kernel(p, s, role) == [], role
        text = build_module(p.for_role(role), s, role)
        for name in names:
            cover = written(text, kt.grid, kt.threads, name, tensor_map_dims(p))
            assert cover.all(), (role, name, int((~cover).sum()), cover.size)
        if shutil.which("ptxas"):
            res = compile_kernel(p, s, role).resources
            assert res["spill_store_bytes"] == 0 and res["spill_load_bytes"] == 0, (role, res)


def test_split_launch_of_dkv_gives_each_output_its_slabs():
    torch = pytest.importorskip("torch")
    from nova.kernels.attention.launch import split_launch
    p = problem(1, 8, 3968, 3968, 64, causal=True, dtype="tf32", kv_heads=1)
    s = configure_attention(p, "h200").schedule
    r, calls = recording(p, s, ("bwd_dkv",))
    split_launch(r, "bwd_dkv", (1, 2, 3, 4, 5, 6), (70, 80), (), 0, torch.empty(1))
    (dkv, args), (comb, cargs) = calls
    slab = s.bwd_dkv.splits * 3968 * 64
    assert dkv == "bwd_dkv" and comb == "bwd_dkv_combine" and args[:6] == (1, 2, 3, 4, 5, 6)
    assert args[7] - args[6] == 4 * slab and cargs == (args[6], args[7], 70, 80)


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("role", ["fwd", "bwd_dq", "bwd_dkv"])
def test_combines_at_the_most_splits_assemble_without_spills(role):
    """Every split's columns of a row in flight at once (dK/dV: both slab sets): MAX_SPLITS fits."""
    from dataclasses import replace

    from nova.kernels.attention.compile import compile_kernel
    from nova.kernels.attention.derive import combine_tile
    p = problem(1, 8, 3968, 3968, 128, causal=True, dtype="bf16", kv_heads=1)
    s = configure_attention(p, "h200").schedule
    s = replace(s, **{COMBINES[role]: combine_tile(p, role, MAX_SPLITS)})
    res = compile_kernel(p, s, COMBINES[role]).resources
    assert res["spill_store_bytes"] == 0 and res["spill_load_bytes"] == 0 and res["registers"] <= 255, res


def test_a_masked_forward_combine_is_built_with_its_dead_row_rule():
    """The combine reads no bias, but a row masked in every split must come out O = 0, LSE = +inf (not
    NaN): the bias stays in the combine's problem (``for_role``), so in its code and its cache key."""
    from nova.hwmodel import get_target
    from nova.kernels.attention.compile import attention_key
    biased = problem(2, 3, 5, 2900, 64, dtype="fp16", bias=(2900, 0, 0, 1))
    s = configure_attention(biased, "h200").schedule
    assert s.fwd.splits > 1
    assert "row_masked" in build_module(biased.for_role("fwd_combine"), s, "fwd_combine")
    plain = problem(2, 3, 5, 2900, 64, dtype="fp16")
    gpu = get_target("h200")
    assert attention_key(biased, s, "fwd_combine", gpu) != attention_key(plain, s, "fwd_combine", gpu)
    assert attention_key(biased, s, "bwd_dq_combine", gpu) == attention_key(plain, s, "bwd_dq_combine", gpu)


def test_given_splits_replace_the_derivations_pick_and_replays_use_the_recorded_ones():
    """``configure_attention(splits=)`` (experiments, replays) prices the given counts; a held-out row's
    recorded counts are what its replay prices (``heldout.splits_ran``), unsplit for a row from before."""
    from nova.bench import heldout
    cfg = configure_attention(DECODE, "h200", splits={"fwd": 1, "bwd_dq": 4})
    s = cfg.schedule
    assert s.fwd.splits == 1 and s.fwd_combine is None
    assert s.bwd_dq.splits == 4 and s.bwd_dq.grid[2] == 4 and s.bwd_dq_combine.splits == 4
    assert "given by the caller" in json.dumps([st.to_dict() for st in cfg.derivation])
    assert cfg.prediction.terms_us["fwd"] > 5 * configure_attention(DECODE, "h200").prediction.terms_us["fwd"]
    assert heldout.splits_ran({"splits": [3, 2]}) == {"fwd": 3, "bwd_dq": 2}
    assert heldout.splits_ran({"splits": [3, 2, 4]}) == {"fwd": 3, "bwd_dq": 2, "bwd_dkv": 4}
    assert heldout.splits_ran({}) is None
    for bad, words in (({"bwd_pre": 2}, "bwd_pre"), ({"fwd": 0}, "from 1 to"), ({"fwd": 64}, "from 1 to"),
                       ({"bwd_dq": 2.0}, "integer")):
        with pytest.raises(ValueError) as e:
            configure_attention(DECODE, "h200", splits=bad)
        assert words in str(e.value) and "\n" not in str(e.value)


# ---- the Hopper forward split over its keys --------------------------------------------------------
HOPPER_SPLIT = [((1, 4, 1728, 1728, 128), "tf32", None), ((1, 2, 2048, 2048, 128), "bf16", None),
                ((2, 2, 1000, 3000, 64), "fp16", (3000, 0, 0, 1))]       # a padding mask: dead rows per split


@pytest.mark.parametrize("target", ["h100", "h200"])
def test_a_few_query_tiles_split_the_hopper_forward_over_its_keys(target):
    """Few query tiles (B1 H4 T1728 D128 tf32: 56 blocks of one a SM) leave the Hopper forward's SMs
    idle: step 7 splits its key tiles too, and step 10 weighs it (plus its combine) against the mma.sync
    kernel split; causal or persistent it stays whole."""
    p = problem(1, 4, 1728, 1728, 128, dtype="tf32")
    cfg = configure_attention(p, target)
    s = cfg.schedule
    assert s.tma and s.fwd.hopper and not s.fwd.persistent and s.fwd.splits > 1
    assert s.fwd.grid == (14, 4, s.fwd.splits) and s.fwd_combine.splits == s.fwd.splits
    assert s.with_combines(("fwd",)) == ("fwd", "fwd_combine")
    [path] = [st for st in cfg.derivation if st.step == "10 fwd path (device time)"]
    assert path.value == "wgmma + TMA, split KV" and "the mma.sync kernel" in path.reason
    whole = configure_attention(p, target, splits={"fwd": 1})
    assert whole.schedule.tma and whole.schedule.fwd.splits == 1
    split_us = cfg.prediction.terms_us["fwd"] + cfg.prediction.terms_us["fwd_combine"]
    assert split_us < 0.75 * whole.prediction.terms_us["fwd"]
    causal = configure_attention(problem(1, 4, 1728, 1728, 128, causal=True, dtype="tf32"), target).schedule
    assert causal.fwd.splits == 1 and causal.fwd_combine is None


@pytest.mark.parametrize("shape, dtype, bias", HOPPER_SPLIT)
def test_the_split_hopper_forward_writes_every_slab_element_in_bounds(shape, dtype, bias):
    """Every block (the split axis z too), thread and iteration: the split Hopper forward's K/V tensor-map
    loads and slab stores in bounds, and its stores cover every element of ``o_part`` and ``lse_part``
    (the combine reads them all); the kernel's parameters are what the launcher passes."""
    from nova.kernels.attention.bounds import check_attention_kernel, tensor_map_dims, written
    from nova.kernels.attention.module import kernel_params
    p = problem(*shape, dtype=dtype, **({"bias": bias} if bias else {}))
    s = configure_attention(p, "h200").schedule
    kt = s.fwd
    assert s.tma and kt.splits > 1
    assert check_attention_kernel(p, s, "fwd") == []
    text = build_module(p, s, "fwd")
    assert kernel_params(s, "fwd", p)[3:5] == ("o_part", "lse_part")
    for name in ("o_part", "lse_part"):
        assert f"%{name}: memref<" in text
        cover = written(text, kt.grid, kt.threads, name, tensor_map_dims(p))
        assert cover.all(), (name, int((~cover).sum()), cover.size)
    from nova.kernels.attention.bounds import check_bounds
    assert check_bounds(text, (kt.grid[0], kt.grid[1], kt.splits + 1), kt.threads, kt.smem_bytes,
                        tensor_map_dims(p))                  # one split too many: its slab rows past the end


@needs_ptxas
@pytest.mark.parametrize("shape, dtype, bias", HOPPER_SPLIT)
def test_the_split_hopper_forward_and_its_combine_assemble_without_spills(shape, dtype, bias):
    from nova.kernels.attention.compile import compile_kernel
    p = problem(*shape, dtype=dtype, **({"bias": bias} if bias else {}))
    s = configure_attention(p, "h200").schedule
    for role in s.with_combines(("fwd",)):
        art = compile_kernel(p, s, role)
        res = art.resources
        assert res["spill_store_bytes"] == 0 and res["spill_load_bytes"] == 0, (role, res)
        assert art.grid == s.kernel(role).grid and math.prod(art.block) == s.kernel(role).threads


@pytest.mark.parametrize("shape, causal, dtype, n", [((1, 4, 1728, 1728, 128), False, "tf32", 2),
                                                     ((1, 8, 2100, 4096, 64), False, "bf16", 3),
                                                     ((1, 4, 64, 2048, 64), False, "tf32", 16)])
def test_a_callers_forward_count_is_the_mma_sync_forwards(shape, causal, dtype, n):
    """A given forward split (an experiment, or a replay of a row's kernels) splits the mma.sync forward
    only: the Hopper forward's split is derived, never given, so a causal or persistent Hopper forward
    is never handed a count it cannot build, and a replay keeps the path the row ran."""
    p = problem(*shape, causal=causal, dtype=dtype)
    for target in ("h100", "h200"):
        s = configure_attention(p, target, splits={"fwd": n}).schedule
        assert not (s.tma and s.fwd.splits > 1), (target, s.fwd)
        build_module(p, s, "fwd")                                  # builds: its checks pass


def test_a_causal_forward_count_is_refused_in_one_line():
    with pytest.raises(ValueError, match="not split with a causal mask"):
        configure_attention(problem(1, 4, 1728, 1728, 128, causal=True, dtype="tf32"), "h100", splits={"fwd": 2})
