"""The kernel of an eager GEMM call: device time or host time, whichever an eager call waits for.

A call from Python (``nova.matmul`` outside a captured CUDA graph) costs its host time as well as its
kernels' device time: the runtime's Python and one driver launch, and a further launch for each
operand-prep pass and for split-K's second kernel.  Calls back to back overlap the host's work for
the next call with the device's for this one, so a call takes the larger of the two:

    t_eager = max(t_device, host_call_us + (launches - 1) x host_launch_us)

(``host_call_us``, ``host_launch_us``: the target's measured host figures, ``nova.bench.calibrate.fit_host``).
The tensor-core tiles of a small problem whose operands need preps (K off 16 bytes, a TF32
transpose) run in a few microseconds but launch two or three kernels; the mma.sync tiles read any
K in place with one.  ``choose_eager`` weighs the device pick against the mma.sync kernel by
``t_eager`` and keeps the device pick on a tie.  A captured call (a compiled step's graph, a
benchmark's replay) pays no host time per launch: its kernel is the device pick (``configure``
without ``eager``).
"""
from __future__ import annotations

from nova.configurator.derivation import Derivation, NullDerivation
from nova.hwmodel import GPUModel
from nova.kernels.gemm.problem import GemmProblem


def host_time_us(gpu: GPUModel, launches: int) -> float:
    """Host microseconds of an eager call of ``launches`` kernel launches on ``gpu``'s machine."""
    return gpu.host_call_us + (launches - 1) * gpu.host_launch_us


def eager_time_us(gpu: GPUModel, device_us: float, launches: int) -> float:
    """What an eager call of a kernel predicted at ``device_us`` costs: the larger of it and the host's."""
    return max(device_us, host_time_us(gpu, launches))


def choose_eager(p: GemmProblem, gpu: GPUModel, picked: tuple, d: Derivation, priced) -> tuple:
    """The eager call's kernel: ``picked`` (the device pick's schedule and prediction) or the mma.sync
    tiles, the lower ``eager_time_us``; recorded in ``d`` with both where the mma.sync tiles apply and
    the device pick launches more than one kernel (else nothing can launch fewer).  ``priced(schedule,
    prediction)``: the calibrated device microseconds of a kernel (``Config.calibrated_time_us``), None
    where the target has no calibration of its family.  Two instruction families' models are on one
    scale only through their calibrations (the mma.sync model on Hopper is optimistic by 2-3x before
    its own), so this choice between families reads the calibrated times, and a target without an
    mma.sync calibration (the H100) keeps the device pick."""
    schedule, prediction = picked
    if schedule.launches == 1 or getattr(schedule, "mma", None) is not None and schedule.mma.family == "mma.sync":
        return picked
    from nova.kernels.gemm.ampere import configure_mma_sync
    from nova.kernels.gemm.schedule import ScheduleError
    try:
        single = configure_mma_sync(p, gpu, NullDerivation())
    except (ValueError, ScheduleError):         # the mma.sync path does not take this problem
        return picked
    device_single = priced(*single)
    if device_single is None:
        d.note("eager call", schedule.kernel, f"the device pick: {gpu.name} has no calibration of the mma.sync "
               "kernels, whose model alone is not on the wgmma model's scale")
        return picked
    device_picked = priced(*picked)
    device_picked = prediction.time_us if device_picked is None else device_picked
    t_picked = eager_time_us(gpu, device_picked, schedule.launches)
    t_single = eager_time_us(gpu, device_single, single[0].launches)
    what = (f"{device_picked:.1f} us on the device, {schedule.launches} launches = "
            f"{host_time_us(gpu, schedule.launches):.1f} us of host; mma.sync {device_single:.1f} us, "
            f"{single[0].launches} launch{'es' * (single[0].launches > 1)} = {host_time_us(gpu, single[0].launches):.1f} us")
    formula = "max(t_device, host_call_us + (launches - 1) x host_launch_us)"
    if t_single < t_picked:
        d.note("eager call", "mma.sync", f"an eager call waits {t_single:.1f} us against {t_picked:.1f} ({what})", formula)
        return single
    d.note("eager call", schedule.kernel,
           f"an eager call waits {t_picked:.1f} us against {t_single:.1f} with mma.sync ({what})", formula)
    return picked
