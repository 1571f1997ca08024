"""Compile rows kernels (MLIR -> PTX -> cubin) into ``KernelArtifact``s; the family's registration.

Host only (imports MLIR through ``nova.codegen``).  Registered as the kernel family ``"rows"``
(``nova/kernels/family.py``): a kernel is keyed by ``{op "rows", role, problem, schedule, target, Nova,
toolchain, ABI}``, so a build host (``nova precompile train``) fills exactly what a device looks up.
"""
from __future__ import annotations

from nova.codegen.artifact import KernelArtifact
from nova.kernels.family import KernelFamily, get_or_compile as family_get_or_compile, register
from nova.kernels.rows.abi import KERNEL_NAMES, params

ROWS_ABI = 2            # bump when the kernels' parameters, workspace or generated code change
SUPPORTED_ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90")


def build_module(problem, schedule, role: str) -> str:
    """The MLIR text of kernel ``role``."""
    from nova.kernels.rows.emit_column import build_column, build_column_final, build_total
    from nova.kernels.rows.emit_partials import build_partials_final
    from nova.kernels.rows.emit_row import build_row
    from nova.kernels.rows.emit_row_final import build_row_final
    if role == "row":
        return build_row(problem, schedule)
    if role == "row_final":
        return build_row_final(problem, schedule)
    if role == "column":
        return build_column(problem, schedule)
    if role == "column_final":
        return build_column_final(problem, schedule)
    if role == "partials_final":
        return build_partials_final(problem, schedule)
    if role in ("total", "total_pre"):
        return build_total(problem, schedule, role)
    raise ValueError(f"unknown rows kernel role {role!r}")


def geometry(schedule, role: str) -> tuple[tuple, tuple, int]:
    """(grid, block, dynamic shared memory bytes) of kernel ``role``."""
    if role == "row":
        t = schedule.row
        return (t.grid, 1, 1), (t.threads, 1, 1), t.smem_bytes
    if role == "row_final":
        t = schedule.row
        return (t.final_grid, 1, 1), (t.final_threads, 1, 1), 0
    if role == "partials_final":
        f = schedule.partials
        return (f.final_grid, 1, 1), (f.final_threads, 1, 1), f.final_smem_bytes
    c = schedule.column
    if role == "column":
        return (c.grid[0], c.grid[1], 1), (c.threads, 1, 1), c.smem_bytes
    if role == "column_final":
        return (c.final_grid, 1, 1), (c.final_threads, 1, 1), c.final_smem_bytes
    return (1, 1, 1), (schedule.total_threads, 1, 1), 4 * 2 * (schedule.total_threads // 32)


def compile_kernel(problem, schedule, role: str, *, cubin: bool = True) -> KernelArtifact:
    from nova.codegen import MLIR_TOOLCHAIN, lower_and_assemble
    from nova.codegen.lower import pipeline
    if schedule.arch not in SUPPORTED_ARCHES:
        raise ValueError(f"rows kernels are generated for {', '.join(SUPPORTED_ARCHES)}, not {schedule.arch}")
    text = build_module(problem, schedule, role)
    ptx, binary, resources, ptxas_version = lower_and_assemble(text, schedule.arch, KERNEL_NAMES[role],
                                                               f"{role} of {problem.describe()}", cubin=cubin)
    grid, block, smem = geometry(schedule, role)
    meta = {"problem": problem.to_dict(), "schedule": schedule.to_dict(), "role": role, "mlir": MLIR_TOOLCHAIN,
            "pipeline": pipeline(schedule.arch)}
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    return KernelArtifact(name=KERNEL_NAMES[role], arch=schedule.arch, ptx=ptx, grid=grid, block=block,
                          smem_bytes=smem, params=tuple(n for n, _ in params(problem, schedule, role)),
                          cubin=binary, resources=resources, meta=meta)


def summary(problem, role: str, target) -> str:
    return f"rows {problem.describe()} [{role}] on {target.name} ({target.arch})"


FAMILY = register(KernelFamily("rows", ROWS_ABI, build=compile_kernel, describe=summary,
                               precompile_hint="nova precompile train ... --target <target>"))


def get_or_compile(problem, schedule, role: str, target, cache=None, offline: bool | None = None):
    """``(artifact, key, status)`` of one rows kernel: cached, else compiled (offline: NotPrecompiledError)."""
    return family_get_or_compile("rows", problem, schedule, role, target, cache, offline)


def precompile_rows(problem, target="h200", cache=None) -> list[tuple[str, str, str]]:
    """Configure ``problem`` for ``target`` and put each of its kernels in the cache: [(role, key, status)]."""
    from nova.hwmodel import get_target
    from nova.kernels.rows.derive import configure_rows
    gpu = get_target(target) if isinstance(target, str) else target
    s = configure_rows(problem, gpu).schedule
    return [(role, *get_or_compile(problem, s, role, gpu, cache, offline=False)[1:]) for role in s.roles]
