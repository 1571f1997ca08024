"""The pointwise kernel family on the host: canonical problems, the configurator, PTX for sm_80/86/90
without spills, problems of real fusion groups, and the CPU program of a plan that uses them."""
import dataclasses
import math

import pytest
from hypothesis import given, settings, strategies as st

from nova.kernels.pointwise.derive import configure_pointwise, contiguous_operands
from nova.kernels.pointwise.emit import unsupported
from nova.kernels.pointwise.problem import Operand, PointwiseProblem, PointwiseProblemError
from nova.passes import pipeline
from nova.passes.pointwise_from_ir import expression_problem
from nova.passes.examples import transformer_step

P = expression_problem


@pytest.mark.parametrize("written, named", [
    ("0.5*x*(1+tanh(0.7978845608*(x+0.044715*x**3)))", "gelu_tanh(x)"),
    ("x*(1+tanh(0.79788456*x+0.0356774*x*x*x))/2", "gelu_tanh(x)"),
    ("0.5*x*(1+erf(x/sqrt(2)))", "gelu_erf(x)"),
    ("x*0.5*(1.0+erf(x*0.7071067811865476))", "gelu_erf(x)"),
    ("x*sigmoid(x)", "silu(x)"),
    ("x/(1+exp(-x))", "silu(x)"),
    ("1/(1+exp(-x))", "sigmoid(x)"),
    ("y*x + 2", "2 + x*y"),
])
def test_the_same_math_is_the_same_problem(written, named):
    for dtype in ("f32", "bf16"):
        a, b = P(written, (64, 48), dtype), P(named, (64, 48), dtype)
        assert a == b and a.to_dict() == b.to_dict()


def test_a_formula_off_the_pattern_is_not_renamed():
    p = P("0.5*x*(1+tanh(0.8*(x+0.044715*x**3)))", (8,), "f32")
    assert "gelu_tanh" not in p.expression() and "tanh" in p.expression()


def test_the_parser_names_what_it_cannot_read():
    for bad in ("x +", "foo(x)", "x $ y", "2"):
        with pytest.raises(PointwiseProblemError):
            P(bad, (4,), "f32")


def test_axes_coalesce_and_broadcast_strides_stay():
    p = P("x + y", (4, 8, 16), "f32")
    assert p.shape == (512,) and all(x.strides == (1,) for x in p.inputs)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 300), dtype=st.sampled_from(["f32", "bf16", "f16", "f64"]),
       target=st.sampled_from(["h200", "a100", "rtx3060"]))
def test_configurator_properties(rows, cols, dtype, target):
    c = configure_pointwise(P("gelu_tanh(x) * y + 1", (rows, cols), dtype), target)
    s, p = c.schedule, c.problem
    assert p.numel % s.vector == 0 and p.shape[-1] % s.vector == 0
    assert all(s.vector * size <= 16 for _, size, _, _ in contiguous_operands(p))
    assert s.threads % 32 == 0 and 32 <= s.threads <= 256
    vectors = p.numel // s.vector
    assert s.grid <= c.target.sm_count * c.facts["ctas_per_sm"] and s.grid * s.threads * c.facts["trips"] >= vectors
    assert c.prediction.time_us > 0 and c.prediction.bound in ("dram", "launch")
    if c.prediction.terms_us["launch"] > c.prediction.terms_us["memory"]:
        assert c.prediction.bound == "launch"


def test_vector_width_follows_alignment_and_strides():
    base = PointwiseProblem((8, 64), (Operand("f32", (128, 1)),), P("exp(x)", (8, 64)).program, (1,))
    assert configure_pointwise(base).schedule.vector == 4
    misaligned = dataclasses.replace(base, inputs=(Operand("f32", (128, 1), align=8),))
    assert configure_pointwise(misaligned).schedule.vector == 2
    gathered = dataclasses.replace(base, inputs=(Operand("f32", (1, 8)),))     # transposed read
    assert configure_pointwise(gathered).schedule.vector == 4                  # outputs still vectorized


ptxas = pytest.importorskip("nova.codegen.ptxas")


@pytest.mark.skipif(not ptxas.available(), reason="ptxas not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
@pytest.mark.parametrize("text, shape, dtype", [
    ("gelu_tanh(x) + y", (64, 48), "bf16"),
    ("gelu_tanh_backward(x, y) * exp(x) / sqrt(y)", (1000,), "f32"),
    ("where(gt(x, y), silu(x), gelu_erf(y)) ** 2 + log(abs(x)) ** 1.7", (7, 5), "f64"),
    ("silu_backward(x, y) + sigmoid_backward(x, y) + tanh_backward(x, y) + relu_backward(x, y)", (33,), "f16"),
    ("logical_or(ge(x, y), logical_and(logical_not(eq(x, y)), lt(x, y)))", (16, 32), "f32"),     # i1 constants
    ("minimum(1 / (sqrt(x) + 1e-06), 1e+20 * y)", (9,), "f32"),      # literals MLIR reads only as 1.0e-06
])
def test_kernels_assemble_without_spills(arch, text, shape, dtype):
    pytest.importorskip("mlir")
    from nova.kernels.pointwise.compile import build
    c = configure_pointwise(P(text, shape, dtype))
    art = build(c.problem, dataclasses.replace(c.schedule, arch=arch))
    r = art.resources
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0
    assert r["registers"] <= 255 and art.grid == (c.schedule.grid, 1, 1)


def test_real_groups_become_problems_and_kernels():
    planned = pipeline(transformer_step(layers=2))
    nova = [g for g in planned.groups if g.kind == "pointwise" and g.kernel == "nova"]
    assert nova and all(isinstance(g.problem, PointwiseProblem) and not unsupported(g.problem) for g in nova)
    assert {i.op for g in nova for i in g.problem.program} >= {"add"}
    # the GELU runs in its GEMM's epilogue (its input written beside it for the backward)
    assert "bias+gelu+preact" in [g.epilogue.describe() for g in planned.groups if g.kind == "gemm"]
    for g in nova:
        assert len(g.problem.outputs) == len(g.outputs) and "Nova pointwise kernel" in g.reason
        assert math.prod(g.problem.shape) == math.prod(g.outputs[0].shape)


def test_executor_lists_the_pointwise_kernels_it_launches():
    from nova.compiler.executor import pointwise_problems
    planned = pipeline(transformer_step())
    listed = pointwise_problems(planned)
    assert listed and set(listed) == {g.problem for g in planned.groups if g.kind == "pointwise" and g.kernel == "nova"}


def test_precompile_train_builds_what_an_offline_program_looks_up(tmp_path, monkeypatch, capsys):
    """``nova precompile train tiny`` builds the step's pointwise kernels (and the rest) into a fresh
    cache and says how many; the CUDA program of the same plan then finds every kernel offline."""
    pytest.importorskip("mlir")
    from nova.cli.main import main
    from nova.compiler.explain import plan_training_step
    from nova.compiler.precompile import missing_kernels, step_kernels
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    cache = KernelCache(tmp_path / "cache")
    planned, _ = plan_training_step("tiny", 2, 16, "adamw", "h200")
    kernels = step_kernels(planned)
    assert kernels.pointwise and len(missing_kernels(planned, get_target("h200"), cache)) >= len(kernels.pointwise)
    assert main(["precompile", "train", "tiny", "--batch", "2", "--seq", "16", "--target", "h200",
                 "--cache-dir", str(cache.root)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"{len(kernels.pointwise)} pointwise kernels" in last and " 0 failed" in last
    monkeypatch.setenv("NOVA_OFFLINE", "1")
    assert missing_kernels(planned, get_target("h200"), cache) == []


def test_the_gpu_tests_list_their_kernels():
    """tests/test_pointwise_gpu.py builds its kernels on the host from problems made on the meta device:
    the same problems its GPU cases launch (strided and broadcast views included)."""
    import pointwise_support as module
    problems = {case.name: case.problem() for case in module.CASES}
    strided = problems["strided_broadcast-f32"]
    assert strided.inputs[0].strides[-1] == 2 and strided.inputs[1].strides == (1, 129)
    assert strided.inputs[2].strides[-1] == 0
    assert all(not unsupported(p) for p in problems.values())
    planned = module.gpt_tiny_planned()
    assert any(g.kind == "pointwise" and g.kernel == "nova" for g in planned.groups)


def test_the_family_types_agree_with_the_ir():
    """The pointwise family keeps its own table of element types (it sits below the IR): the same as
    nova.ir.types, promotion included."""
    import itertools
    from nova.ir import types as ir
    from nova.kernels.pointwise import types
    assert types.ELEMENT_BYTES == {k: v[0] for k, v in ir.ELEMENT_TYPES.items()}
    assert types.TORCH_NAMES == ir.TORCH_NAMES and types.FLOAT_TYPES == ir.FLOAT_TYPES
    for a, b in itertools.product(ir.ELEMENT_TYPES, repeat=2):
        assert types.promote(a, b) == ir.promote(a, b)


def test_a_chain_deeper_than_pythons_recursion_limit_becomes_one_program():
    """A sum of 3000 terms (a chunked loss adds its chunks' losses so): its expression is numbered on
    an explicit stack; recursing, ``nova-config explain train`` of a large batch under a small budget
    died of a RecursionError."""
    from nova.passes.pointwise_from_ir import expression_problem
    problem = expression_problem("+".join(["x"] * 3000), (1024,), "f32")
    assert len(problem.program) == 2999 and all(i.op == "add" for i in problem.program)
    assert problem.expression().startswith("out0 = add(add(add(") and problem.expression().count("in0") == 3000
