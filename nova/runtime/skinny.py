"""The skinny GEMM's launch: its kernel and, when it splits K, a per-stream partials workspace and the
reduction kernel.

A skinny artifact (``nova/kernels/gemm/compile.py`` ``compile_skinny``) takes ``(A*, B*, C*[, bias*])``
when one K slice writes C.  Split (``meta["reduce_kernel"]`` present): the kernel takes ``(A*, B*, W*)``
and writes each slice's FP32 partials into ``W`` (``meta["workspace_bytes"]``), then the reduction
kernel ``(W*, C*[, bias*])`` adds them in slice order with the epilogue.  ``W`` is allocated once per
stream on first use (``cuMemAlloc``, like the Hopper kernels' workspaces), so calls of one problem on
two streams never share it and calls on one stream are ordered; a CUDA-graph capture needs the
stream's first call before it (the executor's warm-up is).

Nothing here imports MLIR or touches CUDA at import time.
"""
from __future__ import annotations

from nova.runtime import driver

_keep: list = []              # device allocations that live as long as the process


class SkinnyGemm:
    """A loaded skinny GEMM (module docstring)."""

    def __init__(self, artifact, device, what: str, key: str | None = None):
        from nova.codegen.artifact import KernelArtifact
        self.device, self.what = device, what
        self.main = driver.load_kernel(artifact, device, what, key)
        reduce = artifact.meta.get("reduce_kernel")
        self.reduce = None if reduce is None else driver.load_kernel(
            KernelArtifact.from_dict(reduce), device, f"{what} [K-slice reduction]",
            None if key is None else f"{key}:reduce")
        self.workspace_bytes = int(artifact.meta.get("workspace_bytes", 0))
        if (self.reduce is not None) != (self.workspace_bytes > 0):
            raise driver.NovaRuntimeError(f"{what}: the artifact {'has' if self.reduce else 'has no'} reduction "
                                          f"kernel but a workspace of {self.workspace_bytes} B (stale cache?)")
        self.workspaces: dict[int, int] = {}          # stream -> the partials' device buffer

    def workspace(self, stream: int) -> int:
        """The FP32 partials' buffer of ``stream`` (allocated on its first call)."""
        ptr = self.workspaces.get(stream)
        if ptr is not None:
            return ptr
        previous = self.device.make_current()
        try:
            ptr = int(driver.check(driver.cuda().cuMemAlloc(self.workspace_bytes),
                                   f"allocating the K-slice partials of {self.what} "
                                   f"({self.workspace_bytes / 2**20:.2f} MiB)"))
        finally:
            driver.restore_context(previous)
        _keep.append(ptr)
        return self.workspaces.setdefault(stream, ptr)

    def release(self) -> None:
        """Free every stream's workspace now (the caller synchronises first); a later call allocates afresh."""
        if not self.workspaces:
            return
        previous = self.device.make_current()
        try:
            for ptr in self.workspaces.values():
                driver.check(driver.cuda().cuMemFree(ptr), f"freeing the K-slice partials of {self.what}")
                _keep.remove(ptr)
            self.workspaces.clear()
        finally:
            driver.restore_context(previous)

    def run(self, a_ptr: int, b_ptr: int, c_ptr: int, bias_ptr: int | None = None, stream: int = 0) -> None:
        """Enqueue the kernel (and the reduction) on ``stream``; no synchronisation."""
        if self.reduce is None:
            self.main.launch((a_ptr, b_ptr, c_ptr) if bias_ptr is None else (a_ptr, b_ptr, c_ptr, bias_ptr), stream)
            return
        w = self.workspace(stream)
        self.main.launch((a_ptr, b_ptr, w), stream)
        self.reduce.launch((w, c_ptr) if bias_ptr is None else (w, c_ptr, bias_ptr), stream)
