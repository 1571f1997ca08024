"""User-facing text that names Nova's commands: the one place that knows the CLI's syntax.

The runtime raises errors that carry data (``NotPrecompiledError``: problem, target, key, cache
directory); the text a user reads, with the ``nova precompile`` line that would fix it, is composed
here.  ``tests/test_cli_nova.py`` parses ``precompile_command``'s output with the real CLI parser,
so the hint stays a valid command.
"""
from __future__ import annotations

from nova.dtypes import MODES

# A cache miss with no code generator at hand (online mode without MLIR): what to do instead.
OFFLINE_HINT = ("set NOVA_OFFLINE=1 and use a cache filled by `nova precompile` on a machine with MLIR "
                "(xtc-mlir-python-bindings)")


def summary_line(problem, target) -> str:
    """``"gemm 4096x4096x4096 tf32 NN -> f32 on h200 (sm_90)"``; ``target`` is anything with ``.name``
    and ``.arch``."""
    return f"{problem.describe()} on {target.name} ({target.arch})"


def misses_command(cache_root) -> str:
    """The command that builds the misses an offline run recorded in ``cache_root``."""
    return f"nova precompile misses --cache-dir {cache_root}"


def precompile_command(problem, target_name: str) -> str:
    """The ``nova precompile`` command line that produces ``problem``'s kernel for ``target_name``."""
    p = problem
    batch = f"{p.batch}x" if p.batch > 1 else ""
    cmd = f"nova precompile gemm --shapes {batch}{p.M}x{p.N}x{p.K} --target {target_name} --dtype {p.dtype}"
    if p.trans_a:
        cmd += " --trans-a"
    if p.trans_b:
        cmd += " --trans-b"
    if p.bias:
        cmd += " --bias"
    if p.activation != "none":
        cmd += f" --activation {p.activation}"
    if p.out_dtype != MODES[p.dtype].storage:
        cmd += f" --out-dtype {p.out_dtype}"
    if p.tf32_rounding == "truncate":
        cmd += " --tf32-fast"
    if p.deterministic:
        cmd += " --deterministic"
    if not p.packed_batch:
        cmd += f" --batch-strides {p.strides_text()}"
    return cmd


def not_precompiled(problem, target, key: str, cache_root) -> str:
    """One line: what is missing, where it was looked up, and the command that builds it."""
    return (f"not precompiled: {summary_line(problem, target)} (key {key[:8]}…) in {cache_root}; "
            f"on a machine with MLIR run: {precompile_command(problem, target.name)} "
            f"and carry the cache directory")
