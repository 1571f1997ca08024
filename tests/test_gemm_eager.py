"""The kernel of an eager GEMM call (nova/kernels/gemm/eager.py): an eager call waits for the larger of
its device time and its host time (a launch per operand prep), so a small problem whose device pick
launches three kernels runs the single-launch mma.sync tiles instead; a captured call and a compiled
step keep the device pick.  The host figures are measured (``calibrate.fit_host``) and reproducible."""
from pathlib import Path

import pytest

from nova.configurator import GemmProblem, configure
from nova.hwmodel import get_target
from nova.kernels.gemm.eager import eager_time_us, host_time_us

ROOT = Path(__file__).resolve().parents[1]


def test_a_small_odd_problem_takes_one_launch_when_called_eagerly():
    """13x7603x270 bf16 NT (K off 16 bytes: both operands padded, three launches, ~9 us on the device):
    27.1 us of host a call; the mma.sync tiles read K in place in one launch: 14.7 us."""
    p = GemmProblem(13, 7603, 270, "bf16", False, True)
    device, eager = configure(p, "h200"), configure(p, "h200", eager=True)
    assert device.schedule.launches == 3 and device.schedule.mma.family == "wgmma"
    assert eager.schedule.launches == 1 and eager.schedule.mma.family == "mma.sync"
    gpu = get_target("h200")
    assert eager_time_us(gpu, eager.time_us, 1) < eager_time_us(gpu, device.time_us, 3) == pytest.approx(
        host_time_us(gpu, 3))
    (step,) = [s for s in eager.derivation if s.step == "eager call"]
    assert step.value == "mma.sync" and "3 launches = 27.1 us of host" in step.reason


def test_the_device_pick_stays_where_it_launches_once_or_wins_anyway():
    """4096^3 bf16 (one launch), a decode GEMM on the skinny kernel (one launch), 448x384x320 TF32 TN
    (a transpose: the mma.sync tiles need a split and launch twice too): the eager pick is the device pick."""
    for p in (GemmProblem(4096, 4096, 4096, "bf16"), GemmProblem(1, 4096, 4096, "bf16", False, True),
              GemmProblem(448, 384, 320, "tf32", True, False)):
        assert configure(p, "h200", eager=True).schedule == configure(p, "h200").schedule, p.describe()


def test_forcing_a_family_or_kernel_ignores_eager():
    p = GemmProblem(13, 7603, 270, "bf16", False, True)
    assert configure(p, "h200", kernel="tiles", eager=True).schedule == configure(p, "h200", kernel="tiles").schedule


def test_precompile_builds_both_picks_for_calls_and_the_device_pick_for_steps(monkeypatch):
    """A shape list's problems are nova.matmul calls, eager or captured: both kernels; a compiled step's
    launches are replayed: the device pick alone."""
    from nova.runtime import matmul as mm
    built = []
    monkeypatch.setattr(mm, "get_or_compile", lambda p, s, t, c, offline: built.append(s) or (None, "k" * 12, "compiled"))
    p = GemmProblem(13, 7603, 270, "bf16", False, True)
    assert mm.precompile_gemms([p], get_target("h200"), None, log=lambda line: None)["compiled"] == 2
    assert {s.mma.family for s in built} == {"wgmma", "mma.sync"}
    built.clear()
    assert mm.precompile_gemms([p], get_target("h200"), None, log=lambda line: None, eager=False)["compiled"] == 1
    assert built[0].mma.family == "wgmma"


def test_a_compiled_step_launches_its_gemms_with_the_device_pick():
    """The executor's GEMM launches pass ``eager=False`` to nova.matmul (the kernels its plan priced and
    ``nova precompile train`` built)."""
    from nova.compiler import gemm_lowering
    seen = {}

    class Launch:
        backend, call, problem = "nova", None, None
    launch = Launch()
    launch.call = type("Call", (), {"a": 1, "b": 2, "out": 3, "bias": None, "residual": None, "preactivation": None})()
    launch.problem = GemmProblem(64, 64, 64, "bf16")
    launch.describe = lambda: "gemm"
    kernel = gemm_lowering.GemmLaunch.kernel(launch, lambda *a, **kw: seen.update(kw), "h200", None, replayed=True)
    kernel.run()
    assert seen["eager"] is False


def test_the_host_figures_are_their_fit():
    """gpus.toml's measured host figures refit from the held-out draws they name."""
    from nova.bench import calibrate
    for preset, runs in (("h200", ["bench/results/h200-2026-12-06/run91-h200/fresh/heldout_gemm.json"]),
                         ("h100", [f"bench/results/h100-2026-12-06/{r}-h100/fresh/heldout_gemm.json"
                                   for r in ("run90", "run91")])):
        fit = calibrate.fit_host([str(ROOT / r) for r in runs], preset)
        gpu = get_target(preset)
        assert (fit["call_us"], fit["launch_us"]) == (gpu.host_call_us, gpu.host_launch_us), preset
        assert f"{fit['rows']} host-bound rows" in gpu.q["host_call_us"].source


def test_a_target_without_an_mma_sync_calibration_keeps_the_device_pick():
    """The H100 has no mma.sync calibration: that family's model alone is 2-3x optimistic on Hopper, not
    on the wgmma model's scale, so an eager call there keeps the device pick and says why."""
    p = GemmProblem(28, 14679, 5932, "bf16", False, True)
    eager = configure(p, "h100", eager=True)
    assert eager.schedule == configure(p, "h100").schedule
    (step,) = [s for s in eager.derivation if s.step == "eager call"]
    assert "no calibration of the mma.sync kernels" in step.reason
