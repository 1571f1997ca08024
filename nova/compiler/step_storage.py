"""Where a per-call program's runs get their arena and output buffers (the torch.compile backend's
programs, ``executor.build(..., per_call=True)``), so that a training loop's steady state hands every
run the addresses of the run before and its CUDA graph replays instead of being bound and captured
again (a binding is made for one set of addresses, ``executor.Program._select_binding``).

* **The arena** (a run's intermediates, dead when the run ends): one buffer per device that every
  per-call program on it shares -- they run one after another on the stream -- as large as the
  largest program's need, held while any of them lives.  A program needing more replaces it with a
  larger one (once, at its first run); a run on another stream than the last waits for that stream.
  (An arena taken from the caching allocator at each run and freed at its end does not come back
  at the same address from one step to the next: every run would bind and capture anew.)
* **Output buffers** (the output region of the plan, one buffer per output, handed to the caller):
  a small one (at most ``SMALL_OUTPUT`` bytes: the loss a loop logs and keeps) is one buffer the
  program owns, handed over as a copy made after each run; a larger one comes from a pool of up to ``POOL_KEPT``
  buffers the program owns for that output: a run takes the first the caller no longer holds
  (every tensor the caller got from it dropped: the storage's use count back to the program's own,
  ``torch._C._storage_Use_Count``), else a new one.  A training loop frees the forward's saved
  tensors in the backward and the gradients at ``zero_grad``, so one buffer per output serves every
  step; accumulating gradients over k micro-batches before ``zero_grad`` uses k.  What it costs:
  a buffer stays allocated between its runs (the forward's saved tensors through the optimizer
  step, after the backward has read them: the backward's gradients lie in their dead bytes,
  ``memory._place_in_donors``, so a gradient the caller keeps keeps its saved buffer taken).
"""
from __future__ import annotations

import weakref

import torch

POOL_KEPT = 4
SMALL_OUTPUT = 1 << 16          # bytes: output buffers at most this large are handed over as copies


def _use_count(t: torch.Tensor) -> int:
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata)


class SharedArena:
    """One device's arena, shared by the per-call programs that registered with ``take``."""

    def __init__(self, device: torch.device):
        self.device = device
        self.buffer: torch.Tensor | None = None
        self.users: weakref.WeakSet = weakref.WeakSet()
        self.stream = None

    def take(self, user, nbytes: int) -> torch.Tensor:
        """The arena for a run of ``user`` needing ``nbytes`` (the first ``nbytes`` of the buffer are
        its own until the run ends); registers ``user`` until ``give_back``."""
        if user not in self.users:
            self.users.add(user)
            weakref.finalize(user, self._forget)
        if self.buffer is None or self.buffer.numel() < nbytes:
            self.buffer = None                               # the old bytes back before the larger ones
            self.buffer = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=self.device)
        if self.device.type == "cuda":
            current = torch.cuda.current_stream(self.device)
            if self.stream is not None and self.stream != current:
                current.wait_stream(self.stream)
            self.stream = current
        return self.buffer[:nbytes]

    def give_back(self, user) -> None:
        self.users.discard(user)
        self._forget()

    def _forget(self) -> None:
        if not any(True for _ in self.users):               # live users only (a finalizer may run first)
            self.buffer, self.stream = None, None


_ARENAS: dict[str, SharedArena] = {}


def shared_arena(device: torch.device) -> SharedArena:
    key = str(device)
    if key not in _ARENAS:
        _ARENAS[key] = SharedArena(device)
    return _ARENAS[key]


class OutputPools:
    """A program's output buffers, one pool per output of its region (``sizes``: bytes of each).

    An output buffer of at most ``SMALL_OUTPUT`` bytes (a loss, a scalar the caller logs and keeps) is
    one buffer the program owns for good, copied once per run and its outputs handed over as views of
    the copy (``small``; outputs viewing one buffer still share one storage): a caller keeping every
    step's loss would otherwise hold a buffer of every run.  A larger one (a saved activation,
    a gradient) is handed over as itself: ``take`` gives the first buffer of its pool the caller no
    longer holds, else a new one (kept in the pool while it has fewer than ``POOL_KEPT``)."""

    def __init__(self, sizes: list[int], device: torch.device):
        self.sizes, self.device = list(sizes), device
        self.small = [n <= SMALL_OUTPUT for n in self.sizes]
        self.pools: list[list[tuple[torch.Tensor, int]]] = [[] for _ in self.sizes]   # (buffer, its use count)

    def take(self) -> list[torch.Tensor]:
        return [self._take(k) for k in range(len(self.sizes))]

    def _take(self, k: int) -> torch.Tensor:
        pool = self.pools[k]
        for buffer, count in pool:
            if self.small[k] or _use_count(buffer) == count:
                return buffer
        buffer = torch.empty(self.sizes[k], dtype=torch.uint8, device=self.device)
        if len(pool) < POOL_KEPT:
            pool.append((buffer, _use_count(buffer)))
        return buffer
