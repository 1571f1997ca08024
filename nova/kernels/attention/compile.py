"""Compile the attention kernels (MLIR -> PTX -> cubin) into ``KernelArtifact``s and the kernel cache.

Host only (imports MLIR through ``nova.codegen.lower``).  Cache key = sha256 of the canonical JSON of
(op "attention", role, problem, schedule, target, Nova version, toolchain, ABI): equal on every
machine, so ``precompile_attention`` on a build host fills exactly what the device looks up.  A
kernel is built, keyed and described by ``problem.for_role(role)``: only the strides of the operands
it reads or writes count, so a forward and a backward problem that differ in dout's strides share
the forward kernel.
"""
from __future__ import annotations

from nova.codegen import sass
from nova.codegen.artifact import KernelArtifact
from nova.codegen.errors import CodegenError
from nova.kernels import family
from nova.kernels.attention.module import KERNEL_NAMES, build_module, kernel_arch, kernel_params
from nova.kernels.attention.schedule import ROLES

ABI = 13           # bump when the kernels' arguments, layouts or generated code change
NAME = "attention"


def attention_key(problem, schedule, role: str, target) -> str:
    return family.kernel_key(NAME, problem, schedule, role, target)


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
    if resources.get("descriptor_hazards"):          # nvgpu.descriptor: the masked fields avoid this so far
        raise CodegenError(sass.refusal(f"{role} of {problem.describe()}", resources["descriptor_hazards"]))
    meta = {"problem": problem.to_dict(), "schedule": schedule.to_dict(), "role": role, "mlir": MLIR_TOOLCHAIN,
            "pipeline": pipeline(arch)}
    if watchdog_ms:
        meta["watchdog_ms"] = watchdog_ms
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    return KernelArtifact(name=KERNEL_NAMES[role], arch=arch, ptx=ptx, grid=tuple(kt.grid),
                          block=(kt.threads, 1, 1), smem_bytes=kt.smem_bytes,
                          params=kernel_params(schedule, role, problem) + (("watchdog",) if watchdog_ms else ()),
                          cubin=binary, resources=resources, meta=meta)


FAMILY = family.register(family.KernelFamily(
    name=NAME, abi=ABI,
    build=lambda problem, schedule, role: compile_kernel(problem, schedule, role),
    describe=lambda problem, role, target: summary(problem, role, target),
    precompile_hint="python -m nova.bench.attention --precompile --target {target} (or "
                    "nova.kernels.attention.precompile_attention)",
    key_problem=lambda problem, role: problem.for_role(role)))


def get_or_compile(problem, schedule, role: str, target, cache=None, offline: bool | None = None):
    """``(artifact, key, status)``: from the cache, else compiled (unless offline) and stored."""
    return family.get_or_compile(NAME, problem, schedule, role, target, cache, offline)


def precompile_attention(problem, target="h200", cache=None, roles=ROLES) -> list[tuple[str, str, str]]:
    """Configure ``problem`` for ``target`` and put the kernels of ``roles`` (and their split-KV combines) in
    the cache; [(role, key, status)]."""
    from nova.hwmodel import get_target
    from nova.kernels.attention.derive import configure_attention
    gpu = get_target(target)
    s = configure_attention(problem, gpu).schedule
    return [(role, *get_or_compile(problem, s, role, gpu, cache, offline=False)[1:]) for role in s.with_combines(roles)]
