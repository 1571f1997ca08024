"""Compiling a GEMM: ``(GemmProblem, Schedule) -> KernelArtifact`` for either instruction family.

Host only (imports MLIR through ``nova.codegen.lower`` when a function runs).
"""
from __future__ import annotations

import dataclasses

FULL_REGISTER_CAP = 255   # [CC] registers a thread may have at most (one 256-thread CTA: 65536 / 256 = 256)


def describe_schedule(s) -> str:
    return (f"{s.arch} {s.mma} tile {s.block_m}x{s.block_n}x{s.block_k} warps {s.warps_m}x{s.warps_n} "
            f"stages {s.stages} split_k {s.split_k}")


def build_module(problem, schedule) -> str:
    """The kernel's MLIR before lowering, for either instruction family or the skinny kernel
    (``nova compile --emit mlir``)."""
    if schedule.kernel == "skinny":
        from nova.kernels.gemm.emit_skinny import build_skinny_module
        return build_skinny_module(problem, schedule)
    if schedule.mma.family == "wgmma":
        from nova.kernels.gemm.emit_hopper import build_hopper_module
        return build_hopper_module(problem, schedule)
    from nova.kernels.gemm.emit_ampere import build_gemm_module
    return build_gemm_module(problem, schedule)


def compile_gemm(problem, schedule, *, cubin: bool = True):
    """Build, lower and (when ``ptxas`` is on PATH and ``cubin``) assemble the GEMM kernel.

    Returns a :class:`nova.codegen.artifact.KernelArtifact` with entry ``nova_gemm``, params
    ``("A", "B", "C", *problem.epilogue_operands)``, ``grid = schedule.grid(M, N, batch)``, ``block = (threads, 1, 1)``,
    ``smem_bytes = schedule.smem_bytes`` (dynamic) and ``zero_output`` (split-K adds atomically into C).
    A wgmma schedule goes to ``emit_hopper.compile_hopper`` (tensor-map params, ``schedule.hopper.ctas``
    CTAs), a skinny one to ``compile_skinny``.  Raises :class:`CodegenError` with the problem and schedule named if any step fails.
    """
    from nova.codegen import MLIR_TOOLCHAIN, lower_and_assemble
    from nova.codegen.artifact import KernelArtifact
    from nova.codegen.lower import pipeline
    from nova.kernels.gemm.emit_ampere import KERNEL_NAME, build_gemm_module

    if schedule.kernel == "skinny":
        return compile_skinny(problem, schedule, cubin=cubin)
    if schedule.mma.family == "wgmma" and schedule.arch == "sm_90a":   # Hopper path: emit_hopper.py
        from nova.kernels.gemm.emit_hopper import compile_hopper
        return compile_hopper(problem, schedule, cubin=cubin)
    where = f"{problem.describe()} with schedule [{describe_schedule(schedule)}]"
    mlir_text = build_gemm_module(problem, schedule)   # raises CodegenError for unsupported input
    ptx, binary, resources, ptxas_version = lower_and_assemble(mlir_text, schedule.arch, KERNEL_NAME, where,
                                                               cubin=cubin)
    meta = {
        "problem": problem.to_dict(),
        "schedule": schedule.to_dict(),
        "mlir": MLIR_TOOLCHAIN,
        "pipeline": pipeline(schedule.arch),
    }
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    params = ("A", "B", "C") + problem.epilogue_operands
    return KernelArtifact(
        name=KERNEL_NAME,
        arch=schedule.arch,
        ptx=ptx,
        grid=tuple(schedule.grid(problem.M, problem.N, problem.batch)),
        block=(schedule.threads_per_block, 1, 1),
        smem_bytes=schedule.smem_bytes,
        params=params,
        zero_output=schedule.zero_output,
        cubin=binary,
        resources=resources,
        meta=meta,
    )


def compile_skinny(problem, schedule, *, cubin: bool = True):
    """Build, lower and assemble the skinny kernel (``emit_skinny.py``): entry ``nova_gemm_skinny``,
    params ``("A", "B", "C"[, "bias"])``, and ``("W", "T")`` after them when K is split: the
    workspace of ``meta["workspace_bytes"]`` bytes (the partials, then the column blocks' counters
    from ``meta["tickets_offset"]``, ``meta["tickets_bytes"]`` of them, zeroed before the first
    launch; the launcher allocates it per stream).  Assembled under the schedule's register cap
    (``max_regs``), or, where ptxas spills under it, without one (``meta["register_cap"]``)."""
    from nova.codegen import MLIR_TOOLCHAIN, lower_and_assemble
    from nova.codegen.artifact import KernelArtifact
    from nova.codegen.lower import pipeline
    from nova.kernels.gemm.emit_skinny import KERNEL_NAME, build_skinny_module, main_params
    p, s = problem, schedule
    where = f"{p.describe()} with the skinny schedule [{s.label()}]"
    ptx, binary, resources, ptxas_version = lower_and_assemble(build_skinny_module(p, s), s.arch, KERNEL_NAME, where,
                                                               cubin=cubin)
    cap = s.max_regs
    if resources.get("spill_store_bytes") or resources.get("spill_load_bytes"):
        # ptxas spilled under the schedule's cap (its allocation is not monotonic in the cap: a kernel that
        # fits 32 registers may spill at 48): the cap lifted to one CTA's share of the register file
        cap = FULL_REGISTER_CAP
        ptx, binary, resources, ptxas_version = lower_and_assemble(
            build_skinny_module(p, dataclasses.replace(s, max_regs=cap)), s.arch, KERNEL_NAME, where, cubin=cubin)
    meta = {"problem": p.to_dict(), "schedule": s.to_dict(), "mlir": MLIR_TOOLCHAIN, "pipeline": pipeline(s.arch),
            "workspace_bytes": s.workspace_bytes(p.M, p.N), "register_cap": cap}
    if s.split:
        meta["tickets_offset"] = s.tickets_offset(p.M, p.N)
        meta["tickets_bytes"] = meta["workspace_bytes"] - meta["tickets_offset"]
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    return KernelArtifact(name=KERNEL_NAME, arch=s.arch, ptx=ptx, grid=s.grid(p.N), block=(s.threads, 1, 1),
                          smem_bytes=s.smem_bytes, params=main_params(p, s), cubin=binary, resources=resources,
                          meta=meta)
