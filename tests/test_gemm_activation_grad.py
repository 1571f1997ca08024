"""The activation's backward as a GEMM epilogue (``GemmProblem.activation_grad``): ``C = (A @ B + bias) *
gelu'(R)``, R the saved pre-activation -- the problem's rules, the kernels' PTX, the fusion that forms
it from ``F.gelu``'s backward and from autograd's op-by-op chain, and the launch the program binds."""
import pytest
import torch

from nova.compiler.executor import build, gemm_problems
from nova.ir import Graph, TensorType, interpreter
from nova.kernels.gemm.configure import configure
from nova.kernels.gemm.problem import GemmProblem, ProblemError
from nova.passes import pipeline

from test_executor import EmulatedNova


def grad_problem(**kw) -> GemmProblem:
    base = dict(M=2048, N=2048, K=512, dtype="tf32", activation="gelu", residual=True, activation_grad=True)
    return GemmProblem(**{**base, **kw})


@pytest.mark.parametrize("kw", [dict(residual=False), dict(activation="silu"), dict(activation="none"),
                                dict(preactivation=True)])
def test_what_the_epilogue_cannot_compute_is_refused_in_one_line(kw):
    with pytest.raises(ProblemError, match="activation_grad multiplies by gelu'") as e:
        grad_problem(**kw)
    assert "\n" not in str(e.value)


def test_it_is_stated_keyed_and_never_split_atomically():
    p = grad_problem()
    assert p.describe() == "gemm 2048x2048x512 tf32 NN +dgelu(R) -> f32"
    assert p.to_dict()["activation_grad"] is True and "activation_grad" not in GemmProblem(64, 64, 64).to_dict()
    assert p.atomic_split_reason and p.epilogue_operands == ("residual",)
    deep = grad_problem(M=129, N=258, K=4096)
    assert not configure(deep, "h200").schedule.zero_output and not configure(deep, "a100").schedule.zero_output


@pytest.mark.parametrize("target, problem", [
    ("h200", grad_problem()),
    ("h200", grad_problem(M=129, N=258, K=4096)),            # a split-K workspace: the reduction applies it
    ("h200", grad_problem(dtype="bf16")),
    ("a100", grad_problem()),
], ids=["wgmma", "wgmma-split-workspace", "wgmma-bf16", "mma.sync"])
def test_the_kernels_assemble_without_spills_and_differ_from_the_residual_add(target, problem):
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    s = configure(problem, target).schedule
    art = compile_gemm(problem, s)
    resources = [art.resources] + ([art.meta["reduce_kernel"]["resources"]] if "reduce_kernel" in art.meta else [])
    for r in resources:
        assert r["spill_store_bytes"] == 0 and r["stack_bytes"] == 0, r
    add = GemmProblem(problem.M, problem.N, problem.K, problem.dtype, activation="gelu", residual=True)
    kernel = art.meta["reduce_kernel"]["ptx"] if "reduce_kernel" in art.meta else art.ptx
    plain = compile_gemm(add, configure(add, target).schedule)   # its own schedule (a residual add alone:
                                                                  # the register epilogue on sm_90)
    assert kernel != (plain.meta["reduce_kernel"]["ptx"] if "reduce_kernel" in plain.meta else plain.ptx)


# ------------------------------------------------------------------ fusion and the launch
F32 = lambda *shape: TensorType(shape, "f32")           # noqa: E731


def mlp_backward() -> Graph:
    """``dpre = gelu_backward(dy @ W2, pre)`` and the bias gradient ``sum(dpre, 0)``."""
    g = Graph("mlp_backward")
    dy, w2, pre = g.input(F32(32, 16), "dy"), g.input(F32(16, 48), "w2"), g.input(F32(32, 48), "pre")
    dpre = g.op("gelu_tanh_backward", g.op("matmul", dy, w2), pre)
    g.output(dpre, "dpre")
    g.output(g.op("sum", dpre, axes=(0,)), "bias_grad")
    return g


def test_the_dgrad_gemm_applies_the_backward_and_the_program_launches_it():
    graph = mlp_backward()
    planned = pipeline(mlp_backward())
    (gemm,) = [gr for gr in planned.groups if gr.kind == "gemm"]
    assert [n.op for n in gemm.nodes] == ["matmul", "gelu_tanh_backward"]
    assert gemm.problem == GemmProblem(32, 48, 16, "tf32", activation="gelu", residual=True, activation_grad=True)
    gen = torch.Generator().manual_seed(5)
    inputs = [torch.randn(spec.value.shape, generator=gen) * (3 if spec.name == "pre" else 1) for spec in graph.inputs]
    ref = interpreter.run(graph, [x.clone() for x in inputs])
    for gemm_fn in (None, EmulatedNova()):            # CPU: matmul then the backward in place; the launch
        program = build(planned, "cpu", poison=True, **({"gemm": gemm_fn} if gemm_fn else {}))
        for got, want in zip(program.run([x.clone() for x in inputs]), ref):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert program.stats["scratch_bytes"] == 0
    assert gemm_fn.launches == [(32, 48, 16, False, False, False, "gelu", "residual", "dgelu")]
    assert [p.activation_grad for p in gemm_problems(planned)] == [True]


def test_the_models_epilogue_ops_are_what_the_kernel_emits():
    """``hopper.epilogue_ops`` (the model's per-element arithmetic of the activation, or of its backward
    at R) counts the FP32 ops ``GemmKernel.finish`` emits for it: every arith/math op and inline PTX
    instruction but the constants."""
    from nova.configurator import configure
    from nova.hwmodel import get_target
    from nova.kernels.gemm.emit_ampere import GemmKernel
    from nova.kernels.gemm.hopper import ACTIVATION_OPS, epilogue_ops
    from nova.kernels.gemm.problem import GemmProblem

    def emitted(p):
        k = GemmKernel(p, configure(p, get_target("a100")).schedule)
        k.finish("%x", "%r" if p.residual else None)
        return sum(1 for line in k.ir.lines if "=" in line and "arith.constant" not in line
                   and any(w in line for w in ("arith.", "math.", "inline_asm")))
    cases = [GemmProblem(256, 256, 256, "tf32", activation=a) for a in ACTIVATION_OPS]
    cases.append(GemmProblem(256, 256, 256, "tf32", activation="gelu", residual=True, activation_grad=True))
    for p in cases:
        assert epilogue_ops(p) == emitted(p), p.describe()
    assert epilogue_ops(cases[-1]) > epilogue_ops(GemmProblem(256, 256, 256, "tf32", activation="gelu")) > 0
