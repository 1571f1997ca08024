"""Compile fused pointwise kernels (MLIR -> PTX -> cubin) and register the family "pointwise".

Host only where it builds (imports MLIR through ``nova.codegen``).  The key is the family protocol's
(``nova.kernels.family.kernel_key``): the canonical problem, the schedule and the target, so the same
math on the same layout is one cache entry however it was written.
"""
from __future__ import annotations

from nova.codegen.artifact import KernelArtifact
from nova.kernels.family import KernelFamily, register

POINTWISE_ABI = 1       # bump when the generated code or the launch contract changes
ROLE = "pointwise"


def build(problem, schedule, role: str = ROLE, *, cubin: bool = True) -> KernelArtifact:
    """The artifact of one pointwise kernel: ``params`` are the inputs then the outputs, bare pointers."""
    from nova.codegen import MLIR_TOOLCHAIN, lower_and_assemble
    from nova.codegen.lower import pipeline
    from nova.kernels.pointwise.emit import KERNEL_NAME, build_module, params
    text = build_module(problem, schedule)
    ptx, binary, resources, ptxas_version = lower_and_assemble(text, schedule.arch, KERNEL_NAME,
                                                               problem.describe(), cubin=cubin)
    meta = {"problem": problem.to_dict(), "schedule": schedule.to_dict(), "role": role, "mlir": MLIR_TOOLCHAIN,
            "pipeline": pipeline(schedule.arch), "expression": problem.expression()}
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    return KernelArtifact(name=KERNEL_NAME, arch=schedule.arch, ptx=ptx, grid=(schedule.grid, 1, 1),
                          block=(schedule.threads, 1, 1), smem_bytes=0, params=params(problem), cubin=binary,
                          resources=resources, meta=meta)


def describe(problem, role: str, target) -> str:
    return f"{problem.describe()} [{role}] on {target.name} ({target.arch})"


FAMILY = register(KernelFamily(name="pointwise", abi=POINTWISE_ABI, build=build, describe=describe,
                               precompile_hint="nova precompile train ... (the step's plan lists its pointwise "
                                               "kernels)"))


def get_or_compile(problem, schedule, target, cache=None, offline: bool | None = None):
    """``(artifact, key, status)`` through the family protocol."""
    from nova.kernels.family import get_or_compile as family_get_or_compile
    return family_get_or_compile("pointwise", problem, schedule, ROLE, target, cache, offline)
