"""Multi-tensor optimizer updates: every parameter of one optimizer group (AdamW/Adam or SGD) updated
in place by one launch of a generated kernel, configured in closed form.

    problem.py     UpdateRule (what the kernel computes), MultiTensorProblem (a group: the rule and its sizes)
    schedule.py    MultiTensorSchedule, MultiTensorConfig
    derive.py      the configurator (vector width, threads, unroll, occupancy, grid, prediction)
    table.py       the argument table: per-tensor pointers, element counts and chunk ranges
    emit.py        the MLIR builder (host only)
    compile.py     the family "multi_tensor" (build, describe) registered with nova.kernels.family
    launch.py      resolve + bind: the runtime side (no MLIR)

``nova-config explain adamw`` / ``sgd`` is ``nova/cli/optimizer.py``.

Importing this package imports neither MLIR nor the CUDA driver.
"""
from nova.kernels.optimizer.problem import MultiTensorProblem, OptimizerProblemError, UpdateRule
from nova.kernels.optimizer.schedule import MultiTensorConfig, MultiTensorSchedule


def __getattr__(name):
    if name in ("configure_multi_tensor", "configure_rule"):
        from nova.kernels.optimizer import derive
        return getattr(derive, name)
    raise AttributeError(f"module 'nova.kernels.optimizer' has no attribute {name!r}")


__all__ = ["UpdateRule", "MultiTensorProblem", "OptimizerProblemError", "MultiTensorSchedule", "MultiTensorConfig",
           "configure_multi_tensor", "configure_rule"]
