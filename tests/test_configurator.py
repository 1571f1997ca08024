"""The Analytic Configurator: legality, determinism, speed, and hand-checked decisions."""
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nova.configurator import (ACTIVATIONS, DTYPES, GemmProblem, ProblemError, check_schedule, configure,
                               predict, roofline_floor_s)
from nova.hwmodel import PRESETS

dims = st.one_of(st.integers(1, 64), st.integers(1, 20000), st.sampled_from([1, 7, 33, 127, 1000, 4096, 4097, 8192]))
problems = st.builds(GemmProblem, M=dims, N=dims, K=dims, dtype=st.sampled_from(list(DTYPES)),
                     trans_a=st.booleans(), trans_b=st.booleans(), bias=st.booleans(),
                     activation=st.sampled_from(ACTIVATIONS), deterministic=st.booleans())
targets = st.sampled_from(list(PRESETS))


@settings(max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems, targets)
def test_every_schedule_fits_every_capacity(problem, target):
    cfg = configure(problem, target, kernel="tiles")     # the skinny kernel's schedules: tests/test_skinny.py
    gpu, s = cfg.target, cfg.schedule
    assert check_schedule(problem, s, gpu) == []
    # the same limits, restated independently of check_schedule
    assert s.smem_bytes <= gpu.smem_per_block
    assert s.blocks_per_sm * (s.smem_bytes + gpu.smem_reserved_per_block) <= gpu.smem_per_sm
    assert s.threads_per_block <= 1024 and s.threads_per_block % 32 == 0
    assert s.regs_per_thread <= 255
    if s.mma.family == "wgmma":   # Hopper: consumer warpgroups each own a 64-row slab (along N when swapped)
        rows, cols = (s.block_n, s.block_m) if s.swap_ab else (s.block_m, s.block_n)
        assert s.arch == "sm_90a" and rows == s.tile_slabs * s.mma.m and cols == s.mma.n   # ping-pong: a warpgroup's tile
    else:
        assert s.block_m % (s.warps_m * s.mma.m) == 0 and s.block_n % (s.warps_n * s.mma.n) == 0
        assert not s.split_workspace                                 # the workspace reduction is Hopper's
    assert s.block_k % s.mma.k == 0 and s.stages >= 2
    if s.zero_output:                                  # slices add with FP32 atomics into C
        assert problem.out_dtype == "f32" and problem.activation == "none" and not problem.deterministic
    # predictions never beat the roofline floor
    assert cfg.prediction.time_us >= cfg.prediction.floor_us * (1 - 1e-9)
    assert cfg.prediction.time_us > 0 and math.isfinite(cfg.prediction.tflops)
    # cp.async vectors never straddle a row end
    row_a = problem.M if problem.trans_a else problem.K
    assert row_a % s.vector_a == 0


@settings(max_examples=300, deadline=None)
@given(problems, targets)
def test_deterministic(problem, target):
    a, b = configure(problem, target), configure(problem, target)
    assert a.schedule == b.schedule and a.prediction == b.prediction
    assert [s.to_dict() for s in a.derivation] == [s.to_dict() for s in b.derivation]


def test_deciding_imports_no_sympy_until_a_derivation_is_shown():
    """Cold start: the configurator decides with plain-Python formulas; sympy prints the
    derivation's formulas only when they are read (``nova-config explain``, ``--json``)."""
    import subprocess
    import sys
    code = ("import sys\n"
            "from nova.configurator import GemmProblem, configure\n"
            "cfgs = [configure(GemmProblem(3000, 5000, 700, 'bf16'), t) for t in ('h200', 'rtx3060')]\n"
            "assert 'sympy' not in sys.modules, 'deciding imported sympy'\n"
            "assert 'floor(' in ''.join(st.formula for st in cfgs[1].derivation)\n"
            "assert 'sympy' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bad_problems_are_rejected_clearly():
    with pytest.raises(ProblemError, match="M must be a positive integer"):
        GemmProblem(0, 5, 5)
    with pytest.raises(ProblemError, match="unsupported dtype 'fp8'"):
        GemmProblem(8, 8, 8, dtype="fp8")
    with pytest.raises(ProblemError, match="activation"):
        GemmProblem(8, 8, 8, activation="tanhshrink")


# --------------------------------------------------------------------------------------------
# Hand-checked decisions.  Each test states the arithmetic that leads to the expected schedule.

@pytest.fixture
def mma_sync_only(monkeypatch):
    """The Ampere-class path on Hopper targets too (NOVA_HOPPER=0), for the tests that document it."""
    monkeypatch.setenv("NOVA_HOPPER", "0")


def _step(cfg, name):
    return next(s for s in cfg.derivation if s.step == name)


def test_rtx3060_4096_cubed_tf32():
    cfg = configure(GemmProblem(4096, 4096, 4096, "tf32"), "rtx3060")
    s = cfg.schedule
    # accumulators get ceil(255/4) = 64 registers -> warp tile area 2**floor(log2(32*64)) = 2048 = 64x32
    assert (s.warp_tile_m, s.warp_tile_n) == (64, 32)
    # smem balance 256 FLOP/clk / 128 B/clk = 2 -> square side needed 4 B * 2 = 8; 64x32 has 2*64*32/(96*4) = 10.7
    assert _step(cfg, "warp tile (smem)").value == pytest.approx(8)
    # L2 balance = 12.74 TFLOP/s / (28 SMs * 48 B/clk * 1.777 GHz) = 5.33 -> T_min = 4 * 5.33 = 21.3:
    # 2x2 warps (one per scheduler) = 128x64 already clears it
    assert (s.block_m, s.block_n, s.warps) == (128, 64, 4)
    # block_k: one 128-byte line per row = 128/4 = 32 TF32 elements
    assert s.block_k == 32
    # padding: A row 32+4 = 36 words = 4 mod 8; B row 64+8 = 72 words = 8 mod 16
    assert (s.smem_pad_a, s.smem_pad_b) == (4, 8)
    # stage = (128*36 + 32*72) * 4 B = 27648 B; smem/SM 100 KB: floor(102400 / (2*27648 + 1024)) = 1 block
    assert s.blocks_per_sm == 1
    # Little's law: 1000 ns * 1.777 GHz * 256 FLOP/clk / (2*128*64/(192*4) = 21.3 FLOP/B) = 21324 B in flight
    # -> 1 + ceil(21324/27648) = 2 stages
    assert s.stages == 2 and s.smem_bytes == 2 * 27648
    # 2048 tiles >> 28 slots: no split-K; group-M = round(sqrt(28 * 64/128)) = round(3.74) = 4
    assert s.split_k == 1 and s.group_m == 4
    assert cfg.prediction.bound == "tensor-core"
    assert 0.9 * 12.74 < cfg.prediction.tflops <= 12.74


def test_h200_4096_cubed_tf32(mma_sync_only):
    cfg = configure(GemmProblem(4096, 4096, 4096, "tf32"), "h200")
    s = cfg.schedule
    assert str(s.mma) == "mma.sync.m16n8k8.f32.tf32" and s.arch == "sm_90"
    # L2 balance (mma.sync at half the wgmma rate) = 247.4 TFLOP/s / 11.6 TB/s = 21.3 -> T_min = 85.3:
    # 2x2 warps of 64x32 give a 64-wide side, so the N side doubles to 4 warps -> 128x128, 8 warps
    assert (s.block_m, s.block_n, s.block_k, s.warps_m, s.warps_n) == (128, 128, 32, 2, 4)
    # registers: 64 acc + 4*4 A-frag + 2*4 B-frag + 40 = 128 -> 8 warps * 16 granules * 256 = 32768 regs,
    # floor(65536/32768) = 2 blocks/SM; smem: floor(233472/(2*35840+1024)) = 3 -> 2 blocks
    assert s.regs_per_thread == 128 and s.blocks_per_sm == 2
    # Little's law: 800 ns * 1.83 GHz * 1024 FLOP/clk / 32 FLOP/B = 46848 B -> 1 + ceil(46848/(2*35840)) = 2
    assert s.stages == 2
    # raster: W = min(264 slots, 1024 tiles) = 264, G = sqrt(264 * 128/128) = 16.2 -> 16
    assert s.group_m == 16 and s.split_k == 1


def test_skinny_fills_the_machine_by_shrinking_tiles(mma_sync_only):
    # 64x8192x1024 on the H200: the 128x128 tile clamps to 64x128 (M = 64), leaving 64 tiles for 264 slots.
    # Halving N twice (64x64 -> 64x32) raises the tiles to 256 while the model gains; the model predicts no
    # gain for 32x32, so halving stops, and split-K = min(floor(924/256), floor(32/2)) = 3 fills the slots.
    cfg = configure(GemmProblem(64, 8192, 1024, "tf32"), "h200")
    s = cfg.schedule
    assert (s.block_m, s.block_n) == (64, 32)
    fills = [st for st in cfg.derivation if st.step == "wave fill"]
    assert [f.value for f in fills] == ["64x64", "64x32", "keep 64x32"]
    assert s.split_k == 3


def test_split_k_when_tiles_cannot_fill_the_gpu():
    # 256x256x65536 on the RTX 3060: 8 tiles of 128x64 for 28 slots (1 block/SM).  Shrinking does not pay,
    # so K is split: min(floor(28/8), floor(2048 k-steps / 2)) = 3 slices.
    cfg = configure(GemmProblem(256, 256, 65536, "tf32"), "rtx3060")
    s = cfg.schedule
    assert (s.block_m, s.block_n) == (128, 64) and s.split_k == 3
    assert s.grid(256, 256) == (8, 1, 3)
    # with a ReLU epilogue partial sums cannot be activated: no split
    relu = configure(GemmProblem(256, 256, 65536, "tf32", activation="relu"), "rtx3060")
    assert relu.schedule.split_k == 1
    # nor into a 16-bit output: atomic adds would round every partial sum to bf16 (measured on the H200:
    # 2e-2 relative error for 64x64x100000 bf16 with split-K, v0.1)
    bf16 = configure(GemmProblem(256, 256, 65536, "bf16"), "rtx3060")
    assert bf16.schedule.split_k == 1
    assert configure(GemmProblem(256, 256, 65536, "bf16", out_dtype="f32"), "rtx3060").schedule.split_k > 1


def test_16bit_types_use_k16_and_wider_block_k(mma_sync_only):
    cfg = configure(GemmProblem(4096, 4096, 4096, "bf16"), "h200")
    s = cfg.schedule
    assert (s.mma.m, s.mma.n, s.mma.k) == (16, 8, 16) and s.block_k == 64  # 128 B / 2 B
    assert s.vector_a == 8  # 16-byte cp.async of bf16


def test_odd_sizes_are_predicated_not_refused(mma_sync_only):
    for shape in [(1, 1, 1), (7, 33, 5), (4097, 127, 1000), (1, 4096, 4096)]:
        for dt in DTYPES:
            cfg = configure(GemmProblem(*shape, dtype=dt), "h200", kernel="tiles")
            assert check_schedule(cfg.problem, cfg.schedule, cfg.target) == []
    # odd K: 4-byte copies for tf32, 1-element (non-cp.async) loads for 16-bit types
    assert configure(GemmProblem(64, 64, 33, "tf32"), "h200").schedule.vector_a == 1
    assert configure(GemmProblem(64, 64, 34, "bf16"), "h200").schedule.vector_a == 2


def test_prediction_is_consistent_with_cost_model(mma_sync_only):
    cfg = configure(GemmProblem(3000, 5000, 700), "h200")
    again = predict(cfg.problem, cfg.schedule, cfg.target)
    assert again == cfg.prediction
    floor = roofline_floor_s(cfg.problem, cfg.target) * 1e6
    assert cfg.prediction.floor_us == pytest.approx(floor)


def test_json_has_the_documented_keys():
    d = configure(GemmProblem(4096, 4096, 4096), "h200").to_dict()
    for k in ("op", "M", "N", "K", "dtype", "target", "schedule", "prediction", "derivation", "config_time_ms"):
        assert k in d
    for k in ("block_m", "block_n", "block_k", "warps", "stages", "split_k", "smem_bytes", "regs_per_thread",
              "threads_per_block", "blocks_per_sm", "mma"):
        assert k in d["schedule"]
    for k in ("time_us", "tflops", "bound"):
        assert k in d["prediction"]
    assert {"step", "formula", "value", "reason"} <= set(d["derivation"][0])


def test_calibrated_time_is_reported_not_used(mma_sync_only):
    cfg = configure(GemmProblem(4096, 4096, 4096, "tf32"), "h200")
    from nova.hwmodel.calibration import load
    cal = load("h200")
    assert cal is not None and set(cal["constants"]) == {"eta_tc", "eta_dram", "t_launch_us"}
    # efficiency constants below 1 can only slow the prediction down
    assert cfg.calibrated_time_us > cfg.prediction.time_us
    assert cfg.to_dict()["calibrated_time_us"] == cfg.calibrated_time_us
    # no calibration for the RTX 3060 preset: nothing is invented
    assert configure(GemmProblem(4096, 4096, 4096), "rtx3060").calibrated_time_us is None


def test_each_family_has_its_own_calibration(monkeypatch):
    monkeypatch.delenv("NOVA_HOPPER", raising=False)
    hopper = configure(GemmProblem(4096, 4096, 4096, "tf32"), "h200")
    assert hopper.schedule.mma.family == "wgmma"
    from nova.hwmodel.calibration import load
    assert load("h200", "wgmma")["family"] == "wgmma" and load("h200")["family"] == "mma.sync"
    assert hopper.calibrated_time_us is not None and hopper.calibrated_time_us > hopper.prediction.floor_us
