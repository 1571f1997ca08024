"""One attention kernel's MLIR module: ``build_module`` picks the builder of a role (the mma.sync
kernels of ``build``, the Hopper forward of ``build_hopper``, the Hopper backward of
``build_hopper_bwd``), with the kernel's PTX target and parameters.  MLIR text only (no MLIR import)."""
from __future__ import annotations

from nova.codegen.nvgpu import SM90A
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


def kernel_params(s: AttentionSchedule, role: str, problem: AttentionProblem | None = None) -> tuple[str, ...]:
    """The kernel's parameters: the Hopper forward reads q, k, v through tensor maps; an mma.sync kernel of
    a ``problem`` with a bias takes it last."""
    if s.kernel(role).hopper:
        if role != "fwd":
            return HOPPER_BWD_PARAMS[role]
        return HOPPER_PARAMS
    return params(problem, role) if problem is not None else PARAMS[role]


def build_module(p: AttentionProblem, s: AttentionSchedule, role: str, watchdog_ms: int | None = None) -> str:
    """The kernel's MLIR; ``watchdog_ms`` (Hopper dK/dV and dQ only): the debug build with bounded mbarrier
    waits (build_hopper_bwd.WATCHDOG_FIELDS; never cached: bench/probes/attention_bwd_hang.py)."""
    if watchdog_ms and not (role in ("bwd_dkv", "bwd_dq") and s.kernel(role).hopper):
        raise AttentionCodegenError(f"watchdog builds exist for the Hopper dK/dV and dQ kernels only, not {role}")
    if s.kernel(role).hopper:
        if p.bias:
            raise AttentionCodegenError(f"the Hopper {role} kernel takes no bias ({p.describe()}): the derivation "
                                        "puts a biased problem on the mma.sync kernels")
        if role != "fwd":
            return build_hopper_bwd(p, s, role, watchdog_ms)
        return build_hopper_fwd(p, s)
    return build_mma_sync(p, s, role)
