"""One attention kernel's MLIR module: ``build_module`` picks the builder of a role (the mma.sync
kernels of ``build``, the Hopper forward of ``build_hopper``, the Hopper backward of
``build_hopper_bwd``, the split-KV combines of ``build_combine``), with the kernel's PTX target, name and
parameters.  MLIR text only (no MLIR import)."""
from __future__ import annotations

from nova.codegen.nvgpu import SM90A
from nova.kernels.attention import build_combine
from nova.kernels.attention.build import KERNEL_NAMES as MMA_SYNC_NAMES
from nova.kernels.attention.build import PARAMS, AttentionCodegenError, build_mma_sync, params
from nova.kernels.attention.build_hopper import PARAMS as HOPPER_PARAMS
from nova.kernels.attention.build_hopper import build_hopper_fwd
from nova.kernels.attention.build_hopper_bwd import PARAMS as HOPPER_BWD_PARAMS
from nova.kernels.attention.build_hopper_bwd import build_hopper_bwd
from nova.kernels.attention.problem import AttentionProblem
from nova.kernels.attention.schedule import AttentionSchedule


def kernel_arch(s: AttentionSchedule, role: str) -> str:
    """The PTX target of kernel ``role``: sm_90a for the Hopper forward (wgmma, setmaxnreg), else the schedule's."""
    return SM90A if s.kernel(role).hopper else s.arch


KERNEL_NAMES = {**MMA_SYNC_NAMES, **build_combine.KERNEL_NAMES}


def kernel_params(s: AttentionSchedule, role: str, problem: AttentionProblem | None = None) -> tuple[str, ...]:
    """The kernel's parameters: the Hopper kernels read q, k, v (and dout) through tensor maps; a kernel
    of a ``problem`` with a bias takes it last; a split-KV kernel writes its partial slabs
    (``build.PARTIALS``)."""
    kt = s.kernel(role)
    if role in build_combine.PARAMS:
        return build_combine.PARAMS[role]
    names = (HOPPER_BWD_PARAMS[role] if role != "fwd" else HOPPER_PARAMS) if kt.hopper else PARAMS[role]
    return params(problem, role, kt.splits, names)


def build_module(p: AttentionProblem, s: AttentionSchedule, role: str, watchdog_ms: int | None = None) -> str:
    """The kernel's MLIR; ``watchdog_ms`` (Hopper dK/dV and dQ only): the debug build with bounded mbarrier
    waits (build_hopper_bwd.WATCHDOG_FIELDS; never cached: bench/probes/attention_bwd_hang.py)."""
    if watchdog_ms and not (role in ("bwd_dkv", "bwd_dq") and s.kernel(role).hopper):
        raise AttentionCodegenError(f"watchdog builds exist for the Hopper dK/dV and dQ kernels only, not {role}")
    if role in build_combine.KERNEL_NAMES:
        return build_combine.build_combine(p, s, role)
    if s.kernel(role).hopper:
        if role != "fwd":
            return build_hopper_bwd(p, s, role, watchdog_ms)
        return build_hopper_fwd(p, s)
    return build_mma_sync(p, s, role)
