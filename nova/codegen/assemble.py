"""Lowering and assembling one kernel's MLIR text (``lower_and_assemble``), and the checks every mma.sync
builder starts with.  MLIR and ptxas are imported only inside the functions."""
from __future__ import annotations

import subprocess

from nova.codegen.errors import CodegenError

MLIR_TOOLCHAIN = "xtc-mlir-python-bindings==22.1.8.4"


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
    when nothing was assembled.  A failure raises :class:`CodegenError` naming ``where``.  A kernel
    with wgmma instructions is also read back from its SASS where ``nvdisasm`` is available:
    ``resources["descriptor_hazards"]`` lists the wgmma descriptor words ptxas left unwritten
    (``sass.descriptor_hazards``; [] when none, absent when not checked)."""
    from nova.codegen import ptxas, sass
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
    if "wgmma.mma_async" in ptx and sass.available():
        try:
            resources["descriptor_hazards"] = sass.descriptor_hazards(sass.disassemble(binary))
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            raise CodegenError(f"reading back {where}'s SASS failed: {e}") from None
    return ptx, binary, resources, ptxas.version()
