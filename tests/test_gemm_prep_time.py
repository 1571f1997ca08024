"""The operand-prep passes' time (hopper.prep_time: DRAM bytes vs the latency chain), their launches
in the calibrated prediction (Schedule.launches), and the DRAM efficiency of tile streams."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

from nova.configurator import GemmProblem, configure
from nova.hwmodel import get_target
from nova.hwmodel.calibration import calibrated_time_us, constants_for, load
from nova.kernels.gemm.hopper import PREP_THREADS, PREP_TILE, operand_plan, prep_pass_time, prep_time

GPU = get_target("h200")


def test_prep_geometry_is_the_emitters():
    from nova.kernels.gemm import emit_hopper
    assert emit_hopper.PREP_TILE is PREP_TILE and emit_hopper.PREP_THREADS is PREP_THREADS


def test_a_padding_copy_issues_every_load_before_its_first_store():
    """The model's one latency a wave is the emitted order: in the padding copy's kernel every global
    load comes before the first store (a store between them would make each load wait for the last)."""
    from nova.kernels.gemm import emit_hopper
    p = GemmProblem(1, 13647, 1389, "tf32", False, True)
    text = emit_hopper.build_prep_module(p, operand_plan(p).b.prep)
    loads = [i for i, line in enumerate(text.splitlines()) if "memref.load %src" in line]
    stores = [i for i, line in enumerate(text.splitlines()) if "memref.store" in line and "%dst" in line]
    assert len(loads) == len(stores) == PREP_TILE * PREP_TILE // PREP_THREADS
    assert max(loads) < min(stores)


def test_a_padding_copy_waits_a_latency_per_wave():
    """1x13647x1389 NT TF32 (K off 16 bytes): B's padding copy, 18 waves of 1056 blocks: its latency chain
    (a loaded latency a wave) is below its bytes at the DRAM bandwidth, so the copy is DRAM-bound."""
    p = GemmProblem(1, 13647, 1389, "tf32", False, True)
    prep = operand_plan(p).b.prep
    assert prep is not None and not prep.transpose
    rows, cols = prep.dst
    waves = math.ceil(math.ceil(rows / PREP_TILE) * math.ceil(cols / PREP_TILE) / (GPU.sm_count * GPU.max_threads_per_sm // PREP_THREADS))
    assert waves == 18
    t = prep_pass_time(p, GPU, prep)
    assert t == pytest.approx(2 * rows * cols * 4 / GPU.dram_bw) and t > waves * GPU.mem_latency_ns * 1e-9


def test_a_large_transpose_is_dram_bound():
    """512x2048x16384 TN TF32 (GPT-42M's dW): A's 8.4M-element transpose runs at DRAM bandwidth."""
    p = GemmProblem(512, 2048, 16384, "tf32", True, False)
    plan = operand_plan(p)
    assert plan.a.prep is not None and plan.a.prep.transpose and plan.b.prep is None
    assert prep_time(p, GPU, plan) == pytest.approx(2 * 512 * 16384 * 4 / GPU.dram_bw)


def test_every_prep_pass_is_a_launch_in_the_calibrated_time():
    """23x1387x4873 NN TF32 odd: two prep passes and split-K: four launches, each t_launch in the calibrated
    time (the count the terms alone give, ``launches_of``, is three)."""
    cfg = configure(GemmProblem(23, 1387, 4873, "tf32"), GPU, kernel="tiles")
    s = cfg.schedule
    assert s.hopper.operands.a.prep and s.hopper.operands.b.prep and s.split_k > 1 and s.launches == 4
    c = constants_for(load("h200", "wgmma")["constants"], s)
    three = calibrated_time_us(cfg.prediction.terms_us, s.launch_split, c)
    assert cfg.calibrated_time_us == pytest.approx(three + c["t_launch_us"])


def test_dram_bound_gemms_stream_at_the_dram_efficiency_and_wait_a_latency():
    """A decode GEMM whose DRAM term binds: its prediction adds the DRAM wait (``hopper.dram_wait_time``:
    its weight streams once, so the wait is the ring term's DRAM_WAIT_LATENCY share) to the DRAM term,
    not their max, and its calibrated time holds DRAM / eta_dram plus the wait, unscaled."""
    from nova.hwmodel.calibration import calibrated_time_us
    from nova.kernels.gemm.hopper import DRAM_WAIT_LATENCY, schedule_terms, total_time
    cal = load("h200", "wgmma")["constants"]
    assert "eta_dram_tiles" not in cal
    cfg = configure(GemmProblem(3, 15232, 896, "tf32"), GPU, kernel="tiles")
    t = cfg.prediction.terms_us
    assert t["dram"] > max(t["mma"], t["l2"], t["ring"])
    assert t["dram_wait"] == pytest.approx(t["ring"] * DRAM_WAIT_LATENCY, rel=0.05)
    seconds = schedule_terms(cfg.problem, GPU, cfg.schedule)
    assert total_time(seconds) - total_time({**seconds, "dram_wait": 0.0}) == pytest.approx(seconds["dram_wait"])
    assert cfg.prediction.time_us == pytest.approx(total_time(seconds) * 1e6)
    no_wait = {**t, "dram_wait": 0.0}
    s = cfg.schedule
    assert cfg.calibrated_time_us - calibrated_time_us(no_wait, s.launch_split, cal, s.launches) == pytest.approx(
        t["dram_wait"], rel=0.02)


def test_kernel_profile_takes_the_held_out_layouts():
    from nova.bench.kernel_profile import parse_shape
    assert parse_shape("1069x10293x885") == (1069, 10293, 885, False, False)
    assert parse_shape("5291x5733x4494:NT") == (5291, 5733, 4494, False, True)
    assert parse_shape("5513x5949x3953:tn") == (5513, 5949, 3953, True, False)
    for bad in ("1x2", "1x2x3:XX", "axbxc"):
        with pytest.raises(ValueError, match=f"shape {bad!r}"):
            parse_shape(bad)


def test_kernel_profile_refuses_a_negative_flush_in_one_line():
    """``--flush-l2`` is a size: a negative one is the caller's mistake, said before any GPU work."""
    r = subprocess.run([sys.executable, "-m", "nova.bench.kernel_profile", "--shapes", "64x64x64", "--flush-l2", "-1"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--flush-l2 -1" in r.stderr and "Traceback" not in r.stderr
