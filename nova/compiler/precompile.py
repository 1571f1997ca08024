"""Every kernel a planned program launches on a GPU, compiled into the kernel cache ahead of time
(``nova precompile train``), so that a GPU machine without MLIR runs the step offline."""
from __future__ import annotations

import time


def step_kernels(planned) -> tuple[list, list]:
    """(GEMM problems, attention problems) of the CUDA program of ``planned``, each distinct, in
    launch order: the Nova GEMMs the executor launches (``executor.gemm_problems``) and the
    attention nodes Nova's fused kernels cover (``explain.attention_problem``)."""
    from nova.compiler.executor import gemm_problems
    from nova.compiler.explain import attention_problem
    attention = []
    for node in planned.graph.nodes:
        if node.op in ("attention", "attention_backward"):
            problem = attention_problem(node)
            if problem is not None and problem not in attention:
                attention.append(problem)
    return gemm_problems(planned), attention


def precompile_planned(planned, target, cache, log=print) -> dict:
    """Compile the step's kernels for ``target`` into ``cache``; returns the counts by status."""
    from nova.kernels.attention import precompile_attention
    from nova.messages import summary_line
    from nova.runtime.cache import get_or_compile
    from nova.runtime.matmul import configure_schedule
    gemms, attention = step_kernels(planned)
    counts = {"compiled": 0, "cached": 0}
    start = time.perf_counter()
    for i, problem in enumerate(gemms, 1):
        t0 = time.perf_counter()
        _, key, status = get_or_compile(problem, configure_schedule(problem, target), target, cache, offline=False)
        counts[status] += 1
        log(f"[gemm {i}/{len(gemms)}] {summary_line(problem, target)}: {status} in {time.perf_counter() - t0:.2f} s "
            f"(key {key[:12]})")
    for i, problem in enumerate(attention, 1):
        t0 = time.perf_counter()
        results = precompile_attention(problem, target, cache)
        for _, _, status in results:
            counts[status] += 1
        log(f"[attention {i}/{len(attention)}] {problem.describe() if hasattr(problem, 'describe') else problem}: "
            f"{len(results)} kernels in {time.perf_counter() - t0:.2f} s")
    log(f"precompiled {len(gemms)} GEMMs and {len(attention)} attention problems for {target.name} into {cache.root}: "
        f"{counts['compiled']} kernels compiled, {counts['cached']} already cached "
        f"({time.perf_counter() - start:.1f} s)")
    return counts
