"""The skinny GEMM's launch: its kernel and, when it splits K, a per-stream workspace.

A skinny artifact (``nova/kernels/gemm/compile.py`` ``compile_skinny``) takes ``(A*, B*, C*[, bias*])``,
and when it splits K also ``(W*, T*)``: its workspace of ``meta["workspace_bytes"]`` bytes holds the
K slices' FP32 partials and, from ``meta["tickets_offset"]``, one 32-bit counter per column block
(``meta["tickets_bytes"]``) that must be zero before the first launch; each launch leaves them zero
(the last CTA of a column block resets its counter).  The workspace is allocated once per stream on
first use (``cuMemAlloc``, like the Hopper kernels' workspaces) and its counters zeroed on that
stream, so calls of one problem on two streams never share it and calls on one stream are ordered; a
CUDA-graph capture needs the stream's first call before it (the executor's warm-up is).

Nothing here imports MLIR or touches CUDA at import time.
"""
from __future__ import annotations

from nova.runtime import driver

_keep: list = []              # device allocations that live as long as the process


class SkinnyGemm:
    """A loaded skinny GEMM (module docstring)."""

    def __init__(self, artifact, device, what: str, key: str | None = None):
        self.device, self.what = device, what
        self.main = driver.load_kernel(artifact, device, what, key)
        meta = artifact.meta
        self.workspace_bytes = int(meta.get("workspace_bytes", 0))
        self.tickets = (int(meta["tickets_offset"]), int(meta["tickets_bytes"])) if self.workspace_bytes else None
        if self.workspace_bytes and ("tickets_offset" not in meta or tuple(artifact.params[-2:]) != ("W", "T")):
            raise driver.NovaRuntimeError(f"{what}: the artifact splits K but does not say where its counters are or "
                                          f"does not take them ({artifact.params}; stale cache?)")
        self.workspaces: dict[int, tuple[int, int]] = {}       # stream -> (partials, counters) device pointers

    def workspace(self, stream: int) -> tuple[int, int]:
        """``stream``'s (partials, counters) pointers: allocated on its first call, the counters zeroed
        on ``stream`` before any launch on it."""
        ws = self.workspaces.get(stream)
        if ws is not None:
            return ws
        cu = driver.cuda()
        offset, nbytes = self.tickets
        previous = self.device.make_current()
        try:
            ptr = int(driver.check(cu.cuMemAlloc(self.workspace_bytes),
                                   f"allocating the K-slice workspace of {self.what} "
                                   f"({self.workspace_bytes / 2**20:.2f} MiB)"))
            _keep.append(ptr)
            driver.memset_async(ptr + offset, nbytes // 4, 4, stream, f"zeroing the K-slice counters of {self.what}")
        finally:
            driver.restore_context(previous)
        return self.workspaces.setdefault(stream, (ptr, ptr + offset))

    def release(self) -> None:
        """Free every stream's workspace now (the caller synchronises first); a later call allocates afresh."""
        if not self.workspaces:
            return
        previous = self.device.make_current()
        try:
            for ptr, _ in self.workspaces.values():
                driver.check(driver.cuda().cuMemFree(ptr), f"freeing the K-slice workspace of {self.what}")
                _keep.remove(ptr)
            self.workspaces.clear()
        finally:
            driver.restore_context(previous)

    def run(self, a_ptr: int, b_ptr: int, c_ptr: int, epilogue: tuple = (), stream: int = 0) -> None:
        """Enqueue the kernel on ``stream``; no synchronisation.  ``epilogue``: the bias pointer, or ()."""
        args = (a_ptr, b_ptr, c_ptr) + tuple(epilogue)
        if self.workspace_bytes:
            args += self.workspace(stream)
        self.main.launch(args, stream)
