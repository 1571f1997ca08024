"""Fused pointwise kernels: a fusion group's chain of IR pointwise ops (broadcasting, strided views
read in place, inlined scalar fills) as one generated kernel, configured in closed form.

    types.py       the element types it computes on (sizes, torch names, promotion)
    problem.py     PointwiseProblem (shape, operands, SSA program, outputs)
    canonical.py   the canonical form (coalesced axes; DAG hash-consing, folding, ordering) + rewrites.py
    schedule.py    PointwiseSchedule, PointwiseConfig
    derive.py      the configurator (vector width, threads, occupancy, grid, prediction)
    emit.py        the MLIR builder (host only)
    compile.py     the family "pointwise" (build, describe) registered with nova.kernels.family
    launch.py      resolve + bind: the runtime side (no MLIR)
    switch.py      NOVA_POINTWISE: which memory-bound groups run on Nova kernels (read once)

A fusion group's problem is stated by ``nova.passes.pointwise_from_ir`` (and so are a concat's that no
kernel assembles in place and a copying view's: ``iota``, ``Window`` and ``gather`` make a value
depend on its index, ``problem.py``); ``nova-config explain pointwise`` is ``nova/cli/pointwise.py``
(its expression parser ``nova/passes/pointwise_expression.py``).

Importing this package imports neither MLIR nor the CUDA driver.
"""
from nova.kernels.pointwise.problem import Instr, Operand, PointwiseProblem, PointwiseProblemError
from nova.kernels.pointwise.schedule import PointwiseConfig, PointwiseSchedule


def __getattr__(name):
    if name == "configure_pointwise":
        from nova.kernels.pointwise.derive import configure_pointwise
        return configure_pointwise
    raise AttributeError(f"module 'nova.kernels.pointwise' has no attribute {name!r}")


__all__ = ["PointwiseProblem", "PointwiseProblemError", "Operand", "Instr", "PointwiseSchedule", "PointwiseConfig",
           "configure_pointwise"]
