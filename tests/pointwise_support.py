"""The GPU cases of the pointwise kernel family, shared by tests/test_pointwise_gpu.py (which runs them
on a GPU) and tests/test_pointwise.py (which makes their problems on the meta device, as the GPU
tests' precompile step does)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nova.ir import Graph, TensorType
from nova.kernels.pointwise.problem import PointwiseProblem
from nova.passes.pointwise_from_ir import pointwise_problem

TOL = {"f32": 2e-5, "bf16": 1.6e-2, "f16": 2e-3}
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def c(g, value):
    return g.op("constant", value=value, dtype="f32")


@dataclass(frozen=True)
class Case:
    """``build(g, *inputs)`` -> result value over inputs of ``shapes`` and ``dtype``; ``views[k] =
    (base shape, slicer)`` makes input k the view ``slicer(base)`` of a bigger tensor."""
    name: str
    build: object
    shapes: tuple
    dtype: str
    views: dict = field(default_factory=dict)

    def graph(self):
        g = Graph(self.name)
        xs = [g.input(TensorType(s, self.dtype), f"x{k}") for k, s in enumerate(self.shapes)]
        out = self.build(g, *xs)
        g.output(out, "y")
        return g, xs, out

    def tensors(self, device, gen=None) -> list:
        dt = TORCH[self.dtype]
        out = []
        for k, s in enumerate(self.shapes):
            if k in self.views:
                base, slicer = self.views[k]
                t = slicer(torch.randn(base, generator=gen, device=device).to(dt) if device != "meta"
                           else torch.empty(base, dtype=dt, device="meta"))
                assert tuple(t.shape) == tuple(s), (t.shape, s)
            else:
                t = torch.randn(s, generator=gen, device=device).to(dt) if device != "meta" else \
                    torch.empty(s, dtype=dt, device="meta")
            out.append(t)
        return out

    def problem(self, tensors=None) -> PointwiseProblem:
        g, xs, out = self.graph()
        tensors = tensors if tensors is not None else self.tensors("meta")
        strides = {v: t.stride() for v, t in zip(xs, tensors)}
        return pointwise_problem(g.nodes, xs, [out], strides.__getitem__)


def _chain(g, x, y):
    big = g.op("gt", x, y)
    a = g.op("mul", g.op("exp", g.op("neg", g.op("abs", x))), c(g, 0.25))
    b = g.op("rsqrt", g.op("add", g.op("mul", y, y), c(g, 1.0)))
    return g.op("where", big, a, g.op("tanh", b))


CASES = [Case(f"gelu_bias_residual-{dtype}-{'x'.join(map(str, shape))}",
              lambda g, x, b, r: g.op("add", g.op("gelu_tanh", g.op("add", x, b)), r), (shape, shape[-1:], shape), dtype)
         for dtype in ("f32", "bf16", "f16") for shape in ((1,), (7,), (3, 1001), (64, 4096), (5, 17, 33))]
# x: every other column of a wider tensor (strided), y: a transpose (gathered), s: broadcast over columns
CASES += [Case(f"strided_broadcast-{dtype}", lambda g, x, y, s: g.op("mul", g.op("silu", g.op("sub", x, y)), s),
               ((129, 300), (129, 300), (129, 1)), dtype,
               {0: ((129, 700), lambda t: t[:, :600:2]), 1: ((300, 129), lambda t: t.t())})
          for dtype in ("f32", "bf16")]
CASES += [Case(f"backward-{op}", lambda g, dy, x, op=op: g.op(op, dy, x), ((333, 77), (333, 77)), "f32")
          for op in ("gelu_tanh_backward", "gelu_erf_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
                     "relu_backward")]
CASES += [Case("chain_constants_where", _chain, ((1023,), (1023,)), "f32")]


# --------------------------------------------------------------------------- a whole step
GPT_BATCH, GPT_SEQ = 2, 16


def make_optimizer(name: str, params):
    """The optimizers the GPU step tests compile: AdamW (torch's defaults, lr 1e-3) or SGD with nesterov momentum."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-2)


def gpt_tiny(device, optimizer: str = "adamw"):
    """The GPT-tiny model, its optimizer and the training step the step tests compile."""
    from nova.models import make_train_step
    from nova.models.gpt import GPT
    if device == "meta":
        with torch.device("meta"):
            model = GPT("tiny")
    else:
        model = GPT("tiny", seed=0).to(device)
    opt = make_optimizer(optimizer, model.parameters())
    return model, opt, make_train_step(model, opt)


def gpt_tiny_planned(optimizer: str = "adamw", later_step: bool = False):
    """The plan of the GPT-tiny step as ``nova.compile`` makes it (captured on the meta device);
    ``later_step``: once the optimizer has state (SGD's momentum buffers exist from the second step)."""
    from nova.frontend import capture
    from nova.passes import pipeline
    model, opt, step = gpt_tiny("meta", optimizer)
    if later_step and optimizer == "sgd":
        for p in model.parameters():
            opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
    idx = torch.zeros((GPT_BATCH, GPT_SEQ), dtype=torch.long, device="meta")
    return pipeline(capture(step, (idx, idx.clone()), models=[model], optimizers=[opt], name="gpt_tiny").graph)


# --------------------------------------------------------------------------- strided outputs
@dataclass(frozen=True)
class StridedCase:
    """Outputs written at strides (``PointwiseProblem.stores``): ``build(g, *inputs)`` -> output values
    over inputs of ``shapes``; ``buffer`` is the shape of the tensor the outputs live in and
    ``views(buffer)`` the output views (slices of it, a permutation of it)."""
    name: str
    build: object
    shapes: tuple
    dtype: str
    buffer: tuple
    views: object
    source: tuple = ()                  # when given: the inputs are ``split(source tensor)``
    split: object = None

    def graph(self):
        g = Graph(self.name)
        xs = [g.input(TensorType(s, self.dtype), f"x{k}") for k, s in enumerate(self.shapes)]
        outs = self.build(g, *xs)
        for k, o in enumerate(outs):
            g.output(o, f"y{k}")
        return g, xs, outs

    def tensors(self, device, gen=None) -> list:
        dt = TORCH[self.dtype]
        make = lambda s: (torch.randn(s, generator=gen, device=device).to(dt) if device != "meta" else   # noqa: E731
                          torch.empty(s, dtype=dt, device="meta"))
        return list(self.split(make(self.source))) if self.source else [make(s) for s in self.shapes]

    def outputs(self, device) -> tuple:
        """(the buffer, NaN-filled; the output views into it)."""
        buf = torch.full(self.buffer, float("nan"), dtype=TORCH[self.dtype], device=device)
        return buf, self.views(buf)

    def problem(self) -> PointwiseProblem:
        g, xs, outs = self.graph()
        inputs = self.tensors("meta")
        _, views = self.outputs("meta")
        strides = {v: t.stride() for v, t in zip(xs, inputs)}
        written = {v: (t.stride(), t.storage_offset()) for v, t in zip(outs, views)}
        return pointwise_problem(g.nodes, xs, outs, strides.__getitem__, written_at=written.__getitem__)


def _halves(t):
    h = t.shape[-1] // 2
    return (t[..., :h], t[..., h:])


STRIDED_CASES = [
    # RoPE's rotate-half of a [B, H, T, D] head tensor x: (-x[..., h:], x[..., :h]) read from x's halves and
    # written into the halves of the concat's buffer (two outputs, one kernel)
    StridedCase(f"rotate_half-{dtype}", lambda g, x1, x2, dtype=dtype: [g.op("neg", x2), g.op("cast", x1, dtype=dtype)],
                ((2, 3, 33, 32),) * 2, dtype, (2, 3, 33, 64), _halves, (2, 3, 33, 64), _halves)
    for dtype in ("f32", "bf16")]
STRIDED_CASES += [
    # a head merge's producer: [B, H, T, D] written with axes (0, 2, 1, 3) outermost first
    StridedCase("heads_permuted-f32", lambda g, x, y: [g.op("add", g.op("mul", x, y), x)], ((2, 5, 17, 24),) * 2,
                "f32", (2, 17, 5, 24), lambda t: (t.permute(0, 2, 1, 3),)),
    # a transposed result: the innermost axis written 96 elements apart (a scatter, one store per lane)
    StridedCase("transposed-f16", lambda g, x: [g.op("silu", x)], ((96, 128),), "f16", (128, 96),
                lambda t: (t.t(),)),
    # an odd slice offset (2 elements: 4-byte aligned) narrows the vector
    StridedCase("offset_slice-bf16", lambda g, x: [g.op("exp", x)], ((7, 40),), "bf16", (7, 44),
                lambda t: (t[:, 2:42],)),
]


def llama_tiny(device):
    """The Llama-tiny model (RoPE, grouped-query attention, SwiGLU), AdamW and its training step."""
    from nova.models import make_train_step
    from nova.models.llama import Llama
    if device == "meta":
        with torch.device("meta"):
            model = Llama("tiny")
    else:
        model = Llama("tiny", seed=0).to(device)
    opt = make_optimizer("adamw", model.parameters())
    return model, opt, make_train_step(model, opt)


def llama_tiny_planned():
    """The plan of the Llama-tiny step as ``nova.compile`` makes it (captured on the meta device)."""
    from nova.frontend import capture
    from nova.passes import pipeline
    model, opt, step = llama_tiny("meta")
    idx = torch.zeros((GPT_BATCH, GPT_SEQ), dtype=torch.long, device="meta")
    return pipeline(capture(step, (idx, idx.clone()), models=[model], optimizers=[opt], name="llama_tiny").graph)
