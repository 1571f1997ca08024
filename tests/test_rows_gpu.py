"""The rows kernels on the GPU (skipped without one): every kind against a float64 reference on fresh
random data, outputs (and the padding of strided rows) NaN-poisoned before the launch; odd row lengths,
rows longer than a CTA holds in registers, non-contiguous rows, f32 / bf16 / f16, operands of different
types (the casts fused into the kernels); and compiled GPT-tiny and Llama-tiny steps (FP32 and bf16
autocast) against eager PyTorch.  Kernels compile online (MLIR on the device machine) or come
from the cache (``NOVA_OFFLINE=1``)."""
from __future__ import annotations

import copy
import dataclasses

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

from nova.kernels.rows import Operand, Prologue, RowsProblem, cli_problem  # noqa: E402
from step_parity import assert_tracks_float64, float64_twin, take_steps, tf32_matmuls, zero_gradient_masks  # noqa: E402,E501

TOL = {"f32": 2e-5, "bf16": 1e-2, "f16": 2e-3}     # relative Frobenius error of an output stored in that type
DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def rel(got, ref) -> float:
    got, ref = got.double().cpu(), ref.double().cpu()
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def strided(p: RowsProblem, stride: int | None) -> RowsProblem:
    """``p`` with every row operand ``stride`` elements apart (None: contiguous)."""
    if stride is None:
        return p
    fix = lambda ops: tuple(dataclasses.replace(o, stride=stride) if o.layout == "row" else o for o in ops)  # noqa: E731
    return dataclasses.replace(p, inputs=fix(p.inputs), outputs=fix(p.outputs))


class Buffers:
    """The operands of a problem on the GPU: row operands as [rows, n] views of [rows, stride] buffers."""

    def __init__(self, p: RowsProblem):
        self.p, self.backing, self.t = p, {}, {}

    def put(self, name: str, value):
        o = self.p.operand(name)
        if o.layout == "row":
            buf = torch.full((self.p.rows, o.stride), float("nan"), dtype=DT[o.dtype], device="cuda")
            buf[:, :self.p.n] = value.to(buf.dtype)
            self.backing[name], self.t[name] = buf, buf[:, :self.p.n]
        else:
            dtype = value.dtype if o.name == "target" else DT[o.dtype]
            self.t[name] = value.to(device="cuda", dtype=dtype).contiguous()
        return self.t[name]

    def poison_outputs(self):
        for o in self.p.outputs:
            shape = {"row": (self.p.rows, self.p.n), "col": (self.p.n,), "per_row": (self.p.rows,), "scalar": ()}
            self.put(o.name, torch.full(shape[o.layout], float("nan")))

    def run(self):
        from nova.kernels.rows.launch import launch_args, resolve
        r = resolve(self.p)
        ws = torch.full((max(1, r.workspace_bytes // 4),), float("nan"), device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        for kernel, args in launch_args(r, {n: t.data_ptr() for n, t in self.t.items()}, ws.data_ptr()):
            kernel.launch(args, stream)
        torch.cuda.synchronize()
        for name, buf in self.backing.items():          # nothing written past a row's end
            if name in {o.name for o in self.p.outputs} and buf.shape[1] > self.p.n:
                assert torch.isnan(buf[:, self.p.n:].float()).all(), f"{name}: written past the row"

    def check(self, name, ref, what=""):
        o = self.p.operand(name)
        got = self.t[name]
        assert not torch.isnan(got.float()).any(), f"{self.p.describe()}: {name} has unwritten (NaN) elements {what}"
        e = rel(got, ref)
        assert e <= TOL[o.dtype], f"{self.p.describe()}: {name} off the float64 reference by {e:.2e} {what}"


def _randn(rows, n, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, n, generator=g, dtype=torch.float64) * scale


def _stored(t, dtype):
    """What the kernel reads: the float64 value rounded to the storage type, back in float64."""
    return t.to(DT[dtype]).double()


NORM_CASES = [(300, 1001, "bf16", None), (64, 24, "f32", None), (7, 70000, "f32", None), (128, 768, "f16", 800),
              (4000, 512, "bf16", None), (33, 4096, "f32", 4104),
              # the weight/bias gradients summed in the row pass: many row groups a CTA, a ragged last one
              (16411, 512, "f32", None), (9001, 4096, "bf16", None), (5003, 1344, "f16", None)]


@pytest.mark.parametrize("rows, n, dtype, stride", NORM_CASES)
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norm_forward(kind, rows, n, dtype, stride):
    p = strided(cli_problem(kind, rows, n, dtype), stride)
    b = Buffers(p)
    x = _stored(_randn(rows, n, 3.0, 1) + 0.5, dtype)
    w, bias = _stored(_randn(1, n, 1.0, 2)[0], dtype), _stored(_randn(1, n, 1.0, 3)[0], dtype)
    b.put("x", x), b.put("weight", w)
    if p.has("bias"):
        b.put("bias", bias)
    b.poison_outputs()
    b.run()
    eps = p.attr("eps")
    if kind == "layernorm":
        mean = x.mean(-1)
        rstd = ((x - mean[:, None]) ** 2).mean(-1).add(eps).rsqrt()
        y = (x - mean[:, None]) * rstd[:, None] * w + bias
        b.check("mean", mean)
    else:
        rstd = (x * x).mean(-1).add(eps).rsqrt()
        y = x * rstd[:, None] * w
    b.check("rstd", rstd)
    b.check("y", y)


def norm_backward_reference(kind, x, w, bias, dy, b, eps=1e-5):
    """The float64 norm of ``x`` (LayerNorm with ``w``, ``bias``; RMSNorm with ``w``) back-propagated from
    ``dy`` (``x.grad``, ``w.grad`` then hold the reference); its mean put in ``b`` (LayerNorm); its rstd."""
    n = x.shape[-1]
    if kind == "layernorm":
        y = torch.nn.functional.layer_norm(x, (n,), w, bias, eps)
        mean = x.detach().mean(-1)
        rstd = ((x.detach() - mean[:, None]) ** 2).mean(-1).add(eps).rsqrt()
        b.put("mean", mean)
    else:
        rstd = (x.detach() ** 2).mean(-1).add(eps).rsqrt()
        y = x * (x * x).mean(-1, keepdim=True).add(eps).rsqrt() * w
    y.backward(dy)
    return rstd


@pytest.mark.parametrize("rows, n, dtype, stride", NORM_CASES)
@pytest.mark.parametrize("residual", [False, True], ids=["dx", "dx+residual,sum"])
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norm_backward(kind, residual, rows, n, dtype, stride):
    p = strided(cli_problem(kind, rows, n, dtype, backward=True, residual=residual, dx_sum=residual), stride)
    b = Buffers(p)
    x = _stored(_randn(rows, n, 2.0, 4) - 0.3, dtype).requires_grad_()
    w = _stored(_randn(1, n, 1.0, 5)[0], dtype).requires_grad_()
    bias = _stored(_randn(1, n, 1.0, 6)[0], dtype).requires_grad_()
    dy = _stored(_randn(rows, n, 1.0, 7), dtype)
    rstd = norm_backward_reference(kind, x, w, bias, dy, b)
    b.put("dy", dy), b.put("x", x.detach()), b.put("rstd", rstd), b.put("weight", w.detach())
    r = _stored(_randn(rows, n, 1.0, 11), dtype) if residual else 0
    if residual:
        b.put("residual", r)
    b.poison_outputs()
    b.run()
    b.check("dx", x.grad + r)
    if residual:
        b.check("dxsum", (x.grad + r).sum(0))
    b.check("dweight", w.grad)
    if p.has("dbias"):
        b.check("dbias", bias.grad)
    first = {name: b.t[name].clone() for name in ("dweight", "dbias", "dxsum") if p.has(name)}
    b.poison_outputs()
    b.run()
    for name, got in first.items():                 # a fixed order of additions: the same bits again
        assert torch.equal(b.t[name], got), f"{p.describe()}: {name} differs between two runs"


SOFTMAX_CASES = [(100, 2050, "f32", None), (77, 33, "f16", None), (8, 300000, "f32", None), (50, 2048, "bf16", 2176),
                 (513, 96, "bf16", 100)]


@pytest.mark.parametrize("rows, n, dtype, stride", SOFTMAX_CASES)
@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
def test_softmax_forward_and_backward(kind, rows, n, dtype, stride):
    x = _stored(_randn(rows, n, 4.0, 8), dtype)
    fn = torch.softmax if kind == "softmax" else torch.log_softmax
    p = strided(cli_problem(kind, rows, n, dtype), stride)
    b = Buffers(p)
    b.put("x", x)
    b.poison_outputs()
    b.run()
    b.check("y", fn(x, -1))
    y = _stored(fn(x, -1), dtype)
    dy = _stored(_randn(rows, n, 1.0, 9), dtype)
    dx = y * (dy - (dy * y).sum(-1, keepdim=True)) if kind == "softmax" else dy - y.exp() * dy.sum(-1, keepdim=True)
    p = strided(cli_problem(kind, rows, n, dtype, backward=True), stride)
    b = Buffers(p)
    b.put("dy", dy), b.put("y", y)
    b.poison_outputs()
    b.run()
    b.check("dx", dx)


@pytest.mark.parametrize("rows, n, dtype, reduction, stride", [
    (100, 32768, "bf16", "mean", None), (64, 50257, "f32", "sum", None), (33, 97, "f32", "mean", 104),
    (300, 4096, "f16", "mean", None)])
def test_cross_entropy_forward_and_backward(rows, n, dtype, reduction, stride):
    ignore = -100
    x = _stored(_randn(rows, n, 3.0, 10), dtype)
    g = torch.Generator().manual_seed(11)
    target = torch.randint(0, n, (rows,), generator=g)
    target[::7] = ignore
    fwd = cli_problem("cross_entropy", rows, n, dtype)
    attrs = {"reduction": reduction, "ignore_index": ignore}
    p = strided(dataclasses.replace(fwd, attrs=attrs), stride)
    b = Buffers(p)
    b.put("logits", x), b.put("target", target)
    b.poison_outputs()
    b.run()
    lse = torch.logsumexp(x, -1)
    b.check("loss", torch.nn.functional.cross_entropy(x, target, ignore_index=ignore, reduction=reduction))
    b.check("lse", lse)
    dloss = torch.tensor(1.7, dtype=torch.float64)
    xg = x.clone().requires_grad_()
    torch.nn.functional.cross_entropy(xg, target, ignore_index=ignore, reduction=reduction).backward(dloss)
    p = strided(dataclasses.replace(cli_problem("cross_entropy", rows, n, dtype, backward=True), attrs=attrs), stride)
    b = Buffers(p)
    b.put("dloss", _stored(dloss, dtype)), b.put("logits", x), b.put("target", target), b.put("lse", lse)
    b.poison_outputs()
    b.run()
    b.check("dlogits", xg.grad)


@pytest.mark.parametrize("rows, n, logits, dlogits, reduction, ignore, stride, in_place, lse", [
    (100, 32768, "f32", "f32", "mean", -100, None, True, False), (64, 50257, "f32", "f32", "sum", -1, None, False, True),
    (33, 97, "f32", "f32", "mean", 3, 104, True, False), (300, 4096, "bf16", "bf16", "mean", -100, None, True, False),
    (9, 70001, "bf16", "bf16", "sum", -100, None, False, True), (300, 4096, "f16", "f32", "mean", -100, None, False, False),
    (2048, 32768, "f32", "f32", "sum", -1, None, True, False)])
def test_cross_entropy_forward_backward_in_one_kernel(rows, n, logits, dlogits, reduction, ignore, stride, in_place,
                                                       lse):
    """The loss and dlogits of one loss in one pass over the logits (the chunked loss's kernel): loss, the
    optional lse and dlogits against float64; ``in_place``: dlogits written over the logits' own buffer
    (the plan's in-place rule), which the kernel must read element by element before writing; an
    ``ignore_index`` that is a real column (3); odd, strided and longer-than-a-CTA rows."""
    x = _stored(_randn(rows, n, 3.0, 30), logits)
    g = torch.Generator().manual_seed(31)
    target = torch.randint(0, n, (rows,), generator=g)
    target[::6] = ignore
    p = cli_problem("cross_entropy", rows, n, "f32", forward_backward=True)
    outputs = [o for o in p.outputs if o.name == "loss"] + ([Operand("lse", "f32", "per_row")] if lse else []) \
        + [o for o in p.outputs if o.name == "dlogits"]
    p = dataclasses.replace(p, outputs=tuple(outputs), attrs={"reduction": reduction, "ignore_index": ignore})
    p = strided(with_types(p, logits=logits, dlogits=dlogits), stride)
    b = Buffers(p)
    dloss = torch.tensor(1.3, dtype=torch.float64)
    b.put("dloss", dloss), b.put("target", target)
    b.poison_outputs()
    b.put("logits", x)
    if in_place:
        b.t["dlogits"] = b.t["logits"]
    b.run()
    xg = x.clone().requires_grad_()
    loss = torch.nn.functional.cross_entropy(xg, target, ignore_index=ignore, reduction=reduction)
    loss.backward(dloss)
    b.check("loss", loss.detach())
    if lse:
        b.check("lse", torch.logsumexp(x, -1))
    b.check("dlogits", xg.grad)


@pytest.mark.parametrize("rows, n, dtype", [(4096, 512, "f32"), (300, 1001, "bf16"), (5, 70000, "f32")])
def test_row_and_column_reductions_with_prologues(rows, n, dtype):
    row = lambda name: Operand(name, dtype, "row", n)  # noqa: E731
    a, c = _stored(_randn(rows, n, 1.0, 12), dtype), _stored(_randn(rows, n, 1.0, 13), dtype)
    s = _stored(_randn(rows, 1, 1.0, 14)[:, 0], dtype)
    # mean over the row of (a + c)^2, the sum a + c stored (the residual stream of RMSNorm's mean of squares)
    pro = Prologue((("add", ("a", "c")), ("cast_" + dtype, ("%0",)), ("pow", ("%1", "#2.0"))), ((2, "out"),),
                   ((1, "st0"),))
    p = RowsProblem("row_reduce", rows, n, (row("a"), row("c")), (Operand("out", "f32", "per_row"), row("st0")),
                    {"op": "mean"}, pro)
    b = Buffers(p)
    b.put("a", a), b.put("c", c)
    b.poison_outputs()
    b.run()
    total = _stored(a + c, dtype)
    b.check("st0", total)
    b.check("out", (total ** 2).mean(-1))
    # sum over the rows of a * s[row] (a norm weight's gradient), and the max over each row of a
    pro = Prologue((("mul", ("a", "s")),), ((0, "out"),))
    p = RowsProblem("column_reduce", rows, n, (row("a"), Operand("s", dtype, "per_row")),
                    (Operand("out", dtype, "col"),), {"op": "sum"}, pro)
    b = Buffers(p)
    b.put("a", a), b.put("s", s)
    b.poison_outputs()
    b.run()
    b.check("out", (a * s[:, None]).sum(0))
    # bias gradients with their producer fused, its value stored: a residual stream's (a + c) and a GELU
    # layer's (gelu_tanh_backward(a, c): torch's gelu_backward in float64)
    for op, value in (("add", total), ("gelu_tanh_backward",
                                       _stored(torch.ops.aten.gelu_backward(a, c, approximate="tanh"), dtype))):
        pro = Prologue(((op, ("a", "c")), ("cast_" + dtype, ("%0",))), ((1, "out"),), ((1, "st0"),))
        p = RowsProblem("column_reduce", rows, n, (row("a"), row("c")), (Operand("out", dtype, "col"), row("st0")),
                        {"op": "sum"}, pro)
        b = Buffers(p)
        b.put("a", a), b.put("c", c)
        b.poison_outputs()
        b.run()
        b.check("st0", value)
        b.check("out", value.sum(0))
    p = RowsProblem("row_reduce", rows, n, (row("a"),), (Operand("out", dtype, "per_row"),), {"op": "max"},
                    Prologue.identity("a", "out"))
    b = Buffers(p)
    b.put("a", a)
    b.poison_outputs()
    b.run()
    b.check("out", a.amax(-1))


# ------------------------------------------------------------------ casts fused: operands of other element types
def with_types(p: RowsProblem, **dtypes) -> RowsProblem:
    """``p`` with the named operands stored in other element types (what a rows kernel with its casts
    fused reads and writes: ``nova/passes/rows_casts.py``)."""
    fix = lambda ops: tuple(dataclasses.replace(o, dtype=dtypes.get(o.name, o.dtype)) for o in ops)  # noqa: E731
    return dataclasses.replace(p, inputs=fix(p.inputs), outputs=fix(p.outputs))


@pytest.mark.parametrize("rows, n, logits, dlogits, stride", [
    (100, 32768, "bf16", "bf16", None), (64, 50257, "f16", "f32", None), (33, 97, "bf16", "f16", 104),
    (9, 70001, "bf16", "bf16", None), (300, 4096, "f32", "bf16", None)])
def test_cross_entropy_reads_16bit_logits_and_writes_its_gradient_in_another_type(rows, n, logits, dlogits, stride):
    """The LM head's bf16 logits read as they are (FP32 inside), the gradient written in the GEMMs' type;
    loss, lse and dloss f32.  70001: odd, and longer than a CTA holds (looped)."""
    ignore = -100
    x = _stored(_randn(rows, n, 3.0, 20), logits)
    g = torch.Generator().manual_seed(21)
    target = torch.randint(0, n, (rows,), generator=g)
    target[::5] = ignore
    p = strided(with_types(cli_problem("cross_entropy", rows, n, "f32"), logits=logits), stride)
    b = Buffers(p)
    b.put("logits", x), b.put("target", target)
    b.poison_outputs()
    b.run()
    lse = torch.logsumexp(x, -1)
    b.check("loss", torch.nn.functional.cross_entropy(x, target, ignore_index=ignore))
    b.check("lse", lse)
    xg = x.clone().requires_grad_()
    dloss = torch.tensor(0.7, dtype=torch.float64)
    torch.nn.functional.cross_entropy(xg, target, ignore_index=ignore).backward(dloss)
    p = strided(with_types(cli_problem("cross_entropy", rows, n, "f32", backward=True), logits=logits,
                           dlogits=dlogits), stride)
    b = Buffers(p)
    b.put("dloss", dloss), b.put("logits", x), b.put("target", target), b.put("lse", lse)
    b.poison_outputs()
    b.run()
    b.check("dlogits", xg.grad)


MIXED_NORM_CASES = [(300, 1001, "bf16", None), (4000, 512, "f16", None), (7, 70000, "bf16", None),
                    (16411, 512, "bf16", None), (128, 768, "bf16", 800), (33, 4096, "f16", 4104)]


@pytest.mark.parametrize("rows, n, low, stride", MIXED_NORM_CASES)
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norms_write_16bit_outputs_and_read_16bit_gradients(kind, rows, n, low, stride):
    """f32 x normalized into a bf16/f16 y (the next GEMM's input); the backward's dy in bf16/f16 (that
    GEMM's gradient), x and dx f32, the weight/bias gradients f32."""
    x = _stored(_randn(rows, n, 2.0, 22) + 0.25, "f32")
    w, bias = _stored(_randn(1, n, 1.0, 23)[0], "f32"), _stored(_randn(1, n, 1.0, 24)[0], "f32")
    eps = 1e-5
    p = strided(with_types(cli_problem(kind, rows, n, "f32"), y=low), stride)
    b = Buffers(p)
    b.put("x", x), b.put("weight", w)
    if p.has("bias"):
        b.put("bias", bias)
    b.poison_outputs()
    b.run()
    if kind == "layernorm":
        mean = x.mean(-1)
        rstd = ((x - mean[:, None]) ** 2).mean(-1).add(eps).rsqrt()
        b.check("y", (x - mean[:, None]) * rstd[:, None] * w + bias)
        b.check("mean", mean)
    else:
        rstd = (x * x).mean(-1).add(eps).rsqrt()
        b.check("y", x * rstd[:, None] * w)
    b.check("rstd", rstd)
    dy = _stored(_randn(rows, n, 1.0, 25), low)
    xg, wg, bg = x.clone().requires_grad_(), w.clone().requires_grad_(), bias.clone().requires_grad_()
    if kind == "layernorm":
        y = torch.nn.functional.layer_norm(xg, (n,), wg, bg, eps)
    else:
        y = xg * (xg * xg).mean(-1, keepdim=True).add(eps).rsqrt() * wg
    y.backward(dy)
    p = strided(with_types(cli_problem(kind, rows, n, "f32", backward=True), dy=low), stride)
    b = Buffers(p)
    b.put("dy", dy), b.put("x", x), b.put("rstd", rstd), b.put("weight", w)
    if kind == "layernorm":
        b.put("mean", mean)
    b.poison_outputs()
    b.run()
    b.check("dx", xg.grad)
    b.check("dweight", wg.grad)
    if p.has("dbias"):
        b.check("dbias", bg.grad)


@pytest.mark.parametrize("rows, n, low, stride", MIXED_NORM_CASES)
@pytest.mark.parametrize("kind, dy_parts", [("layernorm", 1), ("rmsnorm", 1), ("rmsnorm", 3), ("layernorm", 2)])
def test_norm_backward_writes_dx_in_fp32_and_16_bits(kind, dy_parts, rows, n, low, stride):
    """Autocast's pre-norm block backward (``--residual --dx-cast --dx-sum [--dy-parts]``): dy in
    bf16/f16 (or 2-3 such parts added in FP32, in order), x, the residual stream's gradient and dx f32;
    dx + residual written in f32 and again rounded to 16 bits (bit for bit the rounding of the f32 it
    wrote), those 16-bit values summed over the rows (the bias gradient of the linear layer before the
    norm)."""
    x = _stored(_randn(rows, n, 2.0, 28) - 0.1, "f32").requires_grad_()
    w = _stored(_randn(1, n, 1.0, 29)[0], "f32")
    parts = [_stored(_randn(rows, n, 1.0, 30 + 10 * k), low) for k in range(dy_parts)]
    dy = parts[0]
    for part in parts[1:]:
        dy = (dy.float() + part.float()).double()        # FP32 adds, in order
    r = _stored(_randn(rows, n, 1.0, 31), "f32")
    names = ["dy", "dy_1", "dy_2"][:dy_parts]
    p = strided(with_types(cli_problem(kind, rows, n, "f32", backward=True, residual=True, dx_sum=True,
                                       dx_cast=low, dy_parts=dy_parts), **{name: low for name in names}), stride)
    b = Buffers(p)
    rstd = norm_backward_reference(kind, x, w, None, dy, b)
    for name, part in zip(names, parts):
        b.put(name, part)
    b.put("x", x.detach()), b.put("rstd", rstd), b.put("weight", w), b.put("residual", r)
    b.poison_outputs()
    b.run()
    b.check("dx", x.grad + r)
    written = b.t["dx"]
    assert torch.equal(b.t["dx_cast"], written.to(DT[low])), f"{p.describe()}: dx_cast is not the rounding of dx"
    b.check("dxsum", b.t["dx_cast"].double().sum(0))


@pytest.mark.parametrize("rows, n, low, stride", [(77, 33, "f16", None), (8, 300000, "bf16", None),
                                                  (50, 2048, "bf16", 2176), (513, 95, "bf16", 100)])
@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
def test_softmax_writes_16bit_outputs_and_reads_16bit_gradients(kind, rows, n, low, stride):
    x = _stored(_randn(rows, n, 4.0, 26), "f32")
    fn = torch.softmax if kind == "softmax" else torch.log_softmax
    p = strided(with_types(cli_problem(kind, rows, n, "f32"), y=low), stride)
    b = Buffers(p)
    b.put("x", x)
    b.poison_outputs()
    b.run()
    b.check("y", fn(x, -1))
    y = _stored(fn(x, -1), "f32")
    dy = _stored(_randn(rows, n, 1.0, 27), low)
    dx = y * (dy - (dy * y).sum(-1, keepdim=True)) if kind == "softmax" else dy - y.exp() * dy.sum(-1, keepdim=True)
    p = strided(with_types(cli_problem(kind, rows, n, "f32", backward=True), dy=low), stride)
    b = Buffers(p)
    b.put("dy", dy), b.put("y", y)
    b.poison_outputs()
    b.run()
    b.check("dx", dx)


# ------------------------------------------------------------------ whole steps
def _programs(step):
    return [e.engine.program for e in step._cache.values() if hasattr(getattr(e, "engine", None), "program")]


@pytest.mark.parametrize("model_name", ["gpt", "llama"])
def test_compiled_tiny_steps_match_eager(model_name):
    import nova
    from nova.models import GPT, Llama, make_train_step
    torch.backends.cuda.matmul.allow_tf32 = False
    model = (GPT("tiny", seed=0) if model_name == "gpt" else Llama("tiny", seed=0)).cuda()
    twin, model64 = copy.deepcopy(model), float64_twin(model)
    step, ref_step, step64 = (nova.compile(make_train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3))),
                              *(make_train_step(m, torch.optim.AdamW(m.parameters(), lr=1e-3)) for m in (twin, model64)))
    vocab = model.config.vocab_size
    g = torch.Generator(device="cuda").manual_seed(3)
    batches = [tuple(torch.randint(0, vocab, (4, 16), device="cuda", generator=g) for _ in range(2)) for _ in range(3)]
    masks = zero_gradient_masks(model64, lambda m: m(*batches[0]))
    take_steps(step, ref_step, step64, batches, 5e-3, tf32_matmuls)
    assert_tracks_float64(model, twin, model64, masks, floor=5e-3)   # Nova's fp32 attention is TF32 too
    programs = _programs(step)
    assert programs and any(k.rows is not None for prog in programs for launch in prog.launches for k in launch.kernels)
    assert not any("rows" in f or "references" in f for prog in programs for f in prog.stats["fallbacks"])


@pytest.mark.parametrize("model_name", ["gpt", "llama"])
def test_compiled_tiny_steps_match_eager_under_autocast(model_name):
    """bf16 autocast: the norms, the loss and their backwards run on rows kernels with the casts around
    them fused (bf16 operands), against eager autocast on the same GPU."""
    import nova
    from nova.models import GPT, Llama, TrainRecipe, make_train_step
    model = (GPT("tiny", seed=0) if model_name == "gpt" else Llama("tiny", seed=0)).cuda()
    twin, model64 = copy.deepcopy(model), float64_twin(model)
    recipe = TrainRecipe(autocast="bf16")
    step, ref_step = (nova.compile(make_train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), recipe)),
                      make_train_step(twin, torch.optim.AdamW(twin.parameters(), lr=1e-3), recipe))
    step64 = make_train_step(model64, torch.optim.AdamW(model64.parameters(), lr=1e-3))
    vocab = model.config.vocab_size
    g = torch.Generator(device="cuda").manual_seed(4)
    batches = [tuple(torch.randint(0, vocab, (4, 16), device="cuda", generator=g) for _ in range(2)) for _ in range(3)]
    masks = zero_gradient_masks(model64, lambda m: m(*batches[0]))
    take_steps(step, ref_step, step64, batches, 2e-2)
    assert_tracks_float64(model, twin, model64, masks, floor=2e-2)
    programs = _programs(step)
    rows = [k.rows for prog in programs for launch in prog.launches for k in launch.kernels if k.rows is not None]
    # the loss and its gradient in one kernel, reading the bf16 logits and writing bf16 dlogits
    assert any(p.kind == "cross_entropy_forward_backward" and p.operand("logits").dtype == "bf16"
               and p.operand("dlogits").dtype == "bf16" for p in rows)
    assert not any("rows" in f or "references" in f for prog in programs for f in prog.stats["fallbacks"])


# ------------------------------------------------------------------ precompiling this file's kernels (host)
def _precompile(target: str) -> None:
    """Build every rows kernel the tests above launch into $NOVA_CACHE_DIR (a host with MLIR, no GPU):
    each kernel test runs with ``Buffers`` recording its problems instead of touching a GPU (the
    float64 references still compute on the CPU); the compiled steps' kernels come from
    ``nova precompile train tiny|llama-tiny --batch 4 --seq 16 [--autocast bf16]``, printed for the caller
    to run."""
    import collections
    import inspect
    from nova.hwmodel import get_target
    from nova.kernels.rows.compile import get_or_compile
    from nova.kernels.rows.launch import schedule_for

    problems = []

    class Recorder(Buffers):
        def __init__(self, p):
            super().__init__(p)
            problems.append(p)
            self.t = collections.defaultdict(lambda: torch.zeros(1), self.t)   # outputs never computed here

        def put(self, name, value):
            self.t[name] = value
            return value

        def poison_outputs(self):
            pass

        def run(self):
            pass

        def check(self, name, ref, what=""):
            pass
    globals()["Buffers"] = Recorder
    for name, fn in list(globals().items()):
        marks = getattr(fn, "pytestmark", [])
        if not name.startswith("test_") or "tiny_steps" in name or not marks:
            continue
        cases = [{}]
        for mark in marks:
            if mark.name == "parametrize":
                names = [n.strip() for n in mark.args[0].split(",")]
                cases = [{**c, **dict(zip(names, v if len(names) > 1 else (v,)))} for c in cases for v in mark.args[1]]
        for case in cases:
            fn(**{k: case[k] for k in inspect.signature(fn).parameters})
    gpu = get_target(target)
    built = {get_or_compile(p, schedule_for(p, gpu), role, gpu, offline=False)[2]
             for p in dict.fromkeys(problems) for role in schedule_for(p, gpu).roles}
    print(f"# {len(set(problems))} rows problems for {target} ({', '.join(sorted(built))})")
    print(f"nova precompile train tiny --batch 4 --seq 16 --target {target}")
    print(f"nova precompile train llama-tiny --batch 4 --seq 16 --target {target}")
    print(f"nova precompile train tiny --batch 4 --seq 16 --autocast bf16 --target {target}")
    print(f"nova precompile train llama-tiny --batch 4 --seq 16 --autocast bf16 --target {target}")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="build this file's rows kernels into $NOVA_CACHE_DIR; print the rest")
    ap.add_argument("--target", default="h200")
    _precompile(ap.parse_args().target)
