"""The cases of the pointwise family's index-dependent kernels (``iota``, inputs ``Window``ed to a
concat's slice, a copy of a strided view, ``gather`` of a one-axis table), shared by
tests/test_pointwise_indexing_gpu.py (which runs them on a GPU against float64) and
tests/test_pointwise_indexing.py (which runs their generated code on the CPU, and makes their problems
on the meta device as the GPU tests' precompile step does); and the tiny Hugging Face steps whose
plans use them."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nova.ir import Graph, TensorType
from nova.ir.ops import opdef
from nova.kernels.pointwise.problem import PointwiseProblem
from nova.passes.layout import Layout
from nova.passes.pointwise_from_ir import concat_problem, copy_problem, kernel_operands, pointwise_problem

TORCH = {"f64": torch.float64, "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
         "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}
TOL = {"f32": 2e-6, "bf16": 8e-3, "f16": 1e-3}
SENTINEL = -123456789                       # what an integer output holds until the kernel writes it


@dataclass(frozen=True)
class Input:
    """One graph input: its shape and type; ``base`` and ``view``: it is ``view(tensor of base shape)``
    (a slice, a transpose: read in place); ``high``: integers drawn from ``[0, high)`` (an index)."""
    shape: tuple
    dtype: str
    base: tuple = ()
    view: object = None
    high: int = 50


@dataclass(frozen=True)
class IndexCase:
    """``build(g, *inputs)`` -> the result; ``kind``: what states the kernel's problem: "pointwise"
    (the nodes are one fusion group), "concat" (the result is a ``concat``), "copy" (the result is a
    ``reshape`` that is no view of its input)."""
    name: str
    kind: str
    inputs: tuple
    build: object

    def graph(self):
        g = Graph(self.name)
        xs = [g.input(TensorType(x.shape, x.dtype), f"x{k}") for k, x in enumerate(self.inputs)]
        out = self.build(g, *xs)
        g.output(out, "y")
        return g, xs, out

    def tensors(self, device, gen=None) -> list:
        """Fresh data (floats normal, integers in ``[0, high)`` less 25 where not an index, bools
        half true), each input a view of its base where it has one."""
        out = []
        for x in self.inputs:
            base = x.base or x.shape
            dt = TORCH[x.dtype]
            if device == "meta":
                t = torch.empty(base, dtype=dt, device="meta")
            elif x.dtype == "bool":
                t = torch.rand(base, generator=gen, device=device) < 0.5
            elif dt.is_floating_point:
                t = torch.randn(base, generator=gen, device=device).to(dt)
            else:
                t = torch.randint(0, x.high, base, generator=gen, device=device).to(dt)
            out.append(x.view(t) if x.view is not None else t)
        return out

    def problem(self, tensors=None) -> PointwiseProblem:
        g, xs, out = self.graph()
        tensors = tensors if tensors is not None else self.tensors("meta")
        strides = {v: tuple(t.stride()) for v, t in zip(xs, tensors)}
        offsets = {v: t.storage_offset() for v, t in zip(xs, tensors)}
        if self.kind == "concat":
            return concat_problem(out.producer, strides.__getitem__, offsets.__getitem__)
        if self.kind == "copy":
            (x,) = xs
            return copy_problem(out.producer, Layout(x, x.shape, strides[x], offsets[x]))
        return pointwise_problem(g.nodes, xs, [out], strides.__getitem__, offsets.__getitem__)

    def operands(self, tensors) -> list:
        """The tensors the kernel takes, in its argument order (``kernel_operands``)."""
        g, xs, out = self.graph()
        nodes = [out.producer] if self.kind == "concat" else g.nodes
        by_value = dict(zip(xs, tensors))
        return [by_value[v] for v in kernel_operands(nodes, xs)]

    def output(self, device, tensors):
        """The output the kernel writes, poisoned (NaN, or ``SENTINEL``): a copy writes its input's shape."""
        _, _, out = self.graph()
        shape = tuple(tensors[0].shape) if self.kind == "copy" else out.shape
        dt = TORCH[out.dtype]
        return torch.full(shape, float("nan") if dt.is_floating_point else SENTINEL, dtype=dt, device=device)

    def reference(self, tensors) -> torch.Tensor:
        """The result by the IR's references on the CPU, floats in float64."""
        g, xs, out = self.graph()
        env = {v: (t.cpu().double() if t.dtype.is_floating_point else t.cpu()) for v, t in zip(xs, tensors)}
        for n in g.nodes:
            res = opdef(n.op).reference(torch, *[env[v] for v in n.inputs], **n.attrs)
            env[n.outputs[0]] = res
        return env[out]

    def check(self, got, tensors) -> None:
        """``got`` (the kernel's output, any device) equals the reference: exactly for data movement
        and integers, within the type's tolerance for float arithmetic; no element left poisoned."""
        ref = self.reference(tensors)
        got = got.cpu().reshape(ref.shape)
        if got.dtype.is_floating_point:
            assert not got.isnan().any()
            dtype = self.graph()[2].dtype
            if self.name.startswith(("iota_scaled", "gather_strided", "rope_folded")):
                err = ((got.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
                assert err < TOL[dtype], err
            else:
                assert torch.equal(got.double(), ref.to(got.dtype).double())
        else:
            if got.dtype != torch.bool:
                assert not (got == SENTINEL).any()
            assert torch.equal(got, ref.to(got.dtype))


def _iota(g, length, dtype="i64", start=0, step=1):
    return g.op("iota", length=length, dtype=dtype, start=start, step=step)


def _gather_mask(g, a, b, table):
    index = g.op("add", a, b)
    return g.op("where", g.op("index_select", table, index, axis=0), g.op("constant", value=0.0, dtype="f32"),
                g.op("constant", value=float("-inf"), dtype="f32"))


CASES = [
    # position ids over a batch: x + iota along the last axis (an i64 vector of 2)
    IndexCase("iota_positions-i64", "pointwise", (Input((4, 512), "i64"),),
              lambda g, x: g.op("add", x, _iota(g, 512))),
    # i32 positions from -5 by 3
    IndexCase("iota_offset-i32", "pointwise", (Input((7, 33), "i32"),),
              lambda g, x: g.op("add", x, _iota(g, 33, "i32", start=-5, step=3))),
    # a float scale counting down: y * float(3 - 2 i)
    IndexCase("iota_scaled-f32", "pointwise", (Input((5, 96), "f32"),),
              lambda g, y: g.op("mul", y, g.op("cast", _iota(g, 96, start=3, step=-2), dtype="f32"))),
    # the loss's shifted labels: cat(labels[:, 1:], -100), the slice read in place (8-byte aligned)
    IndexCase("concat_shift_labels-i64", "concat", (Input((6, 39), "i64", (6, 40), lambda t: t[:, 1:]),),
              lambda g, x: g.op("concat", x, g.op("constant", value=-100, dtype="i64", shape=(6, 1)), axis=1)),
    # two halves along the last axis, one a slice at an offset: 16-byte vectors inside each window
    IndexCase("concat_halves-f32", "concat", (Input((3, 5, 32), "f32"), Input((3, 5, 32), "f32", (3, 5, 40),
                                                                             lambda t: t[..., 8:])),
              lambda g, x, y: g.op("concat", x, y, axis=2)),
    # along a middle axis, with a constant fill between: vectors along the last axis share a window
    IndexCase("concat_middle-bf16", "concat", (Input((2, 3, 24), "bf16"), Input((2, 5, 24), "bf16")),
              lambda g, x, y: g.op("concat", x, g.op("constant", value=0.5, dtype="bf16", shape=(2, 1, 24)), y,
                                   axis=1)),
    # a transposed input gathered lane by lane, each lane clamped into its window on its own
    IndexCase("concat_gathered-f32", "concat", (Input((16, 8), "f32", (8, 16), lambda t: t.t()),
                                                Input((16, 16), "f32")),
              lambda g, x, y: g.op("concat", x, y, axis=1)),
    # flattening a shifted slice (strides [41, 1], offset 1): one i64 copy
    IndexCase("copy_shifted-i64", "copy", (Input((6, 40), "i64", (6, 41), lambda t: t[:, 1:]),),
              lambda g, x: g.op("reshape", x, shape=(240,))),
    # a head merge of permuted heads: [B, H, T, D] -> [B, T, H * D]
    IndexCase("copy_heads-f32", "copy", (Input((2, 5, 3, 8), "f32", (2, 3, 5, 8), lambda t: t.permute(0, 2, 1, 3)),),
              lambda g, x: g.op("reshape", x, shape=(2, 5, 24))),
    # the padding mask's vmapped lookup: where(mask[a + b], 0, -inf) from a bool table
    IndexCase("gather_mask-bool", "pointwise", (Input((6, 1), "i64", high=120), Input((1, 40), "i64", high=120),
                                                Input((240,), "bool")),
              _gather_mask),
    # RoPE's forward with its rotate-half concat folded in: q * cos + cat(-x2, x1) * sin, the halves
    # read in place through windows (each a slice of its own buffer here)
    IndexCase("rope_folded-f32", "pointwise",
              (Input((2, 3, 8, 16), "f32"), Input((8, 16), "f32"), Input((8, 16), "f32"),
               Input((2, 3, 8, 8), "f32", (2, 3, 8, 16), lambda t: t[..., 8:]),
               Input((2, 3, 8, 8), "f32", (2, 3, 8, 16), lambda t: t[..., :8])),
              lambda g, q, cos, sin, x2, x1: g.op("add", g.op("mul", q, cos),
                                                  g.op("mul", g.op("concat", g.op("neg", x2), x1, axis=3), sin))),
    # its backward after the slices sink: cat(g2 * sin2, -(g1 * sin1)) + dq * cos, each piece a product
    # of two windowed slices (the table's broadcast over batch and heads), in bf16
    IndexCase("rope_folded_backward-bf16", "pointwise",
              (Input((2, 3, 8, 16), "bf16"), Input((8, 16), "bf16"),
               Input((2, 3, 8, 8), "bf16", (2, 3, 8, 16), lambda t: t[..., 8:]),
               Input((8, 8), "bf16", (8, 16), lambda t: t[:, 8:]),
               Input((2, 3, 8, 8), "bf16", (2, 3, 8, 16), lambda t: t[..., :8]),
               Input((8, 8), "bf16", (8, 16), lambda t: t[:, :8])),
              lambda g, dq, cos, g2, s2, g1, s1: g.op("add", g.op("concat", g.op("mul", g2, s2),
                                                                  g.op("neg", g.op("mul", g1, s1)), axis=3),
                                                      g.op("mul", dq, cos))),
    # the same under bf16 autocast (dq bf16, the tables f32): each piece casts its window of dq to f32
    # itself (the slices sunk through the cast), so dq is read in bf16, whole and by halves
    IndexCase("rope_folded_backward_autocast-bf16", "pointwise",
              (Input((2, 3, 8, 16), "bf16"), Input((8, 16), "f32"),
               Input((2, 3, 8, 8), "bf16", (2, 3, 8, 16), lambda t: t[..., 8:]),
               Input((8, 8), "f32", (8, 16), lambda t: t[:, 8:]),
               Input((2, 3, 8, 8), "bf16", (2, 3, 8, 16), lambda t: t[..., :8]),
               Input((8, 8), "f32", (8, 16), lambda t: t[:, :8])),
              lambda g, dq, cos, g2, s2, g1, s1: g.op("add", g.op("cast", g.op("mul", g.op("cast", dq, dtype="f32"), cos),
                                                                  dtype="bf16"),
                                                      g.op("concat",
                                                           g.op("cast", g.op("mul", g.op("cast", g2, dtype="f32"), s2),
                                                                dtype="bf16"),
                                                           g.op("neg", g.op("cast", g.op("mul", g.op("cast", g1,
                                                                                                    dtype="f32"), s1),
                                                                                dtype="bf16")), axis=3))),
    # an f16 table read every other element, i32 indices, then an add
    IndexCase("gather_strided-f16", "pointwise", (Input((50,), "f16", (100,), lambda t: t[::2]),
                                                  Input((3, 64), "i32", high=50), Input((3, 64), "f16")),
              lambda g, table, index, x: g.op("add", g.op("index_select", table, index, axis=0), x)),
]


# --------------------------------------------------------------------------- Hugging Face steps
HF_BATCH, HF_SEQ = 2, 32


def hf_tiny(device, which: str, padded: bool):
    """A tiny Hugging Face GPT-2 or Llama (heads of 64), AdamW and the training step (``padded``: it
    takes an attention mask and ignores the padded labels) the GPU tests compile."""
    from nova.models import TrainRecipe, make_train_step
    from nova.models.hf import HFCausalLM, HFConfig
    cfg = HFConfig(which, vocab_size=96, n_embd=128, n_layer=2, n_head=2, block_size=HF_SEQ,
                   **({"n_kv_head": 1, "hidden_dim": 128} if which == "llama" else {}))
    if device == "meta":
        with torch.device("meta"):
            model = HFCausalLM(cfg)
    else:
        model = HFCausalLM(cfg, seed=0).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return model, opt, make_train_step(model, opt, TrainRecipe(padded=padded))


def hf_batch(seed: int, device, padded: bool) -> tuple:
    """Token ids, their targets and (``padded``) a right-padded mask: row 1 keeps 20 tokens."""
    gen = torch.Generator(device=device).manual_seed(seed)
    idx = torch.randint(0, 96, (HF_BATCH, HF_SEQ), generator=gen, device=device)
    if not padded:
        return idx, idx
    mask = torch.ones(HF_BATCH, HF_SEQ, dtype=torch.long, device=device)
    mask[1, 20:] = 0
    return idx, idx, mask


def hf_tiny_planned(which: str, padded: bool, target=None):
    """The plan of the tiny Hugging Face step (captured on the meta device): for ``target`` (a GPU
    preset name) as ``nova.compile`` plans it on that GPU (``plan_cache.plan``: the memory policy,
    the launches' allocations), else the passes' plan for the CPU."""
    from nova.frontend import capture
    from nova.passes import pipeline
    model, opt, step = hf_tiny("meta", which, padded)
    args = hf_batch(0, "cpu", padded)
    args = tuple(torch.empty(a.shape, dtype=a.dtype, device="meta") for a in args)
    graph = capture(step, args, models=[model], optimizers=[opt], name=f"hf_{which}_tiny").graph
    if target is None:
        return pipeline(graph)
    from nova.compiler import plan_cache
    from nova.hwmodel import get_target
    return plan_cache.plan(graph, get_target(target), "cuda")[0]
