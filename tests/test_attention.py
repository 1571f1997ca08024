"""Fused attention on the host (no GPU): problem validation, the derivation's decisions, MLIR that
builds and lowers to PTX, ptxas resources (no spills) at the configurator's schedules, the CLI."""
from __future__ import annotations

import json
import shutil

import pytest

from nova.hwmodel import PRESETS
from nova.kernels.attention import (AttentionProblem, AttentionProblemError, check_attention_schedule,
                                    configure_attention)
from nova.kernels.attention.build import KERNEL_NAMES, build_module, smem_plan

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


def test_derivation_is_deterministic_and_causal_skips_tiles():
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


def test_module_text_parses_and_holds_the_pieces():
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
