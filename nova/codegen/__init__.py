"""Nova's code generator: ``(GemmProblem, Schedule) -> KernelArtifact`` (MLIR -> PTX -> cubin).

Importing this package is cheap: MLIR is imported lazily inside the functions (the runtime imports
``nova.codegen.artifact`` on machines without MLIR).

    from nova.codegen import compile_gemm
    art = compile_gemm(problem, schedule)      # PTX (+ cubin and ptxas resources when ptxas exists)

Modules: ``gemm`` builds the MLIR kernel, ``lower`` runs the pass pipeline and extracts the PTX,
``ptxas`` assembles it and reports registers/spills/shared memory.
"""
from __future__ import annotations

MLIR_TOOLCHAIN = "xtc-mlir-python-bindings==22.1.8.4"


class CodegenError(RuntimeError):
    """The code generator cannot produce (or assemble) a kernel for this problem/schedule."""


def _describe_schedule(s) -> str:
    return (f"{s.arch} {s.mma} tile {s.block_m}x{s.block_n}x{s.block_k} warps {s.warps_m}x{s.warps_n} "
            f"stages {s.stages} split_k {s.split_k}")


def build_module(problem, schedule) -> str:
    """The kernel's MLIR before lowering, for either instruction family (``nova compile --emit mlir``)."""
    if schedule.mma.family == "wgmma":
        from nova.codegen.gemm_hopper import build_hopper_module
        return build_hopper_module(problem, schedule)
    from nova.codegen.gemm import build_gemm_module
    return build_gemm_module(problem, schedule)


def compile_gemm(problem, schedule, *, cubin: bool = True):
    """Build, lower and (when ``ptxas`` is on PATH and ``cubin``) assemble the GEMM kernel.

    Returns a :class:`nova.codegen.artifact.KernelArtifact` with entry ``nova_gemm``, params
    ``("A", "B", "C"[, "bias"])``, ``grid = schedule.grid(M, N)``, ``block = (threads, 1, 1)``,
    ``smem_bytes = schedule.smem_bytes`` (dynamic) and ``zero_output = split_k > 1``.
    A wgmma schedule goes to ``gemm_hopper.compile_hopper`` (tensor-map params, ``schedule.hopper.ctas``
    CTAs).  Raises :class:`CodegenError` with the problem and schedule named if any step fails.
    """
    from nova.codegen.artifact import KernelArtifact
    from nova.codegen.gemm import KERNEL_NAME, build_gemm_module
    from nova.codegen.lower import pipeline, to_ptx
    from nova.codegen import ptxas as _ptxas

    if schedule.mma.family == "wgmma" and schedule.arch == "sm_90a":   # Hopper path (issue 4): gemm_hopper.py
        from nova.codegen.gemm_hopper import compile_hopper
        return compile_hopper(problem, schedule, cubin=cubin)
    where = f"{problem.describe()} with schedule [{_describe_schedule(schedule)}]"
    mlir_text = build_gemm_module(problem, schedule)   # raises CodegenError for unsupported input
    try:
        ptx = to_ptx(mlir_text, schedule.arch)
    except CodegenError as e:
        raise CodegenError(f"lowering {where} failed: {e}") from None

    resources: dict = {}
    binary = None
    meta = {
        "problem": problem.to_dict(),
        "schedule": schedule.to_dict(),
        "mlir": MLIR_TOOLCHAIN,
        "pipeline": pipeline(schedule.arch),
    }
    if cubin and _ptxas.available():
        try:
            binary, resources = _ptxas.assemble(ptx, schedule.arch, kernel=KERNEL_NAME)
        except CodegenError as e:
            raise CodegenError(f"assembling {where} failed: {e}") from None
        meta["ptxas"] = _ptxas.version()
    params = ("A", "B", "C") + (("bias",) if problem.bias else ())
    return KernelArtifact(
        name=KERNEL_NAME,
        arch=schedule.arch,
        ptx=ptx,
        grid=tuple(schedule.grid(problem.M, problem.N)),
        block=(schedule.threads_per_block, 1, 1),
        smem_bytes=schedule.smem_bytes,
        params=params,
        zero_output=schedule.split_k > 1,
        cubin=binary,
        resources=resources,
        meta=meta,
    )


__all__ = ["CodegenError", "compile_gemm", "MLIR_TOOLCHAIN"]
