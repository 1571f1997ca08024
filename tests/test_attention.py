"""Fused attention on the host (no GPU): problem validation, strided operands (the problem's strides,
the cache key, the launcher's plan on meta tensors), the derivation's decisions, MLIR that builds and
lowers to PTX, ptxas resources (no spills) at the configurator's schedules, the CLI."""
from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pytest
from nova.options import OptionError

from nova.codegen.ptxas import wgmma_hazards
from nova.hwmodel import PRESETS
from nova.kernels.attention import (AttentionProblem, AttentionProblemError, check_attention_schedule,
                                    configure_attention)
from nova.kernels.attention.build import KERNEL_NAMES, smem_plan
from nova.kernels.attention.module import build_module
from nova.kernels.attention.problem import OPERANDS, ROLE_OPERANDS
from nova.kernels.attention.schedule import ROLES

needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")


# ---- problem ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    (dict(batch=0), "batch"), (dict(head_dim=96), "head_dim"), (dict(dtype="fp8"), "dtype"),
    (dict(kv_heads=3), "kv_heads"), (dict(scale=-1.0), "scale"), (dict(seq_q=2.5), "seq_q"),
    (dict(causal="yes"), "causal"),
])
def test_problem_validation_one_line(kwargs, words):
    base = dict(batch=2, heads=4, seq_q=128, seq_k=128, head_dim=64)
    with pytest.raises(AttentionProblemError) as e:
        AttentionProblem(**{**base, **kwargs})
    assert words in str(e.value) and "\n" not in str(e.value)


def test_problem_defaults_and_counts():
    p = AttentionProblem(2, 8, 100, 100, 64, causal=True, kv_heads=2)
    assert p.scale == pytest.approx(0.125) and p.group == 4
    assert p.pairs == 100 * 101 // 2
    assert AttentionProblem(1, 1, 7, 5, 64, causal=True).pairs == 15 + 2 * 5
    assert p.fwd_flops == 4 * 2 * 8 * p.pairs * 64


# ---- strides ----------------------------------------------------------------------------------
def fused_strides(B, H, Hkv, T, D, grads=True):
    """q, k, v as head-transposed views of one [B, T, H + 2*Hkv, D] projection, dout of [B, T, H*D] (a
    GPT step's layout); dq, dk, dv into one fused gradient likewise."""
    w = (H + 2 * Hkv) * D
    st = {n: (T * w, D, w) for n in ("q", "k", "v")}
    if grads:
        st.update({"dout": (T * H * D, D, H * D), **{n: (T * w, D, w) for n in ("dq", "dk", "dv")}})
    return st


GPT = dict(batch=32, heads=8, seq_q=512, seq_k=512, head_dim=64, causal=True)


def test_contiguous_strides_keep_the_problem_its_dict_and_key():
    from nova.kernels.attention.compile import attention_key
    base = AttentionProblem(2, 4, 100, 100, 64, causal=True, kv_heads=2)
    explicit = AttentionProblem(2, 4, 100, 100, 64, causal=True, kv_heads=2,
                                strides={"q": (4 * 6400, 6400, 64, 1), "k": (2 * 6400, 6400, 64), "dq": (25600, 6400, 64)})
    assert explicit == base and hash(explicit) == hash(base) and explicit.strides == ()
    assert base.to_dict() == {"batch": 2, "heads": 4, "seq_q": 100, "seq_k": 100, "head_dim": 64, "causal": True,
                              "dtype": "tf32", "kv_heads": 2, "scale": 0.125}      # the dict the key always hashed
    gpu = PRESETS["h200"]
    s = configure_attention(base, gpu).schedule
    assert all(attention_key(explicit, s, r, gpu) == attention_key(base, s, r, gpu) for r in ROLES)
    # a dimension of size 1 has no stride: any value is the contiguous one
    assert AttentionProblem(1, 4, 1, 9, 64, strides={"q": (5, 64, 3), "k": (7, 576, 64)}) == AttentionProblem(1, 4, 1, 9, 64)
    assert base.extent("q") == 2 * 4 * 100 * 64 and base.operand_strides("k") == (12800, 6400, 64)


def test_strided_problem_dict_key_and_roles():
    from nova.kernels.attention.compile import attention_key
    p = AttentionProblem(**GPT, strides=fused_strides(32, 8, 8, 512, 64))
    fwd = AttentionProblem(**GPT, strides=fused_strides(32, 8, 8, 512, 64, grads=False))
    assert p.to_dict()["strides"]["q"] == [786432, 64, 1536] and p.to_dict()["strides"]["dout"] == [262144, 64, 512]
    assert AttentionProblem(**p.to_dict()) == p                        # the dict round-trips (variant manifests)
    assert "strides q[786432,64,1536] k[786432,64,1536]" in p.describe() and "dout[262144,64,512]" in p.describe()
    assert p.extent("q") == 31 * 786432 + 7 * 64 + 511 * 1536 + 64
    assert dict(p.for_role("bwd_pre").strides) == {"dout": (262144, 64, 512)}
    assert [n for n, _ in p.for_role("bwd_dq").strides] == ["q", "k", "v", "dout", "dq"]
    gpu = PRESETS["h200"]
    s = configure_attention(p, gpu).schedule
    assert s == configure_attention(AttentionProblem(**GPT), gpu).schedule        # strides decide no tile
    # the forward kernel of the step's forward and of its backward problem is one kernel; the others differ
    assert attention_key(p, s, "fwd", gpu) == attention_key(fwd, s, "fwd", gpu)
    assert attention_key(p, s, "bwd_dq", gpu) != attention_key(fwd, s, "bwd_dq", gpu)
    assert attention_key(p, s, "fwd", gpu) != attention_key(AttentionProblem(**GPT), s, "fwd", gpu)


def test_role_operands_are_the_kernel_parameters():
    from nova.kernels.attention import build_combine
    from nova.kernels.attention.build import PARAMS
    params = {**PARAMS, **build_combine.PARAMS}
    assert ROLE_OPERANDS == {r: tuple(n for n in params[r] if n in OPERANDS) for r in params}


@pytest.mark.parametrize("strides, words", [
    ({"q": (786432, 64, 1537)}, "T stride 1537 is not a multiple of 16 bytes"),
    ({"k": (786432, 66, 1536)}, "H stride 66 is not a multiple of 16 bytes"),
    ({"q": (786432, 64, 1536, 2)}, "head dimension is not contiguous"),
    ({"dq": (262144, 64, 64)}, "overlap"),
    ({"out": (262144, 0, 64)}, "overlap"),
    ({"q": (-64, 64, 1536)}, "negative"),
    ({"x": (1, 2, 3)}, "unknown operand 'x'"),
    ({"q": (1, 2)}, "4 integer strides"),
    ({"q": 5}, "strides must map operands"),
])
def test_unsupported_strides_are_one_line(strides, words):
    with pytest.raises(AttentionProblemError) as e:
        AttentionProblem(**GPT, strides=strides)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_inputs_may_broadcast_but_bf16_strides_need_8_elements():
    AttentionProblem(**GPT, strides={"k": (786432, 0, 1536)})             # heads sharing one K: reads only
    with pytest.raises(AttentionProblemError, match="multiple of 16 bytes"):
        AttentionProblem(**{**GPT, "dtype": "bf16"}, strides={"q": (786432, 68, 1536)})


def test_launcher_plans_strided_views_in_place_and_copies_the_rest():
    torch = pytest.importorskip("torch")
    from nova.bench.attention import STRIDED_GPU_CASES, all_kernels, strided_kernels, strided_operands
    from nova.kernels.attention.launch import plan_operands
    for case in STRIDED_GPU_CASES:
        t = strided_operands(case, torch)
        p, copies = plan_operands(t["q"], t["k"], t["v"], case[6], **{n: t[n] for n in ("out", "dout", "dq", "dk", "dv")})
        if case[-1] == "padded":
            assert set(copies) == set(OPERANDS) and p.strides == () and all("16 bytes" in w for w in copies.values())
        else:
            assert copies == {} and {n for n, _ in p.strides} == set(OPERANDS)      # every one a strided view
        assert set(strided_kernels(case)) <= set(all_kernels())        # nova.bench.attention --precompile builds them
    x = torch.empty(1, 2, 64, 64, device="meta").transpose(2, 3)
    _, copies = plan_operands(x, x, x)
    assert "head dimension is not contiguous" in copies["q"]


# ---- derivation -------------------------------------------------------------------------------
CFG_CASES = [(t, dt, d) for t in ("rtx3060", "a100", "h200") for dt in ("tf32", "bf16", "fp16") for d in (64, 128)]


@pytest.mark.parametrize("target, dtype, D", CFG_CASES)
def test_derivation_fits_the_hardware(target, dtype, D):
    gpu = PRESETS[target]
    p = AttentionProblem(4, 8, 1000, 1000, D, causal=True, dtype=dtype)
    cfg = configure_attention(p, gpu)
    s = cfg.schedule
    assert check_attention_schedule(p, s, gpu) == []
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        k = s.kernel(role)
        assert k.smem_bytes >= smem_plan(p, k)["total"]
        assert k.smem_bytes <= gpu.smem_per_block                          # smem fits
        assert k.regs_per_thread <= gpu.max_regs_per_thread                # registers fit
        assert k.block_rows % (16 * k.warps) == 0 and k.block_cols % 16 == 0   # tiles divide warps / MMA rows
        assert k.blocks_per_sm * (k.smem_bytes + gpu.smem_reserved_per_block) <= gpu.smem_per_sm
        assert 2 <= k.stages <= 3
    assert s.dq_mode == "separate"
    assert cfg.prediction.time_us > cfg.prediction.floor_us > 0
    steps = [st.step for st in cfg.derivation]
    assert steps[0] == "1 instruction" and any(st.startswith("2 exp vs MMA") for st in steps)
    assert all(st.formula and st.reason for st in cfg.derivation)


def test_derivation_is_deterministic_and_causal_skips_tiles(monkeypatch):
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "off")        # both on the mma.sync forward: like with like
    p = AttentionProblem(8, 4, 2048, 2048, 64, causal=True, dtype="bf16")
    a, b = configure_attention(p, "h200"), configure_attention(p, "h200")
    assert a.schedule == b.schedule
    full = configure_attention(AttentionProblem(8, 4, 2048, 2048, 64, dtype="bf16"), "h200")
    assert a.terms["fwd"]["tensor-core"] < 0.6 * full.terms["fwd"]["tensor-core"]


def test_schedule_round_trips_json():
    from nova.kernels.attention.schedule import AttentionSchedule
    s = configure_attention(AttentionProblem(2, 2, 64, 64, 128, dtype="fp16"), "a100").schedule
    assert AttentionSchedule.from_dict(json.loads(json.dumps(s.to_dict()))) == s


# ---- MLIR and PTX -------------------------------------------------------------------------------
mlir = pytest.importorskip("mlir.ir", reason="MLIR Python bindings not installed")


def test_module_text_parses_and_holds_the_pieces(monkeypatch):
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "off")         # the mma.sync forward on the H200
    p = AttentionProblem(2, 4, 100, 100, 64, causal=True, dtype="bf16", kv_heads=2)
    s = configure_attention(p, "h200").schedule
    text = build_module(p, s, "fwd")
    assert "gpu.func @nova_attn_fwd(" in text and "nvgpu.device_async_copy" in text
    assert "nvvm.mma.sync" in text and "ex2.approx" in text and "gpu.shuffle xor" in text
    with mlir.Context():
        mlir.Module.parse(text).operation.verify()
    t32 = build_module(AttentionProblem(1, 1, 64, 64, 64, dtype="tf32"), configure_attention(
        AttentionProblem(1, 1, 64, 64, 64, dtype="tf32"), "a100").schedule, "bwd_dkv")
    assert "rna" in t32 and "tf32Enabled" in t32


def test_module_text_addresses_the_strides(monkeypatch):
    """Strided operands are 1-D memrefs over their extent, addressed b*sB + h*sH + t*sT + d; contiguous
    ones row*D + d (the flat row the kernels always used); lse and delta stay [B*H*T] FP32."""
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "off")         # the mma.sync forward on the H200
    monkeypatch.setenv("NOVA_ATTENTION_SPLIT_KV", "0")         # unsplit: the outputs in place (splits: their combines)
    kw = dict(causal=True, dtype="bf16", kv_heads=2)
    p = AttentionProblem(2, 4, 100, 100, 64, **kw, strides=fused_strides(2, 4, 2, 100, 64))
    plain = AttentionProblem(2, 4, 100, 100, 64, **kw)
    s = configure_attention(p, "h200").schedule
    for role in ROLES:
        text = build_module(p, s, role)
        for n in ROLE_OPERANDS[role]:
            assert f"%{n}: memref<{p.extent(n)}xbf16>" in text
        assert ("%lse: memref<800xf32>" in text) == (role != "bwd_pre")
        with mlir.Context():
            mlir.Module.parse(text).operation.verify()
    fwd, fwd_plain = build_module(p, s, "fwd"), build_module(plain, s, "fwd")
    assert "%q: memref<51200xbf16>" in fwd_plain and "%out: memref<51200xbf16>" in fwd
    # q's sB = T*(H + 2*Hkv)*D = 51200 and sT = 512 are index constants of the strided kernel only
    assert "%c51200 = arith.constant 51200 : index" in fwd and "arith.muli %q0, %c512 : index" in fwd
    assert "%c51200 =" not in fwd_plain and "%cp_roff = arith.muli %cp_grow, %c64 : index" in fwd_plain   # (row + r)*D
    pre, pre_plain = build_module(p, s, "bwd_pre"), build_module(plain, s, "bwd_pre")
    assert "arith.divui %row, %c100" in pre and "%c100" not in pre_plain          # dout's (b*H + h, t) of its row


STRIDED_PTX_CASES = [("fwd", "tf32", 64, 1, "h200"), ("bwd_dkv", "bf16", 64, 2, "h200"), ("bwd_dq", "tf32", 128, 1, "a100"),
                     ("bwd_pre", "bf16", 64, 1, "rtx3060"), ("bwd_dkv", "tf32", 64, 2, "rtx3060"),
                     ("fwd", "bf16", 128, 2, "a100")]


@needs_ptxas
@pytest.mark.parametrize("role, dtype, D, group, target", STRIDED_PTX_CASES)
def test_strided_kernels_assemble_without_spills(role, dtype, D, group, target):
    """A GPT step's layout (fused q/k/v and gradients, transposed dout): no spills, the predicted
    occupancy, and at most a few registers beyond the contiguous kernel (measured: -19..+14)."""
    from nova.kernels.attention.compile import compile_kernel
    kw = dict(causal=True, dtype=dtype, kv_heads=4 // group)
    p = AttentionProblem(2, 4, 333, 333, D, **kw, strides=fused_strides(2, 4, 4 // group, 333, D))
    gpu = PRESETS[target]
    s = configure_attention(p, gpu).schedule
    r = compile_kernel(p, s, role).resources
    base = compile_kernel(AttentionProblem(2, 4, 333, 333, D, **kw), s, role).resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    k = s.kernel(role)
    per_warp = -(-r["registers"] * 32 // 256) * 256
    assert k.blocks_per_sm * k.warps * per_warp <= gpu.regs_per_sm, (r["registers"], k.blocks_per_sm)
    assert r["registers"] <= base["registers"] + 16, (r["registers"], base["registers"])


# the configurator's schedules for the benchmark shapes (and ragged/GQA variants), assembled by ptxas
PTX_CASES = [
    ("fwd", "bf16", 64, True, 1), ("bwd_dkv", "bf16", 64, True, 1), ("bwd_dq", "fp16", 64, False, 1),
    ("fwd", "tf32", 64, True, 1), ("bwd_dkv", "tf32", 64, True, 2), ("bwd_dq", "tf32", 64, True, 1),
    ("fwd", "fp16", 128, False, 2), ("bwd_dkv", "bf16", 128, True, 1), ("bwd_pre", "tf32", 128, False, 1),
]


@needs_ptxas
@pytest.mark.parametrize("role, dtype, D, causal, group", PTX_CASES)
def test_lowers_and_assembles_without_spills(role, dtype, D, causal, group):
    from nova.kernels.attention.compile import compile_kernel
    p = AttentionProblem(2, 4, 333, 333, D, causal=causal, dtype=dtype, kv_heads=4 // group)
    gpu = PRESETS["h200"]
    s = configure_attention(p, gpu).schedule
    art = compile_kernel(p, s, role)
    r = art.resources
    assert art.name == KERNEL_NAMES[role] and ".target sm_90" in art.ptx
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    assert not wgmma_hazards(r), r["ptxas_info"]
    k = s.kernel(role)
    assert art.smem_bytes == k.smem_bytes and art.grid == tuple(k.grid) and art.block == (k.threads, 1, 1)
    per_warp = -(-r["registers"] * 32 // 256) * 256                 # the predicted occupancy holds
    assert k.blocks_per_sm * k.warps * per_warp <= gpu.regs_per_sm, (r["registers"], k.blocks_per_sm)


def test_artifact_round_trips_through_the_cache(tmp_path):
    from nova.codegen.artifact import KernelArtifact
    from nova.kernels.attention.compile import attention_key, get_or_compile
    from nova.runtime.cache import KernelCache, NotPrecompiledError
    p = AttentionProblem(1, 2, 17, 17, 64, dtype="fp16")
    gpu = PRESETS["h200"]
    s = configure_attention(p, gpu).schedule
    cache = KernelCache(tmp_path)
    with pytest.raises(NotPrecompiledError):
        get_or_compile(p, s, "bwd_pre", gpu, cache, offline=True)
    art, key, status = get_or_compile(p, s, "bwd_pre", gpu, cache, offline=False)
    assert status == "compiled" and key == attention_key(p, s, "bwd_pre", gpu)
    again, _, status = get_or_compile(p, s, "bwd_pre", gpu, cache, offline=True)
    assert status == "cached" and isinstance(again, KernelArtifact) and again.ptx == art.ptx
    assert key != attention_key(p, s, "fwd", gpu)


# ---- CLI ----------------------------------------------------------------------------------------
def test_cli_explain_attention(capsys):
    from nova.cli.config import main
    assert main(["explain", "attention", "32,8,512,64", "--causal", "--target", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["op"] == "attention" and out["problem"]["causal"] is True
    assert out["schedule"]["fwd"]["block_rows"] % 16 == 0 and out["derivation"]
    assert main(["explain", "attention", "32,8,512,96", "--target", "h200"]) == 2
    assert "head_dim" in capsys.readouterr().err


# ---- 3xtf32 scores (problem.score_precision) ---------------------------------------------------
def test_split_scores_are_a_tf32_problem_option():
    from nova.kernels.attention.problem import AttentionProblemError
    p = AttentionProblem(2, 4, 64, 64, 64, dtype="tf32", score_precision="3xtf32")
    assert p.split_scores and p.to_dict()["score_precision"] == "3xtf32" and "3xtf32" in p.describe()
    assert "score_precision" not in AttentionProblem(2, 4, 64, 64, 64).to_dict()     # old keys unchanged
    with pytest.raises(AttentionProblemError, match="tf32 attention only"):
        AttentionProblem(2, 4, 64, 64, 64, dtype="bf16", score_precision="3xtf32")
    with pytest.raises(AttentionProblemError, match="score_precision"):
        AttentionProblem(2, 4, 64, 64, 64, score_precision="fp64")


def test_split_scores_cost_two_more_matmuls_per_pair(monkeypatch):
    from nova.kernels.attention.derive import GEMMS, gemms_per_pair
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "off")      # the same (mma.sync) kernels: single TF32 runs on wgmma
    one = AttentionProblem(32, 8, 512, 512, 64, causal=True)
    three = AttentionProblem(32, 8, 512, 512, 64, causal=True, score_precision="3xtf32")
    for role in ("fwd", "bwd_dq", "bwd_dkv"):
        assert gemms_per_pair(one, role) == GEMMS[role] and gemms_per_pair(three, role) == GEMMS[role] + 2
    gpu = PRESETS["h200"]
    t1, t3 = configure_attention(one, gpu).prediction.time_us, configure_attention(three, gpu).prediction.time_us
    assert 1.2 * t1 < t3 < 2.0 * t1, (t1, t3)


def test_environment_states_the_score_precision(monkeypatch):
    from nova.kernels.attention.problem import AttentionProblemError, score_precision_for
    monkeypatch.delenv("NOVA_ATTENTION_PRECISION", raising=False)
    assert score_precision_for("tf32") == "tf32" and score_precision_for("bf16") == "tf32"      # the default
    monkeypatch.setenv("NOVA_ATTENTION_PRECISION", "3xtf32")
    assert score_precision_for("tf32") == "3xtf32" and score_precision_for("bf16") == "tf32"
    monkeypatch.setenv("NOVA_ATTENTION_PRECISION", "fast")
    with pytest.raises(OptionError, match="NOVA_ATTENTION_PRECISION"):
        score_precision_for("tf32")


@needs_ptxas
@pytest.mark.parametrize("role", ["fwd", "bwd_dkv", "bwd_dq"])
@pytest.mark.parametrize("D, causal, group", [(64, True, 1), (128, False, 2)])
def test_split_score_kernels_assemble_without_spills(role, D, causal, group):
    """Each score MMA becomes three (small*big, big*small, big*big) on fragments split in registers:
    on the same tiles, the kernel's MMAs grow from GEMMS to GEMMS + 2 per pair; no spills at the
    derived schedule's occupancy."""
    from nova.kernels.attention.compile import compile_kernel
    from nova.kernels.attention.derive import GEMMS
    gpu = PRESETS["h200"]
    problems = {pr: AttentionProblem(2, 4, 333, 333, D, causal=causal, kv_heads=4 // group, score_precision=pr)
                for pr in ("tf32", "3xtf32")}
    s = configure_attention(problems["3xtf32"], gpu).schedule
    art = compile_kernel(problems["3xtf32"], s, role)
    r, k = art.resources, s.kernel(role)
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    per_warp = -(-r["registers"] * 32 // 256) * 256
    assert k.blocks_per_sm * k.warps * per_warp <= gpu.regs_per_sm, (r["registers"], k.blocks_per_sm)
    single = compile_kernel(problems["tf32"], s, role, cubin=False)          # the same tiles, one score MMA
    count = {pr: a.ptx.count("mma.sync.aligned.m16n8k8") for pr, a in (("3xtf32", art), ("tf32", single))}
    assert count["3xtf32"] * GEMMS[role] == count["tf32"] * (GEMMS[role] + 2), count


@needs_ptxas
@pytest.mark.parametrize("role", ["fwd", "bwd_dkv", "bwd_dq"])
@pytest.mark.parametrize("D, causal, group", [(64, True, 1), (128, False, 2)])
def test_fp32_kernels_split_every_product_without_spills(role, D, causal, group):
    """Precision "fp32": every MMA of every product becomes three on split fragments (the kept tiles,
    the register-held P and dS, the streamed tiles), no spills at the derived schedule."""
    from nova.kernels.attention.compile import compile_kernel
    gpu = PRESETS["h200"]
    problems = {pr: AttentionProblem(2, 4, 333, 333, D, causal=causal, kv_heads=4 // group, score_precision=pr)
                for pr in ("tf32", "fp32")}
    s = configure_attention(problems["fp32"], gpu).schedule
    assert not s.tma
    art = compile_kernel(problems["fp32"], s, role)
    r, k = art.resources, s.kernel(role)
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    per_warp = -(-r["registers"] * 32 // 256) * 256
    assert k.blocks_per_sm * k.warps * per_warp <= gpu.regs_per_sm, (r["registers"], k.blocks_per_sm)
    single = compile_kernel(problems["tf32"], s, role, cubin=False)
    count = {pr: a.ptx.count("mma.sync.aligned.m16n8k8") for pr, a in (("fp32", art), ("tf32", single))}
    assert count["fp32"] == 3 * count["tf32"], count
    assert "cvt.rna.tf32" not in art.ptx            # nothing rounded: every operand split instead


@needs_ptxas
@pytest.mark.parametrize("target", ["a100", "rtx3060"])
def test_fp32_kernels_assemble_without_spills_on_the_mma_sync_generation(target):
    """The same fp32 kernels at sm_80 / sm_86's derived schedules: no spills (ptxas)."""
    from nova.kernels.attention.compile import compile_kernel
    p = AttentionProblem(1, 4, 130, 130, 128, kv_heads=2, score_precision="fp32")
    s = configure_attention(p, PRESETS[target]).schedule
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        r = compile_kernel(p, s, role).resources
        assert r["spill_store_bytes"] == 0 and r["stack_bytes"] == 0, (role, r)


def test_fp32_precision_is_stated_and_priced():
    from nova.kernels.attention.derive import GEMMS, gemms_per_pair
    p = AttentionProblem(32, 8, 512, 512, 64, causal=True, score_precision="fp32")
    assert p.split_all and p.split_scores and "fp32-products" in p.describe() and p.to_dict()["score_precision"] == "fp32"
    assert all(gemms_per_pair(p, role) == 3 * GEMMS[role] for role in GEMMS)
    gpu = PRESETS["h200"]
    three = configure_attention(AttentionProblem(32, 8, 512, 512, 64, causal=True, score_precision="3xtf32"), gpu)
    every = configure_attention(p, gpu)
    assert not every.schedule.tma and "fp32" in {st.step: st for st in every.derivation}["10 fwd path"].reason
    assert every.prediction.time_us > 1.2 * three.prediction.time_us


# ---- the Hopper forward ----------------------------------------------------------------------------
BENCH = [(32, 8, 512, 64), (16, 12, 1024, 64), (8, 16, 2048, 128)]


@pytest.mark.parametrize("shape", BENCH)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("persistent", [True, False])
def test_hopper_forward_is_derived_for_16_bit_on_the_h200(shape, dtype, persistent, monkeypatch):
    """bf16/fp16 on the H200: step 10's Hopper forward (TMA + wgmma, 128 query rows = 2 consumer
    warpgroups x 64, a producer warpgroup, 128-key tiles, setmaxnreg 40/232, one block per SM), taken
    where predicted faster than the mma.sync forward.  Persistent (the default where work tiles
    outnumber the SMs, as in all three): everywhere (CUDA-graph replay on the H200, bench/results/h200-2026-12-01/c/call6: 43 vs 62,
    89 vs 136, 327 vs 568 us).  One block per query tile (NOVA_ATTENTION_PERSISTENT=0): at D128 (313
    vs 575 us), not at D64 (its per-block cost fitted to event timings, bench/results/h200-2026-12-01/b)."""
    from nova.kernels.attention.build_hopper import smem_plan_hopper
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER", raising=False)
    monkeypatch.setenv("NOVA_ATTENTION_PERSISTENT", "1" if persistent else "0")
    b, h, t, d = shape
    p = AttentionProblem(b, h, t, t, d, causal=True, dtype=dtype)
    gpu = PRESETS["h200"]
    auto = configure_attention(p, gpu)
    auto_path = {st.step: st for st in auto.derivation}["10 fwd path"]
    wgmma = persistent or d == 128
    assert auto.schedule.tma == wgmma and auto_path.value == ("wgmma + TMA" if wgmma else "mma.sync")
    assert ("<" if wgmma else ">=") in auto_path.reason
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    cfg = configure_attention(p, gpu)
    s, k = cfg.schedule, cfg.schedule.fwd
    assert s.tma and k.hopper and k.block_rows == 128 and k.consumer_warpgroups == 2 and k.producer_warps == 4
    assert k.block_cols == 128 and k.threads == 384 and k.smem_layout == "swizzle128"
    assert (k.producer_regs, k.consumer_regs) == (40, 232) and k.regs_per_thread * k.threads <= gpu.regs_per_sm
    assert k.smem_bytes == smem_plan_hopper(p, 128, 128, k.stages)["total"] <= gpu.smem_per_block
    assert k.persistent == persistent and 2 <= k.stages <= 4
    assert k.grid == ((132, 1, 1) if persistent else (-(-t // 128), b * h, 1))
    assert check_attention_schedule(p, s, gpu) == []
    steps = {st.step: st for st in cfg.derivation}
    assert steps["10 fwd path"].value == "wgmma + TMA" and "step 11" in steps["10 fwd path"].reason
    assert all(st.formula and st.reason for st in cfg.derivation)
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "off")
    off = configure_attention(p, gpu)
    assert not off.schedule.tma and not off.schedule.fwd.hopper
    assert off.schedule.bwd_pre == s.bwd_pre and not any(off.schedule.kernel(r).hopper for r in ROLES)
    assert (cfg.terms["fwd"]["time_us"] < off.terms["fwd"]["time_us"]) == wgmma
    assert steps["10 fwd path"].value == "wgmma + TMA"


@pytest.mark.parametrize("shape", BENCH[:2])
def test_hopper_forward_is_derived_for_tf32_on_the_h200(shape, monkeypatch):
    """TF32 on the H200: the Hopper forward with the producer's V^T copy (a ring slot holds K, V and
    V^T: 128-key tiles fit twice beside Q at D64), taken where predicted faster than mma.sync; the
    backward's kernels likewise with their transposes."""
    from nova.kernels.attention.build_hopper import smem_plan_hopper
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER", raising=False)
    b, h, t, d = shape
    p = AttentionProblem(b, h, t, t, d, causal=True, dtype="tf32")
    gpu = PRESETS["h200"]
    cfg = configure_attention(p, gpu)
    s, k = cfg.schedule, cfg.schedule.fwd
    steps = {st.step: st for st in cfg.derivation}
    assert s.tma and k.hopper and k.block_rows == 128 and k.block_cols == 128 and k.stages == 2
    plan = smem_plan_hopper(p, 128, 128, 2)
    assert plan["stage"] == 3 * 128 * 64 * 4 and k.smem_bytes == plan["total"] <= gpu.smem_per_block
    assert "m64nNk8" in steps["10 fwd instruction"].value and "V^T" in steps["10 fwd instruction"].reason
    assert check_attention_schedule(p, s, gpu) == []
    # the backward on wgmma too (with TF32 mma.sync at its calibrated 0.36 of the wgmma rate; at half,
    # the T512 dK/dV was a 0.3% tie for mma.sync, measured 138 vs 187 us), each with the producer's
    # transposes in its ring (K^T; Q^T and dO^T)
    assert s.bwd_dq.hopper and s.bwd_dkv.hopper
    assert "K^T" in steps["11 bwd_dq instruction"].reason and "Q^T and dO^T" in steps["11 bwd_dkv instruction"].reason
    # TF32: the producer keeps 88 (3 transposes in flight), the consumers the 208 left; the forward 40
    assert (s.bwd_dq.producer_regs, s.bwd_dq.consumer_regs, s.bwd_dq.transpose_in_flight) == (88, 208, 3)
    assert s.bwd_dq.block_cols == 64 and (k.producer_regs, k.transpose_in_flight) == (40, 1)
    off_steps = {st.step: st for st in configure_attention(p, gpu).derivation}
    assert off_steps["10 fwd path"].value == "wgmma + TMA"
    # 3xtf32 scores stay on the mma.sync forward
    split = configure_attention(AttentionProblem(b, h, t, t, d, causal=True, score_precision="3xtf32"), gpu)
    assert not split.schedule.tma and "3xtf32" in {st.step: st for st in split.derivation}["10 fwd path"].reason


def test_tf32_score_accumulators_are_the_a_fragment_of_permuted_keys():
    """The TF32 forward's O += P V without a shuffle: each thread's S accumulators of an 8-key group
    (m64nN layout, CUTLASS CLayout_64xN: d[2h + c] = S[g + 8h, 2t + c]) taken in the order 0, 2, 1, 3
    are the m64k8 register A fragment (ALayout_64x8: (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)) of
    a matrix whose k index is the key permuted by ``vt_position``; V^T holds V's rows in that order,
    so the product is P V exactly."""
    from nova.kernels.attention.build_hopper import vt_position
    rng = np.random.default_rng(0)
    keys, n = 32, 16
    P, V = rng.standard_normal((16, keys)), rng.standard_normal((keys, n))
    assert sorted(vt_position(x) for x in range(keys)) == list(range(keys))
    Vt = np.empty_like(V)
    for key in range(keys):
        Vt[vt_position(key)] = V[key]                       # B's row k = the key at position k
    A = np.full((16, keys), np.nan)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(keys // 8):
            acc = [P[g + 8 * h, 8 * j + 2 * t + c] for h in (0, 1) for c in (0, 1)]   # d[4j + 2h + c]
            frag = [acc[i] for i in (0, 2, 1, 3)]
            for (row, kk), x in zip(((g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)), frag):
                A[row, 8 * j + kk] = x
    assert not np.isnan(A).any()
    np.testing.assert_allclose(A @ Vt, P @ V, rtol=1e-12)


def test_hopper_forward_falls_back_with_a_reason(monkeypatch):
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER", raising=False)
    why = lambda cfg: {st.step: st for st in cfg.derivation}["10 fwd path"]
    # a broadcast K/V head (stride 0) cannot be a tensor map
    bc = AttentionProblem(2, 4, 256, 256, 64, dtype="bf16", strides={"k": (256 * 64, 0, 64), "v": (256 * 64, 0, 64)})
    cfg = configure_attention(bc, "h200")
    assert not cfg.schedule.tma and "stride is 0" in why(cfg).reason
    # no wgmma: no step 10 at all (the A100's derivation is what it was)
    a100 = configure_attention(AttentionProblem(32, 8, 512, 512, 64, causal=True, dtype="bf16"), "a100")
    assert not a100.schedule.tma and not any(st.step.startswith("10 ") for st in a100.derivation)
    # small problems stay on mma.sync by the model; force takes the Hopper kernel wherever it runs
    tiny = AttentionProblem(1, 2, 1, 1, 64, causal=True, dtype="fp16")
    assert not configure_attention(tiny, "h200").schedule.tma
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    assert configure_attention(tiny, "h200").schedule.tma
    assert configure_attention(AttentionProblem(1, 2, 1, 1, 64), "h200").schedule.tma          # TF32 too
    assert not configure_attention(AttentionProblem(1, 2, 1, 1, 64, score_precision="3xtf32"), "h200").schedule.tma
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "sometimes")
    with pytest.raises(OptionError, match="NOVA_ATTENTION_HOPPER"):
        configure_attention(tiny, "h200")


def test_hopper_module_text(monkeypatch):
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    p = AttentionProblem(2, 4, 100, 100, 128, causal=True, dtype="bf16", kv_heads=2,
                         strides={"out": (100 * 4 * 128, 128, 4 * 128)})
    s = configure_attention(p, "h200").schedule
    text = build_module(p, s, "fwd")
    for piece in ("%tmap_q: !llvm.ptr", "nvgpu.tma.async.load", "nvvm.setmaxregister decrease 40",
                  "nvvm.setmaxregister increase 232", '"nvvm.wgmma.mma_async"', "m64n128k16.f32.bf16.bf16",
                  "nvgpu.mbarrier.try_wait.parity", "ex2.approx", "gpu.shuffle xor", "%lse: memref<800xf32>",
                  f"%out: memref<{p.extent('out')}xbf16>", "memref<1x1x128x64xbf16, #smem>"):
        assert piece in text, piece
    assert "nvgpu.device_async_copy" not in text and "mma.sync" not in text
    with mlir.Context():
        mlir.Module.parse(text).operation.verify()
    # bwd_pre of the same schedule is the mma.sync kernel's text (dK/dV and dQ: the Hopper backward, below)
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "off")
    off = configure_attention(p, "h200").schedule
    assert build_module(p, s, "bwd_pre") == build_module(p, off, "bwd_pre")


def test_hopper_tf32_module_text(monkeypatch):
    """TF32: S and P V are k8 wgmmas, P V's A from registers without the transpose immediate, the
    producer's transposer warps (vt_full barriers, the async-proxy fence), P rounded by integer add
    and mask, O stored as FP32 (no truncation)."""
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    p = AttentionProblem(2, 4, 100, 100, 64, causal=True, dtype="tf32", kv_heads=2)
    s = configure_attention(p, "h200").schedule
    text = build_module(p, s, "fwd")
    bc = s.fwd.block_cols
    for piece in (f"k = 8>", "typeA = #nvvm.wgmma_type<tf32>", "m64n64k8.f32.tf32.tf32", "p, 1, 1;",
                  "%vt_full = nvgpu.mbarrier.create", "nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>",
                  "arith.cmpi sge, %tid, %c32", "arith.andi %p_up", "memref<1x1x128x32xf32, #smem>",
                  f"memref<{bc * 64}xf32, #smem>"):
        assert piece in text, piece
    assert "arith.truncf" not in text and "vector<2xbf16>" not in text
    with mlir.Context():
        mlir.Module.parse(text).operation.verify()


HOPPER_PTX_CASES = [("bf16", 64, True, 1, 333), ("bf16", 128, False, 2, 333), ("fp16", 64, False, 1, 200),
                    ("fp16", 128, True, 3, 300), ("bf16", 128, True, 1, 1), ("fp16", 64, True, 2, 150),
                    ("tf32", 64, True, 1, 333), ("tf32", 128, False, 2, 200)]


@needs_ptxas
@pytest.mark.parametrize("dtype, D, causal, group, T", HOPPER_PTX_CASES)
def test_hopper_forward_assembles_without_spills(dtype, D, causal, group, T, monkeypatch):
    """sm_90a, no spills (the consumers' 232 registers after setmaxnreg hold S, P and O of a 128-key
    tile), 384 threads of 168 registers at launch (one block per SM), the wgmma count: D/k for
    S = Q K^T and BC/k for O += P V per tile (k = 16, TF32 8)."""
    from nova.kernels.attention.compile import compile_kernel
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    p = AttentionProblem(1, 3 if group == 3 else 4, T, T, D, causal=causal, dtype=dtype, kv_heads=(3 if group == 3 else 4) // group)
    gpu = PRESETS["h200"]
    s = configure_attention(p, gpu).schedule
    art = compile_kernel(p, s, "fwd")
    r, k = art.resources, s.fwd
    assert ".target sm_90a" in art.ptx and art.arch == "sm_90a" and art.params[:3] == ("tmap_q", "tmap_k", "tmap_v")
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    assert not wgmma_hazards(r), r["ptxas_info"]
    assert r["registers"] <= k.regs_per_thread and art.block == (384, 1, 1) and art.smem_bytes == k.smem_bytes
    kstep = 8 if dtype == "tf32" else 16
    assert art.ptx.count("wgmma.mma_async") == D // kstep + k.block_cols // kstep
    assert art.ptx.count("cp.async.bulk.tensor.4d") >= 3 * D // 64          # Q, K, V boxes (LLVM may unroll)


def test_cli_explain_shows_the_hopper_forward(capsys, monkeypatch):
    from nova.cli.config import main
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER", raising=False)
    assert main(["explain", "attention", "8,16,2048,128", "--causal", "--dtype", "bf16", "--target", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schedule"]["tma"] is True and out["schedule"]["fwd"]["consumer_warpgroups"] == 2
    rows = {d["step"]: d for d in out["derivation"]}
    assert rows["10 fwd path"]["value"] == "wgmma + TMA" and "10 fwd time (Hopper)" in rows
    assert main(["explain", "attention", "8,16,2048,128", "--causal", "--dtype", "bf16", "--target", "h200"]) == 0
    text = capsys.readouterr().out
    assert "10 fwd path" in text and "wgmma + TMA" in text


# ---- the Hopper backward ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", BENCH)
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_hopper_backward_is_derived_for_16_bit_on_the_h200(shape, dtype, monkeypatch):
    """bf16/fp16 on the H200: step 11 puts dK/dV and dQ on TMA + wgmma (128 kept rows = 2 consumer
    warpgroups x 64, a producer warpgroup, setmaxnreg 32/232 for dK/dV and 24/240 for dQ: what the block
    holds at launch, 384 x 168); D128 dK/dV takes 24/240 too, for 64-row query tiles (240 registers
    estimated; 32 rows at 232, 7% slower by the model); bwd_pre stays; ``off`` keeps every kernel on
    mma.sync."""
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER_BWD", raising=False)     # on by default
    from nova.kernels.attention.build_hopper_bwd import smem_plan_hopper_bwd
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")        # the structure, wherever the model puts it
    b, h, t, d = shape
    p = AttentionProblem(b, h, t, t, d, causal=True, dtype=dtype)
    gpu = PRESETS["h200"]
    cfg = configure_attention(p, gpu)
    s = cfg.schedule
    assert check_attention_schedule(p, s, gpu) == []
    steps = {st.step: st for st in cfg.derivation}
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "off")
    off = configure_attention(p, gpu)
    assert not any(off.schedule.kernel(r).hopper for r in ROLES) and not any(st.step.startswith("11 ")
                                                                            for st in off.derivation)
    for role in ("bwd_dkv", "bwd_dq"):
        k = s.kernel(role)
        assert k.hopper and k.block_rows == 128 and k.consumer_warpgroups == 2 and k.threads == 384
        want = {"bwd_dkv": (24, 240) if d == 128 else (32, 232), "bwd_dq": (24, 240)}[role]
        assert (k.producer_regs, k.consumer_regs) == want
        assert k.regs_per_thread == 168 and k.regs_per_thread * k.threads <= gpu.regs_per_sm
        # setmaxnreg moves registers inside the block's launch allocation: more would hang the consumers
        assert 128 * (k.producer_regs + 2 * k.consumer_regs) <= k.threads * k.regs_per_thread
        assert k.block_cols in (32, 64, 128) and 2 <= k.stages <= 4 and k.smem_layout == "swizzle128"
        assert k.smem_bytes == smem_plan_hopper_bwd(p, role, 128, k.block_cols, k.stages)["total"] <= gpu.smem_per_block
        kv = role == "bwd_dkv"
        assert k.grid == (-(-t // 128), b * h, 1)
        assert steps[f"11 {role} path"].value == "wgmma + TMA" and f"11 {role} time (Hopper)" in steps
        if kv:          # 128 query rows per tile would spill (registers, step 11)
            assert k.block_cols == 64
            assert "keeps {} (of 32, 24".format(want[0]) in steps["11 bwd_dkv consumer registers"].reason
    assert s.bwd_pre == off.schedule.bwd_pre
    assert all(st.formula and st.reason for st in cfg.derivation)


def test_hopper_backward_falls_back_with_a_reason(monkeypatch):
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER_BWD", raising=False)     # on by default
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER", raising=False)
    why = lambda cfg, role: {st.step: st for st in cfg.derivation}[f"11 {role} path"]
    split = configure_attention(AttentionProblem(32, 8, 512, 512, 64, causal=True, score_precision="3xtf32"), "h200")
    assert not any(split.schedule.kernel(r).hopper for r in ROLES)
    assert "3xtf32" in why(split, "bwd_dkv").reason and "3xtf32" in why(split, "bwd_dq").reason
    # TF32 D128: no tile of two consumer warpgroups fits (a slot of Q, dO, Q^T, dO^T beside 128-row K, V);
    # one warpgroup's 64-row K, V leave room for 32-query tiles (step 11 lists what it tried)
    d128 = configure_attention(AttentionProblem(8, 16, 2048, 2048, 128, causal=True), "h200")
    k = d128.schedule.bwd_dkv
    assert k.hopper and (k.block_rows, k.block_cols, k.consumer_warpgroups, k.threads) == (64, 32, 1, 256)
    assert (k.producer_regs, k.consumer_regs, k.regs_per_thread, k.transpose_in_flight) == (104, 240, 240, 4)
    tile = {st.step: st for st in d128.derivation}["11 bwd_dkv registers"].reason
    assert "128x64 (40/232): 256 regs" in tile and "64x32:" in tile
    # a D64 TF32 dK/dV never takes 32-query tiles (their 40-register producer spills; 64 fit and are faster)
    for b, h, t, causal in itertools.product((1, 8, 64), (2, 16), (1, 77, 512, 2048, 8192), (True, False)):
        k = configure_attention(AttentionProblem(b, h, t, t, 64, causal=causal), "h200").schedule.bwd_dkv
        assert not k.hopper or (k.block_cols, k.consumer_warpgroups) == (64, 2), (b, h, t, causal)
    # a broadcast dout (stride 0) cannot be a tensor map: the backward stays, the forward need not
    bc = AttentionProblem(2, 4, 256, 256, 64, causal=True, dtype="bf16", strides={"dout": (0, 256 * 64, 64)})
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    cfg = configure_attention(bc, "h200")
    assert cfg.schedule.tma and not cfg.schedule.bwd_dkv.hopper and not cfg.schedule.bwd_dq.hopper
    assert "dout's B stride is 0" in why(cfg, "bwd_dq").reason
    # no wgmma: no step 11 (the A100's derivation is what it was)
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER")
    a100 = configure_attention(AttentionProblem(32, 8, 512, 512, 64, causal=True, dtype="bf16"), "a100")
    assert not any(st.step.startswith("11 ") for st in a100.derivation)
    # force takes the Hopper backward wherever it runs (T = 1 included); an experiment's tile stays mma.sync
    tiny = AttentionProblem(1, 2, 1, 1, 64, causal=True, dtype="fp16")
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    s = configure_attention(tiny, "h200").schedule
    assert s.bwd_dkv.hopper and s.bwd_dq.hopper
    ex = configure_attention(tiny, "h200", tiles={"bwd_dkv": (64, 64, 2, 1)})
    assert not ex.schedule.bwd_dkv.hopper and ex.schedule.bwd_dq.hopper


def test_hopper_backward_module_text(monkeypatch):
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER_BWD", raising=False)     # on by default
    from nova.kernels.attention.module import kernel_params
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    monkeypatch.setenv("NOVA_ATTENTION_SPLIT_KV", "0")         # unsplit: dK, dV written in place
    p = AttentionProblem(2, 4, 100, 100, 64, causal=True, dtype="bf16", kv_heads=2,
                         strides={"dk": (100 * 2 * 64, 64, 2 * 64), "dout": (100 * 4 * 64, 64, 4 * 64)})
    s = configure_attention(p, "h200").schedule
    for role, outs, regs in (("bwd_dkv", ("dk", "dv"), (32, 232)), ("bwd_dq", ("dq",), (24, 240))):
        text = build_module(p.for_role(role), s, role)
        assert kernel_params(s, role) == ("tmap_q", "tmap_k", "tmap_v", "tmap_dout", "lse", "delta") + outs
        for piece in ("%tmap_dout: !llvm.ptr", "nvgpu.tma.async.load", f"nvvm.setmaxregister decrease {regs[0]}",
                      f"nvvm.setmaxregister increase {regs[1]}", '"nvvm.wgmma.mma_async"', "m64n64k16.f32.bf16.bf16",
                      "nvgpu.mbarrier.try_wait.parity", "ex2.approx", "%lse: memref<800xf32>", "%delta: memref<800xf32>",
                      f"%{outs[0]}: memref<{p.extent(outs[0])}xbf16>"):
            assert piece in text, (role, piece)
        assert "nvgpu.device_async_copy" not in text and "mma.sync" not in text
        with mlir.Context():
            mlir.Module.parse(text).operation.verify()
    dkv = build_module(p.for_role("bwd_dkv"), s, "bwd_dkv")
    assert "nvgpu.mbarrier.arrive %full" in dkv and f"memref<{s.bwd_dkv.stages}x64xf32, #smem>" in dkv


HOPPER_BWD_PTX_CASES = [("bf16", 64, True, 1, 512), ("bf16", 128, True, 1, 333), ("fp16", 64, False, 1, 333),
                        ("bf16", 128, False, 2, 200), ("fp16", 128, True, 3, 300), ("bf16", 64, True, 1, 1),
                        ("fp16", 64, True, 2, 150), ("tf32", 64, True, 1, 512), ("tf32", 64, False, 2, 130),
                        ("tf32", 128, True, 1, 333), ("tf32", 128, False, 2, 200)]


@needs_ptxas
@pytest.mark.parametrize("dtype, D, causal, group, T", HOPPER_BWD_PTX_CASES)
def test_hopper_backward_assembles_without_spills(dtype, D, causal, group, T, monkeypatch):
    """sm_90a, no spills (the consumers' 232 (dK/dV) or 240 (dQ) registers after setmaxnreg hold dK and dV
    or dQ, S and dP; the producers' 32 or 24), setmaxnreg within the block's registers at launch,
    384 threads of 168 registers at launch, the wgmma count per tile: D/16 for each of S and dP, N/16 for
    each register-A product (dV and dK, or dQ); TMA boxes of q, k, v and dout.  TF32: k = 8 for all
    four (D/8, N/8), and the producer keeps 40 registers (its idle warps transpose tiles)."""
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER_BWD", raising=False)     # on by default
    from nova.kernels.attention.compile import compile_kernel
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    H = 3 if group == 3 else 4
    p = AttentionProblem(1, H, T, T, D, causal=causal, dtype=dtype, kv_heads=H // group)
    gpu = PRESETS["h200"]
    s = configure_attention(p, gpu).schedule
    for role, products in (("bwd_dkv", 2), ("bwd_dq", 1)):
        k = s.kernel(role)
        assert k.hopper             # D128 dK/dV with 32-row query tiles (64: 240 registers > 232)
        art = compile_kernel(p, s, role)
        r = art.resources
        assert ".target sm_90a" in art.ptx and art.arch == "sm_90a" and art.params[3] == "tmap_dout"
        assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, (role, r)
        # no warpgroup.arrive/wait injected (C7519/C7517: S and dP once serialised by their zeroed accumulators);
        # where the tile loop runs once (T = 1) LLVM folds it and zeroes dK/dV after the fence: one arrive, once
        if T > k.block_cols:
            assert not wgmma_hazards(r), (role, r["ptxas_info"])
        assert r["registers"] <= k.regs_per_thread and art.block == (k.threads, 1, 1) and art.smem_bytes == k.smem_bytes
        assert k.threads == 128 * (1 + k.consumer_warpgroups)      # TF32 D128 dK/dV: one consumer warpgroup
        kstep = 8 if dtype == "tf32" else 16
        assert art.ptx.count("wgmma.mma_async") == 2 * D // kstep + products * k.block_cols // kstep
        assert art.ptx.count("cp.async.bulk.tensor.4d") >= 4 * D // 64
        assert f"setmaxnreg.dec.sync.aligned.u32 \t{k.producer_regs}" in art.ptx
        assert f"setmaxnreg.inc.sync.aligned.u32 \t{k.consumer_regs}" in art.ptx
        assert 128 * (k.producer_regs + k.consumer_warpgroups * k.consumer_regs) <= k.threads * k.regs_per_thread


def test_cli_explain_shows_the_hopper_backward(capsys, monkeypatch):
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER_BWD", raising=False)     # on by default
    from nova.cli.config import main
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")        # the rows, wherever the model puts the kernels
    assert main(["explain", "attention", "32,8,512,64", "--causal", "--dtype", "bf16", "--target", "h200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for role in ("bwd_dkv", "bwd_dq"):
        assert out["schedule"][role]["consumer_warpgroups"] == 2
    rows = {d["step"]: d for d in out["derivation"]}
    assert rows["11 bwd_dkv path"]["value"] == "wgmma + TMA" and "11 bwd_dq time (Hopper)" in rows
    assert main(["explain", "attention", "32,8,512,64", "--causal", "--dtype", "bf16", "--target", "h200"]) == 0
    text = capsys.readouterr().out
    assert "11 bwd_dkv path" in text and "backward: wgmma + TMA" in text


def test_hopper_backward_is_on_by_default_and_the_switch_turns_it_off(monkeypatch):
    """Step 11 weighs the wgmma dK/dV and dQ by default; NOVA_ATTENTION_HOPPER_BWD=0 keeps them on
    mma.sync and the derivation says why; the forward's path is unaffected; a bad value is one clear
    error."""
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER", raising=False)
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER_BWD", "0")
    p = AttentionProblem(16, 12, 1024, 1024, 64, causal=True, dtype="bf16")
    off = configure_attention(p, "h200")
    assert not off.schedule.bwd_dkv.hopper and not off.schedule.bwd_dq.hopper
    row = next(st for st in off.derivation if st.step == "11 bwd_dkv path")
    assert row.value == "mma.sync" and "NOVA_ATTENTION_HOPPER_BWD=0" in row.reason
    monkeypatch.delenv("NOVA_ATTENTION_HOPPER_BWD")
    on = configure_attention(p, "h200")
    assert on.schedule.bwd_dkv.hopper and on.schedule.bwd_dq.hopper
    assert off.schedule.fwd == on.schedule.fwd
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER_BWD", "maybe")
    with pytest.raises(OptionError, match="NOVA_ATTENTION_HOPPER_BWD"):
        configure_attention(p, "h200")
