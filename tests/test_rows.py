"""The rows kernel family on the host: problems from captured training steps, the configurator's
invariants (hypothesis), PTX that assembles without spills for sm_80 and sm_90, the CLI, and the CPU
program of plans with rows groups against the reference interpreter."""
from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nova.kernels.rows import Operand, Prologue, RowsProblem, RowsProblemError, cli_problem, configure_rows
from nova.kernels.rows.derive import HELD, MIN_SPLIT_CHUNKS, REG_VALUES

CLI_KINDS = ("layernorm", "rmsnorm", "softmax", "log_softmax", "cross_entropy")


def plan_step(model_name: str):
    from nova.frontend import capture
    from nova.models import GPT, Llama, make_train_step
    from nova.passes import pipeline
    torch.manual_seed(0)
    model = GPT("tiny") if model_name == "gpt" else Llama("tiny", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    vocab = model.config.vocab_size
    idx = torch.randint(0, vocab, (2, 16))
    captured = capture(make_train_step(model, opt), (idx, idx.clone()), models=[model], optimizers=[opt])
    return pipeline(captured.graph)


def rows_groups(planned):
    return [g for g in planned.groups if g.kernel == "nova" and isinstance(g.problem, RowsProblem)]


# ------------------------------------------------------------------ problems from captured steps
def test_gpt_step_runs_its_norms_loss_and_bias_gradients_on_rows_kernels():
    planned = plan_step("gpt")
    kinds = [g.problem.kind for g in rows_groups(planned)]
    n_layer = 2
    assert kinds.count("layer_norm") == 2 * n_layer + 1 and kinds.count("layer_norm_backward") == 2 * n_layer + 1
    assert kinds.count("cross_entropy_forward_backward") == 1           # the loss and dlogits: one kernel
    assert kinds.count("cross_entropy") == kinds.count("cross_entropy_backward") == 0
    summed = [g.problem for g in rows_groups(planned) if g.problem.has("dxsum")]
    # the linears' bias gradients: those of the projections back into the residual stream summed by the
    # norm backward that writes their output gradient, the others column sums of their own
    assert len(summed) == 2 * n_layer and all(p.kind == "layer_norm_backward" for p in summed)
    assert kinds.count("column_reduce") >= 2 * n_layer
    for g in rows_groups(planned):
        p = g.problem
        assert set(g.bindings.values()) <= set(g.inputs) | set(g.outputs)
        assert {o.name for o in p.outputs} == {n for n, v in g.bindings.items() if v in g.outputs}
        assert "Nova rows kernel" in g.reason
    ce = next(g.problem for g in rows_groups(planned) if g.problem.kind == "cross_entropy_forward_backward")
    assert (ce.rows, ce.n, ce.attr("ignore_index")) == (32, 96, -1)
    assert [o.name for o in ce.outputs] == ["loss", "dlogits"]          # the row statistics stay in the kernel
    ln = next(g.problem for g in rows_groups(planned) if g.problem.kind == "layer_norm")
    assert (ln.rows, ln.n) == (32, 32) and [o.name for o in ln.inputs] == ["x", "weight", "bias"]


def test_llama_step_norms_become_rms_norm_kinds():
    planned = plan_step("llama")
    groups = rows_groups(planned)
    kinds = [g.problem.kind for g in groups]
    n_layer = 2
    assert kinds.count("rms_norm") == kinds.count("rms_norm_backward") == 2 * n_layer + 1
    fwd = next(g.problem for g in groups if g.problem.kind == "rms_norm")
    assert (fwd.rows, fwd.n) == (32, 32) and [o.name for o in fwd.inputs] == ["x", "weight"]
    bwd = next(g.problem for g in groups if g.problem.kind == "rms_norm_backward")
    assert [o.name for o in bwd.outputs] == ["dx", "dweight"]
    assert not [p for p in (g.problem for g in groups) if p.kind == "row_reduce" and p.attr("op") == "mean"]
    middle = [g for g in planned.groups if g.kind == "reduction" and g.kernel == "aten"]
    assert all("neither the trailing nor the leading axes" in g.reason for g in middle)


def test_problem_errors_are_one_line():
    with pytest.raises(RowsProblemError, match="needs the x operand"):
        RowsProblem("layer_norm", 4, 8, (), (Operand("y", "f32", "row", 8),), {"eps": 1e-5})
    with pytest.raises(RowsProblemError, match="row stride 4 is shorter"):
        RowsProblem("softmax", 4, 8, (Operand("x", "f32", "row", 4),), (Operand("y", "f32", "row", 8),))
    with pytest.raises(RowsProblemError, match="pow needs a constant exponent"):
        RowsProblem("row_reduce", 4, 8, (Operand("a", "f32", "row", 8), Operand("b", "f32", "row", 8)),
                    (Operand("out", "f32", "per_row"),), {"op": "sum"}, Prologue((("pow", ("a", "b")),), ((0, "out"),)))
    with pytest.raises(RowsProblemError, match="unsupported dtype"):
        cli_problem("softmax", 4, 8, "f64")


# ------------------------------------------------------------------ the configurator
@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(CLI_KINDS), backward=st.booleans(), rows=st.integers(1, 70000),
       n=st.one_of(st.integers(1, 5000), st.integers(5000, 400000)), dtype=st.sampled_from(["f32", "bf16", "f16"]),
       target=st.sampled_from(["h200", "a100", "rtx3060"]))
def test_schedules_cover_every_element_within_the_limits(kind, backward, rows, n, dtype, target):
    p = cli_problem(kind, rows, n, dtype, backward=backward)
    cfg = configure_rows(p, target)
    s, gpu = cfg.schedule, cfg.target
    t = s.row
    assert n % t.vec == 0 and t.vec * max(o.elem_bytes for o in p.operands if o.layout in ("row", "col")) <= 16
    assert t.threads == t.threads_per_row * t.rows_per_cta <= gpu.max_threads_per_block
    assert t.threads_per_row <= 32 and 32 % t.threads_per_row == 0 or t.threads_per_row % 32 == 0
    assert t.chunks * t.threads_per_row * t.vec >= n > (t.chunks - 1) * t.threads_per_row * t.vec
    walk = s.partials.groups_per_cta if s.partials is not None else 1
    assert t.grid * walk * t.rows_per_cta >= rows
    assert rows > (t.grid - 1) * t.rows_per_cta if walk == 1 else rows > t.grid * (walk - 1) * t.rows_per_cta
    if s.partials is not None:                        # the weight/bias gradients summed in the row pass
        f = s.partials
        groups = math.ceil(rows / t.rows_per_cta)
        assert f.partials == t.grid <= groups and t.grid * (walk - 1) < groups
        assert t.in_registers and s.column is None and s.roles == ("row", "partials_final")
        assert t.chunks * t.vec * f.outputs <= 64 and t.regs_per_thread <= t.max_regs
        assert f.final_grid * f.final_threads_cols * f.final_vec >= n and n % f.final_vec == 0
        assert f.final_threads <= 512 and f.final_smem_bytes <= gpu.smem_per_block
    if t.in_registers:
        assert t.chunks * t.vec * len(HELD[p.kind]) <= REG_VALUES
        assert t.regs_per_thread * t.threads <= gpu.regs_per_sm
    assert t.blocks_per_sm >= 1 and t.smem_bytes <= gpu.smem_per_block
    if s.column is not None:
        c = s.column
        assert c.splits * c.rows_per_split >= rows > (c.splits - 1) * c.rows_per_split
        assert c.grid[0] * c.threads_cols * c.vec >= n and c.threads <= gpu.max_threads_per_block
        assert ("column_final" in s.roles) == (c.splits > 1)
    assert cfg.prediction.time_us >= cfg.prediction.floor_us > 0
    assert all(term["bound"] in ("dram", "sm", "launch") for term in cfg.terms.values())


def test_long_rows_loop_and_short_rows_share_a_warp():
    long = configure_rows(cli_problem("softmax", 8, 300000, "f32"), "h200").schedule.row
    assert long.threads_per_row == 1024 and not long.in_registers and long.chunks == math.ceil(300000 / 4096)
    short = configure_rows(cli_problem("layernorm", 64, 24, "f32"), "h200").schedule.row
    assert short.threads_per_row == 8 and short.rows_per_cta == short.threads // 8 and short.in_registers
    odd = configure_rows(cli_problem("layernorm", 64, 1001, "bf16"), "h200").schedule.row
    assert odd.vec == 1                                       # 1001 is odd: scalar accesses


def sum_of_squares(rows: int, n: int, dtype: str = "f32", op: str = "sum", stored: bool = False) -> RowsProblem:
    """A gradient's sum of squares (gradient clipping's norms) over ``rows`` rows of ``n``; ``stored``: the
    value squared (a cast of the gradient) written too."""
    row = lambda name, dt=dtype: Operand(name, dt, "row", n)  # noqa: E731
    pro = Prologue((("cast_f32", ("a",)), ("mul", ("%0", "%0"))), ((1, "out"),), ((0, "st0"),) if stored else ())
    outs = (Operand("out", "f32", "per_row"),) + ((row("st0", "f32"),) if stored else ())
    return RowsProblem("row_reduce", rows, n, (row("a"),), outs, {"op": op}, pro)


@settings(max_examples=150, deadline=None)
@given(rows=st.integers(1, 600), n=st.one_of(st.integers(1, 5000), st.integers(5000, 20_000_000)),
       dtype=st.sampled_from(["f32", "bf16", "f16"]), op=st.sampled_from(["sum", "mean", "max"]),
       stored=st.booleans(), target=st.sampled_from(["h200", "a100", "rtx3060"]))
def test_row_reductions_over_few_long_rows_split_each_row_over_one_wave(rows, n, dtype, op, stored, target):
    from nova.kernels.rows.abi import params, workspace_layout
    p = sum_of_squares(rows, n, dtype, op, stored)
    cfg = configure_rows(p, target)
    s, gpu = cfg.schedule, cfg.target
    t = s.row
    step = t.threads_per_row * t.vec
    assert t.splits * t.chunks * step >= n > (t.splits - 1) * t.chunks * step     # the parts cover the row, none empty
    assert t.grid == math.ceil(rows / t.rows_per_cta) * t.splits
    assert ("row_final" in s.roles) == (t.splits > 1)
    capacity = gpu.sm_count * t.blocks_per_sm
    whole_row = math.ceil(math.ceil(n / t.vec) / t.threads_per_row)               # vector steps of an unsplit thread
    if t.splits > 1:
        assert t.rows_per_cta == 1 and rows < capacity and t.grid < capacity + rows   # one wave of CTAs
        assert t.chunks >= MIN_SPLIT_CHUNKS
        assert t.final_grid * (t.final_threads // 32) >= rows > (t.final_grid - 1) * (t.final_threads // 32)
        assert workspace_layout(p, s)[0]["row_parts"][1] == rows * t.splits
        assert "out" not in dict(params(p, s, "row")) and "out" in dict(params(p, s, "row_final"))
    else:                     # enough rows for a wave, rows shared by a CTA, or too short to split
        assert rows >= capacity or t.rows_per_cta > 1 or whole_row < 2 * MIN_SPLIT_CHUNKS
        assert "split" not in json.dumps(t.to_dict())                             # the schedule (key) it always had
    assert all(term["bound"] in ("dram", "sm", "launch") for term in cfg.terms.values())


def test_one_long_row_is_split_over_a_wave_and_one_cta_is_priced_at_one_sm():
    """The embedding's 16M-element sum of squares on one CTA would stream 64 MB through one SM: split into a
    wave of CTAs it is DRAM-bound; a one-CTA kernel (the loss's sum) is priced at one SM's streaming rate."""
    n = 1 << 24
    cfg = configure_rows(sum_of_squares(1, n), "h200")
    t, gpu = cfg.schedule.row, cfg.target
    assert cfg.schedule.roles == ("row", "row_final") and t.final_grid == 1
    assert gpu.sm_count * t.blocks_per_sm // 2 < t.grid <= gpu.sm_count * t.blocks_per_sm
    assert cfg.terms["row"]["bound"] == "dram"
    one_sm = gpu.l2_bw / gpu.sm_count
    assert cfg.prediction.time_us < 0.1 * (4 * n / one_sm * 1e6)
    assert any(step.step == "split" and "one CTA would stream" in step.reason for step in cfg.derivation)
    ce = configure_rows(cli_problem("cross_entropy", 16384, 32768, "f32"), "h200")
    loss_sum_bytes = 16384 * ce.problem.operand("target").elem_bytes + 4 * 16384     # targets and per-row losses
    assert ce.terms["total"]["time_us"] > loss_sum_bytes / one_sm * 1e6
    short = configure_rows(sum_of_squares(1, 512), "h200")                        # launch-bound: not split
    assert short.schedule.roles == ("row",) and short.schedule.row.splits == 1


# ------------------------------------------------------------------ generated code
def _kernels():
    cases = [cli_problem("layernorm", 300, 1001, "bf16"), cli_problem("layernorm", 300, 1001, "bf16", backward=True),
             cli_problem("layernorm", 64, 24, "f32", backward=True), cli_problem("rmsnorm", 100, 4096, "f16"),
             cli_problem("layernorm", 16384, 768, "f32", backward=True, residual=True, dx_sum=True),   # 2 warps a row
             cli_problem("layernorm", 16384, 512, "f32", backward=True, residual=True, dx_sum=True, dx_cast="bf16"),
             cli_problem("rmsnorm", 16384, 512, "f32", backward=True, residual=True, dy_parts=3),
             cli_problem("rmsnorm", 64, 16384, "f32", backward=True, dy_parts=2),     # the column stage adds them
             cli_problem("layernorm", 4096, 8192, "f32", backward=True, dx_cast="bf16", dy_parts=3),   # looped, 4 inputs
             cli_problem("rmsnorm", 4096, 8192, "f32", backward=True, residual=True, dx_sum=True, dx_cast="bf16",
                         dy_parts=3),                                                 # looped, 5 row inputs
             cli_problem("cross_entropy", 16384, 32768, "bf16", forward_backward=True),   # passes at 3 CTAs an SM
             cli_problem("cross_entropy", 64, 10240, "bf16", forward_backward=True),      # 16-bit dlogits, in registers
             cli_problem("rmsnorm", 100, 4096, "bf16", backward=True), cli_problem("softmax", 8, 300000, "f32"),
             cli_problem("softmax", 8, 300000, "f32", backward=True),
             cli_problem("softmax", 77, 33, "f16", backward=True), cli_problem("log_softmax", 50, 2048, "bf16"),
             cli_problem("log_softmax", 50, 2048, "f32", backward=True),
             cli_problem("cross_entropy", 100, 32768, "bf16"), cli_problem("cross_entropy", 100, 50257, "f32", backward=True),
             cli_problem("cross_entropy", 8192, 32768, "f32", forward_backward=True),
             cli_problem("cross_entropy", 33, 97, "bf16", forward_backward=True),
             cli_problem("cross_entropy", 9, 70001, "f32", forward_backward=True),
             cli_problem("cross_entropy", 9, 20000, "f32", forward_backward=True),       # looped, 8 ragged steps
             RowsProblem("softmax", 40, 96, (Operand("x", "f32", "row", 200),), (Operand("y", "f32", "row", 96),)),
             sum_of_squares(1, 1 << 24), sum_of_squares(3, 70001, "bf16", "mean", stored=True),
             sum_of_squares(5, 300000, "f16", "max")]
    for g in rows_groups(plan_step("llama")):
        if g.problem.kind in ("row_reduce", "column_reduce", "rms_norm", "rms_norm_backward") and g.problem not in cases:
            cases.append(g.problem)
    return cases


@pytest.mark.parametrize("target", ["a100", "h200"])
def test_every_kernel_assembles_without_spills(target):
    from nova.codegen import ptxas
    from nova.kernels.rows.compile import compile_kernel
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    pytest.importorskip("mlir")
    for p in _kernels():
        s = configure_rows(p, target).schedule
        for role in s.roles:
            art = compile_kernel(p, s, role)
            r = art.resources
            assert art.cubin and r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0, (p.describe(), role, r)
            assert r["registers"] * art.block[0] <= 65536, (p.describe(), role)
            if role == "row":                           # the planned residency is the real one
                assert r["registers"] * art.block[0] * s.row.blocks_per_sm <= 65536, (p.describe(), r, s.row)
            assert art.arch == s.arch


def test_a_norm_backwards_residual_loads_with_the_row_even_at_a_resident_cta():
    """The residual (read only by the writing sweep) loads in the row's first sweep, before the row's
    shuffles, whenever its values fit beside the kept row in the registers of MIN_RESIDENT CTAs an SM:
    LayerNorm's backward with the residual at 16384 x 512 on the H100 keeps 4 CTAs an SM with them, and
    with the bias-gradient sum beside it gives one up (4 -> 3: measured faster than 4 with the residual
    late).  The register cap is the planned residency's share either way.  Where they would pass the
    registers of two CTAs (256 threads per 8192-wide bf16 row) the residual stays in the writing sweep,
    after the shuffles, and the schedule's key is as before (no ``early`` entry)."""
    from nova.kernels.rows.compile import build_module

    def first(text, needle):
        return next(i for i, line in enumerate(text.splitlines()) if needle in line)
    for n, dtype, dx_sum, early, bps in ((512, "f32", False, True, 4), (512, "f32", True, True, 3),
                                         (8192, "bf16", False, False, 2)):
        p = cli_problem("layernorm", 16384, n, dtype, backward=True, residual=True, dx_sum=dx_sum)
        c = configure_rows(p, "h100")
        row = c.schedule.row
        assert row.early == (("residual",) if early else ()) and row.blocks_per_sm == bps, row
        assert row.max_regs * row.threads * row.blocks_per_sm <= 65536, row
        assert row.max_regs == 65536 // (row.threads * bps) // 8 * 8, row
        text = build_module(p, c.schedule, "row")
        assert (first(text, "vector.load %residual") < first(text, "gpu.shuffle")) == early
        why = next(st for st in c.derivation if st.step == "early loads")
        assert ("(4 -> 3 CTAs an SM)" in why.reason) == dx_sum, why
        assert ("would pass 128 registers" in why.reason) == (not early), why
        assert ("early" in json.dumps(c.schedule.to_dict())) == early     # no early loads: the key as before


@pytest.mark.parametrize("rows, n", [(77, 33), (50, 2048)])
def test_log_softmax_backward_loads_y_with_the_row_and_matches_float64(rows, n):
    """Log-softmax's backward reduces dy alone and reads y only where it writes dx: with the row in
    registers y is an early load (it loads in the first sweep, beside dy).  Executed thread by thread
    on the CPU (``tests/simt_cpu.py``) with and without the early load, dx NaN-poisoned, against
    float64 ``dy - exp(y) * sum(dy)``."""
    import dataclasses
    import numpy as np
    from simt_cpu import run_kernel
    from nova.kernels.rows.abi import KERNEL_NAMES, params
    from nova.kernels.rows.compile import build_module, geometry
    p = cli_problem("log_softmax", rows, n, "f32", backward=True)
    s = configure_rows(p, "h200").schedule
    assert s.row.in_registers and s.row.early == ("y",), s.row
    rng = np.random.default_rng(rows + n)
    logits = rng.standard_normal((rows, n))
    y = (logits - np.log(np.exp(logits).sum(1, keepdims=True))).astype(np.float32)
    dy = rng.standard_normal((rows, n)).astype(np.float32)
    y64, dy64 = y.astype(np.float64), dy.astype(np.float64)
    dx = dy64 - np.exp(y64) * dy64.sum(1, keepdims=True)
    for schedule in (s, dataclasses.replace(s, row=dataclasses.replace(s.row, early=()))):
        text = build_module(p, schedule, "row")
        lines = text.splitlines()
        first_y = next(i for i, line in enumerate(lines) if "vector.load %y" in line or "memref.load %y" in line)
        first_shuffle = next(i for i, line in enumerate(lines) if "gpu.shuffle" in line)
        assert (first_y < first_shuffle) == bool(schedule.row.early)
        buffers = {"dy": dy.ravel().copy(), "y": y.ravel().copy(), "dx": np.full(rows * n, np.nan, np.float32)}
        grid, block, smem = geometry(schedule, "row")
        run_kernel(text, KERNEL_NAMES["row"], grid, block[0], smem,
                   {name: buffers[name] for name, _ in params(p, schedule, "row")})
        assert np.abs(buffers["dx"] - dx.ravel()).max() <= 1e-5 * np.abs(dx).max()


def test_the_family_is_registered_and_keys_are_stable():
    from nova.hwmodel import get_target
    from nova.kernels.family import family, kernel_key
    import nova.kernels.rows.compile  # noqa: F401  (registers the family)
    p = cli_problem("layernorm", 1024, 768, "bf16")
    gpu = get_target("h200")
    s = configure_rows(p, gpu).schedule
    assert family("rows").name == "rows"
    assert kernel_key("rows", p, s, "row", gpu) == kernel_key("rows", cli_problem("layernorm", 1024, 768, "bf16"),
                                                              s, "row", gpu)
    assert kernel_key("rows", p, s, "row", gpu) != kernel_key("rows", p.with_rows(1025), s, "row", gpu)


def test_offline_miss_is_one_line(tmp_path):
    from nova.hwmodel import get_target
    from nova.kernels.rows.compile import get_or_compile
    from nova.runtime.cache import KernelCache, NotPrecompiledError
    p = cli_problem("softmax", 64, 256, "f32")
    gpu = get_target("h200")
    s = configure_rows(p, gpu).schedule
    with pytest.raises(NotPrecompiledError) as e:
        get_or_compile(p, s, "row", gpu, KernelCache(tmp_path), offline=True)
    assert "\n" not in str(e.value) and "not precompiled: rows softmax 64x256" in str(e.value)


# ------------------------------------------------------------------ CLI
def test_cli_explain_text_and_json(capsys):
    from nova.cli.config import main
    assert main(["explain", "layernorm", "16384x512", "--backward", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    for piece in ("layer_norm_backward 16384x512", "vector width", "threads per row", "column sums a thread keeps",
                  "partials", "row groups a CTA", "partials_final", "Prediction"):
        assert piece in out
    assert "column_final" not in out                       # dy and x are read once: no column stage
    assert main(["explain", "cross_entropy", "16384x32768", "--json", "--target", "a100"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["op"] == "rows" and d["target"] == "a100" and d["schedule"]["roles"] == ["row", "total"]
    assert d["problem"]["kind"] == "cross_entropy" and d["derivation"] and d["prediction"]["time_us"] > 0
    assert main(["explain", "rmsnorm", "16384x4096", "--backward", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schedule"]["row"]["in_registers"] is True and d["schedule"]["roles"] == ["row", "partials_final"]
    assert d["schedule"]["partials"]["partials"] == d["schedule"]["row"]["grid"] and "column" not in d["schedule"]
    assert main(["explain", "cross_entropy", "8192x32768", "--forward-backward", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["problem"]["kind"] == "cross_entropy_forward_backward"
    assert d["schedule"]["roles"] == ["total_pre", "row", "total"]
    assert main(["explain", "softmax", "16384x"]) == 2
    assert "expected ROWSxN" in capsys.readouterr().err


# ------------------------------------------------------------------ planning and the CPU program
@pytest.mark.parametrize("rows, n", [(8192, 32768), (16384, 50257), (64, 96)])
def test_the_loss_and_its_gradient_in_one_kernel_move_one_read_of_the_logits_less(rows, n):
    """cross_entropy_forward_backward: the logits read once (and re-read from L2 for the second pass where
    the rows in flight fit it), dlogits written once, against the forward and backward kernels apart,
    which read the logits from DRAM twice: its predicted DRAM bytes are a logits read fewer, its time less."""
    both = configure_rows(cli_problem("cross_entropy", rows, n, "f32", forward_backward=True), "h200")
    apart = [configure_rows(cli_problem("cross_entropy", rows, n, "f32", backward=b), "h200") for b in (False, True)]
    dram = lambda cfg: sum(t["bytes"] for t in cfg.terms.values())  # noqa: E731
    # a read of the logits fewer, and of the targets; the lse neither written nor read back
    assert dram(both) == sum(dram(c) for c in apart) - 4 * rows * n - 8 * rows - 2 * 4 * rows
    assert both.prediction.time_us < sum(c.prediction.time_us for c in apart)
    assert both.schedule.roles == ("total_pre", "row", "total") and not both.schedule.row.in_registers or n < 1000


def test_cpu_program_matches_the_interpreter_with_rows_groups():
    from nova.compiler.executor import build, rows_problems
    from nova.ir import interpreter
    from nova.passes.examples import random_inputs, transformer_step
    from nova.passes import pipeline
    graph = transformer_step()
    planned = pipeline(graph)
    assert rows_groups(planned)
    program = build(planned, "cpu", poison=True)
    inputs = random_inputs(graph, 3, int_high=8)
    ref = interpreter.run(graph, [x.clone() for x in inputs])
    got = program.run([x.clone() for x in inputs])
    for o, a, b in zip(graph.outputs, got, ref):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), o.name
    problems = rows_problems(planned)
    assert problems == list(dict.fromkeys(g.problem for g in rows_groups(planned)))


def test_meta_program_leaves_unwritten_values_without_storage():
    """The Llama-tiny forward alone: its RMSNorms' rstd is read by nothing, so the rows kernel does not
    write it and the program gives it no storage."""
    from nova.compiler.executor import build
    from nova.frontend import capture
    from nova.models import Llama
    from nova.passes import pipeline
    model = Llama("tiny", seed=0)
    idx = torch.randint(0, model.config.vocab_size, (2, 16))
    planned = pipeline(capture(lambda i, t: model(i, t), (idx, idx.clone()), models=[model]).graph)
    program = build(planned, "meta")
    unwritten = [v for v, loc in program.loc.items() if loc[0] == "unwritten"]
    assert unwritten and program.stats["scratch_bytes"] == 0
    assert all(any(v in n.outputs for g in rows_groups(planned) for n in g.nodes) for v in unwritten)


def test_explain_prices_rows_groups_with_the_rows_configurator():
    from nova.compiler.explain import kernel_reports
    from nova.hwmodel import get_target
    planned = plan_step("gpt")
    reports = {r.index: r for r in kernel_reports(planned, get_target("h200"))}
    for i, g in enumerate(planned.groups):
        if g in rows_groups(planned):
            r = reports[i]
            assert r.kernel == "nova" and r.model == "rows configurator" and r.predicted_us > 0
            assert r.schedule["roles"] and r.name == g.problem.describe()


# ------------------------------------------------------------------ the column stage on the SIMT simulator
@pytest.mark.parametrize("rows, n, op, stored", [(1000, 72, "sum", False), (4096, 512, "mean", False),
                                                 (513, 37, "sum", False), (777, 96, "sum", "add"),
                                                 (300, 64, "sum", "gelu_tanh_backward"),
                                                 (1200, 40, "sum", "tanh_backward")])
def test_the_column_stage_and_its_final_sum_run_like_float64(rows, n, op, stored):
    """``column`` then ``column_final`` (threads along the columns and the partials, met in shared memory)
    executed thread by thread on the CPU (``tests/simt_cpu.py``: bounds and shared-memory races checked),
    every output NaN-poisoned first, against a float64 sum over the rows; ``stored``: a prologue
    ``in0 + in1``, ``gelu_tanh_backward(in0, in1)`` or ``tanh_backward(in0, in1)`` (a bias gradient fused
    with the residual add or the activation's backward, as ``F.gelu`` or op by op) whose value the
    kernel also writes.  Several rows a loop trip (``unroll``) where the derivation asks for them."""
    import numpy as np
    from simt_cpu import run_kernel
    from nova.hwmodel import get_target
    from nova.kernels.rows.abi import KERNEL_NAMES
    from nova.kernels.rows.compile import geometry
    from nova.kernels.rows.derive import configure_rows
    from nova.kernels.rows.emit_column import build_column, build_column_final
    from nova.kernels.rows.problem import RowsProblem
    from nova.kernels.rows.prologue import Prologue
    if stored:
        ins = (Operand("in0", "f32", "row", n), Operand("in1", "f32", "row", n))
        outs = (Operand("out", "f32", "col"), Operand("st0", "f32", "row", n))
        prologue = Prologue(((stored, ("in0", "in1")),), ((0, "out"),), ((0, "st0"),))
    else:
        ins, outs = (Operand("in0", "f32", "row", n),), (Operand("out", "f32", "col"),)
        prologue = Prologue((("cast_f32", ("in0",)),), ((0, "out"),))
    p = RowsProblem("column_reduce", rows, n, ins, outs, (("op", op),), prologue)
    s = configure_rows(p, get_target("h200")).schedule
    assert s.roles == ("column", "column_final")
    if (rows, n) == (4096, 512):
        assert s.column.unroll > 1
    rng = np.random.default_rng(rows * n)
    x = rng.standard_normal(rows * n).astype(np.float32)
    y = rng.standard_normal(rows * n).astype(np.float32)
    buffers = {"in0": x, "out": np.full(n, np.nan, np.float32),
               "partials": np.full(s.column.splits * n, np.nan, np.float32)}
    if stored:
        buffers.update(in1=y, st0=np.full(rows * n, np.nan, np.float32))
    for role, build in (("column", build_column), ("column_final", build_column_final)):
        grid, block, smem = geometry(s, role)
        run_kernel(build(p, s), KERNEL_NAMES[role], grid, block[0], smem, buffers)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    if stored == "gelu_tanh_backward":          # (dy, x) -> dy * d/dx gelu_tanh(x)
        t = np.tanh(np.sqrt(2 / np.pi) * (y64 + 0.044715 * y64 ** 3))
        du = np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * y64 ** 2)
        summed = x64 * (0.5 * (1 + t) + 0.5 * y64 * (1 - t * t) * du)
    elif stored == "tanh_backward":             # (dy, y) -> dy * (1 - y^2)
        summed = x64 * (1 - y64 * y64)
    else:
        summed = x64 + (y64 if stored else 0.0)
    want = summed.reshape(rows, n).sum(0) * (1 / rows if op == "mean" else 1)
    assert np.abs(buffers["out"] - want).max() <= 1e-5 * np.abs(want).max()
    if stored == "add":
        assert np.array_equal(buffers["st0"], x + y)
    elif stored:
        assert np.abs(buffers["st0"] - summed).max() <= 1e-5 * np.abs(summed).max()


@pytest.mark.parametrize("rows, n, dtype", [(5, 4096, "f32"), (4, 32768, "f32"), (3, 20000, "f32"), (3, 32768, "bf16")])
def test_the_fused_loss_kernel_computes_what_the_two_kernels_did_bit_for_bit(rows, n, dtype):
    """``cross_entropy_forward_backward`` against ``cross_entropy`` then ``cross_entropy_backward``,
    every kernel executed thread by thread on the CPU (``tests/simt_cpu.py``): the same loss and the same
    dlogits, bit for bit (the fused kernel keeps the lse in registers, the pair writes and reads it back:
    the arithmetic is the same), the fused one writing dlogits over its logits; rows held in registers
    (4096) and looped with the second pass re-reading them (32768, the steps' case; 20000, ragged, at the
    looped f32 loss's register budget; bf16 logits and dlogits: HF GPT-2's loss under autocast, walked in
    passes); ignored rows."""
    import dataclasses
    import numpy as np
    from simt_cpu import round_bf16, run_kernel
    from nova.hwmodel import get_target
    from nova.kernels.rows.abi import KERNEL_NAMES, params
    from nova.kernels.rows.compile import build_module, geometry
    gpu = get_target("h200")
    attrs = {"reduction": "sum", "ignore_index": -100}
    fwd, bwd, both = (dataclasses.replace(cli_problem("cross_entropy", rows, n, dtype, **kw), attrs=attrs)
                      for kw in ({}, {"backward": True}, {"forward_backward": True}))
    rng = np.random.default_rng(n)
    logits = (3 * rng.standard_normal(rows * n)).astype(np.float32)
    if dtype == "bf16":
        logits = round_bf16(logits)
    target = rng.integers(0, n, rows).astype(np.float32)
    target[1] = -100

    def launch(p, buffers):
        s = configure_rows(p, gpu).schedule
        for role in s.roles:
            grid, block, smem = geometry(s, role)
            names = {name for name, _ in params(p, s, role)}
            with np.errstate(over="ignore"):          # exp's first step scales the max's -3e38 start: -inf, then 0
                run_kernel(build_module(p, s, role), KERNEL_NAMES[role], grid, block[0], smem,
                           {k: v for k, v in buffers.items() if k in names})
        return s
    nan = lambda k: np.full(k, np.nan, np.float32)  # noqa: E731
    pair = {"logits": logits.copy(), "target": target, "loss": nan(1), "lse": nan(rows), "rowloss": nan(rows),
            "dloss": np.array([0.25], np.float32), "scale": nan(1), "dlogits": nan(rows * n)}
    launch(fwd, pair)
    launch(bwd, pair)
    fused = {"logits": logits.copy(), "target": target, "loss": nan(1), "rowloss": nan(rows),
             "dloss": np.array([0.25], np.float32), "scale": nan(1)}
    fused["dlogits"] = fused["logits"]                # in place, as the plan runs it
    s = launch(both, fused)
    assert s.row.in_registers == (n == 4096)
    assert not np.isnan(fused["dlogits"]).any() and fused["loss"].tobytes() == pair["loss"].tobytes()
    assert fused["dlogits"].tobytes() == pair["dlogits"].tobytes()
    assert (fused["dlogits"].reshape(rows, n)[1] == 0).all()     # the ignored row's gradient
    x = logits.astype(np.float64).reshape(rows, n)                # and both against float64
    lse = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
    kept = target != -100
    rows_kept = np.flatnonzero(kept)
    labels = target[kept].astype(int)
    loss = (lse[kept] - x[rows_kept, labels]).sum()
    step = 2.0 ** -8 if dtype == "bf16" else 1e-5                  # bf16's rounding of the loss and each dlogit
    assert abs(float(fused["loss"][0]) - loss) <= step * abs(loss)
    grad = np.exp(x - lse[:, None])
    grad[rows_kept, labels] -= 1
    grad = 0.25 * grad * kept[:, None]
    assert np.abs(fused["dlogits"].reshape(rows, n) - grad).max() <= step * np.abs(grad).max()


def test_the_final_sum_spreads_its_columns_over_as_many_ctas_as_its_lanes_allow():
    """The partials are read from L2 at each SM's share of its bandwidth: LayerNorm's backward at 16384 x
    512 reads its 528 partial rows with 4-byte lanes over 64 CTAs (16-byte lanes: 16 CTAs, 0.5 us slower
    on the H200), and the prediction falls with the busiest SM's bytes."""
    from nova.hwmodel import get_target
    cfg = configure_rows(cli_problem("layer_norm", 16384, 512, "f32", backward=True), get_target("h200"))
    f = cfg.schedule.partials
    assert (f.partials, f.final_vec, f.final_threads_cols, f.final_grid) == (528, 1, 8, 64)
    assert any(step.step == "final vector width" for step in cfg.derivation)
    wide = cli_problem("layer_norm", 16384, 4096, "f32", backward=True)
    assert configure_rows(wide, get_target("h200")).schedule.partials.final_grid >= get_target("h200").sm_count



@pytest.mark.parametrize("kind, rows, n, dx_cast, dy_parts", [
    ("rmsnorm", 40, 96, None, 1), ("layernorm", 24, 200, None, 1), ("layernorm", 6, 768, None, 1),
    ("rmsnorm", 6, 16384, None, 1), ("layernorm", 24, 200, "bf16", 1), ("rmsnorm", 6, 16384, "bf16", 1),
    ("rmsnorm", 40, 96, "f16", 1), ("rmsnorm", 40, 96, "bf16", 3), ("layernorm", 24, 200, "bf16", 2),
    ("rmsnorm", 6, 16384, "bf16", 2)])
def test_a_norm_backward_adds_the_residual_and_sums_dx(kind, rows, n, dx_cast, dy_parts):
    """``--residual --dx-sum``: the norm's backward writes ``dx + residual`` (the residual stream's
    gradient a pre-norm block adds after the norm's backward) and sums it over the rows (the bias
    gradient of the linear layer before it), every kernel of the schedule executed thread by thread on
    the CPU (``tests/simt_cpu.py``), outputs NaN-poisoned, against float64: dx with the residual, its
    column sums and the weight (and bias) gradients; the sums in the row kernel's pass (96, 200; 768: a
    CTA of two warps per row, so that a lane's 3 x 12 sums fit) and in the column stage after it
    (16384: it reads dx back).  ``--dx-cast`` (autocast): dx written a second time rounded to 16 bits,
    bit for bit the rounding of the FP32 dx it writes, and the sums add those rounded values.
    ``--dy-parts`` (autocast): dy read as 2 or 3 bf16 row inputs added in order, in the row pass and
    in the column stage."""
    import numpy as np
    from simt_cpu import run_kernel
    from nova.hwmodel import get_target
    from nova.kernels.rows.abi import KERNEL_NAMES, params, workspace_layout
    from nova.kernels.rows.compile import build_module, geometry
    from simt_cpu import round_bf16
    import dataclasses
    p = cli_problem(kind, rows, n, "f32", backward=True, residual=True, dx_sum=True, dx_cast=dx_cast,
                    dy_parts=dy_parts)
    part_names = ["dy", "dy_1", "dy_2"][:dy_parts]
    if dy_parts > 1:                                  # autocast's 16-bit gradients, widened as read
        p = dataclasses.replace(p, inputs=tuple(dataclasses.replace(o, dtype="bf16") if o.name in part_names
                                                else o for o in p.inputs))
    assert [o.name for o in p.inputs][-1] == "residual" and [o.name for o in p.outputs][-1] == "dxsum"
    assert [o.name for o in p.inputs][:dy_parts + 1] == part_names + ["x"]
    s = configure_rows(p, get_target("h200")).schedule
    assert s.roles == (("row", "column") if n == 16384 else ("row", "partials_final")), s.roles
    if n == 768:                                      # a warp per row would keep 3 x 24 sums a lane
        assert s.row.threads_per_row == 64, s.row
    rng = np.random.default_rng(rows + n)
    x, dy, residual = (rng.standard_normal((rows, n)) for _ in range(3))
    w = 1 + 0.1 * rng.standard_normal(n)
    mean = x.mean(1, keepdims=True) if kind == "layernorm" else np.zeros((rows, 1))
    centered = x - mean
    rstd = 1 / np.sqrt((centered ** 2).mean(1, keepdims=True) + 1e-5)
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32).ravel()  # noqa: E731
    x, dy, residual, w, mean, rstd = (f32(a).astype(np.float64).reshape(np.shape(a))
                                      for a in (x, dy, residual, w, mean, rstd))
    parts = [dy] + [f32(rng.standard_normal((rows, n))).astype(np.float64).reshape(rows, n)
                    for _ in range(dy_parts - 1)]
    if dy_parts > 1:
        parts = [round_bf16(f32(a)).astype(np.float64).reshape(rows, n) for a in parts]
        dy = parts[0]
        for part in parts[1:]:
            dy = (dy + part).astype(np.float32).astype(np.float64)   # FP32 adds, in order
    xhat = (x - mean) * rstd
    g = dy * w
    dx = rstd * (g - xhat * (g * xhat).mean(1, keepdims=True)
                 - (g.mean(1, keepdims=True) if kind == "layernorm" else 0)) + residual
    _, total = workspace_layout(p, s)
    buffers = {**{name: f32(a) for name, a in zip(part_names, parts)}, "x": f32(x), "rstd": f32(rstd), "mean": f32(mean), "weight": f32(w),
               "residual": f32(residual), "dx": np.full(rows * n, np.nan, np.float32),
               "dweight": np.full(n, np.nan, np.float32), "dbias": np.full(n, np.nan, np.float32),
               "dxsum": np.full(n, np.nan, np.float32), "dx_cast": np.full(rows * n, np.nan, np.float32)}
    for role in s.roles:
        grid, block, smem = geometry(s, role)
        names = params(p, s, role)
        for name, what in names:
            if what.startswith("ws:"):
                buffers.setdefault(name, np.full(total // 4, np.nan, np.float32))
        run_kernel(build_module(p, s, role), KERNEL_NAMES[role], grid, block[0], smem,
                   {name: buffers[name] for name, _ in names})
    assert np.abs(buffers["dx"] - dx.ravel()).max() <= 1e-5 * np.abs(dx).max()
    dxsum = dx.sum(0)
    if dx_cast is not None:                           # the kernel's own dx, rounded as a cast rounds it
        rounded = round_bf16(buffers["dx"]) if dx_cast == "bf16" else buffers["dx"].astype(np.float16)
        assert np.array_equal(buffers["dx_cast"], rounded.astype(np.float32))
        assert np.abs(buffers["dx_cast"] - buffers["dx"]).max() > 0       # the rounding is there to see
        dxsum = rounded.astype(np.float64).reshape(rows, n).sum(0)
    assert np.abs(buffers["dxsum"] - dxsum).max() <= 1e-5 * np.abs(dx).max() * max(1, rows / 8)
    dweight = (dy * xhat).sum(0)
    assert np.abs(buffers["dweight"] - dweight).max() <= 1e-5 * np.abs(dweight).max() * max(1, rows / 64)
    if kind == "layernorm":
        assert np.abs(buffers["dbias"] - dy.sum(0)).max() <= 1e-5 * np.abs(dy.sum(0)).max() * max(1, rows / 64)


def test_a_row_only_a_lone_cta_could_keep_in_registers_is_walked_in_passes():
    """With one CTA an SM nothing overlaps its loads, reductions, exponentials and stores: the row stays
    in registers only where MIN_RESIDENT (2) CTAs an SM hold it.  The fused loss of 8192 x 16384 f32
    rows would keep 32 values a thread in a lone 512-thread CTA; it walks the row in two passes instead
    (the second from L2) at 3 CTAs an SM; ``min_resident=1`` is the other side, for the probes.  The
    HF GPT-2 loss (16384 x 32768 bf16) is walked in passes either way now: with its 16-bit dlogits
    counted, its kept row passes one 512-thread CTA's registers too (ptxas spilled 16 B at 128)."""
    p = cli_problem("cross_entropy", 8192, 16384, "f32", forward_backward=True)
    row = configure_rows(p, "h100").schedule.row
    assert not row.in_registers and row.blocks_per_sm >= 2, row
    lone = configure_rows(p, "h100", min_resident=1).schedule.row
    assert lone.in_registers and lone.blocks_per_sm == 1, lone
    why = next(st for st in configure_rows(p, "h100").derivation if st.step == "passes")
    assert "for 2 CTAs an SM of 512 threads" in why.reason, why
    hf = cli_problem("cross_entropy", 16384, 32768, "bf16", forward_backward=True)
    assert not any(configure_rows(hf, "h100", min_resident=k).schedule.row.in_registers for k in (1, 2))
    short = configure_rows(cli_problem("layernorm", 16384, 512, "f32", backward=True), "h100").schedule.row
    assert short.in_registers and short.blocks_per_sm >= 2, short       # short rows: as before
