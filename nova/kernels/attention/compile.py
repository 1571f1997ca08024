"""Compile the attention kernels (MLIR -> PTX -> cubin) into ``KernelArtifact``s and the kernel cache.

Host only (imports MLIR through ``nova.codegen.lower``).  Cache key = sha256 of the canonical JSON of
(op "attention", role, problem, schedule, target, Nova version, toolchain, ABI): equal on every
machine, so ``precompile_attention`` on a build host fills exactly what the device looks up.  A
kernel is built, keyed and described by ``problem.for_role(role)``: only the strides of the operands
it reads or writes count, so a forward and a backward problem that differ in dout's strides share
the forward kernel.
"""
from __future__ import annotations

import hashlib

import nova
from nova.codegen.artifact import KernelArtifact
from nova.kernels.attention.build import KERNEL_NAMES, build_module, kernel_arch, kernel_params
from nova.kernels.attention.schedule import ROLES

ATTN_ABI = 10           # bump when the kernels' arguments, layouts or generated code change (2: TF32 rounded in smem);
                        # strides (a 1-D view per operand) left it at 2: same pointers, same results, and a contiguous
                        # problem's PTX identical but for ragged tiles' zero-fill source address (cached kernels stay valid);
                        # 3: the 3xtf32 score split by truncation (a 3xtf32 kernel of ABI 2 rounded with cvt.rna);
                        # 4: the split rounds big to nearest by integer arithmetic (truncation biased the scores);
                        # 5: the Hopper forward (TMA + wgmma, sm_90a, q/k/v through tensor maps) on sm_90 targets
                        # 6: the Hopper backward (dK/dV and dQ on TMA + wgmma, q/k/v/dout through tensor maps)
                        # 7: the Hopper backward's setmaxnreg targets fit the block's registers at launch (ABI 6's
                        # 32/240 needed 65536 of the 64512 the block holds: setmaxnreg.inc waited forever)
                        # 8: the Hopper kernels mask the descriptor start address to 14 bits (ptxas 13.0 left the
                        # descriptor's high word unwritten on the consumers' path of the non-causal D64 dK/dV kernel)
                        # 9: the Hopper backward's S and dP start with scale-d 0 (no zeroed accumulators: ptxas had
                        # injected a warpgroup.wait that drained S before dP, C7517/C7519)
                        # 10: the Hopper dK/dV's slot released by every consumer thread (lane 0's arrival did not
                        # order the other lanes' LSE/D reads: racecheck, session 12) under unchanged schedules


def attention_key(problem, schedule, role: str, target) -> str:
    return _key(role, problem.for_role(role).to_dict(), schedule.to_dict(), target.name, target.arch)


def _key(role: str, problem: dict, schedule: dict, target_name: str, target_arch: str) -> str:
    from nova.runtime.cache import CODEGEN_TOOLCHAIN, canonical_json
    payload = {"op": "attention", "role": role, "problem": problem, "schedule": schedule,
               "target": {"name": target_name, "arch": target_arch}, "nova": nova.__version__,
               "toolchain": CODEGEN_TOOLCHAIN, "abi": ATTN_ABI}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def entry_key(entry: dict, target_name: str, target_arch: str) -> str:
    """The key today's code gives a cached attention kernel's own problem, schedule and role on that
    target (``nova cache prune``: an entry whose file is not named so is never looked up again)."""
    meta = entry["meta"]
    return _key(meta["role"], meta["problem"], meta["schedule"], target_name, target_arch)


def summary(problem, role: str, target) -> str:
    return f"{problem.for_role(role).describe()} [{role}] on {target.name} ({target.arch})"


def compile_kernel(problem, schedule, role: str, *, cubin: bool = True, watchdog_ms: int | None = None) -> KernelArtifact:
    """``watchdog_ms``: the Hopper dK/dV or dQ kernel's debug build (bounded mbarrier waits, one more
    parameter, ``watchdog``); such an artifact is for probes and never goes into the cache."""
    from nova.codegen import MLIR_TOOLCHAIN, lower_and_assemble
    from nova.codegen.lower import pipeline
    kt = schedule.kernel(role)
    problem = problem.for_role(role)
    text = build_module(problem, schedule, role, watchdog_ms)
    arch = kernel_arch(schedule, role)
    ptx, binary, resources, ptxas_version = lower_and_assemble(text, arch, KERNEL_NAMES[role],
                                                               f"{role} of {problem.describe()}", cubin=cubin)
    meta = {"problem": problem.to_dict(), "schedule": schedule.to_dict(), "role": role, "mlir": MLIR_TOOLCHAIN,
            "pipeline": pipeline(arch)}
    if watchdog_ms:
        meta["watchdog_ms"] = watchdog_ms
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    return KernelArtifact(name=KERNEL_NAMES[role], arch=arch, ptx=ptx, grid=tuple(kt.grid),
                          block=(kt.threads, 1, 1), smem_bytes=kt.smem_bytes,
                          params=kernel_params(schedule, role) + (("watchdog",) if watchdog_ms else ()),
                          cubin=binary, resources=resources, meta=meta)


def get_or_compile(problem, schedule, role: str, target, cache=None, offline: bool | None = None):
    """``(artifact, key, status)``: from the cache, else compiled (unless offline) and stored."""
    from nova.runtime.cache import KernelCache, NotPrecompiledError, is_offline
    cache = cache or KernelCache()
    offline = is_offline() if offline is None else offline
    key = attention_key(problem, schedule, role, target)
    art = cache.get(key)
    if art is not None:
        return art, key, "cached"
    if offline:
        raise NotPrecompiledError(problem, target, key, cache.root, message=(
            f"not precompiled: {summary(problem, role, target)} (key {key[:8]}…) in {cache.root}; on a machine "
            f"with MLIR run: python -m nova.bench.attention --precompile --target {target.name} (or "
            f"nova.kernels.attention.precompile_attention) and carry the cache directory"))
    from nova.runtime.cache import CompilerUnavailableError, mlir_available
    if not mlir_available():
        raise CompilerUnavailableError(f"cannot compile {summary(problem, role, target)}: MLIR is not installed "
                                       "here; set NOVA_OFFLINE=1 and use a precompiled cache")
    art = compile_kernel(problem, schedule, role)
    cache.put(key, art, summary(problem, role, target))
    return art, key, "compiled"


def precompile_attention(problem, target="h200", cache=None, roles=ROLES) -> list[tuple[str, str, str]]:
    """Configure ``problem`` for ``target`` and put every kernel in the cache; [(role, key, status)]."""
    from nova.hwmodel import get_target
    from nova.kernels.attention.derive import configure_attention
    gpu = get_target(target)
    s = configure_attention(problem, gpu).schedule
    return [(role, *get_or_compile(problem, s, role, gpu, cache, offline=False)[1:]) for role in roles]
