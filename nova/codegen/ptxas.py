"""Assemble PTX with NVIDIA's ``ptxas`` and report the kernel's resources (``ptxas -v``)."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile

from nova.codegen.errors import CodegenError


# ptxas's notes that a kernel's wgmmas do not run as written (``ptxas -v`` info lines):
#   C7508 setmaxnreg ignored;  C7513/C7515 wgmmas serialised;  C7517/C7519 a warpgroup.wait/arrive
#   injected because registers an in-flight wgmma reads or writes were touched between its issue and
#   its wait (e.g. accumulators zeroed by movs after the wgmma.fence);  C7520 wgmmas serialised by a
#   compiler-inserted warpgroup.arrive on a divergent path.  Every kernel Nova picks must be free of them.
WGMMA_HAZARDS = re.compile(r"C75(08|13|15|17|19|20)")


def wgmma_hazards(resources: dict) -> list[str]:
    """The ``ptxas -v`` lines of ``resources`` (``parse_resources``) that are WGMMA_HAZARDS."""
    return [ln for ln in resources.get("ptxas_info", ()) if WGMMA_HAZARDS.search(ln)]


def available() -> bool:
    return shutil.which("ptxas") is not None


@functools.lru_cache(maxsize=1)
def version() -> str:
    """e.g. 'ptxas 13.0.88' ('' when ptxas is missing)."""
    if not available():
        return ""
    out = subprocess.run(["ptxas", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return f"ptxas {m.group(1)}" if m else out.strip().splitlines()[-1]


def parse_resources(info: str, kernel: str | None = None) -> dict:
    """Parse ``ptxas -v`` output into registers / spill / stack / static smem numbers."""
    res = {"registers": 0, "spill_store_bytes": 0, "spill_load_bytes": 0, "stack_bytes": 0,
           "smem_bytes": 0, "ptxas_info": []}
    lines = [ln.rstrip() for ln in info.splitlines() if ln.strip()]
    res["ptxas_info"] = lines
    current = None
    for ln in lines:
        m = re.search(r"Function properties for (\S+)", ln) or re.search(r"Compiling entry function '([^']+)'", ln)
        if m:
            current = m.group(1)
            continue
        if kernel is not None and current is not None and current != kernel:
            continue
        if m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", ln):
            res["stack_bytes"], res["spill_store_bytes"], res["spill_load_bytes"] = map(int, m.groups())
        if m := re.search(r"Used (\d+) registers", ln):
            res["registers"] = int(m.group(1))
        if m := re.search(r"(\d+) bytes smem", ln):
            res["smem_bytes"] = int(m.group(1))
    return res


def assemble(ptx: str, arch: str, kernel: str | None = None) -> tuple[bytes, dict]:
    """``ptxas -arch=<arch> -v``: return (cubin bytes, resources).  Raises CodegenError on failure."""
    if not available():
        raise CodegenError("ptxas is not on PATH (install the CUDA toolkit or pass cubin=False)")
    with tempfile.TemporaryDirectory(prefix="nova_ptxas_") as tmp:
        src, out = os.path.join(tmp, "kernel.ptx"), os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run(["ptxas", f"-arch={arch}", "-v", "-o", out, src], capture_output=True, text=True)
        log = (proc.stdout + proc.stderr).replace(src, "<kernel.ptx>")
        if proc.returncode != 0:
            raise CodegenError(f"ptxas -arch={arch} failed (exit {proc.returncode}):\n{log.strip()}")
        with open(out, "rb") as f:
            cubin = f.read()
    return cubin, parse_resources(log, kernel)
