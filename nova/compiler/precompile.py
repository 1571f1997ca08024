"""Every kernel a planned program launches on a GPU, compiled into the kernel cache ahead of time
(``nova precompile train``), so that a GPU machine without MLIR runs the step offline."""
from __future__ import annotations

import time

from nova.compiler.kernel_lookup import StepKernels, kernels_missing  # noqa: F401  (StepKernels: this module's API)
from nova.runtime.cache import precompile_each  # noqa: F401  (the loop of every precompile below)


def step_kernels(planned) -> StepKernels:
    """The Nova kernels of the CUDA program of ``planned``, as its dry run on meta tensors builds
    them (``Program.step_kernels``)."""
    from nova.compiler.executor import Program
    return Program(planned, "meta").step_kernels()


def rows_problems_of(planned) -> list:
    """The distinct Nova rows problems the CUDA program of ``planned`` launches (``Program.rows_problems``)."""
    return step_kernels(planned).rows



def precompile_pointwise(problems, target, cache, log=print) -> dict:
    """Configure each ``PointwiseProblem`` for ``target`` and compile its kernel into ``cache``."""
    from nova.kernels.pointwise.compile import describe, get_or_compile
    from nova.kernels.pointwise.derive import configure_pointwise

    def one(problem):
        _, key, status = get_or_compile(problem, configure_pointwise(problem, target).schedule, target, cache,
                                        offline=False)
        return key, status
    return precompile_each(problems, one, lambda p: describe(p, "pointwise", target), log, "pointwise ")


def precompile_optimizer(rules, target, cache, log=print) -> dict:
    """Configure each multi-tensor ``UpdateRule`` for ``target`` and compile its kernel into ``cache``."""
    from nova.kernels.optimizer.compile import ROLE, describe, get_or_compile
    from nova.kernels.optimizer.derive import configure_rule

    def one(rule):
        _, key, status = get_or_compile(rule, configure_rule(rule, target), target, cache, offline=False)
        return key, status
    return precompile_each(rules, one, lambda r: describe(r, ROLE, target), log, "multi-tensor ")


def precompile_sums(rules, target, cache, log=print) -> dict:
    """Configure each multi-tensor ``SumRule`` for ``target`` and compile its kernel into ``cache``."""
    from nova.kernels.optimizer.compile import SUM_ROLE, describe, get_or_compile
    from nova.kernels.optimizer.sum_derive import configure_sum_rule

    def one(rule):
        _, key, status = get_or_compile(rule, configure_sum_rule(rule, target), target, cache, offline=False,
                                        role=SUM_ROLE)
        return key, status
    return precompile_each(rules, one, lambda r: describe(r, SUM_ROLE, target), log, "multi-tensor sum ")


def _add(total: dict, counts: dict) -> None:
    for k, v in counts.items():
        total[k] = total.get(k, 0) + v


def precompile_planned(planned, target, cache, log=print) -> dict:
    """Compile the step's kernels for ``target`` into ``cache``; returns the counts by status
    (compiled, cached, failed: a kernel that fails is reported and the rest go on) and how many
    kernels of each family the step has (``gemm``, ``attention``, ``rows``, ``embedding``, ``pointwise``, ``optimizer``)."""
    from nova.kernels.attention import precompile_attention
    from nova.runtime.matmul import precompile_gemms
    kernels = step_kernels(planned)
    start = time.perf_counter()
    counts = precompile_gemms(kernels.gemms, target, cache, log, label="gemm ", eager=False)   # launched replayed
    for i, (problem, roles) in enumerate(kernels.attention, 1):
        t0 = time.perf_counter()
        results = precompile_attention(problem, target, cache, roles=roles)
        for _, _, status in results:
            counts[status] += 1
        log(f"[attention {i}/{len(kernels.attention)}] {problem.describe()} ({', '.join(roles)}): "
            f"{len(results)} kernels in {time.perf_counter() - t0:.2f} s")
    rows = kernels.rows
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
    for i, problem in enumerate(kernels.embedding, 1):
        t0 = time.perf_counter()
        from nova.kernels.embedding.compile import precompile_embedding
        try:
            results = precompile_embedding(problem, target, cache)
        except Exception as e:                # reported like a GEMM that fails; the rest go on
            counts["failed"] += 1
            log(f"[embedding {i}/{len(kernels.embedding)}] {problem.describe()}: failed: "
                f"{str(e).splitlines()[0] if str(e) else e}")
            continue
        for _, _, status in results:
            counts[status] += 1
        log(f"[embedding {i}/{len(kernels.embedding)}] {problem.describe()}: {len(results)} kernels in "
            f"{time.perf_counter() - t0:.2f} s")
    _add(counts, precompile_pointwise(kernels.pointwise, target, cache, log))
    _add(counts, precompile_optimizer(kernels.optimizer, target, cache, log))
    _add(counts, precompile_sums(kernels.sums, target, cache, log))
    log(f"precompiled {len(kernels.gemms)} GEMMs, {len(kernels.attention)} attention launches, {len(rows)} rows "
        f"problems, {len(kernels.embedding)} embedding problems, {len(kernels.pointwise)} pointwise kernels, "
        f"{len(kernels.optimizer)} multi-tensor optimizer "
        f"and {len(kernels.sums)} multi-tensor sum kernels for {target.name} into {cache.root}: "
        f"{counts['compiled']} kernels compiled, {counts['cached']} already cached, {counts['failed']} failed "
        f"({time.perf_counter() - start:.1f} s)")
    return {**counts, "gemm": len(kernels.gemms), "attention": len(kernels.attention), "rows": len(kernels.rows),
            "embedding": len(kernels.embedding), "pointwise": len(kernels.pointwise), "optimizer": len(kernels.optimizer),
            "sums": len(kernels.sums)}


def missing_kernels(planned, target, cache) -> list[str]:
    """The Nova kernels of ``planned``'s CUDA program that ``cache`` lacks for ``target``, one line each
    (``kernel_lookup.kernels_missing`` on ``step_kernels(planned)``)."""
    return kernels_missing(step_kernels(planned), target, cache)


def build_misses(cache, log=print) -> dict:
    """Build every miss recorded in ``cache`` (``nova precompile misses``), each under the key the
    device looked up, and forget it once built; returns the counts by status (compiled, cached,
    failed).  A record this Nova cannot read or whose key it would not give (another Nova version,
    toolchain or family ABI) is reported as failed and kept."""
    from nova.hwmodel import get_target
    from nova.kernels.family import get_or_compile, kernel_key
    records = cache.misses()

    def compile_one(item):
        path, record = item
        if "error" in record:
            raise ValueError(f"unreadable record {path.name}: {record['error']}")
        name, arch = record["target"]
        target = get_target(name)
        if target.arch != arch:
            raise ValueError(f"recorded for {name} ({arch}); this Nova's {name} is {target.arch}")
        key = kernel_key(record["family"], record["problem"], record["schedule"], record["role"], target)
        if key != record["key"]:
            raise ValueError(f"this Nova keys it {key[:8]}…, the device looked up {record['key'][:8]}… "
                             f"(another Nova version, toolchain or kernel ABI recorded it)")
        _, key, status = get_or_compile(record["family"], record["problem"], record["schedule"], record["role"],
                                        target, cache, offline=False)
        path.unlink(missing_ok=True)
        return key, status

    def describe(item):
        path, record = item
        return record.get("summary", path.name)

    return precompile_each(records, compile_one, describe, log=log, label="miss ")
