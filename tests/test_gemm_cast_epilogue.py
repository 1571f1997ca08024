"""The cast epilogue (``GemmProblem.round_through``): a 16-bit GEMM whose result is widened to f32
writes f32 rounded through the 16-bit type -- the problem's rules, the configurator's split-K, the
kernels' PTX, the fusion rule that forms it (autocast's ``R + y``, a weight gradient cast for its f32
parameter) and the CPU program that computes such a group unfused."""
import re

import pytest
import torch

from nova.compiler.executor import build, gemm_problems
from nova.ir import Graph, TensorType, interpreter
from nova.kernels.gemm.configure import configure
from nova.kernels.gemm.problem import GemmProblem, ProblemError
from nova.passes import fuse, pipeline

from test_executor import EmulatedNova


def cast_problem(**kw) -> GemmProblem:
    base = dict(M=2048, N=768, K=768, dtype="bf16", bias=True, out_dtype="f32", residual=True, round_through="bf16")
    return GemmProblem(**{**base, **kw})


# ------------------------------------------------------------------ the problem
@pytest.mark.parametrize("kw, match", [
    (dict(dtype="tf32", round_through="f32"), "16-bit type"),
    (dict(round_through="f16"), "16-bit type"),                   # not the inputs' type
    (dict(out_dtype="bf16"), "widened to an f32 output"),
    (dict(activation="gelu", preactivation=True), "pre-activation"),
])
def test_a_cast_epilogue_the_kernels_cannot_compute_is_refused_in_one_line(kw, match):
    with pytest.raises(ProblemError, match=match) as e:
        cast_problem(**kw)
    assert "\n" not in str(e.value)


def test_the_bias_stays_16_bit_the_key_of_other_problems_is_unchanged_and_atomics_are_refused():
    p = cast_problem()
    assert p.bias_dtype == "bf16" and p.out_dtype == "f32" and p.describe().endswith("-> bf16->f32")
    assert p.to_dict()["round_through"] == "bf16"
    assert "round_through" not in GemmProblem(64, 64, 64, "bf16").to_dict()
    assert GemmProblem(64, 64, 64, "bf16", bias=True, out_dtype="f32").bias_dtype == "f32"
    assert "rounded through bf16" in cast_problem(residual=False, bias=False).atomic_split_reason
    assert GemmProblem(64, 64, 64, "bf16", out_dtype="f32").atomic_split_reason == ""


@pytest.mark.parametrize("target", ["a100", "h200"])
@pytest.mark.parametrize("shape", [(64, 512, 8192), (768, 2304, 16384)])
def test_k_slices_never_add_atomically_and_split_as_the_16_bit_gemm_does(target, shape):
    """The alternative to the cast epilogue is the 16-bit GEMM (no atomic adds into bf16 either) and a
    cast kernel: the cast epilogue keeps that GEMM's split (a workspace on sm_90, none on mma.sync)."""
    cast = GemmProblem(*shape, "bf16", trans_a=True, out_dtype="f32", round_through="bf16")
    narrow = GemmProblem(*shape, "bf16", trans_a=True)
    s, t = configure(cast, target).schedule, configure(narrow, target).schedule
    assert not s.zero_output and s.split_k == t.split_k and s.split_workspace == t.split_workspace, (s, t)


@pytest.mark.parametrize("target, problem", [
    ("h200", cast_problem()),                                                         # register epilogue + R
    ("h200", GemmProblem(768, 2304, 16384, "bf16", trans_a=True, out_dtype="f32", round_through="bf16")),
    ("a100", cast_problem(residual=False)),
], ids=["wgmma-residual", "wgmma-split-workspace", "mma.sync"])
def test_the_kernels_round_before_they_widen(target, problem):
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    s = configure(problem, target).schedule
    art = compile_gemm(problem, s)
    kernels = [(art.ptx, art.resources)]
    if "reduce_kernel" in art.meta:                               # the split-K reduction applies the epilogue
        kernels = [(art.meta["reduce_kernel"]["ptx"], art.meta["reduce_kernel"]["resources"])]
    for ptx, r in kernels:
        assert r["spill_store_bytes"] == 0 and r["stack_bytes"] == 0, r
        assert re.search(r"cvt\.rn\.bf16\.f32", ptx), "no rounding to bf16 in the epilogue"
    plain = GemmProblem(problem.M, problem.N, problem.K, "bf16", problem.trans_a, bias=problem.bias,
                        out_dtype="f32", residual=problem.residual)
    assert "cvt.rn.bf16.f32" not in compile_gemm(plain, s).ptx            # the rounding is the epilogue's


# ------------------------------------------------------------------ fusion
B16 = lambda *shape: TensorType(shape, "bf16")          # noqa: E731
F32 = lambda *shape: TensorType(shape, "f32")           # noqa: E731


def autocast_linear_residual() -> Graph:
    """``R + (x @ W^T + b)`` with a bf16 linear layer and an f32 residual stream (autocast), and a
    bf16 weight gradient ``dy^T @ x`` widened for its f32 parameter."""
    g = Graph("autocast_linear")
    x, w, b = g.input(B16(32, 16), "x"), g.input(B16(24, 16), "w"), g.input(B16(24), "b")
    r, dy = g.input(F32(32, 24), "residual"), g.input(B16(32, 24), "dy")
    y = g.op("add", g.op("matmul", x, w, transpose_b=True), b)
    g.output(g.op("add", r, y), "h")                                 # the add widens y first
    g.output(g.op("cast", g.op("matmul", dy, x, transpose_a=True), dtype="f32"), "w_grad")
    return g


def test_the_widening_add_and_the_lone_cast_join_their_gemms():
    groups = [gr for gr in fuse(autocast_linear_residual()) if gr.kind == "gemm"]
    forward, weight_grad = groups
    assert [n.op for n in forward.nodes] == ["matmul", "add", "add"]
    assert forward.problem.round_through == "bf16" and forward.problem.out_dtype == "f32" and forward.problem.residual
    assert forward.epilogue.describe() == "bias+cast(bf16->f32)+residual"
    assert [n.op for n in weight_grad.nodes] == ["matmul", "cast"]
    assert weight_grad.problem == GemmProblem(24, 16, 32, "bf16", trans_a=True, out_dtype="f32", round_through="bf16")


def test_a_cast_that_a_pointwise_kernel_can_widen_itself_stays_out():
    """A cast read by a pointwise op: that kernel reads the 16-bit value (2 bytes an element) in its
    own prologue; the GEMM writing f32 would move 4, twice."""
    g = Graph()
    a, b = g.input(B16(32, 16), "a"), g.input(B16(16, 24), "b")
    g.output(g.op("exp", g.op("cast", g.op("matmul", a, b), dtype="f32")), "e")
    (gemm,) = [gr for gr in fuse(g) if gr.kind == "gemm"]
    assert [n.op for n in gemm.nodes] == ["matmul"] and gemm.problem.round_through is None


def _inputs(graph, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(spec.value.shape, generator=gen).to(getattr(torch, {"bf16": "bfloat16", "f32": "float32"}[
        spec.value.dtype])) for spec in graph.inputs]


def test_the_cpu_program_computes_the_fused_group_unfused_in_the_results_bytes():
    graph = autocast_linear_residual()
    planned = pipeline(autocast_linear_residual())
    inputs = _inputs(graph)
    ref = interpreter.run(graph, [x.clone() for x in inputs])
    program = build(planned, "cpu", poison=True)
    for got, want in zip(program.run([x.clone() for x in inputs]), ref):
        assert torch.equal(got, want)                       # the same ATen ops, in the result's bytes
    assert program.stats["scratch_bytes"] == 0              # the bf16 products lie in their f32 results


def test_the_launched_problem_rounds_through_bf16():
    graph = autocast_linear_residual()
    planned = pipeline(autocast_linear_residual())
    nova = EmulatedNova()
    inputs = _inputs(graph, 1)
    ref = interpreter.run(graph, [x.clone() for x in inputs])
    program = build(planned, "cpu", poison=True, gemm=nova)
    for got, want in zip(program.run([x.clone() for x in inputs]), ref):
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    assert [p.round_through for p in gemm_problems(planned)] == ["bf16", "bf16"]
    assert sorted(nova.rounded) == [True, True]
