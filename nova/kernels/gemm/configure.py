"""``configure(problem, target)``: the GEMM family's entry point.  It picks the instruction family
(wgmma on Hopper unless ``NOVA_HOPPER=0``, else mma.sync), runs that family's derivation
(``hopper.py`` or ``ampere.py``) and records its prediction; for a GEMM of a few rows it then derives
the skinny kernel (``skinny.py``: B streamed on the CUDA cores) and keeps the lower prediction of the
two (``skinny.choose_kernel``); for an eager call (``eager=True``) it weighs that pick's launches
against the single-launch mma.sync tiles (``eager.choose_eager``), and returns the ``Config``.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from nova.configurator.derivation import Derivation, note
from nova.configurator.step import Prediction, Step
from nova.hwmodel import GPUModel, get_target
from nova.kernels.gemm.ampere import configure_mma_sync
from nova.kernels.gemm.eager import choose_eager
from nova.kernels.gemm.hopper import configure_hopper, hopper_supported
from nova.kernels.gemm.problem import GemmProblem, ProblemError
from nova.kernels.gemm.schedule import Schedule
from nova.kernels.gemm.skinny import choose_kernel
from nova.kernels.gemm.skinny_schedule import SkinnySchedule
from nova.options import DEFAULTS, Options
from nova.options import current as current_options


@dataclass(frozen=True)
class Config:
    problem: GemmProblem
    target: GPUModel
    schedule: Schedule | SkinnySchedule      # the kernel that runs: tensor-core tiles, or the skinny kernel
    prediction: Prediction
    derivation: tuple[Step, ...]
    config_time_ms: float = field(default=0.0, compare=False)

    @property
    def skinny(self) -> bool:
        """The skinny kernel (``skinny.py``) runs this GEMM, not the tensor-core tiles."""
        return self.schedule.kernel == "skinny"

    @property
    def calibrated_time_us(self) -> float | None:
        """The prediction with the target's fitted efficiency constants (``nova.bench.calibrate``), when
        a calibration exists for this target and instruction family; None otherwise.  A family's
        derivation never uses it (it reports, it does not choose); only an eager call's choice between
        two families reads it (``eager.choose_eager``)."""
        clock_and_time = self._calibrated()
        return None if clock_and_time is None else float(clock_and_time[1])

    @property
    def time_us(self) -> float:
        """What a plan prices this GEMM at: the calibrated time where a calibration applies, else the
        model's prediction (the step's passes and reports; the schedule itself is chosen by the model)."""
        calibrated = self.calibrated_time_us
        return self.prediction.time_us if calibrated is None else calibrated

    @property
    def calibrated_clock_mhz(self) -> float | None:
        """The SM clock the calibration predicts for this kernel (its power-limited clock), when the
        calibration has the power constants; None otherwise."""
        clock_and_time = self._calibrated()
        return None if clock_and_time is None or clock_and_time[0] is None else float(clock_and_time[0])

    @property
    def measured_ceiling(self) -> dict | None:
        """The target's measured power-limited tensor ceiling for this dtype
        (``nova.hwmodel.calibration.measured_ceiling``), or None where none was measured."""
        from nova.hwmodel.calibration import measured_ceiling
        return measured_ceiling(self.target.name, self.problem.dtype)

    def calibration_constants(self) -> dict | None:
        """The calibration constants that apply to this kernel (its target's, for its instruction
        family, ping-pong's where it has them), or None: no calibration, or the skinny kernel (its
        prediction already uses the memory-bound families' fitted constants)."""
        from nova.hwmodel.calibration import constants_for, load
        if self.skinny:
            return None
        cal = load(self.target.name, self.schedule.mma.family)
        return None if cal is None else constants_for(cal["constants"], self.schedule)

    def _calibrated(self):
        from nova.hwmodel.calibration import clock_and_time
        constants = self.calibration_constants()
        if constants is None:
            return None
        return clock_and_time(self.prediction.terms_us, self.schedule.launch_split, constants, self.schedule.launches)

    def to_dict(self) -> dict:
        s = self.schedule
        sched = s.to_dict()
        if self.skinny:
            sched.update(kernel="skinny", label=s.label(), grid=list(s.grid(self.problem.N)),
                         workspace_bytes=s.workspace_bytes(self.problem.M, self.problem.N))
        else:
            sched.update(warps=s.warps, threads_per_block=s.threads_per_block, swap_ab=s.swap_ab, warp_tile_m=s.warp_tile_m,
                         warp_tile_n=s.warp_tile_n, grid=list(s.grid(self.problem.M, self.problem.N, self.problem.batch)),
                         mma=str(s.mma), mma_instr=s.mma.__dict__ | {})
        return {"op": "matmul", "batch": self.problem.batch, "M": self.problem.M, "N": self.problem.N,
                "K": self.problem.K,
                "dtype": self.problem.dtype, "target": self.target.name, "arch": self.target.arch,
                "problem": self.problem.to_dict(), "schedule": sched, "prediction": self.prediction.to_dict(),
                "derivation": [st.to_dict() for st in self.derivation], "config_time_ms": self.config_time_ms,
                "calibrated_time_us": self.calibrated_time_us, "calibrated_clock_mhz": self.calibrated_clock_mhz,
                "measured_ceiling": self.measured_ceiling}


def configure(problem: GemmProblem, target: "GPUModel | str" = "rtx3060", *, family: str | None = None,
              options: Options | None = None, kernel: str | None = None, eager: bool = False) -> Config:
    """Derive the schedule for ``problem`` on ``target``.  Pure and deterministic: a function of its
    arguments, ``options`` included (None: ``nova.options.current()``, the environment's); derived
    once per argument set inside ``memoized()``.

    ``family`` picks the tensor-core instruction family: None = the fastest the target and the code
    generator support (wgmma on Hopper unless ``NOVA_HOPPER=0``), ``"mma.sync"`` = the Ampere-class
    path on any target (used by the oracle's schedule space).  ``kernel``: None = the lower
    prediction of the tensor-core tiles and (for a few rows) the skinny kernel; ``"tiles"`` = the
    tiles (as a given ``family`` implies: the schedule space, Triton's mapping); ``"skinny"`` = the
    skinny kernel, a ``ValueError`` where it does not apply.  ``eager``: the kernel of a call from
    Python outside a captured graph, host time per launch included (``eager.choose_eager``: the
    device pick or the single-launch mma.sync tiles); with ``family`` or ``kernel`` given it changes
    nothing."""
    if family not in (None, "mma.sync", "wgmma"):
        raise ValueError(f"unknown MMA family {family!r}; choose mma.sync or wgmma")
    if kernel not in (None, "tiles", "skinny"):
        raise ValueError(f"unknown GEMM kernel {kernel!r}; choose tiles or skinny")
    if kernel == "skinny" and family is not None:
        raise ValueError(f"the skinny kernel runs on the CUDA cores: no MMA family ({family!r}) applies")
    gpu = get_target(target)
    opts = options if options is not None else current_options()
    memo = _memo.get()
    if memo is None:
        return _derive(problem, gpu, family, opts, kernel, eager)
    key = (problem, family, kernel, eager, opts, gpu.name, id(gpu))
    found = memo.get(key)
    if found is None or found.target is not gpu:
        found = memo[key] = _derive(problem, gpu, family, opts, kernel, eager)
    return found


_memo: ContextVar[dict | None] = ContextVar("nova_gemm_configs", default=None)


@contextmanager
def memoized():
    """Inside, ``configure`` derives each (problem, target, family, kernel, options) once: a planner that
    prices and sizes the same GEMMs in plan after plan (``nova.passes.memory_policy``, ``explain``)
    uses it.  Outside, every call derives (module constants an experiment changes take effect)."""
    if _memo.get() is not None:
        yield
        return
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


def _derive(problem: GemmProblem, gpu: GPUModel, family: str | None, opts: Options, kernel: str | None,
            eager: bool = False) -> Config:
    """``configure``'s derivation (its docstring), not memoized."""
    t0 = time.perf_counter()
    d = Derivation()
    # ---- Hopper: the wgmma/TMA path, rules in hopper.py; on by default for targets with
    # wgmma (the H200 sweep passed: 652/652, sanitizer clean); NOVA_HOPPER=0 forces mma.sync.
    if family == "wgmma" and not use_hopper(problem, gpu, opts, forced=True):
        from nova.hwmodel import TargetError
        raise TargetError(f"the wgmma path does not apply to {problem.describe()} on {gpu.name} ({gpu.arch})")
    if family != "mma.sync" and use_hopper(problem, gpu, opts, forced=family == "wgmma"):
        schedule, prediction = configure_hopper(problem, gpu, d, opts)
    else:
        if family is None:
            refuse_wgmma_forcing(problem, gpu, opts)
        schedule, prediction = configure_mma_sync(problem, gpu, d)
    d.record(prediction_step(prediction))
    if family is None and kernel != "tiles":
        picked = choose_kernel(problem, gpu, (schedule, prediction), d, forced=kernel == "skinny")
        if picked[0] is not schedule:
            schedule, prediction = picked
            d.record(prediction_step(prediction))
    if family is None and kernel is None and eager:
        picked = choose_eager(problem, gpu, (schedule, prediction), d,
                              lambda s, pr: Config(problem, gpu, s, pr, ()).calibrated_time_us)
        if picked[0] is not schedule:
            schedule, prediction = picked
            d.record(prediction_step(prediction))
    return Config(problem, gpu, schedule, prediction, tuple(d.steps), (time.perf_counter() - t0) * 1e3)


def refuse_wgmma_forcing(p: GemmProblem, gpu: GPUModel, opts: Options) -> None:
    """Where the derivation takes the mma.sync path, a ``NOVA_STREAM_K=1`` or ``NOVA_PINGPONG`` that
    forces a walk or consumers only the wgmma kernels have is a ``ProblemError`` naming why the wgmma
    kernels do not run (the target, the dtype or ``NOVA_HOPPER=0``), as where the wgmma kernels run but
    no tile allows it; a caller that asks for the mma.sync family by name (the schedule space, reports)
    gets its schedules as asked."""
    forced = []
    if opts.stream_k:
        forced.append(("NOVA_STREAM_K=1", "stream-K"))
    if opts.pingpong not in (None, False):
        setting = "1" if opts.pingpong is True else "x".join(str(v) for v in opts.pingpong)
        forced.append((f"NOVA_PINGPONG={setting}", "ping-pong consumers"))
    if not forced:
        return
    supported, why = hopper_supported(p, gpu)
    if supported and not opts.hopper:
        why = "NOVA_HOPPER=0 rules them out"
    variable, what = forced[0]
    raise ProblemError(f"{variable}: {p.describe()} cannot run {what} on {gpu.name}: only the wgmma kernels have "
                       f"{'it' if what == 'stream-K' else 'them'}, and {why} (unset {variable.split('=')[0]})")


def use_hopper(p: GemmProblem, gpu: GPUModel, opts: Options = DEFAULTS, forced: bool = False) -> bool:
    """The wgmma path applies: the target has wgmma/TMA, the problem is supported, and (unless
    ``forced``) the user did not opt out with ``NOVA_HOPPER=0``."""
    if not forced and not opts.hopper:
        return False
    return hopper_supported(p, gpu)[0]


def prediction_step(prediction: Prediction) -> tuple[Prediction, Step]:
    """The last step of both families: the cost model's prediction of the schedule."""
    return prediction, note("prediction", f"{prediction.time_us:.1f} us",
                            f"{prediction.tflops:.1f} TFLOP/s, {prediction.bound}-bound; roofline floor "
                            f"{prediction.floor_us:.1f} us")
