"""Every kernel a planned program launches on a GPU, compiled into the kernel cache ahead of time
(``nova precompile train``), so that a GPU machine without MLIR runs the step offline."""
from __future__ import annotations

import time


def step_kernels(planned) -> tuple[list, list]:
    """(GEMM problems, attention launches) of the CUDA program of ``planned``, each distinct, in
    launch order, as its dry run on meta tensors builds them: the Nova GEMMs the executor launches
    (``Program.gemm_problems``) and its Nova attention launches, ``(AttentionProblem, roles)`` with the
    strides of the arena views they read and write (``Program.attention_kernels``)."""
    from nova.compiler.executor import Program
    program = Program(planned, "meta")
    return program.gemm_problems(), program.attention_kernels()


def rows_problems_of(planned) -> list:
    """The distinct Nova rows problems the CUDA program of ``planned`` launches (``Program.rows_problems``)."""
    from nova.compiler.executor import Program
    return Program(planned, "meta").rows_problems()


def precompile_planned(planned, target, cache, log=print) -> dict:
    """Compile the step's kernels for ``target`` into ``cache``; returns the counts by status
    (compiled, cached, failed: a GEMM that fails is reported and the rest go on)."""
    from nova.kernels.attention import precompile_attention
    from nova.runtime.matmul import precompile_gemms
    gemms, attention = step_kernels(planned)
    start = time.perf_counter()
    counts = precompile_gemms(gemms, target, cache, log, label="gemm ")
    for i, (problem, roles) in enumerate(attention, 1):
        t0 = time.perf_counter()
        results = precompile_attention(problem, target, cache, roles=roles)
        for _, _, status in results:
            counts[status] += 1
        log(f"[attention {i}/{len(attention)}] {problem.describe()} ({', '.join(roles)}): "
            f"{len(results)} kernels in {time.perf_counter() - t0:.2f} s")
    rows = rows_problems_of(planned)
    for i, problem in enumerate(rows, 1):
        t0 = time.perf_counter()
        from nova.kernels.rows.compile import precompile_rows
        try:
            results = precompile_rows(problem, target, cache)
        except Exception as e:                # reported like a GEMM that fails; the rest go on
            counts["failed"] += 1
            log(f"[rows {i}/{len(rows)}] {problem.describe()}: failed: {str(e).splitlines()[0] if str(e) else e}")
            continue
        for _, _, status in results:
            counts[status] += 1
        log(f"[rows {i}/{len(rows)}] {problem.describe()}: {len(results)} kernels in {time.perf_counter() - t0:.2f} s")
    log(f"precompiled {len(gemms)} GEMMs, {len(attention)} attention launches and {len(rows)} rows problems for "
        f"{target.name} into {cache.root}: "
        f"{counts['compiled']} kernels compiled, {counts['cached']} already cached, {counts['failed']} failed "
        f"({time.perf_counter() - start:.1f} s)")
    return counts
