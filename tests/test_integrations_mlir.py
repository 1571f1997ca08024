"""Nova's graphs as MLIR on tensors and its GEMM schedules as transform-dialect scripts, kept valid
by upstream MLIR: every export is parsed (``mlir.ir.Module.parse``) and run through an upstream
pipeline (``canonicalize``, ``one-shot-bufferize``; ``transform-interpreter`` for the scripts), and
the graph exports are lowered to LLVM, run on the CPU and compared with Nova's IR interpreter."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ir = pytest.importorskip("mlir.ir")

from mlir.execution_engine import ExecutionEngine  # noqa: E402
from mlir.passmanager import PassManager  # noqa: E402
from mlir.runtime import np_to_memref  # noqa: E402

from nova.cli.config import main as config_main  # noqa: E402
from nova.configurator import GemmProblem, configure  # noqa: E402
from nova.integrations.mlir_export import MlirExportError, graph_to_mlir  # noqa: E402
from nova.integrations.transform_script import transform_script, with_payload  # noqa: E402
from nova.ir import Graph, TensorType, interpreter  # noqa: E402

BUFFERIZE = "builtin.module(canonicalize,one-shot-bufferize{bufferize-function-boundaries=1},canonicalize)"
TO_LLVM = ("builtin.module(one-shot-bufferize{bufferize-function-boundaries=1 "
           "function-boundary-type-conversion=identity-layout-map},buffer-results-to-out-params{modify-public-functions=1},"
           "convert-linalg-to-loops,expand-strided-metadata,lower-affine,convert-scf-to-cf,convert-math-to-llvm,"
           "convert-math-to-libm,convert-arith-to-llvm,convert-index-to-llvm,finalize-memref-to-llvm,"
           "convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)")
NUMPY = {"f64": np.float64, "f32": np.float32, "i64": np.int64, "i32": np.int32, "bool": np.bool_}


def parse_and_bufferize(text: str) -> str:
    with ir.Context():
        module = ir.Module.parse(text)
        PassManager.parse(BUFFERIZE).run(module.operation)
        return str(module)


# ---------------------------------------------------------------- running an export on the CPU
class Unranked(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int64), ("descriptor", ctypes.c_void_p)]


def _strided(memref, itemsize: int):
    rank = memref.contents.rank
    d = ctypes.cast(memref.contents.descriptor, ctypes.POINTER(ctypes.c_int64))
    aligned, offset = d[1], d[2]
    sizes, strides = [d[3 + i] for i in range(rank)], [d[3 + rank + i] for i in range(rank)]
    span = (1 + sum((n - 1) * s for n, s in zip(sizes, strides))) * itemsize if all(sizes) else 1
    raw = np.frombuffer((ctypes.c_uint8 * span).from_address(aligned + offset * itemsize), dtype=np.uint8)
    return np.lib.stride_tricks.as_strided(raw, shape=sizes + [itemsize], strides=[s * itemsize for s in strides] + [1])


@ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.POINTER(Unranked), ctypes.POINTER(Unranked))
def memref_copy(itemsize, source, target):
    """The runtime's strided ``memrefCopy`` (a copy out of a non-contiguous slice), in numpy."""
    _strided(target, itemsize)[...] = _strided(source, itemsize)


def run_export(graph, inputs) -> list[np.ndarray]:
    """The export of ``graph`` lowered to LLVM and run on ``inputs``: one array per output."""
    text = graph_to_mlir(graph)
    with ir.Context():
        module = ir.Module.parse(text)
        [func] = [op for op in module.body.operations if op.operation.name == "func.func"]
        func.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
        name = ir.StringAttr(func.attributes["sym_name"]).value
        PassManager.parse(TO_LLVM).run(module.operation)
        engine = ExecutionEngine(module, opt_level=2)
        engine.raw_register_runtime("memrefCopy", ctypes.cast(memref_copy, ctypes.c_void_p))
        arrays = [np.ascontiguousarray(t.detach().numpy()) for t in inputs]
        outputs = [np.full(o.value.type.shape, np.nan if o.value.dtype in ("f32", "f64") else 0,
                           dtype=NUMPY[o.value.dtype]) for o in graph.outputs]   # poisoned: every output written
        engine.invoke(name, *[ctypes.pointer(ctypes.pointer(np_to_memref.get_ranked_memref_descriptor(a)))
                              for a in arrays + outputs])
        return outputs


def assert_matches_interpreter(graph, inputs, tol: float = 1e-5):
    expected = interpreter.run(graph, inputs)
    actual = run_export(graph, inputs)
    for o, e, a in zip(graph.outputs, expected, actual):
        e = e.detach().numpy()
        assert a.shape == e.shape, o.name
        if e.dtype == np.bool_ or np.issubdtype(e.dtype, np.integer):
            assert (a == e).all(), o.name
        else:
            scale = max(1.0, float(np.abs(e).max()))
            assert float(np.abs(a - e).max()) <= tol * scale, f"{o.name}: {float(np.abs(a - e).max())}"


# ---------------------------------------------------------------- GPT-tiny's forward
def gpt_tiny_forward(with_loss: bool):
    from nova.frontend import capture
    from nova.models import gpt
    model = gpt.GPT(gpt.CONFIGS["tiny"])
    g = torch.Generator().manual_seed(0)
    idx, targets = torch.randint(0, 96, (2, 16), generator=g), torch.randint(0, 96, (2, 16), generator=g)
    targets[0, :3] = -1                                        # ignored positions

    def forward(idx, targets):
        return model(idx, targets)

    def logits(idx):
        return model(idx)
    fn, args = (forward, (idx, targets)) if with_loss else (logits, (idx,))
    captured = capture(fn, args, models=[model])
    return captured.graph, captured.bindings.gather(list(args))[0]


@pytest.mark.parametrize("with_loss", [True, False])
def test_gpt_tiny_forward_exports_bufferizes_and_runs(with_loss):
    graph, inputs = gpt_tiny_forward(with_loss)
    ops = set(graph.op_counts())
    assert {"matmul", "attention", "layer_norm", "reshape", "permute", "index_select", "gelu_tanh"} <= ops
    text = graph_to_mlir(graph)
    assert "linalg.matmul" in text and "func.func" in text
    bufferized = parse_and_bufferize(text)
    assert "memref" in bufferized and "tensor.empty" not in bufferized
    assert_matches_interpreter(graph, inputs)


def test_compiled_step_after_a_call_exports_and_backward_ops_are_refused():
    import nova
    from nova.models import gpt
    model = gpt.GPT(gpt.CONFIGS["tiny"])
    idx = torch.randint(0, 96, (2, 16))

    def predict(idx):
        with torch.no_grad():
            return model(idx)
    step = nova.compile(predict)
    with pytest.raises(MlirExportError, match="call the compiled step once"):
        graph_to_mlir(step)
    step(idx)
    parse_and_bufferize(graph_to_mlir(step))

    def train(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        return loss
    training = nova.compile(train)
    training(idx, idx)
    with pytest.raises(MlirExportError, match=r"^op \w+_backward is not exported to MLIR") as info:
        graph_to_mlir(training)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- op by op
def graph_of(build, *input_types):
    g = Graph("ops")
    xs = [g.input(TensorType(shape, dtype), f"x{i}") for i, (shape, dtype) in enumerate(input_types)]
    for i, v in enumerate(build(g, *xs)):
        g.output(v, f"y{i}")
    return g


def randn(shape, dtype="f32", seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64 if dtype == "f64" else torch.float32)


CASES = {
    "pointwise and casts": (lambda g, a, b, c: [
        g.op("add", a, b), g.op("div", a, g.op("add", g.op("abs", b), g.op("constant", value=1.0, dtype="f32"))),
        g.op("gelu_erf", a), g.op("silu", b), g.op("sigmoid", a), g.op("relu", a), g.op("tanh", a),
        g.op("maximum", a, b), g.op("cast", a, dtype="f64"), g.op("cast", c, dtype="f32"), g.op("neg", c),
        g.op("rsqrt", g.op("add", g.op("exp", a), g.op("constant", value=1e-3, dtype="f32"))),
        g.op("pow", g.op("abs", a), b), g.op("sub", c, g.op("cast", g.op("mul", c, c), dtype="i64"))],
        [((3, 4), "f32"), ((4,), "f32"), ((3, 1), "i64")],
        lambda: [randn((3, 4)), randn((4,), seed=1), torch.tensor([[1], [2], [5]])]),
    "comparisons and where": (lambda g, a, b, c: [
        g.op("where", g.op("gt", a, b), a, g.op("constant", value=-math.inf, dtype="f32")),
        g.op("logical_not", g.op("le", c, g.op("constant", value=2, dtype="i64"))),
        g.op("logical_and", g.op("ne", a, b), g.op("eq", c, c)), g.op("cast", g.op("lt", a, b), dtype="f32")],
        [((3, 4), "f32"), ((4,), "f32"), ((3, 1), "i64")],
        lambda: [randn((3, 4)), randn((4,), seed=1), torch.tensor([[1], [2], [5]])]),
    "reductions": (lambda g, a: [
        g.op("sum", a, axes=(1,)), g.op("max", a, axes=(0, 2), keepdim=True), g.op("mean", a, axes=(2,), keepdim=True),
        g.op("min", a, axes=(0,)), g.op("sum", a, axes=(0, 1, 2), dtype="f64")],
        [((2, 3, 5), "f32")], lambda: [randn((2, 3, 5))]),
    "matmul": (lambda g, a, b, c: [
        g.op("matmul", a, b), g.op("matmul", a, a, transpose_b=True), g.op("matmul", b, b, transpose_a=True),
        g.op("matmul", c, b), g.op("matmul", c, c, transpose_a=True), g.op("matmul", c, g.op("permute", c, perm=(0, 2, 1)))],
        [((4, 6), "f32"), ((6, 5), "f32"), ((3, 4, 6), "f32")],
        lambda: [randn((4, 6)), randn((6, 5), seed=1), randn((3, 4, 6), seed=2)]),
    "views": (lambda g, a, b: [
        g.op("reshape", a, shape=(4, 6)), g.op("reshape", g.op("slice", a, axis=2, start=1, end=4, step=2), shape=(6, 2)),
        g.op("expand", b, shape=(2, 3, 4)), g.op("permute", a, perm=(2, 0, 1)),
        g.op("concat", a, g.op("expand", b, shape=(2, 3, 4)), axis=1), g.op("reshape", g.op("sum", a, axes=(0, 1, 2)),
                                                                                shape=(1, 1))],
        [((2, 3, 4), "f32"), ((3, 1), "f32")], lambda: [randn((2, 3, 4)), randn((3, 1), seed=1)]),
    "creation and lookup": (lambda g, table, index: [
        g.op("iota", length=7, dtype="i64", start=2, step=3), g.op("index_select", table, index, axis=0),
        g.op("index_select", table, g.op("reshape", index, shape=(6,)), axis=1)],
        [((9, 9), "f32"), ((2, 3), "i64")], lambda: [randn((9, 9)), torch.tensor([[0, 4, 8], [1, 1, 3]])]),
    "softmax and losses": (lambda g, x, t: [
        g.op("softmax", x, axis=1), g.op("log_softmax", x, axis=0),
        *g.op("nll_loss", g.op("log_softmax", x, axis=1), t, reduction="mean", ignore_index=-1),
        g.op("nll_loss", g.op("log_softmax", x, axis=1), t, reduction="none", ignore_index=-1)[0]],
        [((5, 7), "f32"), ((5,), "i64")], lambda: [randn((5, 7)), torch.tensor([3, -1, 0, 6, 2])]),
    "layer_norm": (lambda g, x, w, b: [*g.op("layer_norm", x, w, b, normalized_shape=(6,), eps=1e-5),
                                       g.op("layer_norm", x, normalized_shape=(4, 6), eps=1e-3, has_weight=False,
                                            has_bias=False)[0]],
                   [((3, 4, 6), "f32"), ((6,), "f32"), ((6,), "f32")],
                   lambda: [randn((3, 4, 6)) * 3 + 1, randn((6,), seed=1), randn((6,), seed=2)]),
    "attention": (lambda g, q, k, v, qs: [*g.op("attention", q, k, v, scale=0.4, causal=True),
                                          *g.op("attention", qs, k, v, scale=0.3, causal=True),
                                          g.op("attention", q, k, v, scale=0.5)[0]],
                  [((2, 4, 5, 8), "f32"), ((2, 2, 5, 8), "f32"), ((2, 2, 5, 3), "f32"), ((2, 4, 3, 8), "f32")],
                  lambda: [randn((2, 4, 5, 8)), randn((2, 2, 5, 8), seed=1), randn((2, 2, 5, 3), seed=2),
                           randn((2, 4, 3, 8), seed=3)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_ops_export_and_match_the_interpreter(case):
    """Every case parses and bufferizes; those without bool tensors also run on the CPU (upstream's
    memref-to-LLVM lowering does not store i1 elements, a limit of this test's pipeline)."""
    build, types, make = CASES[case]
    graph = graph_of(build, *types)
    parse_and_bufferize(graph_to_mlir(graph))
    if any(v.dtype == "bool" for node in graph.nodes for v in node.outputs):
        assert case == "comparisons and where"
        return
    assert_matches_interpreter(graph, make())


def test_sixteen_bit_types_export_and_bufferize():
    graph = graph_of(lambda g, a, b: [g.op("matmul", a, b), *g.op("layer_norm", a, normalized_shape=(8,), eps=1e-5,
                                                                   has_weight=False, has_bias=False),
                                      g.op("add", a, g.op("constant", value=-math.inf, dtype="bf16")),
                                      g.op("cast", g.op("softmax", a, axis=1), dtype="f16")],
                     ((4, 8), "bf16"), ((8, 3), "bf16"))
    text = graph_to_mlir(graph)
    assert "bf16" in text and "0xFF80" in text
    parse_and_bufferize(text)


def test_unsupported_op_is_one_line():
    graph = graph_of(lambda g, a, i: [g.op("take_along_axis", a, i, axis=1)], ((3, 4), "f32"), ((3, 2), "i64"))
    with pytest.raises(MlirExportError, match=r"^op take_along_axis is not exported to MLIR") as info:
        graph_to_mlir(graph)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- the transform script
SCHEDULES = [(4096, 4096, 4096, "bf16", "h200"), (4096, 4096, 4096, "tf32", "h200"), (8192, 8192, 1024, "bf16", "h200"),
             (2048, 1024, 512, "fp16", "a100"), (1024, 512, 2048, "tf32", "rtx3060")]


@pytest.mark.parametrize("M, N, K, dtype, target", SCHEDULES)
def test_transform_script_tiles_a_linalg_matmul(M, N, K, dtype, target):
    s = configure(GemmProblem(M, N, K, dtype=dtype), target).schedule
    script = transform_script(M, N, K, dtype, target)
    with ir.Context():
        ir.Module.parse(script)                                   # the script alone is a valid module
        module = ir.Module.parse(with_payload(M, N, K, dtype, target))
        PassManager.parse("builtin.module(transform-interpreter,canonicalize)").run(module.operation)
        out = str(module)
    assert "transform.named_sequence" in out and "#gpu.block<y>, #gpu.block<x>" in out and "scf.for " in out
    element = {"tf32": "f32", "bf16": "bf16", "fp16": "f16"}[dtype]
    a_step = f"tensor<{s.block_m}x{s.block_k}x{element}>"       # A's tile per K step: block_m x block_k
    assert a_step in out, a_step
    warp_level = "#gpu.warp<y>, #gpu.warp<x>" if s.mma.family != "wgmma" else \
        "#gpu.warpgroup<x>" if s.consumer_warpgroups > 1 and not s.pingpong else None
    assert warp_level is None or warp_level in out


def test_cli_exports_a_runnable_transform(capsys):
    assert config_main(["export", "transform", "matmul", "2048x1024x512", "--dtype", "bf16", "--target", "h200",
                        "--with-payload"]) == 0
    text = capsys.readouterr().out
    assert text == with_payload(2048, 1024, 512, "bf16", "h200")
    with ir.Context():
        module = ir.Module.parse(text)
        PassManager.parse("builtin.module(transform-interpreter)").run(module.operation)
    assert config_main(["export", "transform", "matmul", "2048x1024x512", "--trans-b"]) == 0
    assert capsys.readouterr().out == transform_script(2048, 1024, 512, "tf32", "h200", trans_b=True)
    assert config_main(["export", "transform", "conv", "64"]) == 2
    assert "unknown operation 'conv'" in capsys.readouterr().err
