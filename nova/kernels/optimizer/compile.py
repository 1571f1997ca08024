"""Compile multi-tensor optimizer kernels (MLIR -> PTX -> cubin) and register the family "multi_tensor".

Host only where it builds (imports MLIR through ``nova.codegen``).  The key is the family protocol's
(``nova.kernels.family.kernel_key``) over the ``UpdateRule`` (role ``update``) or the ``SumRule``
(role ``sum``) -- not the tensors: those are in the argument table --, the schedule and the target, so
one entry serves every model and parameter group with that rule.
"""
from __future__ import annotations

from nova.codegen.artifact import KernelArtifact
from nova.kernels.family import KernelFamily, register

MULTI_TENSOR_ABI = 1       # bump when the generated code, the argument table or the launch contract changes
ROLE = "update"            # an UpdateRule's kernel (AdamW/Adam, SGD)
SUM_ROLE = "sum"           # a SumRule's kernel (the full sums of many tensors: gradient clipping's norms)


def build(rule, schedule, role: str = ROLE, *, cubin: bool = True) -> KernelArtifact:
    """The artifact of one multi-tensor kernel: ``params`` are the argument table and the hyper-parameters
    (an update) or the workspace (a sum)."""
    from nova.codegen import MLIR_TOOLCHAIN, lower_and_assemble
    from nova.codegen.lower import pipeline
    if role == SUM_ROLE:
        from nova.kernels.optimizer.sum_emit import KERNEL_NAME, PARAMS, build_module, smem_bytes
        smem = smem_bytes(schedule)
    else:
        from nova.kernels.optimizer.emit import KERNEL_NAME, PARAMS, build_module
        smem = 0
    text = build_module(rule, schedule)
    ptx, binary, resources, ptxas_version = lower_and_assemble(text, schedule.arch, KERNEL_NAME,
                                                               rule.describe(), cubin=cubin)
    meta = {"problem": rule.to_dict(), "schedule": schedule.to_dict(), "role": role, "mlir": MLIR_TOOLCHAIN,
            "pipeline": pipeline(schedule.arch)}
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    return KernelArtifact(name=KERNEL_NAME, arch=schedule.arch, ptx=ptx, grid=(schedule.grid, 1, 1),
                          block=(schedule.threads, 1, 1), smem_bytes=smem, params=PARAMS, cubin=binary,
                          resources=resources, meta=meta)


def describe(rule, role: str, target) -> str:
    return f"{'' if role == SUM_ROLE else 'multi-tensor '}{rule.describe()} [{role}] on {target.name} ({target.arch})"


FAMILY = register(KernelFamily(name="multi_tensor", abi=MULTI_TENSOR_ABI, build=build, describe=describe,
                               precompile_hint="nova precompile train ... (the step's plan lists its optimizer "
                                               "updates)"))


def get_or_compile(rule, schedule, target, cache=None, offline: bool | None = None, role: str = ROLE):
    """``(artifact, key, status)`` through the family protocol (``role``: ``update`` or ``sum``)."""
    from nova.kernels.family import get_or_compile as family_get_or_compile
    return family_get_or_compile("multi_tensor", rule, schedule, role, target, cache, offline)
