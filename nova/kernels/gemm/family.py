"""The GEMM family's registration with ``nova.kernels.family``: its ABI counter, how a kernel is
built and described, and the GEMM spellings of the family-wide key and ``get_or_compile``.

Two registered families share a problem: ``gemm`` (the tensor-core tiles, ``Schedule``) and
``gemm_skinny`` (the skinny kernel of a few rows, ``SkinnySchedule``), each with its own ABI counter,
so neither's change invalidates the other's cache entries.  ``family_of(schedule)`` names the one a
schedule belongs to; ``kernel_key`` and ``get_or_compile`` take either schedule.

Importing this module imports no MLIR: ``compile_artifact`` imports the code generator when a kernel
must be built.  GEMM kernels have no role (one kernel per problem; its operand-prep and split-K
reduction kernels travel inside its artifact), so their keys hold none.
"""
from __future__ import annotations

from nova.kernels import family
from nova.messages import OFFLINE_HINT, not_precompiled, summary_line
from nova.runtime import cache as kernel_cache
from nova.runtime.cache import CompilerUnavailableError, KernelCache

NAME = "gemm"
ABI = 18           # bump whenever the kernel ABI (arguments, layout, launch contract) or the generated code changes
SKINNY_NAME = "gemm_skinny"
SKINNY_ABI = 4     # the same for the skinny kernel (emit_skinny.py) and its launch (nova/runtime/skinny.py)


def compile_artifact(problem, schedule, target):
    """Run the code generator (imports MLIR): the problem's ``KernelArtifact``; a missing MLIR is
    ``CompilerUnavailableError``."""
    if not kernel_cache.mlir_available():
        raise CompilerUnavailableError(f"cannot compile {summary_line(problem, target)}: MLIR Python bindings "
                                       f"are not installed here; {OFFLINE_HINT}")
    from nova.kernels.gemm.compile import compile_gemm
    return compile_gemm(problem, schedule)


FAMILY = family.register(family.KernelFamily(
    name=NAME, abi=ABI,
    build=lambda problem, schedule, role: compile_artifact(problem, schedule, None),
    describe=lambda problem, role, target: summary_line(problem, target),
    not_precompiled=lambda problem, role, target, key, root: not_precompiled(problem, target, key, root)))

SKINNY_FAMILY = family.register(family.KernelFamily(
    name=SKINNY_NAME, abi=SKINNY_ABI,
    build=lambda problem, schedule, role: compile_artifact(problem, schedule, None),
    describe=lambda problem, role, target: f"{summary_line(problem, target)} [skinny]",
    not_precompiled=lambda problem, role, target, key, root: not_precompiled(problem, target, key, root)))


def family_of(schedule) -> str:
    """The registered family of a GEMM schedule: ``gemm_skinny`` for the skinny kernel, else ``gemm``."""
    return SKINNY_NAME if schedule.kernel == "skinny" else NAME


def key_payload(problem: dict, schedule: dict, target_name: str, target_arch: str) -> dict:
    """Everything that determines a tensor-core GEMM kernel's bytes, as plain data."""
    return family.key_payload(NAME, family.family(NAME).abi, None, problem, schedule, target_name, target_arch)


def kernel_key(problem, schedule, target) -> str:
    """sha256 hex of the canonical payload; ``target`` is anything with ``.name`` and ``.arch``."""
    return family.kernel_key(family_of(schedule), problem, schedule, None, target)


def get_or_compile(problem, schedule, target, cache: KernelCache | None = None,
                   offline: bool | None = None):
    """``(artifact, key, status)`` with status ``"cached"`` or ``"compiled"`` (then stored)."""
    return family.get_or_compile(family_of(schedule), problem, schedule, None, target, cache, offline)
