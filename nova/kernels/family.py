"""Kernel families as plug-ins: one protocol, one registry, one cache key and one ``get_or_compile``.

A *family* is a kind of kernel Nova generates (GEMM, attention, fused memory-bound kernels).  Each
family module registers one ``KernelFamily`` describing how its kernels are keyed, built and
summarised; the kernel cache, the runtime and the precompile commands only ever talk to this
protocol and never name a family.

    from nova.kernels.family import KernelFamily, register, family, get_or_compile

    register(KernelFamily(name="fused", abi=1, build=compile_fn, describe=summary_fn))
    artifact, key, status = get_or_compile("fused", problem, schedule, role, target)

Contract of a family:

- ``problem`` and ``schedule`` are frozen dataclasses with ``to_dict()`` (plain JSON data): the
  cache key is the sha256 of the canonical JSON of ``{op, role, problem, schedule, target, nova,
  toolchain, abi}`` (``kernel_key``), equal on every machine, so a build host fills exactly what a
  device looks up.
- ``build(problem, schedule, role)`` returns a ``KernelArtifact`` (host only: it may import MLIR).
- ``describe(problem, role, target)`` is the one-line summary stored beside the entry and printed
  by ``nova cache list`` and by the offline cache-miss error.
- ``abi`` is bumped whenever the family's generated code or launch contract changes (old entries
  then become unreachable and ``nova cache prune`` removes them).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

import nova


@dataclass(frozen=True)
class KernelFamily:
    name: str                                   # "gemm", "attention", "fused": the key's "op"
    abi: int                                    # the family's ABI counter
    build: Callable                             # (problem, schedule, role) -> KernelArtifact   [host only]
    describe: Callable                          # (problem, role, target) -> one-line summary
    precompile_hint: str = ""                   # the command that builds a missing kernel, for the offline error


_FAMILIES: dict[str, KernelFamily] = {}


def register(f: KernelFamily) -> KernelFamily:
    """Add (or replace, on module reload) a family; returns it."""
    _FAMILIES[f.name] = f
    return f


def family(name: str) -> KernelFamily:
    try:
        return _FAMILIES[name]
    except KeyError:
        raise KeyError(f"unknown kernel family {name!r} (registered: {', '.join(sorted(_FAMILIES)) or 'none'})") \
            from None


def families() -> list[KernelFamily]:
    return list(_FAMILIES.values())


def key_payload(name: str, abi: int, role: str, problem: dict, schedule: dict, target_name: str,
                target_arch: str) -> dict:
    """Everything that determines a kernel's bytes, as plain data."""
    from nova.runtime.cache import CODEGEN_TOOLCHAIN
    return {"op": name, "role": role, "problem": problem, "schedule": schedule,
            "target": {"name": target_name, "arch": target_arch}, "nova": nova.__version__,
            "toolchain": CODEGEN_TOOLCHAIN, "abi": abi}


def kernel_key(name: str, problem, schedule, role: str, target) -> str:
    """sha256 hex of the canonical payload; ``target`` is anything with ``.name`` and ``.arch``."""
    from nova.runtime.cache import canonical_json
    f = family(name)
    payload = key_payload(name, f.abi, role, problem.to_dict(), schedule.to_dict(), target.name, target.arch)
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def get_or_compile(name: str, problem, schedule, role: str, target, cache=None, offline: bool | None = None):
    """``(artifact, key, status)`` of one kernel of family ``name``: from the cache ("cached"), else
    compiled and stored ("compiled"); offline, a miss raises ``NotPrecompiledError`` naming the
    kernel and the command that builds it."""
    from nova.runtime.cache import (CompilerUnavailableError, KernelCache, NotPrecompiledError, is_offline,
                                    mlir_available)
    f = family(name)
    cache = cache or KernelCache()
    offline = is_offline() if offline is None else offline
    key = kernel_key(name, problem, schedule, role, target)
    art = cache.get(key)
    if art is not None:
        return art, key, "cached"
    what = f.describe(problem, role, target)
    if offline:
        hint = f"; on a machine with MLIR run: {f.precompile_hint}" if f.precompile_hint else ""
        raise NotPrecompiledError(problem, target, key, cache.root, message=(
            f"not precompiled: {what} (key {key[:8]}…) in {cache.root}{hint} and carry the cache directory"))
    if not mlir_available():
        raise CompilerUnavailableError(f"cannot compile {what}: MLIR is not installed here; set NOVA_OFFLINE=1 "
                                       "and use a precompiled cache")
    art = f.build(problem, schedule, role)
    cache.put(key, art, what)
    return art, key, "compiled"
