"""Run rows kernels on torch tensors: the kernels of one ``RowsProblem`` resolved once, launched with
bare pointers on torch's current stream (a CUDA graph captures them).  Runtime only: no MLIR import.

The first use of a problem configures it (``derive.py``), looks its kernels up in Nova's kernel cache
by structural key (compiling on a miss unless offline: ``NOVA_OFFLINE=1`` raises the one-line
``NotPrecompiledError`` of ``family.get_or_compile``) and loads them; later uses only launch.
"""
from __future__ import annotations

from nova.kernels.role_launch import RoleLauncher
from nova.kernels.rows import abi


def schedule_for(problem, target):
    """The schedule the launches use (``configure_rows`` for the GPU model ``target``)."""
    from nova.kernels.rows.derive import configure_rows
    return configure_rows(problem, target).schedule


def _compile_module():
    from nova.kernels.rows import compile as compiled
    return compiled


LAUNCHER = RoleLauncher(schedule_for, _compile_module, abi)   # the memo, resolve and launch_args (role_launch.py)
_memo = LAUNCHER.memo
resolve = LAUNCHER.resolve
launch_args = LAUNCHER.launch_args
reset = LAUNCHER.reset
