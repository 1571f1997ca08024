"""Which of a program's Nova kernels a kernel cache lacks: the kernel lists of a CUDA program
(``StepKernels``, what ``Program.step_kernels`` states) looked up offline, family by family, as the
runtime looks them up.  ``nova precompile`` (``precompile.missing_kernels``) and an offline program
that misses (``Program._every_miss``) share it; it imports no program, so both may."""
from __future__ import annotations

from typing import NamedTuple


class StepKernels(NamedTuple):
    """The distinct Nova kernels of a CUDA program, each list in launch order."""
    gemms: list                 # GemmProblem
    attention: list             # (AttentionProblem with the arena views' strides, roles)
    rows: list                  # RowsProblem
    pointwise: list             # PointwiseProblem
    optimizer: list             # UpdateRule (a multi-tensor kernel serves every group of its rule), with the
                                # rules of the steps after (an SGD first step's successor reads its buffers)
    embedding: list = []        # EmbeddingProblem (gathers, deterministic scatter-adds)
    sums: list = []             # SumRule (a multi-tensor sum kernel serves every group of its entries)


def kernels_missing(kernels: StepKernels, target, cache) -> list[str]:
    """The kernels of ``kernels`` (a program's ``StepKernels``) that ``cache`` lacks for ``target``, one
    line each (empty when an offline device finds them all): each looked up offline through its
    family's ``get_or_compile``, as the runtime looks it up, without a GPU (each miss recorded in the
    cache for ``nova precompile misses``)."""
    from nova.kernels.attention.compile import get_or_compile as attention_kernel
    from nova.kernels.attention.derive import configure_attention
    from nova.kernels.embedding.compile import get_or_compile as embedding_kernel
    from nova.kernels.embedding.derive import configure_embedding
    from nova.kernels.gemm.family import get_or_compile as gemm_kernel
    from nova.kernels.optimizer.compile import SUM_ROLE, get_or_compile as optimizer_kernel
    from nova.kernels.optimizer.derive import configure_rule
    from nova.kernels.optimizer.sum_derive import configure_sum_rule
    from nova.kernels.pointwise.compile import get_or_compile as pointwise_kernel
    from nova.kernels.pointwise.derive import configure_pointwise
    from nova.kernels.rows.compile import get_or_compile as rows_kernel
    from nova.kernels.rows.derive import configure_rows
    from nova.runtime.cache import NotPrecompiledError
    from nova.runtime.matmul import configure_schedule

    def by_role(problems, configure, kernel) -> list:
        """One look-up per role of each problem of a multi-role family (rows, embedding)."""
        configured = [(p, configure(p, target).schedule) for p in problems]
        return [lambda p=p, s=s, r=r: kernel(p, s, r, target, cache, offline=True)
                for p, s in configured for r in s.roles]
    lookups = [lambda p=p: gemm_kernel(p, configure_schedule(p, target), target, cache, offline=True)
               for p in kernels.gemms]
    attention = [(p, configure_attention(p, target).schedule, roles) for p, roles in kernels.attention]
    lookups += [lambda p=p, s=s, r=r: attention_kernel(p, s, r, target, cache, offline=True)
                for p, s, roles in attention for r in s.with_combines(roles)]
    lookups += by_role(kernels.rows, configure_rows, rows_kernel)
    lookups += by_role(kernels.embedding, configure_embedding, embedding_kernel)
    lookups += [lambda p=p: pointwise_kernel(p, configure_pointwise(p, target).schedule, target, cache, offline=True)
                for p in kernels.pointwise]
    lookups += [lambda r=r: optimizer_kernel(r, configure_rule(r, target), target, cache, offline=True)
                for r in kernels.optimizer]
    lookups += [lambda r=r: optimizer_kernel(r, configure_sum_rule(r, target), target, cache, offline=True,
                                             role=SUM_ROLE) for r in kernels.sums]
    missing = []
    for lookup in lookups:
        try:
            lookup()
        except NotPrecompiledError as e:
            missing.append(str(e).split(" (key ")[0])
    return missing
