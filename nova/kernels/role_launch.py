"""Resolving and launching a problem whose kernels are several roles run in order over one workspace
(the rows and embedding families): configured once, each role's kernel looked up in the cache by
structural key (compiled on a miss unless offline) and loaded, memoised per (problem, target,
device); a launch binds operands by name and workspace buffers (``ws:NAME`` parameters) by offset.
Runtime only: no MLIR import.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from types import SimpleNamespace


@dataclass
class Resolved:
    problem: object
    schedule: object
    kernels: dict                   # role -> driver.LoadedKernel
    workspace: dict                 # name -> (byte offset, elements)
    workspace_bytes: int


class RoleLauncher:
    """One family's memo and its four pieces: ``schedule_for(problem, target)``,
    ``get_or_compile(problem, schedule, role, target)``, ``summary(problem, role, target)`` (the
    kernel's one-line description) and the ABI's ``params(problem, schedule, role)`` /
    ``workspace_layout(problem, schedule)``."""

    def __init__(self, schedule_for, compile_module, abi):
        self.family = SimpleNamespace(schedule_for=schedule_for, compile_module=compile_module, abi=abi)
        self.memo: dict[tuple, Resolved] = {}
        self.lock = threading.RLock()

    def resolve(self, problem, device_index=None, target=None) -> Resolved:
        """The schedule and the loaded kernels of ``problem`` on the device (memoised)."""
        from nova.runtime import driver
        from nova.runtime.matmul import resolve_target
        device = driver.get_device(device_index)
        model = resolve_target(target, device)
        key = (problem, model.name, device.ordinal)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        with self.lock:
            compiled = self.family.compile_module()
            schedule = self.family.schedule_for(problem, model)
            kernels = {}
            for role in schedule.roles:
                art, k, _ = compiled.get_or_compile(problem, schedule, role, model)
                kernels[role] = driver.load_kernel(art, device, compiled.summary(problem, role, model), k)
            ws, nbytes = self.family.abi.workspace_layout(problem, schedule)
            hit = self.memo[key] = Resolved(problem, schedule, kernels, ws, nbytes)
            return hit

    def launch_args(self, r: Resolved, pointers: dict, workspace_ptr: int) -> list[tuple[object, tuple[int, ...]]]:
        """``[(kernel, pointer arguments)]`` in launch order: operands by name, workspace buffers by offset."""
        out = []
        for role in r.schedule.roles:
            args = [workspace_ptr + r.workspace[what[3:]][0] if what.startswith("ws:") else pointers[what]
                    for _, what in self.family.abi.params(r.problem, r.schedule, role)]
            out.append((r.kernels[role], tuple(args)))
        return out

    def reset(self) -> None:
        with self.lock:
            self.memo.clear()
