"""The Analytic Configurator: closed-form schedules, predictions and derivations.

This package holds what every kernel family's derivation shares (``step``: ``Step``, ``Prediction``,
``MmaInstr``; ``derivation``: recording the steps) and the public façade of the GEMM family, whose
problem, schedule and derivations live in ``nova/kernels/gemm/``:

    from nova.configurator import GemmProblem, configure
    cfg = configure(GemmProblem(4096, 4096, 4096, "bf16"), "h200")

The façade imports lazily, so ``nova.kernels.gemm`` may import ``nova.configurator.step`` and
``nova.configurator.derivation`` without a cycle.
"""
from nova.configurator.step import MmaInstr, Prediction, Step

_GEMM = {
    "configure": "configure", "Config": "configure", "memoized": "configure",
    "ScheduleError": "schedule", "Schedule": "schedule",
    "check_schedule": "ampere",
    "predict": "cost", "roofline_floor_s": "cost",
    "GemmProblem": "problem", "ProblemError": "problem", "DTYPES": "problem", "ACTIVATIONS": "problem",
}


def __getattr__(name):
    if name in _GEMM:
        import importlib
        return getattr(importlib.import_module(f"nova.kernels.gemm.{_GEMM[name]}"), name)
    raise AttributeError(f"module 'nova.configurator' has no attribute {name!r}")


__all__ = ["configure", "Config", "memoized", "ScheduleError", "check_schedule", "predict", "roofline_floor_s",
           "GemmProblem", "ProblemError", "DTYPES", "ACTIVATIONS", "Schedule", "MmaInstr", "Prediction", "Step"]
