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
  toolchain, abi}`` (``kernel_key``; ``role`` left out for a family whose kernels have none, the
  problem as ``key_problem(problem, role)`` states it), equal on every machine, so a build host
  fills exactly what a device looks up.  The artifact's ``meta`` holds that problem, the schedule
  and the role, so ``current_keys`` can tell a stale cache entry from a live one.
- ``build(problem, schedule, role)`` returns a ``KernelArtifact`` (host only: it may import MLIR).
- ``describe(problem, role, target)`` is the one-line summary stored beside the entry and printed
  by ``nova cache list`` and by the offline cache-miss error.
- ``abi`` is bumped whenever the family's generated code or launch contract changes (old entries
  then become unreachable and ``nova cache prune`` removes them).
- ``not_precompiled(problem, role, target, key, cache_root)`` (optional) is the offline cache-miss
  message; by default it names the kernel and ``precompile_hint``.

An offline miss is also recorded in the cache (``KernelCache.record_miss``: the family, problem,
schedule, role and target as the device derived them); ``nova.compiler.precompile.build_misses`` --
``nova precompile misses`` -- builds every recorded one on a host with MLIR, so a device whose torch
traces a model otherwise than the host's still gets exactly the kernels it looks up.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable

from nova.messages import OFFLINE_HINT, misses_command
from nova.runtime import cache as kernel_cache
from nova.runtime.cache import (CODEGEN_TOOLCHAIN, CompilerUnavailableError, KernelCache, NotPrecompiledError,
                                canonical_json, is_offline)
from nova.version import __version__


def _same_problem(problem, role):
    return problem


@dataclass(frozen=True)
class KernelFamily:
    name: str                                   # "gemm", "attention", "fused": the key's "op"
    abi: int                                    # the family's ABI counter
    build: Callable                             # (problem, schedule, role) -> KernelArtifact   [host only]
    describe: Callable                          # (problem, role, target) -> one-line summary
    precompile_hint: str = ""                   # the command that builds a missing kernel ("{target}": its name)
    key_problem: Callable = _same_problem       # (problem, role) -> the problem the key and the build hold
    not_precompiled: Callable | None = None     # (problem, role, target, key, cache_root) -> offline miss message


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


def key_payload(name: str, abi: int, role: str | None, problem: dict, schedule: dict, target_name: str,
                target_arch: str) -> dict:
    """Everything that determines a kernel's bytes, as plain data (no ``role`` where it is None)."""
    payload = {"op": name, "problem": problem, "schedule": schedule,
               "target": {"name": target_name, "arch": target_arch}, "nova": __version__,
               "toolchain": CODEGEN_TOOLCHAIN, "abi": abi}
    if role is not None:
        payload["role"] = role
    return payload


def payload_key(payload: dict) -> str:
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def kernel_key(name: str, problem, schedule, role: str | None, target) -> str:
    """sha256 hex of the canonical payload; ``target`` is anything with ``.name`` and ``.arch``."""
    f = family(name)
    keyed = f.key_problem(problem, role)
    return payload_key(key_payload(name, f.abi, role, keyed.to_dict(), schedule.to_dict(), target.name, target.arch))


def current_keys(entry: dict, targets) -> set[str]:
    """The keys today's code would give a cache entry's own problem, schedule and role (its artifact's
    meta), for every registered family, on every ``(name, arch)`` of ``targets`` (entries do not name
    theirs): an entry stored under none of them is stale, left by an older Nova, toolchain or family
    ABI, and is never looked up again (``KernelCache.prune``)."""
    meta = entry["meta"]
    problem, schedule, role = meta["problem"], meta["schedule"], meta.get("role")
    return {payload_key(key_payload(f.name, f.abi, role, problem, schedule, name, arch))
            for f in families() for name, arch in targets}


def preset_targets() -> set[tuple[str, str]]:
    """``(name, arch)`` of every GPU preset: the targets ``current_keys`` tries."""
    from nova.hwmodel.presets import PRESETS
    return {(t.name, t.arch) for t in PRESETS.values()}


def get_or_compile(name: str, problem, schedule, role: str | None, target, cache=None, offline: bool | None = None):
    """``(artifact, key, status)`` of one kernel of family ``name``: from the cache ("cached"), else
    compiled and stored ("compiled"); offline, a miss raises ``NotPrecompiledError`` naming the
    kernel and the command that builds it."""
    f = family(name)
    cache = cache or KernelCache()
    offline = is_offline() if offline is None else offline
    key = kernel_key(name, problem, schedule, role, target)
    art = cache.get(key)
    if art is not None:
        return art, key, "cached"
    what = f.describe(problem, role, target)
    if offline:
        if f.not_precompiled is not None:
            message = f.not_precompiled(problem, role, target, key, cache.root)
        else:
            hint = f"; on a machine with MLIR run: {f.precompile_hint.format(target=target.name)}" \
                if f.precompile_hint else ""
            message = f"not precompiled: {what} (key {key[:8]}…) in {cache.root}{hint} and carry the cache directory"
        if cache.record_miss(key, {"family": name, "problem": problem, "schedule": schedule, "role": role,
                                   "target": (target.name, target.arch), "summary": what}) is not None:
            message += f" (recorded in {cache.misses_dir}: `{misses_command(cache.root)}` builds every recorded miss)"
        raise NotPrecompiledError(problem, target, key, cache.root, message=message)
    if not kernel_cache.mlir_available():
        raise CompilerUnavailableError(f"cannot compile {what}: MLIR Python bindings are not installed here; "
                                       f"{OFFLINE_HINT}")
    art = f.build(problem, schedule, role)
    cache.put(key, art, what, abi=f.abi)
    return art, key, "compiled"
