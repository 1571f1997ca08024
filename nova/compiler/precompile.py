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
    """Compile the step's kernels for ``target`` into ``cache``; returns the counts by status
    (compiled, cached, failed: a GEMM that fails is reported and the rest go on)."""
    from nova.kernels.attention import precompile_attention
    from nova.runtime.matmul import precompile_gemms
    gemms, attention = step_kernels(planned)
    start = time.perf_counter()
    counts = precompile_gemms(gemms, target, cache, log, label="gemm ")
    for i, problem in enumerate(attention, 1):
        t0 = time.perf_counter()
        results = precompile_attention(problem, target, cache)
        for _, _, status in results:
            counts[status] += 1
        log(f"[attention {i}/{len(attention)}] {problem.describe()}: "
            f"{len(results)} kernels in {time.perf_counter() - t0:.2f} s")
    log(f"precompiled {len(gemms)} GEMMs and {len(attention)} attention problems for {target.name} into {cache.root}: "
        f"{counts['compiled']} kernels compiled, {counts['cached']} already cached, {counts['failed']} failed "
        f"({time.perf_counter() - start:.1f} s)")
    return counts
