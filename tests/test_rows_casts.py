"""Casts fused into rows kernels on the host: ``place_casts`` (values unchanged, each cast next to the
rows op that takes it), the fusion rule and its byte saving, the rows problems' operand types and
bindings, the memory plan (the bf16 logits' gradient over the logits), the CPU program against the
reference interpreter, a captured autocast GPT step, and the mixed-type kernels' PTX (ptxas, no spills)."""
from __future__ import annotations

import pytest
import torch

from nova.ir import interpreter
from nova.ir.graph import Graph
from nova.ir.types import TensorType
from nova.ir.verify import verify
from nova.kernels.rows import Operand, RowsProblem, configure_rows
from nova.passes import pipeline
from nova.passes.examples import random_inputs
from nova.passes.fusion import boundary, format_bytes
from nova.passes.layout import analyze
from nova.passes.rows_casts import cast_saving, place_casts
from nova.passes.rows_from_ir import from_group

B, T, C, V = 2, 8, 16, 40
ROWS_OPS = ("layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward", "softmax", "log_softmax",
            "softmax_backward", "log_softmax_backward", "cross_entropy", "cross_entropy_backward")


def autocast_head(views: bool = True) -> Graph:
    """A LayerNorm, a bf16 LM head and its cross-entropy, and their backward, cast the way a CUDA autocast
    step casts them (``views``: through the reshapes Hugging Face's modules put between them)."""
    g = Graph("autocast_head")
    x = g.input(TensorType((B, T, C), "f32"), "x", "data")
    lnw = g.input(TensorType((C,), "f32"), "ln.weight", "param")
    lnb = g.input(TensorType((C,), "f32"), "ln.bias", "param")
    w = g.input(TensorType((V, C), "f32"), "head.weight", "param")
    targets = g.input(TensorType((B, T), "i64"), "targets", "data")
    reshape = (lambda v, *shape: g.op("reshape", v, shape=shape)) if views else (lambda v, *shape: v)
    y, mean, rstd = g.op("layer_norm", x, lnw, lnb, normalized_shape=(C,), eps=1e-5)
    h = g.op("cast", reshape(y, B * T, C), dtype="bf16")
    if not views:
        h = g.op("reshape", h, shape=(B * T, C))
    wb = g.op("cast", w, dtype="bf16")                                    # read by both GEMMs: stays a kernel
    logits = g.op("matmul", h, wb, transpose_b=True)                      # bf16 [BT, V]
    if views:
        lf = g.op("reshape", g.op("cast", g.op("reshape", logits, shape=(B, T, V)), dtype="f32"), shape=(B * T, V))
    else:
        lf = g.op("cast", logits, dtype="f32")
    tgt = g.op("reshape", targets, shape=(B * T,))
    loss, lse = g.op("cross_entropy", lf, tgt, reduction="mean", ignore_index=-100)
    dloss = g.op("constant", value=1.0, dtype="f32")
    dl = g.op("cross_entropy_backward", dloss, lf, tgt, lse, reduction="mean", ignore_index=-100)
    dlb = g.op("cast", reshape(dl, B, T, V), dtype="bf16")
    dh = g.op("matmul", g.op("reshape", dlb, shape=(B * T, V)), wb)      # bf16 [BT, C]
    dy = g.op("reshape", g.op("cast", dh, dtype="f32"), shape=(B, T, C))
    dx, dw, db = g.op("layer_norm_backward", dy, x, mean, rstd, lnw, lnb, normalized_shape=(C,))
    g.output(loss, "loss")
    for name, v in (("dx", dx), ("dweight", dw), ("dbias", db)):
        g.output(v, name, "grad")
    return g


def inputs_of(graph, seed=0):
    xs = random_inputs(graph, seed, int_high=V)
    for spec, t in zip(graph.inputs, xs):
        if spec.name == "targets":
            t[0, ::3] = -100                                             # ignored rows
    return xs


def casts_groups(planned):
    return {"+".join(n.op for n in g.nodes): g for g in planned.groups
            if g.kind == "composite" and any(n.op == "cast" for n in g.nodes)}


# ------------------------------------------------------------------ the rewrite
@pytest.mark.parametrize("views", [True, False])
def test_place_casts_keeps_every_value_and_puts_each_cast_next_to_its_rows_op(views):
    g = autocast_head(views)
    moved = place_casts(g)
    verify(moved)
    xs = inputs_of(g)
    for a, b in zip(interpreter.run(g, [x.clone() for x in xs]), interpreter.run(moved, [x.clone() for x in xs])):
        assert torch.equal(a, b)
    users = moved.users()
    for node in moved.nodes:
        if node.op == "cast" and node.outputs[0].dtype == "f32":          # one cast per rows op that reads it
            readers = users[node.outputs[0]]
            assert len(readers) == 1 and readers[0].op in ROWS_OPS, [r.op for r in readers]
        if node.op in ("layer_norm", "cross_entropy_backward"):
            assert [r.op for r in users[node.outputs[0]]] == ["cast"]
    casts = [n for n in moved.nodes if n.op == "cast"]
    assert len(casts) == 6                     # the weight's, the head input's, 2 logits', dlogits', dy's


def test_place_casts_leaves_a_cast_another_op_reads():
    g = Graph("shared")
    x = g.input(TensorType((4, 8), "bf16"), "x", "data")
    xf = g.op("cast", g.op("reshape", x, shape=(2, 2, 8)), dtype="f32")
    y = g.op("softmax", xf, axis=-1)
    g.output(y, "y")
    g.output(g.op("exp", xf), "e")                               # a pointwise reader: the cast stays one kernel
    assert place_casts(g) is g


# ------------------------------------------------------------------ fusion
def test_fusion_takes_the_casts_into_the_rows_kernels_and_says_what_it_saves():
    g = autocast_head()
    planned = pipeline(g, target="h200")
    groups = casts_groups(planned)
    # the loss and its gradient in one kernel: each read the bf16 logits through its own cast (and view)
    loss = "cast+cross_entropy+cast+cross_entropy_backward+cast"
    assert set(groups) == {"layer_norm+cast", loss, "cast+layer_norm_backward"}
    standalone = [gr for gr in planned.groups if [n.op for n in gr.nodes] == ["cast"]]
    assert len(standalone) == 1 and standalone[0].inputs[0].type == TensorType((V, C), "f32")   # the weight's
    operand = {name: gr.problem.operand(op).dtype for name, gr in groups.items()
               for op in ("y", "logits", "dlogits", "dy") if gr.problem.has(op)}
    assert operand == {"layer_norm+cast": "bf16", loss: "bf16", "cast+layer_norm_backward": "bf16"}
    ln = groups["layer_norm+cast"].problem
    assert ln.operand("x").dtype == "f32" and ln.operand("mean").dtype == "f32"
    ce = groups[loss]
    assert ce.problem.kind == "cross_entropy_forward_backward" and ce.problem.operand("loss").dtype == "f32"
    assert [o.dtype for o in ce.problem.outputs] == ["f32", "bf16"] and ce.outputs[-1].dtype == "bf16"
    assert "3 cast kernels fewer" in ce.reason
    for gr in groups.values():
        bound = set(gr.bindings.values())
        assert bound <= set(gr.inputs) | set(gr.outputs) and set(gr.outputs) <= bound
        assert all(v.dtype == "bf16" for n, v in gr.bindings.items() if n in ("y", "logits", "dlogits", "dy"))
    # each fused cast saves twice its f32 value: written and read back (prologue: by the cast and the rows
    # kernel; epilogue: by the rows kernel and the cast)
    f32_rows = {"layer_norm+cast": [B * T * C], "cast+layer_norm_backward": [B * T * C]}
    for name, counts in f32_rows.items():
        reason = groups[name].reason
        saved = sum(2 * TensorType((c,), "f32").nbytes for c in counts)
        casts = f"{len(counts)} cast kernel{'s' if len(counts) > 1 else ''}"
        assert f"{casts} fewer, saves {format_bytes(saved)}" in reason, reason


def test_cast_saving_is_the_byte_difference_of_the_rows_problems():
    g = autocast_head(views=False)
    ln = next(n for n in g.nodes if n.op == "layer_norm")
    cast = g.users()[ln.outputs[0]][0]
    layouts = analyze(g)
    users, outputs = g.users(), set(g.output_values())
    alone, fused = ([ln], [ln, cast])
    pa = from_group(alone, *boundary(alone, users, outputs), layouts)[0]
    pf = from_group(fused, *boundary(fused, users, outputs), layouts)[0]
    assert pa.operand("y").dtype == "f32" and pf.operand("y").dtype == "bf16"
    y = ln.outputs[0].type
    assert cast_saving([cast], pa, pf) == 2 * y.nbytes
    assert pa.bytes_moved - pf.bytes_moved == y.nbytes // 2


def test_casts_that_would_change_values_stay_kernels():
    """A bf16 result cast to f32 (the kernel would skip the bf16 rounding) and a narrowing cast into a
    rows op (it would need the rounding) are not fused."""
    g = Graph("unfused")
    x = g.input(TensorType((4, 32), "f32"), "x", "data")
    y = g.op("softmax", g.op("cast", x, dtype="bf16"), axis=-1)        # bf16 softmax of a rounded input
    g.output(g.op("cast", y, dtype="f32"), "y")
    planned = pipeline(g)
    assert [[n.op for n in gr.nodes] for gr in planned.groups] == [["cast"], ["softmax"], ["cast"]]


# ------------------------------------------------------------------ memory and the CPU program
def test_the_bf16_logits_gradient_takes_the_logits_buffer():
    planned = pipeline(autocast_head())
    ceb = casts_groups(planned)["cast+cross_entropy+cast+cross_entropy_backward+cast"]
    pairs = [(a, b) for a, b in planned.memory.inplace() if b in ceb.outputs]
    assert len(pairs) == 1
    dying, result = pairs[0]
    assert dying.type == TensorType((B * T, V), "bf16") and dying.producer.op == "matmul"
    assert result.type == TensorType((B * T, V), "bf16")


def test_cpu_program_with_fused_casts_matches_the_interpreter():
    from nova.compiler.executor import build
    g = autocast_head()
    planned = pipeline(g)
    xs = inputs_of(g, seed=3)
    ref = interpreter.run(g, [x.clone() for x in xs])
    got = build(planned, "cpu", poison=True).run([x.clone() for x in xs])
    for o, a, b in zip(g.outputs, got, ref):
        assert not torch.isnan(a).any() and torch.allclose(a, b, rtol=1e-5, atol=1e-6), o.name


def _autocast_tiny():
    from nova.compiler.explain import plan_training_step
    from nova.models import TrainRecipe
    return plan_training_step("tiny", 2, 16, recipe=TrainRecipe(autocast="bf16"))[0]


def test_captured_autocast_gpt_step_leaves_no_cast_kernel_beside_a_rows_kernel():
    planned = _autocast_tiny()
    groups = [g for g in planned.groups if g.kernel == "nova" and isinstance(g.problem, RowsProblem)]
    names = ["+".join(n.op for n in g.nodes) for g in groups]
    n_layer = 2
    backward = [name for name in names if name.startswith("cast+layer_norm_backward")]
    assert names.count("layer_norm+cast") == len(backward) == 2 * n_layer + 1
    # a norm backward whose dx feeds a linear layer writes it twice, FP32 (the residual stream) and bf16
    # (the GEMMs' input), and sums the bf16 values (that layer's bias gradient); each but ln_f adds the
    # residual stream's gradient; the first block's ln_1 feeds the embeddings (FP32 only)
    assert sum(name.endswith("+cast+sum") for name in backward) == 2 * n_layer
    assert backward.count("cast+layer_norm_backward+add+cast+sum") == 2 * n_layer - 1
    assert backward[-1] == "cast+layer_norm_backward+add"
    for g in groups:                               # what the kernel reads and writes: each node's value
        if "+".join(n.op for n in g.nodes) == "cast+layer_norm_backward+add+cast+sum":
            dy_cast, norm, add, cast, total = g.nodes
            assert g.bindings["dy"] is dy_cast.inputs[0] and g.bindings["dy"].dtype == "bf16"
            assert g.bindings["residual"] is next(v for v in add.inputs if v is not norm.outputs[0])
            assert g.bindings["dx"] is add.outputs[0] and g.problem.operand("dx").dtype == "f32"
            assert g.bindings["dx_cast"] is cast.outputs[0] and g.problem.operand("dx_cast").dtype == "bf16"
            assert g.bindings["dxsum"] is total.outputs[0] and total.inputs[0] is cast.outputs[0]
    # the loss and its gradient in one kernel: each one's widening cast of the bf16 logits and the
    # gradient's narrowing cast taken in
    assert names.count("cast+cross_entropy+cast+cross_entropy_backward+cast") == 1
    users = planned.graph.users()
    for g in planned.groups:
        if [n.op for n in g.nodes] != ["cast"]:
            continue
        x, y = g.inputs[0], g.outputs[0]
        # what stays: the weights' casts and their gradients', and the one cast of a result another op reads too
        assert x.producer is None or x.producer.op not in ROWS_OPS or len(users[x]) > 1, g.reason
        assert not any(u.op in ROWS_OPS for u in users[y]), g.reason


def test_autocast_llama_norm_backwards_add_their_dy_from_the_projections_gradients():
    """Under autocast each RMSNorm backward's dy is the FP32 sum of the bf16 gradients of the projections
    that read the norm's output (w1 and w3: two; wq, wk and wv: three), added left to right: the rows
    kernel reads the parts in bf16 and adds them in that order (``dy``, ``dy_1``, ``dy_2``); no add
    kernel is left in front of a norm backward."""
    from nova.compiler.explain import plan_training_step
    from nova.models import TrainRecipe
    planned = plan_training_step("llama-tiny", 2, 16, recipe=TrainRecipe(autocast="bf16"))[0]
    norms = [g for g in planned.groups if g.kernel == "nova" and isinstance(g.problem, RowsProblem)
             and g.problem.kind == "rms_norm_backward"]
    parts = sorted(sum(g.problem.has(name) for name in ("dy", "dy_1", "dy_2")) for g in norms)
    n_layer = 2
    assert parts == [1] + [2] * n_layer + [3] * n_layer, parts       # the final norm's dy: the LM head's alone
    users = planned.graph.users()
    for g in norms:
        adds = [n for n in g.nodes if n.op == "add" and g.problem.has("dy_1") and n.outputs[0] is not g.bindings["dx"]]
        count = sum(g.problem.has(name) for name in ("dy_1", "dy_2"))
        if not count:
            continue
        assert len(adds) == count and "parts as it reads them" in g.reason
        for name in ("dy", "dy_1", "dy_2")[:count + 1]:
            v = g.bindings[name]
            assert v.dtype == "bf16" and g.problem.operand(name).dtype == "bf16" and v in g.inputs
        # left to right: dy + dy_1 first, then dy_2
        assert adds[0].inputs[0].producer.inputs[0] is g.bindings["dy"]
        assert adds[0].inputs[1].producer.inputs[0] is g.bindings["dy_1"]
    for g in planned.groups:                  # nothing computes a norm backward's dy outside its kernel
        if g.kind == "pointwise":
            assert not any(u.op == "rms_norm_backward" for v in g.outputs for u in users[v]), g.reason


def test_captured_autocast_gpt_step_runs_on_the_cpu_program_like_the_interpreter():
    from step_parity import captured_step_inputs
    from nova.compiler.executor import build
    planned = _autocast_tiny()
    g = planned.graph
    xs = captured_step_inputs(g, 5, int_high=64)
    ref = interpreter.run(g, [x.clone() for x in xs])
    got = build(planned, "cpu", poison=True).run([x.clone() for x in xs])
    for o, a, b in zip(g.outputs, got, ref):        # bf16 GEMMs: torch's CPU matmul rounds as it accumulates
        assert not torch.isnan(a.float()).any(), o.name
        a, b = a.double(), b.double()
        assert (a - b).norm() <= 1e-2 * b.norm() + 1e-6, o.name


# ------------------------------------------------------------------ the kernels
def mixed_problems():
    """Rows problems whose operands differ in element type, as the fused casts state them."""
    def row(name, dtype, n):
        return Operand(name, dtype, "row", n)

    def stat(name):
        return Operand(name, "f32", "per_row")

    def col(name):
        return Operand(name, "f32", "col")
    target = Operand("target", "i64", "per_row")
    ce = {"reduction": "mean", "ignore_index": -100}
    cases = []
    for n, lo in ((32768, "bf16"), (1001, "f16"), (70000, "bf16")):
        cases.append(RowsProblem("cross_entropy", 64, n, (row("logits", lo, n), target),
                                 (Operand("loss", "f32", "scalar"), stat("lse")), ce))
        cases.append(RowsProblem("cross_entropy_backward", 64, n, (Operand("dloss", "f32", "scalar"),
                                 row("logits", lo, n), target, stat("lse")), (row("dlogits", lo, n),), ce))
    for n, lo in ((512, "bf16"), (1001, "f16"), (70000, "bf16")):
        cases.append(RowsProblem("layer_norm", 300, n, (row("x", "f32", n), col("weight"), col("bias")),
                                 (row("y", lo, n), stat("mean"), stat("rstd")), {"eps": 1e-5}))
        cases.append(RowsProblem("layer_norm_backward", 300, n, (row("dy", lo, n), row("x", "f32", n), stat("mean"),
                                 stat("rstd"), col("weight")), (row("dx", "f32", n), col("dweight"), col("dbias"))))
        cases.append(RowsProblem("rms_norm", 300, n, (row("x", "f32", n), col("weight")),
                                 (row("y", lo, n), stat("rstd")), {"eps": 1e-5}))
        cases.append(RowsProblem("rms_norm_backward", 300, n, (row("dy", lo, n), row("x", "f32", n), stat("rstd"),
                                 col("weight")), (row("dx", "f32", n), col("dweight"))))
        cases.append(RowsProblem("softmax", 300, n, (row("x", "f32", n),), (row("y", lo, n),)))
        cases.append(RowsProblem("softmax_backward", 300, n, (row("dy", lo, n), row("y", "f32", n)),
                                 (row("dx", "f32", n),)))
    return cases


def test_mixed_type_schedules_size_the_vectors_by_the_widest_operand():
    for p in mixed_problems():
        t = configure_rows(p, "h200").schedule.row
        widest = max(o.elem_bytes for o in p.operands if o.layout in ("row", "col"))
        assert t.vec * widest <= 16 and p.n % t.vec == 0, p.describe()
    ce = mixed_problems()[0]
    f32 = RowsProblem("cross_entropy", ce.rows, ce.n, (Operand("logits", "f32", "row", ce.n), ce.inputs[1]), ce.outputs,
                      ce.attrs)
    assert f32.bytes_moved - ce.bytes_moved == ce.rows * ce.n * 2           # the logits read at half the bytes
    assert configure_rows(ce, "h200").prediction.time_us < configure_rows(f32, "h200").prediction.time_us


@pytest.mark.parametrize("target", ["a100", "h200"])
def test_mixed_type_kernels_assemble_without_spills(target):
    from nova.codegen import ptxas
    from nova.kernels.rows.compile import compile_kernel
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    pytest.importorskip("mlir")
    for p in mixed_problems():
        s = configure_rows(p, target).schedule
        for role in s.roles:
            art = compile_kernel(p, s, role)
            r = art.resources
            assert art.cubin and r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0, (p.describe(), role, r)


def test_a_column_sums_prologue_computes_each_term_once():
    """Mish written op by op (``h * tanh(log(1 + exp(h)))``, no named op): its backward recomputes the
    forward's terms beside the gradient's own, and the bias gradient's column sum takes them all as
    its prologue.  Each pure op on the same arguments is computed once: one exp where the forward's
    and the gradient's were two (HF GPT-2's bf16 GELU backward had two tanh that way: its column sum
    ran compute-bound, 121 us against 71 predicted on the H100)."""
    from nova.compiler import plan_cache
    from nova.compiler.precompile import step_kernels
    from nova.frontend import capture
    from nova.hwmodel import get_target

    class Mish(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(64, 256), torch.nn.Linear(256, 64)

        def forward(self, x):
            h = self.a(x)
            return self.b(h * torch.tanh(torch.log(1 + torch.exp(h)))).square().mean()
    with torch.device("meta"):
        model = Mish()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(x):
        opt.zero_grad(set_to_none=True)
        loss = model(x)
        loss.backward()
        opt.step()
        return loss
    graph = capture(step, (torch.empty(512, 64, device="meta"),), models=[model], optimizers=[opt], name="mish").graph
    rows = step_kernels(plan_cache.plan(graph, get_target("h100"), "cuda")[0]).rows
    mish = [p for p in rows if p.prologue is not None and any(op == "tanh" for op, _ in p.prologue.ops)]
    assert [p.kind for p in mish] == ["column_reduce"], [p.describe() for p in rows]
    ops = mish[0].prologue.ops
    assert len(set(ops)) == len(ops) and [op for op, _ in ops].count("exp") == 1, mish[0].describe()


def test_hf_gpt2s_gelu_backward_under_autocast_is_placed_by_the_cost_model():
    """Hugging Face GPT-2's op-by-op tanh GELU under bf16 autocast: its backward is the named gradient
    (``named_activations``: read as math, casts aside).  The dgrad GEMM's epilogue would spend more on
    its arithmetic than the bias gradient's column sum spends reading two more 16-bit matrices
    (``fusion.activation_grad_pays``): the column sum computes it in its prologue, no GELU chain left."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e .[dev])")
    from nova.compiler import plan_cache
    from nova.compiler.precompile import step_kernels
    from nova.frontend import capture
    from nova.hwmodel import get_target
    from nova.models import TrainRecipe, make_train_step
    from nova.models.hf import HFCausalLM, HFConfig
    assert transformers
    with torch.device("meta"):
        model = HFCausalLM(HFConfig("gpt2", vocab_size=96, n_embd=512, n_layer=1, n_head=8, block_size=512))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = make_train_step(model, opt, TrainRecipe(autocast="bf16"))
    args = tuple(torch.empty(32, 512, dtype=torch.long, device="meta") for _ in range(2))
    graph = capture(step, args, models=[model], optimizers=[opt], name="hf_gpt2_bf16").graph
    kernels = step_kernels(plan_cache.plan(graph, get_target("h200"), "cuda")[0])
    assert not [p.describe() for p in kernels.rows
                if p.prologue is not None and any(op == "tanh" for op, _ in p.prologue.ops)]
    assert not [p.describe() for p in kernels.gemms if p.activation_grad]
    in_sum = [p for p in kernels.rows if p.prologue is not None
              and any(op == "gelu_tanh_backward" for op, _ in p.prologue.ops)]
    assert [p.kind for p in in_sum] == ["column_reduce"], [p.describe() for p in kernels.rows]


def test_the_activation_grads_place_is_the_cheaper_by_the_models():
    """GPT-42M's dgrad GEMM (TF32 NN 16384 x 2048 x 512, its result read by the bias gradient's column sum):
    gelu'(R) in the epilogue adds ~57 us on the H200 where the column sum's prologue would read two f32
    matrices more (~64 us): the epilogue.  The bf16 NT twin adds ~60 us against two 16-bit matrices
    (~32 us): the column sum.  Without a column sum reading it, a pointwise kernel would move a third
    matrix and launch: TF32's epilogue is cheaper still (~96 us outside); bf16's is not (~49 us)."""
    from nova.ir import Graph, TensorType
    from nova.kernels.gemm.problem import GemmProblem
    from nova.passes.fusion import activation_grad_pays

    def case(dtype, trans_b, column_sum):
        g = Graph()
        storage = {"tf32": "f32", "bf16": "bf16"}[dtype]
        acc, pre = (g.input(TensorType((32, 512, 2048), storage), n) for n in ("acc", "pre"))
        grad = g.op("gelu_tanh_backward", acc, pre)
        g.output(g.op("sum", grad, axes=(0, 1), keepdim=False) if column_sum else grad, "out")
        problem = GemmProblem(16384, 2048, 512, dtype, trans_b=trans_b)
        return activation_grad_pays(problem, grad.producer, g.users(), "h200")
    assert case("tf32", False, True) and not case("bf16", True, True)
    assert case("tf32", False, False) and not case("bf16", True, False)
