"""Read a cubin's SASS (NVIDIA's ``nvdisasm``) for what ``ptxas -v`` does not report.

One check, ``descriptor_hazards``: every wgmma (``HGMMA``) reads its shared-memory operands through
64-bit descriptors held in uniform registers (``gdesc[URk]``: A in URk:URk+1, B in URk+2:URk+3).
ptxas 13.0 may lower ``zext(start) + high`` (the descriptor's start field plus its constant high
word: LBO/SBO, base offset, swizzle mode) to a 32-bit add on the low word and never write the high
one, so the wgmma reads its tile with whatever layout the register last held: wrong results, or
shared reads out of range (an illegal address).  It did so in the Hopper attention forward (the V
tile at D = 64, a 3-deep ring) and in ping-pong GEMMs whose ring slot LLVM hoisted out of the unit
loop (8 stages for 4 K tiles, 2 for 1: bench/results/h100-2026-12-08/run128-h100).  The check: a
uniform register an ``HGMMA`` descriptor names that no instruction of the kernel writes after
its consumers' ``USETMAXREG.TRY_ALLOC`` (``setmaxnreg.inc``: where the consumer role's code starts; the
producer's writes before it do not reach the consumers' path).

``nvdisasm`` comes from the ``nvidia-cuda-nvdisasm`` wheel (a dependency) or a CUDA toolkit's PATH.
"""
from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# a SASS line's destination register: "/*0a50*/  @UP0 UIADD3 UR18, UR24, 0x10200, URZ ;"
_WRITE = re.compile(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)\s+UR(\d+)\b")
_HGMMA = re.compile(r"HGMMA\S*\s+\S+\s+gdesc\[UR(\d+)\]")


@functools.lru_cache(maxsize=1)
def nvdisasm() -> str | None:
    """The ``nvdisasm`` executable: the ``nvidia-cuda-nvdisasm`` wheel's, else one on PATH (None: neither)."""
    try:
        import nvidia.cu13 as cu13                          # the wheel's package (CUDA 13)
        for root in map(Path, cu13.__path__):
            exe = root / "bin" / "nvdisasm"
            if exe.exists():
                return str(exe)
    except ImportError:
        pass
    return shutil.which("nvdisasm")


def available() -> bool:
    return nvdisasm() is not None


def disassemble(cubin: bytes) -> str:
    """The SASS text of ``cubin`` (``nvdisasm``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        run = subprocess.run([nvdisasm(), str(path)], capture_output=True, text=True, timeout=120)
    if run.returncode:
        why = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit status {run.returncode}"
        raise RuntimeError(f"nvdisasm failed: {why}")
    return run.stdout


def written_uniform_registers(lines: list[str]) -> set[int]:
    """Uniform registers ``lines`` write (a 64-bit op's destination pair counts both)."""
    out = set()
    for line in lines:
        m = _WRITE.search(line)
        if m:
            op, reg = m.group(1), int(m.group(2))
            out.add(reg)
            if ".64" in op or "WIDE" in op:
                out.add(reg + 1)
    return out


def descriptor_hazards(sass: str) -> list[str]:
    """``"HGMMA descriptor register URk never written"`` for each uniform register an ``HGMMA``'s
    descriptors name that no instruction after the consumers' ``USETMAXREG.TRY_ALLOC`` writes (the
    whole kernel where it has none); [] when every descriptor word is written."""
    lines = sass.splitlines()
    start = next((i for i, line in enumerate(lines) if "USETMAXREG.TRY_ALLOC" in line), 0)
    body = lines[start:]
    written = written_uniform_registers(body)
    unwritten = set()
    for line in body:
        m = _HGMMA.search(line)
        if m:
            first = int(m.group(1))
            unwritten |= {r for r in range(first, first + 4) if r not in written}
    return [f"HGMMA descriptor register UR{r} never written" for r in sorted(unwritten)]


def refusal(where: str, hazards: list[str]) -> str:
    """The one-line error of a kernel refused for ``hazards`` (``descriptor_hazards``)."""
    return f"{where}: ptxas left wgmma descriptor words unwritten ({'; '.join(hazards)}): no kernel built"
