"""Run rows kernels on torch tensors: the kernels of one ``RowsProblem`` resolved once, launched with
bare pointers on torch's current stream (a CUDA graph captures them).  Runtime only: no MLIR import.

The first use of a problem configures it (``derive.py``), looks its kernels up in Nova's kernel cache
by structural key (compiling on a miss unless offline: ``NOVA_OFFLINE=1`` raises the one-line
``NotPrecompiledError`` of ``family.get_or_compile``) and loads them; later uses only launch.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from nova.kernels.rows.abi import params, workspace_layout


@dataclass
class Resolved:
    problem: object
    schedule: object
    kernels: dict                   # role -> driver.LoadedKernel
    workspace: dict                 # name -> (byte offset, f32 elements)
    workspace_bytes: int


_memo: dict[tuple, Resolved] = {}
_lock = threading.RLock()


def schedule_for(problem, target):
    """The schedule the launches use (``configure_rows`` for the GPU model ``target``)."""
    from nova.kernels.rows.derive import configure_rows
    return configure_rows(problem, target).schedule


def resolve(problem, device_index=None, target=None) -> Resolved:
    """The schedule and the loaded kernels of ``problem`` on the device (memoised)."""
    from nova.runtime import driver
    from nova.runtime.matmul import resolve_target
    device = driver.get_device(device_index)
    model = resolve_target(target, device)
    key = (problem, model.name, device.ordinal)
    hit = _memo.get(key)
    if hit is not None:
        return hit
    with _lock:
        from nova.kernels.rows.compile import get_or_compile, summary
        schedule = schedule_for(problem, model)
        kernels = {}
        for role in schedule.roles:
            art, k, _ = get_or_compile(problem, schedule, role, model)
            kernels[role] = driver.load_kernel(art, device, summary(problem, role, model), k)
        ws, nbytes = workspace_layout(problem, schedule)
        hit = _memo[key] = Resolved(problem, schedule, kernels, ws, nbytes)
        return hit


def launch_args(r: Resolved, pointers: dict, workspace_ptr: int) -> list[tuple[object, tuple[int, ...]]]:
    """``[(kernel, pointer arguments)]`` in launch order: operands by name, workspace slices by offset."""
    out = []
    for role in r.schedule.roles:
        args = []
        for _, what in params(r.problem, r.schedule, role):
            args.append(workspace_ptr + r.workspace[what[3:]][0] if what.startswith("ws:") else pointers[what])
        out.append((r.kernels[role], tuple(args)))
    return out


def reset() -> None:
    with _lock:
        _memo.clear()
