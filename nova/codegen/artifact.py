"""A compiled kernel as the runtime sees it.  Pure data: importing this never imports MLIR.

Kernel ABI (every Nova GEMM): ``nova_gemm(A*, B*, C*[, bias*])``, bare device pointers, static
shapes baked into the kernel, launched with ``grid``/``block``/``smem_bytes`` dynamic shared
memory.  When ``zero_output`` is set (split-K accumulates with atomics) the runtime clears C first.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelArtifact:
    name: str                                  # entry point in the PTX
    arch: str                                  # e.g. "sm_90"
    ptx: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem_bytes: int                            # dynamic shared memory, bytes
    params: tuple[str, ...]                    # argument order, e.g. ("A", "B", "C", "bias")
    zero_output: bool = False
    cubin: bytes | None = None                 # ptxas output for ``arch`` when available on the host
    resources: dict = field(default_factory=dict)   # ptxas -v: registers, spill bytes, stack, smem
    meta: dict = field(default_factory=dict)   # problem, schedule, key summary, toolchain versions

    def to_dict(self) -> dict:
        return {
            "name": self.name, "arch": self.arch, "ptx": self.ptx,
            "grid": list(self.grid), "block": list(self.block), "smem_bytes": self.smem_bytes,
            "params": list(self.params), "zero_output": self.zero_output,
            "cubin": base64.b64encode(self.cubin).decode() if self.cubin else None,
            "resources": self.resources, "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "KernelArtifact":
        return cls(
            name=d["name"], arch=d["arch"], ptx=d["ptx"], grid=tuple(d["grid"]), block=tuple(d["block"]),
            smem_bytes=int(d["smem_bytes"]), params=tuple(d["params"]), zero_output=bool(d["zero_output"]),
            cubin=base64.b64decode(d["cubin"]) if d.get("cubin") else None,
            resources=dict(d.get("resources") or {}), meta=dict(d.get("meta") or {}),
        )
