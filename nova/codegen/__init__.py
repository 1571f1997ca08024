"""Nova's code generator, family-independent: the MLIR text scaffold (``builder``), the lowering
pipeline to PTX (``lower``), ptxas (``ptxas``) and the artifact (``artifact``).  The kernel families'
builders live in ``nova/kernels/<family>/``.

Importing this package is cheap: MLIR is imported lazily inside the functions (the runtime imports
``nova.codegen.artifact`` on machines without MLIR).

    from nova.codegen import compile_gemm
    art = compile_gemm(problem, schedule)      # PTX (+ cubin and ptxas resources when ptxas exists)

``compile_gemm`` and ``build_module`` are the façade of ``nova.kernels.gemm.compile``.
"""
from __future__ import annotations

MLIR_TOOLCHAIN = "xtc-mlir-python-bindings==22.1.8.4"


class CodegenError(RuntimeError):
    """The code generator cannot produce (or assemble) a kernel for this problem/schedule."""


def check_mma_sync_target(schedule, supported: tuple[str, ...], fail) -> None:
    """The first checks of an mma.sync kernel builder (GEMM, attention): the schedule's arch is one the
    builder supports and its MMA family is mma.sync.  ``fail(msg)`` raises the builder's error."""
    if schedule.arch not in supported:
        fail(f"unsupported arch {schedule.arch!r}; supported: {', '.join(supported)}")
    if schedule.mma.family != "mma.sync":
        fail(f"MMA family {schedule.mma.family!r} is not supported yet (only 'mma.sync')")


def lower_and_assemble(mlir_text: str, arch: str, kernel: str, where: str, *, cubin: bool = True):
    """Lower ``mlir_text`` to PTX and, when ``cubin`` and ``ptxas`` is on PATH, assemble ``kernel``.

    Returns ``(ptx, binary, resources, ptxas_version)``; ``binary`` and ``ptxas_version`` are None
    when nothing was assembled.  A failure raises :class:`CodegenError` naming ``where``."""
    from nova.codegen import ptxas
    from nova.codegen.lower import to_ptx
    try:
        ptx = to_ptx(mlir_text, arch)
    except CodegenError as e:
        raise CodegenError(f"lowering {where} failed: {e}") from None
    if not (cubin and ptxas.available()):
        return ptx, None, {}, None
    try:
        binary, resources = ptxas.assemble(ptx, arch, kernel=kernel)
    except CodegenError as e:
        raise CodegenError(f"assembling {where} failed: {e}") from None
    return ptx, binary, resources, ptxas.version()


def build_module(problem, schedule) -> str:
    """The GEMM kernel's MLIR before lowering (``nova.kernels.gemm.compile.build_module``)."""
    from nova.kernels.gemm.compile import build_module as build
    return build(problem, schedule)


def compile_gemm(problem, schedule, *, cubin: bool = True):
    """The GEMM kernel's artifact (``nova.kernels.gemm.compile.compile_gemm``)."""
    from nova.kernels.gemm.compile import compile_gemm as compile_
    return compile_(problem, schedule, cubin=cubin)


__all__ = ["CodegenError", "check_mma_sync_target", "compile_gemm", "build_module", "lower_and_assemble",
           "MLIR_TOOLCHAIN"]
