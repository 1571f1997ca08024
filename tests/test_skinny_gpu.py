"""The skinny GEMM on the GPU (skipped without one): fresh random data, outputs NaN-poisoned before the
launch, a float64 reference.  The skinny kernel itself over M in {1, 2, 3, 5, 8, 13, 16}, odd N and K,
NN / NT / TN / TT, tf32 / bf16 / fp16 and the epilogues (configured with ``kernel="skinny"`` and
launched through ``nova.runtime.matmul``'s own loader, whatever the rule would pick); ``nova.matmul``
on the held-out decode shapes (the rule picks the skinny kernel on the H200); two runs bit-identical
(K slices added in order by whichever CTA is last); a CUDA graph replaying a split kernel (its
counters left zero for the next replay).

Kernels compile online (MLIR on the device machine) or come from the cache.  On a host with MLIR and no
GPU, ``python3 tests/test_skinny_gpu.py --target h200 --build`` puts every kernel these tests launch into
``$NOVA_CACHE_DIR``; carry it over and run ``NOVA_OFFLINE=1 NOVA_CACHE_DIR=<cache> python3 -m pytest -m gpu
tests/test_skinny_gpu.py``.
"""
from __future__ import annotations

import sys
import zlib

import pytest

from nova.kernels.gemm.problem import GemmProblem

# (M, N, K, dtype, trans_a, trans_b, bias, activation): M in {1, 2, 3, 5, 8, 13, 16}, odd N and K, every layout
# and dtype, the epilogues, N below a warp's columns.  Past the device target's balance point (16-bit M of 13
# and 16 on the H200: the tiles run those) the kernel is the one configured for WIDE_TARGET, whose balance
# point is higher (sm_86 code, JIT-compiled from its PTX on the device)
CASES = [(M, N, K, dt, ta, tb, bias, act)
         for M in (1, 2, 3, 5, 8, 13, 16)
         for (N, K, ta, tb, bias, act) in ((1387, 1389, False, False, False, "none"), (777, 4099, False, True, True, "relu"),
                                         (2051, 515, True, False, False, "gelu"), (96, 3001, True, True, True, "silu"),
                                         (4096, 4096, False, False, False, "none"), (5, 2000, False, True, False, "none"))
         for dt in ("tf32", "bf16", "fp16")]
# the held-out decode shapes (bench/results/h200-2026-12-03/run8/heldout): nova.matmul picks the skinny kernel
HELDOUT = [(1, 1014, 11606, "tf32", False, False), (1, 13647, 1389, "tf32", False, True),
           (1, 345, 483, "tf32", False, True), (23, 1387, 4873, "tf32", False, False),
           (15, 576, 1920, "tf32", True, False), (16, 5760, 384, "tf32", False, False),
           (3, 15232, 896, "tf32", False, False), (8, 896, 3776, "bf16", False, True),
           (5, 576, 3392, "bf16", False, False), (1, 640, 2176, "bf16", False, False),
           (14, 14759, 10323, "tf32", False, True), (13, 7603, 270, "bf16", False, True)]
TOLERANCE = {"tf32": 1e-5, "bf16": 8e-3, "fp16": 1e-3}    # FP32 sums of exact products; the output's rounding
WIDE_TARGET = "rtx3060"        # the skinny kernel takes up to 34 rows of 16-bit inputs there


def problem_of(case) -> GemmProblem:
    return GemmProblem(*case)


def applicable(problems, target):
    from nova.hwmodel import get_target
    from nova.kernels.gemm.skinny import applies
    gpu = get_target(target) if isinstance(target, str) else target
    return [p for p in problems if applies(p, gpu)[0]]


def skinny_target(problem, target):
    """``target`` where the skinny kernel applies to ``problem``, else WIDE_TARGET."""
    from nova.hwmodel import get_target
    return target if applicable([problem], target) else get_target(WIDE_TARGET)


def skinny_schedule(problem, target):
    from nova.configurator import configure
    return configure(problem, target, kernel="skinny").schedule


# --------------------------------------------------------------------------- the device run
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def target_and_device():
    from nova.runtime import driver, matmul as mm
    device = driver.get_device()
    return mm.resolve_target(device=device), device


def launch_skinny(torch, problem, a, b, out, bias):
    """The skinny kernel of ``problem``, loaded as nova.matmul loads kernels, launched on the current stream."""
    from nova.kernels.gemm.family import get_or_compile
    from nova.runtime import matmul as mm
    target, device = target_and_device()
    target = skinny_target(problem, target)
    schedule = skinny_schedule(problem, target)
    artifact, key, status = get_or_compile(problem, schedule, target)
    resolved = mm.load_resolved(problem, target, schedule, artifact, key, status, device)
    assert resolved.skinny is not None
    resolved.run(a.data_ptr(), b.data_ptr(), out.data_ptr(), None if bias is None else bias.data_ptr(),
                 torch.cuda.current_stream().cuda_stream)
    return schedule


def operands(torch, p: GemmProblem, seed: int):
    from nova.bench.harness import random_bias, random_operands
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a, b = random_operands(torch, p.M, p.N, p.K, p.dtype, gen, p.trans_a, p.trans_b)
    bias_dtype = torch.float32 if p.dtype == "tf32" else a.dtype
    bias = random_bias(torch, p.N, bias_dtype, gen) if p.bias else None
    out = torch.full((p.M, p.N), float("nan"), device="cuda", dtype=a.dtype)
    return a, b, bias, out


def error(torch, p, a, b, bias, out) -> float:
    from nova.bench.harness import reference, rel_fro
    assert not torch.isnan(out).any(), "outputs never written (NaN poison survives)"
    return rel_fro(out, reference(torch, a, b, bias, p.activation))


def case_id(c) -> str:
    return f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{'T' if c[4] else 'N'}{'T' if c[5] else 'N'}{'-bias' if c[6] else ''}-{c[7]}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_skinny_kernel_matches_float64(torch, case):
    p = problem_of(case)
    a, b, bias, out = operands(torch, p, seed=zlib.crc32(case_id(case).encode()))
    schedule = launch_skinny(torch, p, a, b, out, bias)
    torch.cuda.synchronize()
    err = error(torch, p, a, b, bias, out)
    assert err <= TOLERANCE[p.dtype], f"{p.describe()} [{schedule.label()}]: error {err:.2e}"


@pytest.mark.gpu
@pytest.mark.parametrize("case", HELDOUT, ids=lambda c: f"{c[0]}x{c[1]}x{c[2]}-{c[3]}-{'T' if c[4] else 'N'}{'T' if c[5] else 'N'}")
def test_matmul_runs_the_skinny_kernel_on_decode_shapes(torch, case):
    import nova
    from nova.configurator import configure
    from nova.runtime import matmul as mm
    p = GemmProblem(*case)
    target, device = target_and_device()
    a, b, bias, out = operands(torch, p, seed=sum(case[:3]))
    nova.matmul(a, b, out=out)
    torch.cuda.synchronize()
    resolved = mm.resolve_kernel(p, device=device)
    assert (resolved.skinny is not None) == configure(p, target).skinny
    from nova.kernels.gemm import skinny
    if target.name == "h200" and skinny.applies(p, target)[0]:     # M past the balance point: the tiles
        assert resolved.skinny is not None, f"{p.describe()}: the rule picked the tiles on the H200"
    from nova.bench.harness import TOLERANCE as TENSOR_CORE_TOLERANCE
    err = error(torch, p, a, b, bias, out)
    tolerance = TOLERANCE[p.dtype] if resolved.skinny is not None else TENSOR_CORE_TOLERANCE[p.dtype]
    assert err <= tolerance, f"{p.describe()}: {err:.2e}"


@pytest.mark.gpu
def test_k_slices_add_in_order_bit_identical(torch):
    p = GemmProblem(3, 1014, 11606, "tf32", bias=True, activation="gelu")
    a, b, bias, out = operands(torch, p, seed=5)
    schedule = launch_skinny(torch, p, a, b, out, bias)
    assert schedule.split
    again = torch.full_like(out, float("nan"))
    launch_skinny(torch, p, a, b, again, bias)
    torch.cuda.synchronize()
    assert torch.equal(out, again)
    assert error(torch, p, a, b, bias, out) <= TOLERANCE["tf32"]


@pytest.mark.gpu
def test_a_cuda_graph_replays_a_split_kernel(torch):
    """Warmed up on the capture stream (its workspace allocated, its counters zeroed), then captured and
    replayed three times on new operands copied in place."""
    import nova
    p = GemmProblem(1, 1014, 11606, "tf32")
    a, b, _, out = operands(torch, p, seed=11)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        nova.matmul(a, b, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        nova.matmul(a, b, out=out)
    for seed in (12, 13, 14):
        a2, b2, _, _ = operands(torch, p, seed=seed)
        a.copy_(a2)
        b.copy_(b2)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert error(torch, p, a, b, None, out) <= TOLERANCE["tf32"]


@pytest.mark.gpu
def test_f32_output_from_bf16_inputs(torch):
    import nova
    from nova.bench.harness import random_operands, reference, rel_fro
    gen = torch.Generator(device="cuda").manual_seed(21)
    a, b = random_operands(torch, 5, 3001, 777, "bf16", gen, False, True)
    out = torch.full((5, 3001), float("nan"), device="cuda", dtype=torch.float32)
    nova.matmul(a, b, out=out)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any() and rel_fro(out, reference(torch, a, b)) <= 1e-5


# --------------------------------------------------------------------------- precompile (host, MLIR)
def all_problems(target: str) -> tuple[list, list]:
    """(the forced skinny kernels, the problems ``nova.matmul`` runs) of these tests on ``target``."""
    forced = [problem_of(c) for c in CASES] + [GemmProblem(3, 1014, 11606, "tf32", bias=True, activation="gelu")]
    matmul = [GemmProblem(*c) for c in HELDOUT] + [GemmProblem(1, 1014, 11606, "tf32"),
                                                  GemmProblem(5, 3001, 777, "bf16", False, True, out_dtype="f32")]
    return forced, matmul


def build(target: str) -> int:
    from nova.hwmodel import get_target
    from nova.kernels.gemm.family import get_or_compile
    from nova.runtime.cache import KernelCache
    from nova.runtime.matmul import precompile_gemms
    gpu, cache = get_target(target), KernelCache()
    forced, matmul = all_problems(target)
    failed = 0
    for i, p in enumerate(forced, 1):
        try:
            where = skinny_target(p, gpu)
            _, key, status = get_or_compile(p, skinny_schedule(p, where), where, cache, offline=False)
            print(f"[skinny {i}/{len(forced)}] {p.describe()} on {where.name}: {status} (key {key[:12]})", flush=True)
        except Exception as e:          # reported and counted; the batch goes on
            failed += 1
            print(f"[skinny {i}/{len(forced)}] {p.describe()}: FAILED: {type(e).__name__}: {e}", flush=True)
    failed += precompile_gemms(matmul, gpu, cache, log=lambda line: print(line, flush=True), label="matmul ")["failed"]
    print(f"{len(forced) + len(matmul)} kernels into {cache.root}, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="build this file's skinny GEMM kernels into $NOVA_CACHE_DIR")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--build", action="store_true", help="compile the kernels (a host with MLIR, no GPU needed)")
    args = ap.parse_args()
    if not args.build:
        ap.error("--build is the only action (this file's tests run under pytest -m gpu)")
    sys.exit(build(args.target))
