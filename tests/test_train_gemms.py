"""The training-step GEMM suite (nova/bench/train_gemms.py) on the CPU: the capture of the step's
GEMMs and their roles and counts, the committed suite file, the JSON suite of ``nova precompile
gemm``, the summary and verdicts, the XLA call (jax on the CPU) and the no-GPU line."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nova.bench import train_gemms as tg
from nova.cli.shapes import read_suite_entries

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / tg.SUITE


@pytest.fixture(scope="module")
def tiny_planned():
    from nova.compiler.explain import plan_training_step
    planned, _ = plan_training_step("tiny", 2, 8)
    return planned


def test_roles_follow_the_layout_flags():
    assert tg.role(False, True) == "forward"          # Y = X·Wᵀ, W stored [N, K]
    assert tg.role(False, False) == "dX"              # dY·W, both row-major
    assert tg.role(True, False) == "dW"               # A stored [K, M]
    assert tg.role(True, True) == "other"


def test_tiny_step_gemms_are_the_precompiled_problems_with_their_launch_counts(tiny_planned):
    from nova.compiler.executor import Program
    from nova.compiler.precompile import step_kernels
    from nova.models.gpt import CONFIGS
    entries = tg.gemm_entries(tiny_planned, "tiny", 2, 8)
    problems = [tg.case_problem(e, "tf32") for e in entries]
    assert problems == step_kernels(tiny_planned)[0]
    assert sum(e["count"] for e in entries) == Program(tiny_planned, "meta").stats["nova_gemm_launches"]
    layers = CONFIGS["tiny"].n_layer
    for r in ("forward", "dX", "dW"):           # 4 linears per block + the LM head, in each role
        assert sum(e["count"] for e in entries if e["role"] == r) == 4 * layers + 1, r
    assert {e["role"] for e in entries} == {"forward", "dX", "dW"}
    assert all(e["role"] == tg.role(e["trans_a"], e["trans_b"]) for e in entries)
    assert {e["bias"] for e in entries if e["role"] == "forward"} == {True, False}     # the LM head has none
    assert not any(e["bias"] for e in entries if e["role"] != "forward")
    assert {(e["M"], e["N"], e["K"]) for e in entries if e["role"] == "forward" and not e["bias"]} == {(16, 96, 32)}


def test_suite_generation_is_deterministic(tiny_planned):
    entries = tg.step_gemms("tiny", 2, 8)          # a second capture of the same step
    assert entries == tg.gemm_entries(tiny_planned, "tiny", 2, 8)
    assert tg.suite_text(entries) == tg.suite_text(tg.step_gemms("tiny", 2, 8))
    assert json.loads(tg.suite_text(entries)) == entries      # the entry keys, the optional ones where set


def test_a_suite_that_is_not_json_is_one_line_naming_the_line(tmp_path, capsys):
    bad = tmp_path / "s.json"
    bad.write_text('[{"M": 8, "N": 8, "K": 8},\n]\n')
    assert tg.main(["--list", "--suite", str(bad)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"nova.bench.train_gemms: error: suite file {bad}:2:1: JSON parse error: Expecting value"]


def test_committed_suite_covers_both_steps():
    from nova.models.gpt import CONFIGS
    entries = tg.load_suite(SUITE)
    assert SUITE.read_text() == tg.suite_text(entries)
    assert {(e["model"], e["batch"], e["seq"]) for e in entries} == set(tg.SUITE_STEPS)
    for model, batch, seq in tg.SUITE_STEPS:
        cfg = CONFIGS[model]
        mine = [e for e in entries if e["model"] == model]
        assert len({tg.case_problem(e, "tf32") for e in mine}) == len(mine)          # distinct problems
        # the LM head runs once per loss chunk (the default memory policy's), on its rows
        chunks = sum(e["count"] for e in mine if e["role"] == "forward" and e["N"] == cfg.vocab_size)
        assert chunks >= 1
        for r in ("forward", "dX", "dW"):
            assert sum(e["count"] for e in mine if e["role"] == r) == 4 * cfg.n_layer + chunks, (model, r)
        tokens = {"forward": "M", "dX": "M", "dW": "K"}
        for e in mine:
            assert e["role"] == tg.role(e["trans_a"], e["trans_b"])
            head = cfg.vocab_size in (e["M"], e["N"], e["K"])
            assert e[tokens[e["role"]]] == batch * seq or head            # a loss chunk's rows: below
            assert head or cfg.n_embd in (e["M"], e["N"], e["K"])
        for r, t in tokens.items():                                      # the chunks cover every row once
            assert sum(e[t] * e["count"] for e in mine if e["role"] == r and cfg.vocab_size in (e["M"], e["N"], e["K"])) \
                == batch * seq, (model, r)


def test_precompiling_the_suite_builds_the_kernels_the_device_run_looks_up():
    from nova.cli.main import build_parser, problems_from
    args = build_parser().parse_args(["precompile", "gemm", "--suite", str(SUITE), "--target", "h200",
                                      "--dtype", "tf32,bf16"])
    compiled = problems_from(read_suite_entries(args.suite), args)
    looked_up = [tg.case_problem(e, d) for d in ("tf32", "bf16") for e in tg.load_suite(SUITE)]
    assert compiled == looked_up
    assert {p.out_dtype for p in compiled} == {"f32", "bf16"}
    assert any(p.trans_a for p in compiled) and any(p.trans_b for p in compiled) and any(p.bias for p in compiled)


BATCHED_SUITE = REPO / "bench" / "suites" / "batched_gemms.json"


def test_batched_suite_precompiles_the_batched_problems_the_device_run_looks_up():
    """bench/suites/batched_gemms.json: ``B`` and ``batch_strides`` reach ``nova precompile gemm --suite``
    and the device run alike (one batched problem per entry); the file is ``suite_text``'s."""
    from nova.cli.main import build_parser, problems_from
    args = build_parser().parse_args(["precompile", "gemm", "--suite", str(BATCHED_SUITE), "--target", "h200",
                                      "--dtype", "tf32,bf16"])
    compiled = problems_from(read_suite_entries(args.suite), args)
    entries = tg.load_suite(BATCHED_SUITE)
    assert compiled == [tg.case_problem(e, d) for d in ("tf32", "bf16") for e in entries]
    assert all(p.batch == e["B"] > 1 for p, e in zip(compiled, entries))
    assert BATCHED_SUITE.read_text() == tg.suite_text(entries)
    shared = next(p for p in compiled if p.batch_stride_b == 0)
    assert shared.trans_a and shared.bias                     # a transposed batch against one weight: batched
    with pytest.raises(ValueError, match="batch_strides must be three of"):
        tg.batch_of({"B": 2, "batch_strides": [16, 0, 0]})


def _row(model, role, dtype, ratio, count=1, status="ok"):
    nova_us = 100.0
    return {"model": model, "role": role, "dtype": dtype, "M": 64, "N": 64, "K": 64, "count": count,
            "status": status, "ratio": ratio if status == "ok" else math.nan, "nova_us": nova_us,
            "best_us": nova_us * ratio, "best": "cublas"}


def test_summary_geomeans_worst_shape_and_verdicts():
    rows = [_row("a", "forward", "tf32", 1.2, count=8), _row("a", "dW", "tf32", 0.95),
            _row("a", "forward", "bf16", 1.1), _row("a", "dX", "bf16", 0.8),
            _row("b", "dX", "bf16", 1.0, status="failed")]
    s = tg.summarize(rows, have_xla=True)
    assert s["per_role"]["forward/tf32"] == pytest.approx(1.2)
    assert s["per_dtype"]["tf32"]["geomean"] == pytest.approx(math.sqrt(1.2 * 0.95))
    assert s["per_model"]["a/tf32"]["step_weighted"] == pytest.approx((8 * 120 + 95) / (9 * 100))
    assert s["verdicts"]["tf32"] == {"geomean_target": 1.05, "geomean_met": True, "floor_met": True}
    assert s["per_dtype"]["bf16"]["worst"]["ratio"] == 0.8 and s["per_dtype"]["bf16"]["below_floor"] == 1
    assert s["per_dtype"]["bf16"]["failed"] == 1
    bf16 = s["verdicts"]["bf16"]
    assert not bf16["geomean_met"] and not bf16["floor_met"] and "1 of 3 shapes without a Nova result" in bf16["note"]
    lines = tg.verdict_lines(s)
    assert lines[0].startswith("tf32: geomean Nova / max(cuBLAS, XLA) 1.068 (target >= 1.05: MET)")
    assert "NOT MET" in lines[1]
    assert tg.summarize(rows[:1], have_xla=False)["baseline"] == "cuBLAS (XLA n/a)"


def test_xla_gemm_reads_the_stored_layouts():
    jax = pytest.importorskip("jax")
    import torch
    for ta in (False, True):
        for tb in (False, True):
            M, N, K = 5, 7, 3
            a = torch.randn((K, M) if ta else (M, K))
            b = torch.randn((N, K) if tb else (K, N))
            bias = torch.randn(N)
            c = tg.xla_gemm(jax, ta, tb, True, "relu")(tg.to_jax(jax, a), tg.to_jax(jax, b), tg.to_jax(jax, bias))
            ref = torch.relu((a.T if ta else a) @ (b.T if tb else b) + bias)
            assert torch.allclose(torch.from_dlpack(c), ref, atol=1e-5), (ta, tb)


def test_xla_gemm_with_a_batch_dimension():
    """Batched operands as stored: both batched (a dot_general batch dimension) or one broadcast
    (2-D), every layout; the result is [B, M, N]."""
    jax = pytest.importorskip("jax")
    import torch
    B, M, N, K = 3, 5, 7, 4
    for batched in ((True, True), (True, False), (False, True)):
        for ta in (False, True):
            for tb in (False, True):
                a = torch.randn(((B,) if batched[0] else ()) + ((K, M) if ta else (M, K)))
                b = torch.randn(((B,) if batched[1] else ()) + ((N, K) if tb else (K, N)))
                c = tg.xla_gemm(jax, ta, tb, batched=batched)(tg.to_jax(jax, a), tg.to_jax(jax, b))
                ref = (a.mT if ta else a) @ (b.mT if tb else b)
                assert ref.shape == (B, M, N) and torch.allclose(torch.from_dlpack(c), ref, atol=1e-5), (batched, ta, tb)


def test_device_mode_without_a_gpu_is_one_line(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert tg.main(["--device", "--out", "/nonexistent"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no NVIDIA GPU" in err and "Traceback" not in err


def test_jax_without_a_gpu_is_one_warning():
    jax = pytest.importorskip("jax")
    try:
        jax.devices("gpu")
        pytest.skip("jax has a GPU")
    except RuntimeError:
        pass
    lines = []
    assert tg.load_jax(lines.append) is None
    assert len(lines) == 1 and lines[0].startswith("warning: jax") and "XLA columns are n/a" in lines[0]


def test_xla_gemm_adds_the_residual_and_returns_the_preactivation():
    jax = pytest.importorskip("jax")
    import torch
    a, b, bias, r = torch.randn(5, 3), torch.randn(3, 7), torch.randn(7), torch.randn(5, 7)
    c, p = tg.xla_gemm(jax, False, False, True, "gelu", residual=True, preactivation=True)(
        *(tg.to_jax(jax, t) for t in (a, b, bias, r)))
    pre = a @ b + bias
    assert torch.allclose(torch.from_dlpack(p), pre, atol=1e-5)
    assert torch.allclose(torch.from_dlpack(c), torch.nn.functional.gelu(pre, approximate="tanh") + r, atol=1e-5)
