"""The SM clock a whole step settles on, and the step's GEMMs priced at it.

A GEMM timed back to back runs at the clock its own tensor-core duty allows at the power cap
(``nova.hwmodel.calibration.clock_and_time``: f = min(f_max, f_sustained * duty^(-1/3))).  Inside a
training step the power controller, whose time constant is milliseconds, sees the whole step: the
GEMMs, attention and the memory-bound kernels between them.  The step runs at one clock, set by
the step's tensor-core duty:

    f_step    = min(f_max, f_step_sustained * duty_step^(-1/3))
    duty_step = (tensor-core time of the GEMMs at f_step + attention's tensor-core time)
                / (the step's predicted time at f_step)

solved by fixed-point iteration from f_max (the GEMMs' times depend on the clock, the duty on their
times).  Every calibrated Nova GEMM of the step is then priced at f_step
(``calibration.time_at_clock``) instead of at its own back-to-back clock.  ``f_step_sustained`` is
lower than a GEMM loop's ``f_sustained``: the memory-bound kernels draw power (DRAM, L2, the SMs'
load/store pipes) at zero tensor-core duty.  It is fitted, one constant per preset, by
``nova.bench.calibrate_step_clock`` on the SM clocks measured during training-step benchmarks and
stored in ``<preset>.step.json`` (``nova/hwmodel/calibration``).  Without that file, or without the
GEMM calibration's power constants, there is no step clock and each GEMM keeps its own price.
"""
from __future__ import annotations

from dataclasses import dataclass

from nova.hwmodel import calibration

ITERATIONS = 60


@dataclass(frozen=True)
class StepClock:
    mhz: float                # the SM clock of the step
    duty: float               # the step's tensor-core duty at that clock
    sustained_mhz: float      # f_step_sustained (the step calibration's constant)
    max_mhz: float            # f_max (the GEMM calibration's)
    source: str               # the calibration file

    def to_dict(self) -> dict:
        return {"mhz": round(self.mhz, 1), "duty": round(self.duty, 4), "sustained_mhz": self.sustained_mhz,
                "max_mhz": self.max_mhz, "source": self.source,
                "formula": "f = min(f_max, f_step_sustained * duty^(-1/3)), duty = tensor-core time / step time"}


@dataclass(frozen=True)
class PricedGemm:
    """What pricing one GEMM at a clock needs: its model terms and the constants that apply to it."""
    terms_us: dict
    split: int
    launches: int
    constants: dict

    def at(self, mhz: float) -> tuple[float, float]:
        """(tensor-core time, time) in us at ``mhz`` (``calibration.at_clock``)."""
        compute, time = calibration.at_clock(self.terms_us, self.split, self.constants, mhz, self.launches)
        return float(compute), float(time)


def priced_gemm(cfg) -> PricedGemm | None:
    """A calibrated tile GEMM's pricing inputs (``nova.configurator.Config``); None for a GEMM the
    clock model does not price (the skinny CUDA-core kernel, a target without power constants)."""
    if getattr(cfg, "skinny", False):
        return None
    constants = cfg.calibration_constants()
    if constants is None or "f_sustained_mhz" not in constants:
        return None
    return PricedGemm(cfg.prediction.terms_us, cfg.schedule.launch_split, cfg.schedule.launches, constants)


def step_constants(target) -> dict | None:
    """``<preset>.step.json``'s constants with their file name, or None where none is stored."""
    stored = calibration.load(target.name, "step")
    if not stored:
        return None
    return {**stored["constants"], "source": calibration.path_for(target.name, "step").name}


def duty_at(mhz: float, gemms: list[PricedGemm], attention_tensor_us: float, other_us: float) -> tuple[float, float]:
    """(duty, step time in us) with the GEMMs at ``mhz``; ``other_us``: everything else of the step."""
    compute = time = 0.0
    for g in gemms:
        c, t = g.at(mhz)
        compute, time = compute + c, time + t
    step = time + other_us
    return ((compute + attention_tensor_us) / step if step > 0 else 0.0), step


def solve(gemms: list[PricedGemm], attention_tensor_us: float, other_us: float, sustained_mhz: float,
          max_mhz: float) -> tuple[float, float]:
    """(clock in MHz, duty) of the fixed point f = min(f_max, f_sustained * duty(f)^(-1/3)), iterated
    from f_max (module docstring)."""
    mhz, duty = max_mhz, 1.0
    for _ in range(ITERATIONS):
        duty, _ = duty_at(mhz, gemms, attention_tensor_us, other_us)
        mhz = min(max_mhz, sustained_mhz * max(duty, 1e-6) ** (-1 / calibration.CLOCK_EXPONENT))
    return mhz, duty


def settle(gemms: list[PricedGemm], attention_tensor_us: float, other_us: float, target) -> StepClock | None:
    """The step's clock (module docstring), or None without a step calibration or GEMMs to price."""
    step = step_constants(target)
    if step is None or not gemms:
        return None
    f_max, sustained = gemms[0].constants["f_max_mhz"], step["f_step_sustained_mhz"]
    mhz, duty = solve(gemms, attention_tensor_us, other_us, sustained, f_max)
    return StepClock(mhz, duty, sustained, f_max, step["source"])
