"""The IR's closed set of ops.  Each op is defined once, here: its kind, its type rule and its
reference semantics on torch CPU tensors (what the interpreter runs and every pass is tested
against).  Kinds, for passes and the planner:

    matmul     matmul                                  tensor cores (Nova GEMM kernels)
    pointwise  add, mul, exp, gelu_tanh, where, cast …  elementwise with NumPy broadcasting
    reduce     sum, mean, max, min                     over ``axes``
    view       reshape, permute, expand, slice         no data movement where strides allow
    memory     concat, index_select, take_along_axis, scatter_add
    creation   constant, iota
    composite  attention(+backward), layer_norm(+backward), rms_norm(+backward), softmax/log_softmax(+backward),
               nll_loss(+backward), cross_entropy(+backward),
               adamw, sgd                              ops with a dedicated kernel
    collective all_reduce, reduce_scatter, all_gather  across the ranks of a process group
    transfer   offload, reload                          copies between device and host memory (copy engines)
    opaque     aten                                    an ATen op the IR does not know (listed by explain)

Attributes are plain Python values (int, float, bool, str, tuples of them, None) so that graphs
print, hash and compare structurally.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from nova.ir.types import TORCH_NAMES, IRError, TensorType, broadcast_shapes, promote, promote_operands


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    infer: Callable[[list[TensorType], dict], list[TensorType]]   # input types, attrs -> result types
    reference: Callable                                          # (torch, *tensors, **attrs) -> tensor | tuple
    arity: int | None = None                                     # None: variadic
    required: tuple[str, ...] = ()                               # attributes that must be present
    doc: str = ""


OPS: dict[str, OpDef] = {}


def define(name, kind, infer, reference, arity=None, required=(), doc=""):
    OPS[name] = OpDef(name, kind, infer, reference, arity, tuple(required), doc)


def opdef(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise IRError(f"unknown IR op {name!r}") from None


def infer(op: str, types: list[TensorType], attrs: dict) -> list[TensorType]:
    """Result types of ``op`` on inputs of ``types`` (raises IRError naming the op on a mismatch)."""
    d = opdef(op)
    if d.arity is not None and len(types) != d.arity:
        raise IRError(f"{op} takes {d.arity} inputs, got {len(types)}")
    missing = [a for a in d.required if a not in attrs]
    if missing:
        raise IRError(f"{op} needs attribute(s) {', '.join(missing)}")
    try:
        return d.infer(types, attrs)
    except IRError as e:
        raise IRError(f"{op}: {e}") from None


def kind(op: str) -> str:
    return opdef(op).kind


def _torch_dtype(torch, name: str):
    return getattr(torch, TORCH_NAMES[name])


# =============================================================== matmul
def _infer_matmul(types, attrs):
    a, b = types
    if a.rank < 2 or b.rank < 2:
        raise IRError(f"operands must have rank >= 2, got {a} and {b}")
    m, k = (a.shape[-1], a.shape[-2]) if attrs.get("transpose_a") else a.shape[-2:]
    k_b, n = (b.shape[-1], b.shape[-2]) if attrs.get("transpose_b") else b.shape[-2:]
    if k != k_b:
        raise IRError(f"inner dimensions differ: {a} and {b} "
                      f"(transpose_a={bool(attrs.get('transpose_a'))}, transpose_b={bool(attrs.get('transpose_b'))})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return [TensorType(batch + (m, n), attrs.get("out_dtype") or promote(a.dtype, b.dtype))]


def _ref_matmul(torch, a, b, transpose_a=False, transpose_b=False, out_dtype=None):
    out = (a.mT if transpose_a else a) @ (b.mT if transpose_b else b)
    return out.to(_torch_dtype(torch, out_dtype)) if out_dtype else out


define("matmul", "matmul", _infer_matmul, _ref_matmul, 2,
       doc="[..., M, K] x [..., K, N] -> [..., M, N]; transpose_a/b read the operand's last two axes swapped")


# =============================================================== pointwise
def _torch(name):
    """The reference of an op that is torch's function of the same name."""
    return lambda torch, *xs: getattr(torch, name)(*xs)


def _aten(name, **fixed):
    return lambda torch, *xs: getattr(torch.ops.aten, name)(*xs, **fixed)


POINTWISE = {
    # name: (arity, reference(torch, *xs, **attrs), result-type rule)
    "neg": (1, lambda t, x: -x, "same"),
    "silu": (1, lambda t, x: t.nn.functional.silu(x), "same"),
    "gelu_tanh": (1, lambda t, x: t.nn.functional.gelu(x, approximate="tanh"), "same"),
    "gelu_erf": (1, lambda t, x: t.nn.functional.gelu(x), "same"),
    "cast": (1, lambda t, x, dtype: x.to(_torch_dtype(t, dtype)), "attr"),
    "gelu_tanh_backward": (2, _aten("gelu_backward", approximate="tanh"), "promote"),
    "gelu_erf_backward": (2, _aten("gelu_backward"), "promote"),
    "relu_backward": (2, lambda t, dy, y: t.ops.aten.threshold_backward(dy, y, 0), "promote"),
}
# The ops whose reference is torch's function (or, for a backward, ATen's op) of the same name,
# by (arity, result-type rule)
for _names, _arity, _rule in (
        ("exp log sqrt rsqrt reciprocal abs tanh erf sin cos sigmoid relu", 1, "same"),
        ("logical_not", 1, "bool"),
        ("add sub mul pow maximum minimum", 2, "promote"),
        ("div", 2, "promote_float"),
        ("eq ne lt le gt ge logical_and logical_or", 2, "bool"),
        ("where", 3, "promote_last2")):
    POINTWISE.update({n: (_arity, _torch(n), _rule) for n in _names.split()})
POINTWISE.update({n: (2, _aten(n), "promote") for n in ("silu_backward", "sigmoid_backward", "tanh_backward")})


def _pointwise_infer(name, rule):
    def infer_fn(types, attrs):
        shape = broadcast_shapes(*(t.shape for t in types))
        if rule == "same":
            dtype = types[0].dtype
        elif rule == "bool":
            dtype = "bool"
        elif rule == "attr":
            dtype = attrs["dtype"]
        elif rule == "promote_last2":
            if types[0].dtype != "bool":
                raise IRError(f"condition must be bool, got {types[0]}")
            dtype = promote_operands(types[1:])
        else:
            dtype = promote_operands(types)
            if rule == "promote_float" and dtype not in ("f64", "f32", "bf16", "f16"):
                dtype = "f32"                      # true division of integers (torch's default float)
        return [TensorType(shape, dtype)]
    return infer_fn


for _name, (_arity, _ref, _rule) in POINTWISE.items():
    define(_name, "pointwise", _pointwise_infer(_name, _rule), _ref, _arity,
           required=("dtype",) if _rule == "attr" else ())


# =============================================================== reductions
def _infer_reduce(types, attrs):
    (x,) = types
    axes = tuple(a % x.rank for a in attrs["axes"]) if x.rank else ()
    keep = attrs.get("keepdim", False)
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keep else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorType(shape, attrs.get("dtype") or x.dtype)]


def _reducer(fn):
    def ref(torch, x, axes, keepdim=False, dtype=None):
        if dtype:
            x = x.to(_torch_dtype(torch, dtype))
        if not axes:
            return x.clone()
        if fn in ("max", "min"):
            return getattr(torch, "amax" if fn == "max" else "amin")(x, dim=tuple(axes), keepdim=keepdim)
        return getattr(torch, fn)(x, dim=tuple(axes), keepdim=keepdim)
    return ref


for _fn in ("sum", "mean", "max", "min"):
    define(_fn, "reduce", _infer_reduce, _reducer(_fn), 1, required=("axes",))


# =============================================================== views
def _infer_reshape(types, attrs):
    (x,) = types
    shape = tuple(attrs["shape"])
    if math.prod(shape) != x.numel:
        raise IRError(f"cannot reshape {x} to {list(shape)}")
    return [x.with_shape(shape)]


def _infer_permute(types, attrs):
    (x,) = types
    perm = tuple(attrs["perm"])
    if sorted(perm) != list(range(x.rank)):
        raise IRError(f"{list(perm)} is not a permutation of {x.rank} axes")
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


def _infer_expand(types, attrs):
    (x,) = types
    shape = tuple(attrs["shape"])
    if broadcast_shapes(x.shape, shape) != shape:
        raise IRError(f"cannot expand {x} to {list(shape)}")
    return [x.with_shape(shape)]


def _infer_slice(types, attrs):
    (x,) = types
    axis = attrs["axis"] % x.rank
    start, end, step = attrs["start"], attrs["end"], attrs.get("step", 1)
    if not (0 <= start <= end <= x.shape[axis]) or step < 1:
        raise IRError(f"slice [{start}:{end}:{step}] out of range for axis {axis} of {x}")
    shape = list(x.shape)
    shape[axis] = len(range(start, end, step))
    return [x.with_shape(shape)]


def _ref_slice(torch, x, axis, start, end, step=1):
    index = [slice(None)] * x.dim()
    index[axis] = slice(start, end, step)
    return x[tuple(index)]


define("reshape", "view", _infer_reshape, lambda t, x, shape: x.reshape(shape), 1, ("shape",))
define("permute", "view", _infer_permute, lambda t, x, perm: x.permute(perm), 1, ("perm",))
define("expand", "view", _infer_expand, lambda t, x, shape: x.expand(shape), 1, ("shape",))
define("slice", "view", _infer_slice, _ref_slice, 1, ("axis", "start", "end"))


# =============================================================== memory
def _infer_concat(types, attrs):
    axis = attrs["axis"] % types[0].rank
    first = types[0]
    for t in types[1:]:
        if t.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != axis):
            raise IRError(f"cannot concatenate {first} and {t} along axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in types)
    return [TensorType(tuple(shape), promote(*(t.dtype for t in types)))]


def _infer_index_select(types, attrs):
    x, index = types
    axis = attrs["axis"] % x.rank
    if index.dtype not in ("i64", "i32"):
        raise IRError(f"index must be an integer tensor, got {index}")
    return [x.with_shape(x.shape[:axis] + index.shape + x.shape[axis + 1:])]


def _ref_index_select(torch, x, index, axis):
    out = torch.index_select(x, axis, index.reshape(-1))
    return out.reshape(x.shape[:axis] + index.shape + x.shape[axis + 1:])


def _infer_take_along_axis(types, attrs):
    x, index = types
    if index.rank != x.rank:
        raise IRError(f"index {index} must have the rank of {x}")
    return [x.with_shape(index.shape)]


def _infer_scatter_add(types, attrs):
    src, index = types
    shape = tuple(attrs["shape"])
    axis = attrs["axis"] % len(shape)
    expected = shape[:axis] + index.shape + shape[axis + 1:]
    if src.shape != expected:
        raise IRError(f"src {src} must have shape {list(expected)} to scatter along axis {axis} into {list(shape)}")
    return [src.with_shape(shape)]


def _ref_scatter_add(torch, src, index, axis, shape):
    flat = src.reshape(tuple(shape[:axis]) + (-1,) + tuple(shape[axis + 1:]))
    out = torch.zeros(shape, dtype=src.dtype)
    return out.index_add(axis, index.reshape(-1), flat)


define("concat", "memory", _infer_concat, lambda t, *xs, axis: t.cat(xs, axis), None, ("axis",))
define("index_select", "memory", _infer_index_select, _ref_index_select, 2, ("axis",),
       doc="embedding lookup: x with `axis` replaced by index's shape")
define("take_along_axis", "memory", _infer_take_along_axis,
       lambda t, x, index, axis: t.gather(x, axis, index), 2, ("axis",))
define("scatter_add", "memory", _infer_scatter_add, _ref_scatter_add, 2, ("axis", "shape"),
       doc="the transpose of index_select: zeros(shape) with src's rows added at index (embedding backward)")


# =============================================================== creation
define("constant", "creation",
       lambda types, attrs: [TensorType(tuple(attrs.get("shape", ())), attrs["dtype"])],
       lambda t, value, dtype, shape=(): t.full(tuple(shape), value, dtype=_torch_dtype(t, dtype)),
       0, ("value", "dtype"))
define("iota", "creation",
       lambda types, attrs: [TensorType((attrs["length"],), attrs["dtype"])],
       lambda t, length, dtype, start=0, step=1:
           t.arange(start, start + length * step, step, dtype=_torch_dtype(t, dtype)),
       0, ("length", "dtype"))


# =============================================================== composites
# scale q k^T + bias below it is clamped there: exp(-1e4 - max) is 0 in FP32 beside any key a row keeps, and
# the value stays small enough that the kernels' base-2 exponents of a fully masked row (-1.4e4) keep ~1e-3
# absolute accuracy in FP32 (a -5e29 floor would leave them none).  nova/ir imports nothing of nova, so the
# attention kernels state the same floor (``nova.kernels.attention.problem.BIAS_FLOOR``; a test ties them)
ATTENTION_BIAS_FLOOR = -1.0e4


def _check_attention_bias(q, bias):
    """An attention bias: a float ``[B|1, H|1, Tq|1, Tk]`` tensor (scores ``[B, H, Tq, Tk]``)."""
    if bias.dtype not in ("f32", "f64") or bias.rank != 4:
        raise IRError(f"the attention bias must be an f32/f64 [B|1, H|1, Tq|1, Tk] tensor, got {bias}")


def _infer_attention(types, attrs):
    if len(types) not in (3, 4):
        raise IRError(f"attention takes q, k, v and an optional bias, got {len(types)} inputs")
    q, k, v = types[:3]
    if q.rank != 4 or k.rank != 4 or v.rank != 4:
        raise IRError(f"attention takes [B, H, T, D] operands, got {q}, {k}, {v}")
    if k.shape[:2] != v.shape[:2] or k.shape[2] != v.shape[2] or q.shape[3] != k.shape[3] \
            or q.shape[0] != k.shape[0] or q.shape[1] % k.shape[1]:
        raise IRError(f"attention operands do not agree: q {q}, k {k}, v {v}")
    if len(types) == 4:
        _check_attention_bias(q, types[3])
        scores = q.shape[:3] + (k.shape[2],)
        if any(n not in (1, m) for n, m in zip(types[3].shape, scores)) or types[3].shape[3] != k.shape[2]:
            raise IRError(f"the attention bias {types[3]} does not broadcast to the scores {list(scores)} "
                          f"(it needs [B|1, H|1, Tq|1, Tk])")
    out = TensorType(q.shape[:3] + (v.shape[3],), q.dtype)
    return [out, TensorType(q.shape[:3], "f64" if q.dtype == "f64" else "f32")]


def _wide(torch, x):
    """At least FP32 (the accumulator precision of every attention kernel)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _attention_scores(torch, q, k, scale, causal, bias=None):
    """The scores softmax reads: scale q k^T (at least FP32), plus the bias, clamped from below at
    ``ATTENTION_BIAS_FLOOR``, the causal mask (-inf) on top."""
    if k.shape[1] != q.shape[1]:                          # grouped-query: repeat K/V heads
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    s = (_wide(torch, q) @ _wide(torch, k).mT) * scale
    if bias is not None:
        s = (s + bias.to(s.dtype)).nan_to_num(nan=ATTENTION_BIAS_FLOOR).clamp_min(ATTENTION_BIAS_FLOOR)
    if causal:
        t_q, t_k = s.shape[-2:]
        mask = torch.ones(t_q, t_k, dtype=torch.bool, device=s.device).tril(t_k - t_q)
        s = s.masked_fill(~mask, float("-inf"))
    return s


def _attention_probabilities(torch, q, k, scale, causal, bias=None):
    """P and lse; with a bias, a row whose every visible score sits at the floor is masked: lse = +inf,
    so P (and the output) is 0 across it and the backward's exp(s - lse) gives it no gradient."""
    s = _attention_scores(torch, q, k, scale, causal, bias)
    lse = torch.logsumexp(s, dim=-1)
    if bias is not None:
        lse = lse.masked_fill(s.amax(dim=-1) <= ATTENTION_BIAS_FLOOR, float("inf"))
    return torch.exp(s - lse[..., None]), lse


def _ref_attention(torch, q, k, v, bias=None, *, scale, causal=False):
    p, lse = _attention_probabilities(torch, q, k, scale, causal, bias)
    if v.shape[1] != q.shape[1]:
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return (p @ _wide(torch, v)).to(q.dtype), lse


def _ref_attention_backward(torch, dout, q, k, v, out, lse, bias=None, *, scale, causal=False):
    """dS = P (dP - D) wherever P is computed: the bias's clamp passes the gradient through (as eager's
    autograd does for ``s + finfo.min``); the bias itself gets none."""
    groups = q.shape[1] // k.shape[1]
    kk = k.repeat_interleave(groups, dim=1) if groups > 1 else k
    vv = v.repeat_interleave(groups, dim=1) if groups > 1 else v
    s = _attention_scores(torch, q, kk, scale, causal, bias)
    p = torch.exp(s - lse[..., None])
    do = _wide(torch, dout)
    dv = p.mT @ do
    dp = do @ _wide(torch, vv).mT
    ds = p * (dp - (do * _wide(torch, out)).sum(-1, keepdim=True))
    dq = (ds @ _wide(torch, kk)) * scale
    dk = (ds.mT @ _wide(torch, q)) * scale
    if groups > 1:
        dk = dk.unflatten(1, (k.shape[1], groups)).sum(2)
        dv = dv.unflatten(1, (v.shape[1], groups)).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _infer_attention_backward(types, attrs):
    if len(types) not in (6, 7):
        raise IRError(f"attention_backward takes dout, q, k, v, out, lse and an optional bias, got {len(types)} inputs")
    if len(types) == 7:
        _infer_attention([types[1], types[2], types[3], types[6]], attrs)
    return [types[1], types[2], types[3]]


define("attention", "composite", _infer_attention, _ref_attention, None, ("scale",),
       doc="(q, k, v[, bias]) -> (out, per-row log-sum-exp f32): softmax(q k^T * scale [+ bias, clamped from below "
           "at ATTENTION_BIAS_FLOOR] [+ causal mask]) v; bias [B|1, H|1, Tq|1, Tk], float, no gradient; a row "
           "whose every visible score is at the floor gives out 0 and lse +inf")
define("attention_backward", "composite", _infer_attention_backward, _ref_attention_backward, None, ("scale",),
       doc="(dout, q, k, v, out, lse[, bias]) -> (dq, dk, dv), scores recomputed from lse")


def _norm_stats_type(x: TensorType, normalized_rank: int) -> TensorType:
    """mean and rstd: one per normalized row, in FP32 (f64 for f64 input): the accumulation type of
    ATen's CUDA kernel, which the reference follows for 16-bit inputs too."""
    return TensorType(x.shape[:x.rank - normalized_rank] + (1,) * normalized_rank, "f64" if x.dtype == "f64" else "f32")


def _infer_layer_norm(types, attrs):
    x = types[0]
    n = len(attrs["normalized_shape"])
    if tuple(x.shape[x.rank - n:]) != tuple(attrs["normalized_shape"]):
        raise IRError(f"normalized_shape {list(attrs['normalized_shape'])} does not end {x}")
    return [x, _norm_stats_type(x, n), _norm_stats_type(x, n)]


def _affine_args(rest, has_weight, has_bias):
    rest = list(rest)
    weight = rest.pop(0) if has_weight else None
    bias = rest.pop(0) if has_bias else None
    return weight, bias


def _widen_all(torch, *xs):
    return [None if x is None else _wide(torch, x) for x in xs]


def _ref_layer_norm(torch, x, *affine, normalized_shape, eps, has_weight=True, has_bias=True):
    """Computed in at least FP32 with FP32 statistics (the type rule; CPU's own bf16/f16 kernel
    would keep the statistics in the input type)."""
    weight, bias = _affine_args(affine, has_weight, has_bias)
    y, mean, rstd = torch.ops.aten.native_layer_norm(*_widen_all(torch, x), list(normalized_shape),
                                                     *_widen_all(torch, weight, bias), eps)
    return y.to(x.dtype), mean, rstd


def _infer_layer_norm_backward(types, attrs):
    x = types[1]
    outs = [x]
    n_affine = len(types) - 4
    outs += [types[4 + i] for i in range(n_affine)]
    return outs


def _ref_layer_norm_backward(torch, dy, x, mean, rstd, *affine, normalized_shape, has_weight=True, has_bias=True):
    weight, bias = _affine_args(affine, has_weight, has_bias)
    mask = [True, has_weight, has_bias]
    wdy, wx, wmean, wrstd, ww, wb = _widen_all(torch, dy, x, mean, rstd, weight, bias)
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(wdy, wx, list(normalized_shape), wmean, wrstd, ww, wb, mask)
    outs = (dx.to(x.dtype), None if dw is None else dw.to(weight.dtype), None if db is None else db.to(bias.dtype))
    return tuple(t for t, keep in zip(outs, mask) if keep)


define("layer_norm", "composite", _infer_layer_norm, _ref_layer_norm, None, ("normalized_shape", "eps"),
       doc="(x[, weight][, bias]) -> (y, mean, rstd)")
define("layer_norm_backward", "composite", _infer_layer_norm_backward, _ref_layer_norm_backward, None,
       ("normalized_shape",), doc="(dy, x, mean, rstd[, weight][, bias]) -> (dx[, dweight][, dbias])")

def _infer_rms_norm(types, attrs):
    x = types[0]
    if x.rank < 1:
        raise IRError(f"rms_norm normalizes the last axis of a tensor, got {x}")
    if attrs.get("has_weight", True) and (len(types) != 2 or types[1].shape != x.shape[-1:]):
        raise IRError(f"rms_norm's weight must be [{x.shape[-1]}], got {types[1:]}")
    return [TensorType(x.shape, attrs.get("dtype", x.dtype)), _norm_stats_type(x, 1)]


def _ref_rms_norm(torch, x, *weight, eps, has_weight=True, dtype=None):
    """y = x * rsqrt(mean(x^2, last axis) + eps) [* weight] in at least FP32; rstd f32 (keepdim)."""
    wx = _wide(torch, x)
    rstd = torch.rsqrt(wx.pow(2).mean(-1, keepdim=True) + eps)
    y = wx * rstd
    if has_weight:
        y = y * _wide(torch, weight[0])
    return y.to(_torch_dtype(torch, dtype) if dtype else x.dtype), rstd


def _infer_rms_norm_backward(types, attrs):
    dy, x = types[0], types[1]
    outs = [TensorType(x.shape, attrs.get("dtype", x.dtype))]
    if attrs.get("has_weight", True) and attrs.get("weight_grad", True):
        outs.append(types[3])
    return outs


def _ref_rms_norm_backward(torch, dy, x, rstd, *weight, has_weight=True, weight_grad=True, dtype=None):
    """dx = rstd * g - x * rstd^3 * mean(g * x, last axis) with g = dy [* weight];
    dweight = the sum over the rows of dy * x * rstd."""
    wdy, wx, wr = _widen_all(torch, dy, x, rstd)
    g = wdy * _wide(torch, weight[0]) if has_weight else wdy
    dx = wr * g - wx * wr.pow(3) * (g * wx).mean(-1, keepdim=True)
    outs = [dx.to(_torch_dtype(torch, dtype) if dtype else x.dtype)]
    if has_weight and weight_grad:
        dw = (wdy * wx * wr).reshape(-1, x.shape[-1]).sum(0)
        outs.append(dw.to(weight[0].dtype))
    return tuple(outs)


define("rms_norm", "composite", _infer_rms_norm, _ref_rms_norm, None, ("eps",),
       doc="(x[, weight]) -> (y, rstd): RMSNorm over the last axis (y's type: dtype, default x's)")
define("rms_norm_backward", "composite", _infer_rms_norm_backward, _ref_rms_norm_backward, None, (),
       doc="(dy, x, rstd[, weight]) -> (dx[, dweight]) (dx's type: dtype, default x's)")

define("softmax", "composite", lambda types, attrs: [types[0]],
       lambda t, x, axis: t.softmax(x, axis), 1, ("axis",))
define("log_softmax", "composite", lambda types, attrs: [types[0]],
       lambda t, x, axis: t.log_softmax(x, axis), 1, ("axis",))
define("softmax_backward", "composite", lambda types, attrs: [types[1]],
       lambda t, dy, y, axis: t.ops.aten._softmax_backward_data(dy, y, axis, y.dtype), 2, ("axis",),
       doc="(dy, y = softmax(x)) -> dx")
define("log_softmax_backward", "composite", lambda types, attrs: [types[1]],
       lambda t, dy, y, axis: t.ops.aten._log_softmax_backward_data(dy, y, axis, y.dtype), 2, ("axis",),
       doc="(dy, y = log_softmax(x)) -> dx")


def _infer_nll_loss(types, attrs):
    logp, target = types
    if logp.rank != 2 or target.shape != logp.shape[:1]:
        raise IRError(f"nll_loss takes [N, C] log-probabilities and [N] targets, got {logp}, {target}")
    scalar = TensorType((), logp.dtype)
    loss = TensorType(logp.shape[:1], logp.dtype) if attrs.get("reduction") == "none" else scalar
    return [loss, scalar]


define("nll_loss", "composite", _infer_nll_loss,
       lambda t, logp, target, reduction="mean", ignore_index=-100:
           t.ops.aten.nll_loss_forward(logp, target, None, {"none": 0, "mean": 1, "sum": 2}[reduction], ignore_index),
       2, doc="(log-probabilities [N, C], target [N]) -> (loss ([N] when reduction='none'), total_weight)")
define("nll_loss_backward", "composite", lambda types, attrs: [types[1]],
       lambda t, dloss, logp, target, total_weight, reduction="mean", ignore_index=-100:
           t.ops.aten.nll_loss_backward(dloss, logp, target, None, {"none": 0, "mean": 1, "sum": 2}[reduction],
                                        ignore_index, total_weight),
       4, doc="(dloss, logp, target, total_weight) -> dlogp")


CROSS_ENTROPY_REDUCTIONS = ("mean", "sum")


def _lse_dtype(dtype: str) -> str:
    """The log-sum-exp rows' type: f32 (f64 for f64 logits), like attention's."""
    return "f64" if dtype == "f64" else "f32"


def _check_cross_entropy(logits: TensorType, target: TensorType, attrs) -> None:
    if logits.rank != 2 or target.shape != logits.shape[:1] or not logits.is_float:
        raise IRError(f"takes float logits [N, C] and targets [N], got {logits}, {target}")
    if target.dtype not in ("i64", "i32"):
        raise IRError(f"targets must be an integer tensor, got {target}")
    if attrs.get("reduction", "mean") not in CROSS_ENTROPY_REDUCTIONS:
        raise IRError(f"reduction must be one of {', '.join(CROSS_ENTROPY_REDUCTIONS)}, "
                      f"got {attrs.get('reduction')!r}")


def _infer_cross_entropy(types, attrs):
    logits, target = types
    _check_cross_entropy(logits, target, attrs)
    return [TensorType((), logits.dtype), TensorType(logits.shape[:1], _lse_dtype(logits.dtype))]


def _infer_cross_entropy_backward(types, attrs):
    dloss, logits, target, lse = types
    _check_cross_entropy(logits, target, attrs)
    if dloss.shape != () or lse.shape != logits.shape[:1]:
        raise IRError(f"takes dloss [] and lse [N] with logits {logits}, got {dloss}, {lse}")
    return [logits]


def _cross_entropy_rows(torch, target, ignore_index):
    """(kept rows as a bool mask, targets with ignored rows pointing at class 0, as [N, 1] int64)."""
    keep = target != ignore_index
    return keep, torch.where(keep, target, 0).to(torch.int64)[:, None]


def _ref_cross_entropy(torch, logits, target, reduction="mean", ignore_index=-100):
    """torch's F.cross_entropy(logits, target, reduction=, ignore_index=) (no weights, no label
    smoothing) computed at least in FP32 (float64 exact for f64), and each row's log-sum-exp."""
    x = _wide(torch, logits)
    lse = torch.logsumexp(x, dim=-1)
    keep, safe = _cross_entropy_rows(torch, target, ignore_index)
    per_row = torch.where(keep, lse - x.gather(1, safe)[:, 0], 0)
    loss = per_row.sum()
    if reduction == "mean":
        loss = loss / keep.sum()                 # 0/0 = nan when every row is ignored, as torch
    return loss.to(logits.dtype), lse.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)


def _ref_cross_entropy_backward(torch, dloss, logits, target, lse, reduction="mean", ignore_index=-100):
    """d loss / d logits = (softmax(logits) - onehot(target)) * dloss / count per kept row, zero
    rows where target == ignore_index (count: the kept rows for 'mean', 1 for 'sum'; torch's
    gradient is zero when no row is kept).  softmax(logits) = exp(logits - lse)."""
    x = _wide(torch, logits)
    keep, safe = _cross_entropy_rows(torch, target, ignore_index)
    scale = dloss.to(x.dtype)
    if reduction == "mean":
        scale = scale / keep.sum().clamp_min(1)
    row = torch.where(keep, scale, 0).to(x.dtype)[:, None]               # [N, 1]
    dx = torch.exp(x - lse.to(x.dtype)[:, None]) * row
    dx.scatter_add_(1, safe, -row)
    return dx.to(logits.dtype)


define("cross_entropy", "composite", _infer_cross_entropy, _ref_cross_entropy, 2,
       doc="(logits [N, C], target [N]) -> (loss [], lse [N] f32): F.cross_entropy with reduction "
           "mean|sum and ignore_index, without writing log-probabilities")
define("cross_entropy_backward", "composite", _infer_cross_entropy_backward, _ref_cross_entropy_backward, 4,
       doc="(dloss [], logits, target, lse) -> dlogits = (softmax(logits) - onehot(target)) * dloss / count, "
           "ignored rows zero")


ADAMW_HYPER = ("lr", "beta1", "beta2", "eps", "weight_decay")       # adamw's ``hyper`` input, in order
SGD_HYPER = ("lr", "momentum", "dampening", "weight_decay")           # sgd's ``hyper`` input, in order


def ref_adamw(torch, param, grad, exp_avg, exp_avg_sq, step, hyper, decoupled=True, maximize=False):
    """torch.optim.AdamW's (``decoupled``) or Adam's single-tensor update, out of place.

    ``step`` is the step count after this update's increment; ``hyper`` the 1-D f64 tensor
    ``ADAMW_HYPER`` = [lr, beta1, beta2, eps, weight_decay], a runtime input (a learning-rate
    schedule changes it between steps without changing the program).  Its entries stay 0-d tensors
    here: a 0-d tensor does not promote a dimensioned one, so the arithmetic runs in the
    parameter's dtype like eager's Python-float scalars (a 0-d parameter's results, promoted to
    f64, are rounded back).  Adam's coupled decay: ``grad += wd *
    param`` after ``maximize``; AdamW's: ``param *= 1 - lr * wd``."""
    lr, beta1, beta2, eps, weight_decay = hyper.unbind(0)
    dtypes = (param.dtype, exp_avg.dtype, exp_avg_sq.dtype)
    if maximize:
        grad = -grad
    if decoupled:
        param = param * (1 - lr * weight_decay)
    else:
        grad = grad + weight_decay * param
    exp_avg = exp_avg.lerp(grad, (1 - beta1).to(exp_avg.dtype))
    exp_avg_sq = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
    t = step.to(torch.float64)
    bias_correction1 = 1 - beta1 ** t
    bias_correction2_sqrt = (1 - beta2 ** t).sqrt()
    denom = exp_avg_sq.sqrt() / bias_correction2_sqrt + eps
    new = (param - (lr / bias_correction1) * (exp_avg / denom), exp_avg, exp_avg_sq)
    return tuple(x.to(dtype) for x, dtype in zip(new, dtypes))


def _infer_hyper(op: str, hyper: TensorType, names: tuple) -> None:
    if hyper.shape != (len(names),) or hyper.dtype != "f64":
        raise IRError(f"{op}'s hyper-parameters must be f64[{len(names)}] ({', '.join(names)}), got {hyper}")


def _infer_adamw(types, attrs):
    param, grad, exp_avg, exp_avg_sq, step, hyper = types
    if not (param.shape == grad.shape == exp_avg.shape == exp_avg_sq.shape) or step.shape != ():
        raise IRError(f"adamw operands disagree: param {param}, grad {grad}, moments {exp_avg}, {exp_avg_sq}, step {step}")
    _infer_hyper("adamw", hyper, ADAMW_HYPER)
    return [param, exp_avg, exp_avg_sq]


define("adamw", "composite", _infer_adamw, ref_adamw, 6,
       doc="(param, grad, exp_avg, exp_avg_sq, step after increment, hyper f64[5] = lr, beta1, beta2, eps, "
           "weight_decay) -> (param', exp_avg', exp_avg_sq'); attrs decoupled (AdamW), maximize")


def ref_sgd(torch, param, grad, hyper, *buffer, with_momentum=False, nesterov=False, maximize=False):
    """torch.optim.SGD's single-tensor update, out of place; ``hyper`` is the 1-D f64 tensor
    ``SGD_HYPER`` = [lr, momentum, dampening, weight_decay] (a runtime input).  With momentum and
    without a buffer input the buffer starts as the gradient (torch's first step)."""
    lr, momentum, dampening, weight_decay = hyper.unbind(0)
    if maximize:
        grad = -grad
    grad = grad + weight_decay * param
    if with_momentum:       # the buffer keeps its own dtype (eager updates it in place), as it is read
        buf = (grad.clone() if not buffer else buffer[0] * momentum + grad * (1 - dampening)).to(
            buffer[0].dtype if buffer else param.dtype)
        grad = grad + momentum * buf if nesterov else buf
        return (param - lr * grad).to(param.dtype), buf
    return ((param - lr * grad).to(param.dtype),)       # a 0-d parameter: the f64 0-d rates would promote it


def _infer_sgd(types, attrs):
    param, _, hyper = types[:3]
    _infer_hyper("sgd", hyper, SGD_HYPER)
    return [param, types[3] if len(types) > 3 else param] if attrs.get("with_momentum") else [param]


define("sgd", "composite", _infer_sgd, ref_sgd, None,
       doc="(param, grad, hyper f64[4] = lr, momentum, dampening, weight_decay[, momentum_buffer]) -> "
           "(param'[, momentum_buffer']); attrs with_momentum, nesterov, maximize")


# =============================================================== collectives
# A collective runs across the ``world_size`` ranks of the process group named ``group`` (the c10d
# group name; the group itself is bound when the program runs, ``nova/compiler/collectives.py``).
# Its reference semantics is the result rank 0 sees when every rank holds the same inputs (what
# one process can state): all_reduce sum = world_size * x, avg = x; all_gather = world_size copies
# of x along axis 0; reduce_scatter = world_size * (rank 0's chunk of axis 0, avg: the chunk).
# With world_size 1 every collective is the identity.
REDUCE_OPS = ("sum", "avg")


def _check_collective(attrs):
    if "reduce_op" in attrs and attrs["reduce_op"] not in REDUCE_OPS:
        raise IRError(f"reduce_op must be one of {', '.join(REDUCE_OPS)}, got {attrs['reduce_op']!r}")
    if not isinstance(attrs["world_size"], int) or attrs["world_size"] < 1:
        raise IRError(f"world_size must be a positive integer, got {attrs['world_size']!r}")


def _infer_all_reduce(types, attrs):
    _check_collective(attrs)
    return [types[0]]


def _infer_all_gather(types, attrs):
    _check_collective(attrs)
    (x,) = types
    if x.rank < 1:
        raise IRError(f"gathers along axis 0 of a tensor of rank >= 1, got {x}")
    return [x.with_shape((x.shape[0] * attrs["world_size"],) + x.shape[1:])]


def _infer_reduce_scatter(types, attrs):
    _check_collective(attrs)
    (x,) = types
    n = attrs["world_size"]
    if x.rank < 1 or x.shape[0] % n:
        raise IRError(f"scatters axis 0 of {x} over {n} ranks: it must divide evenly")
    return [x.with_shape((x.shape[0] // n,) + x.shape[1:])]


def _ref_all_reduce(torch, x, reduce_op, group, world_size):
    return x.clone() if reduce_op == "avg" or world_size == 1 else x * world_size


def _ref_all_gather(torch, x, group, world_size):
    return torch.cat([x] * world_size, 0)


def _ref_reduce_scatter(torch, x, reduce_op, group, world_size):
    return _ref_all_reduce(torch, x[:x.shape[0] // world_size], reduce_op, group, world_size)


define("all_reduce", "collective", _infer_all_reduce, _ref_all_reduce, 1, ("reduce_op", "group", "world_size"),
       doc="x -> the elementwise sum (or mean, reduce_op avg) of x over the ranks of `group`")
define("all_gather", "collective", _infer_all_gather, _ref_all_gather, 1, ("group", "world_size"),
       doc="x [N, ...] -> [world_size * N, ...]: every rank's x, in rank order, along axis 0")
define("reduce_scatter", "collective", _infer_reduce_scatter, _ref_reduce_scatter, 1,
       ("reduce_op", "group", "world_size"),
       doc="x [world_size * N, ...] -> [N, ...]: this rank's chunk of the sum (or mean) of x over the ranks")


# =============================================================== transfer
def _infer_transfer(types, attrs):
    if not types:
        raise IRError("takes the tensor to copy (and, optionally, values it runs after)")
    return [types[0]]


def _ref_transfer(torch, x, *after):
    return x.clone()


define("offload", "transfer", _infer_transfer, _ref_transfer, None,
       doc="x, *after -> x's copy in host memory, complete once every value in `after` exists (they order "
           "the copy; it reads none of them)")
define("reload", "transfer", _infer_transfer, _ref_transfer, None,
       doc="h, *after -> h (a host copy) copied back to device memory, started once every value in `after` "
           "exists (they order the copy; it reads none of them)")


# =============================================================== opaque
def _infer_aten(types, attrs):
    return [TensorType(tuple(shape), dtype) for shape, dtype in attrs["result_types"]]


def _ref_aten(torch, *tensors, target, args, kwargs=(), result_types=(), layouts=()):
    """Call the ATen op ``target`` ("aten.foo.default"); ``args``/``kwargs`` hold constants, with
    ("$", i) standing for the i-th tensor input, dense (an op may need it so: eager's graph had copied
    it where the IR keeps a view).  ``layouts``: ``(i, strides)`` of inputs an op that reads storage
    (``as_strided``) must see as eager laid them out: a fresh tensor of those strides."""
    fn = torch.ops
    for part in target.split("."):
        fn = getattr(fn, part)
    laid_out = dict(layouts)     # the others dense: an IR value may be a strided view eager had copied
    tensors = [torch.empty_strided(t.shape, laid_out[i], dtype=t.dtype, device=t.device).copy_(t) if i in laid_out
               else t.contiguous() for i, t in enumerate(tensors)]

    def fill(a):
        if isinstance(a, tuple) and len(a) == 2 and a[0] == "$":
            return tensors[a[1]]
        if isinstance(a, tuple):
            return [fill(x) for x in a]
        return a
    out = fn(*[fill(a) for a in args], **{k: fill(v) for k, v in kwargs})
    return out


define("aten", "opaque", _infer_aten, _ref_aten, None, ("target", "args", "result_types"),
       doc="an ATen op the IR does not model; runs as itself (listed and counted by explain)")
