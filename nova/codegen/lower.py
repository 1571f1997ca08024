"""Lowering: Nova's MLIR (gpu + nvgpu + scf + memref + vector + arith) -> PTX text.

The pass pipeline attaches an NVVM target, lowers everything inside the ``gpu.module`` to the
LLVM/NVVM dialects with the bare-pointer kernel ABI (static shapes, one pointer per memref), and
serializes the module with ``gpu-module-to-binary{format=isa}``; the PTX is the ``#gpu.object``'s
assembly.
"""
from __future__ import annotations

import re

from nova.codegen.errors import CodegenError

# PTX ISA 8.0 (CUDA 12.0) covers sm_80 .. sm_90a and is accepted by every newer ptxas.
_PTX_FEATURES = "+ptx80"
SUPPORTED_ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")


def pipeline(arch: str, opt: int = 3) -> str:
    """The textual pass pipeline used for ``arch``."""
    _check_arch(arch)
    return (
        "builtin.module("
        f"nvvm-attach-target{{chip={arch} features={_PTX_FEATURES} O={opt}}},"
        "gpu.module("
        "convert-nvgpu-to-nvvm,"
        "convert-vector-to-scf,"
        "convert-scf-to-cf,"
        "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
        "convert-vector-to-llvm,"
        "canonicalize,cse,"
        "reconcile-unrealized-casts),"
        "gpu-to-llvm{use-bare-pointers-for-kernels=1},"
        "reconcile-unrealized-casts,"
        "gpu-module-to-binary{format=isa})"
    )


def _check_arch(arch: str) -> None:
    if arch not in SUPPORTED_ARCHES:
        raise CodegenError(f"unsupported arch {arch!r}; supported: {', '.join(SUPPORTED_ARCHES)}")


def _diagnostics(err: Exception, limit: int = 12) -> str:
    """First lines of an MLIR error (the full dump of the failing op can be thousands of lines)."""
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    keep = [ln for ln in lines if "error:" in ln] or lines
    out = "\n".join(keep[:limit])
    if len(keep) > limit:
        out += f"\n... ({len(keep) - limit} more)"
    return out


def to_ptx(mlir_text: str, arch: str) -> str:
    """Parse, verify and lower ``mlir_text``; return the PTX of its (single) GPU module."""
    _check_arch(arch)
    from mlir import ir
    from mlir.dialects import gpu
    from mlir.passmanager import PassManager

    with ir.Context():
        try:
            module = ir.Module.parse(mlir_text)
        except Exception as e:  # MLIRError: syntax or verifier failure
            raise CodegenError(f"the generated MLIR does not parse/verify:\n{_diagnostics(e)}") from None
        try:
            PassManager.parse(pipeline(arch)).run(module.operation)
        except Exception as e:
            raise CodegenError(f"MLIR lowering pipeline failed:\n{_diagnostics(e)}") from None
        ptx = None
        for op in module.body.operations:
            if op.operation.name == "gpu.binary":
                for obj in op.attributes["objects"]:
                    ptx = gpu.ObjectAttr(obj).object
                    break
        if ptx is None:
            raise CodegenError("lowering produced no gpu.binary object")
    if isinstance(ptx, bytes):
        ptx = ptx.decode()
    return _fix_dynamic_smem(ptx.rstrip("\x00"))


_DEMOTED = re.compile(r"^[ \t]*(?://[^\n]*demoted variable[^\n]*\n[ \t]*)?"
                      r"\.shared\s+\.align\s+(\d+)\s+\.b8\s+(__dynamic_shmem__\w*);[ \t]*\n", re.M)


def _fix_dynamic_smem(ptx: str) -> str:
    """Declare MLIR's dynamic-shared-memory symbol as ``.extern .shared .b8 name[]``.

    ``gpu.dynamic_shared_memory`` becomes an internal zero-length LLVM global; the NVPTX backend
    "demotes" it into the kernel as a 1-byte *static* shared variable.  Dynamic shared memory
    starts after static shared memory, so the kernel would still work (the window covers it),
    but ptxas would count static bytes that shrink the dynamic limit.  Re-declare it as the
    module-scope extern array that CUDA uses for dynamic shared memory.
    """
    found = _DEMOTED.findall(ptx)
    if not found:
        return ptx
    ptx = _DEMOTED.sub("", ptx)
    decls = "".join(f".extern .shared .align {align} .b8 {name}[];\n" for align, name in found)
    entry = re.search(r"^\.(visible\s+|weak\s+)?\.entry", ptx, re.M)
    if entry is None:
        raise CodegenError("unexpected PTX: no .entry found")
    pos = entry.start()
    return ptx[:pos] + decls + "\n" + ptx[pos:]
