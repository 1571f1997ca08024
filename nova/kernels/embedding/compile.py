"""Compile embedding kernels (MLIR -> PTX -> cubin) into ``KernelArtifact``s; the family's registration.

Host only (imports MLIR through ``nova.codegen``).  Registered as the kernel family ``"embedding"``
(``nova/kernels/family.py``): a kernel is keyed by ``{op "embedding", role, problem, schedule, target,
Nova, toolchain, ABI}``, so a build host (``nova precompile train``) fills exactly what a device looks up.
"""
from __future__ import annotations

from nova.codegen.artifact import KernelArtifact
from nova.kernels.embedding.abi import kernel_name, params, split_role
from nova.kernels.family import KernelFamily, get_or_compile as family_get_or_compile, register

EMBEDDING_ABI = 3       # bump when the kernels' parameters, workspace or generated code change
SUPPORTED_ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90")     # match.any.sync: sm_70 and later


def geometry(problem, schedule, role: str) -> tuple[tuple, tuple, int]:
    """(grid, block, dynamic shared memory bytes) of kernel ``role``."""
    base, _ = split_role(role)
    if base in ("gather", "accumulate"):
        t = schedule.rows
        return (t.grid, 1, 1), (t.threads, 1, 1), 0
    sp = schedule.sort
    if base == "scan":
        return (1, 1, 1), (sp.scan_threads, 1, 1), 4 * (sp.scan_threads // 32)
    words = sp.digits if base == "histogram" else sp.digits * (sp.tile // 32)
    return (sp.tiles, 1, 1), (sp.tile, 1, 1), 4 * words


def compile_kernel(problem, schedule, role: str, *, cubin: bool = True) -> KernelArtifact:
    from nova.codegen import MLIR_TOOLCHAIN, lower_and_assemble
    from nova.codegen.lower import pipeline
    from nova.kernels.embedding.emit import build_module
    if schedule.arch not in SUPPORTED_ARCHES:
        raise ValueError(f"embedding kernels are generated for {', '.join(SUPPORTED_ARCHES)}, not {schedule.arch}")
    text = build_module(problem, schedule, role)
    name = kernel_name(role)
    ptx, binary, resources, ptxas_version = lower_and_assemble(text, schedule.arch, name,
                                                               f"{role} of {problem.describe()}", cubin=cubin)
    grid, block, smem = geometry(problem, schedule, role)
    meta = {"problem": problem.to_dict(), "schedule": schedule.to_dict(), "role": role, "mlir": MLIR_TOOLCHAIN,
            "pipeline": pipeline(schedule.arch)}
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    return KernelArtifact(name=name, arch=schedule.arch, ptx=ptx, grid=grid, block=block, smem_bytes=smem,
                          params=tuple(n for n, _ in params(problem, schedule, role)), cubin=binary,
                          resources=resources, meta=meta)


def summary(problem, role: str, target) -> str:
    return f"{problem.describe()} [{role}] on {target.name} ({target.arch})"


FAMILY = register(KernelFamily("embedding", EMBEDDING_ABI, build=compile_kernel, describe=summary,
                               precompile_hint="nova precompile train ... --target <target>"))


def get_or_compile(problem, schedule, role: str, target, cache=None, offline: bool | None = None):
    """``(artifact, key, status)`` of one embedding kernel: cached, else compiled (offline: NotPrecompiledError)."""
    return family_get_or_compile("embedding", problem, schedule, role, target, cache, offline)


def precompile_embedding(problem, target="h200", cache=None) -> list[tuple[str, str, str]]:
    """Configure ``problem`` for ``target`` and put each of its kernels in the cache: [(role, key, status)]."""
    from nova.hwmodel import get_target
    from nova.kernels.embedding.derive import configure_embedding
    gpu = get_target(target) if isinstance(target, str) else target
    s = configure_embedding(problem, gpu).schedule
    return [(role, *get_or_compile(problem, s, role, gpu, cache, offline=False)[1:]) for role in s.roles]
