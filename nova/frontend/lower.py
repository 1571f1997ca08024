"""Lowering: a functional FX graph of ATen ops (what ``capture`` traces) -> ``nova.ir.Graph``.

One table, ``LOWERINGS``, maps each ATen overload to a small function ``(ctx, *args, **kwargs)``
that emits IR ops through ``ctx`` and returns the IR value(s) of the FX node (a tuple for ops with
several results, ``None`` for a result nothing models).  After each node the result is checked
against the fake tensor torch computed (``node.meta["val"]``): the shape must agree, a different
element type gets a ``cast`` (torch's own result type is the truth).

Python scalars become ``constant`` nodes in the op's math type (f32 for half types, the tensor's
type otherwise), views keep value semantics (``reshape``/``permute``/``expand``/``slice``), and
``detach``/``clone``/``alias`` are the identity.  Every IR node carries the FX node's
``meta["nova_origin"]`` (module path and source line).

An op without a lowering becomes the opaque ``aten`` op when all its arguments are tensors or
plain constants (counted in ``Lowered.opaque``), else one ``NovaUnsupportedError`` line naming the
op and where it came from.  Random ops (dropout with p > 0 in training, ``rand``...) are refused:
the compiled step could not reproduce eager's random stream.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch

from nova.frontend.errors import NovaUnsupportedError
from nova.ir import Graph, TensorType, Value
from nova.ir.types import FROM_TORCH_NAMES, IRError

aten = torch.ops.aten
LOWERINGS: dict = {}


def lowers(*targets):
    """Register a lowering for ATen overloads (targets missing from this torch are skipped)."""
    def register(fn):
        for target in targets:
            if target is not None:
                LOWERINGS[target] = fn
        return fn
    return register


def _op(packet: str, overload: str = "default"):
    """``aten.<packet>.<overload>`` if this torch has it (keeps the table valid across versions)."""
    pk = getattr(aten, packet, None)
    return getattr(pk, overload, None) if pk is not None else None


class UnsupportedDtype(NovaUnsupportedError):
    """A tensor whose element type the IR does not have (uint8, complex, float8...)."""


def ir_type(t: torch.Tensor, what: str = "") -> TensorType:
    name = str(t.dtype).removeprefix("torch.")
    if name not in FROM_TORCH_NAMES:
        raise UnsupportedDtype(f"element type {t.dtype} is not supported by Nova's IR{' (' + what + ')' if what else ''}")
    return TensorType(tuple(int(d) for d in t.shape), FROM_TORCH_NAMES[name])


class Unmodeled:
    """An FX result the IR does not model (a random seed, a padded log-sum-exp, a debug mask).
    Reading it anywhere but where its producer's partner expects it is an error."""

    def __init__(self, what: str, value: Value | None = None, error: str | None = None, bookkeeping: bool = False):
        self.what = what
        self.value = value
        self.error = error            # the one line to raise when read (an op Nova cannot run at all)
        self.bookkeeping = bookkeeping  # an attention kernel's seed, offset or debug mask without dropout: its
                                        # backward's lowering never reads it (a placeholder may stand for it)

    def refuse(self, message: str):
        raise NovaUnsupportedError(self.error or message)


class Fallback(Exception):
    """Raised by a lowering for an argument combination it does not handle: use the opaque op."""


@dataclass
class Lowered:
    graph: Graph
    outputs: list                 # the IR value of each FX output (None where the FX output is None)
    constants: list = field(default_factory=list)   # (name, real tensor) of each lifted constant input
    opaque: dict = field(default_factory=dict)      # aten target -> count of opaque nodes


# ====================================================================== the driver
class Lowerer:
    """Walks the FX graph in order; ``ctx`` for the lowering functions."""

    def __init__(self, gm: torch.fx.GraphModule, input_names: list[str], input_roles: list[str], name: str):
        self.gm = gm
        self.graph = Graph(name)
        self.input_names = input_names
        self.input_roles = input_roles
        self.env: dict = {}
        self.node = None
        self.origin = ""
        self.constants: list = []
        self.opaque: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers for lowerings
    @property
    def meta(self):
        return self.node.meta.get("val")

    def where(self) -> str:
        return f" at {self.origin}" if self.origin else ""

    def op(self, name: str, *inputs, **attrs):
        for v in inputs:
            if not isinstance(v, Value):
                message = f"{self.node.target} reads {v.what if isinstance(v, Unmodeled) else repr(v)}, which Nova " \
                          f"does not model{self.where()}"
                if isinstance(v, Unmodeled):
                    v.refuse(message)
                raise NovaUnsupportedError(message)
        try:
            return self.graph.op(name, *inputs, origin=self.origin, **attrs)
        except IRError as e:
            raise IRError(f"lowering {self.node.target}{self.where()}: {e}") from None

    def const(self, value, dtype: str, shape=()) -> Value:
        if dtype == "bool":
            value = bool(value)
        elif dtype in ("i64", "i32"):
            value = int(value)
        else:
            value = float(value)
        attrs = {"shape": tuple(shape)} if shape else {}
        return self.op("constant", value=value, dtype=dtype, **attrs)

    def scalar(self, x, other, *, opmath: bool = True) -> Value:
        """``x`` as an IR value: a Value stays; a Python number becomes a constant of the type torch
        would compute it in against ``other`` (f32 for half types when ``opmath``)."""
        if isinstance(x, Value) or isinstance(x, Unmodeled):
            return x
        od = other.dtype if isinstance(other, Value) else None
        if od in ("f16", "bf16"):
            dtype = "f32" if opmath else od
        elif od in ("f32", "f64"):
            dtype = od
        elif od in ("i32", "i64"):
            dtype = "f32" if isinstance(x, float) else od
        elif od == "bool":
            dtype = "f32" if isinstance(x, float) else ("bool" if isinstance(x, bool) else "i64")
        else:
            dtype = "f32" if isinstance(x, float) else ("bool" if isinstance(x, bool) else "i64")
        return self.const(x, dtype)

    def binary(self, name: str, a, b, *, opmath: bool = True) -> Value:
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise Fallback()
        a = self.scalar(a, b, opmath=opmath)
        b = self.scalar(b, a, opmath=opmath)
        return self.op(name, a, b)

    def scaled(self, x, alpha):
        """``alpha * x`` (no node when alpha is 1)."""
        if alpha == 1:
            return x
        if isinstance(x, Value):
            return self.binary("mul", x, alpha)
        return x * alpha

    def cast(self, v: Value, dtype: str) -> Value:
        return v if v.dtype == dtype else self.op("cast", v, dtype=dtype)

    def reshape(self, v: Value, shape) -> Value:
        shape = tuple(int(d) for d in shape)
        return v if v.shape == shape else self.op("reshape", v, shape=shape)

    def expand(self, v: Value, shape) -> Value:
        shape = tuple(int(d) for d in shape)
        return v if v.shape == shape else self.op("expand", v, shape=shape)

    def slice(self, v: Value, axis: int, start: int, end: int, step: int = 1) -> Value:
        if start == 0 and end == v.shape[axis] and step == 1:
            return v
        return self.op("slice", v, axis=axis, start=start, end=end, step=step)

    def zeros(self, shape, dtype: str) -> Value:
        return self.const(0, dtype, shape)

    def out_type(self, index: int | None = None) -> TensorType:
        val = self.meta if index is None else self.meta[index]
        return ir_type(val)

    # ------------------------------------------------------------------ the walk
    def run(self) -> Lowered:
        placeholders = 0
        outputs = None
        for node in self.gm.graph.nodes:
            self.node = node
            self.origin = node.meta.get("nova_origin", "") or ""
            if node.op == "placeholder":
                val = node.meta["val"]
                self.env[node] = self.graph.input(ir_type(val, self.input_names[placeholders]),
                                                  self.input_names[placeholders], self.input_roles[placeholders])
                placeholders += 1
            elif node.op == "get_attr":
                self.env[node] = self._constant_attr(node)
            elif node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "output":
                outputs = [self._lookup(a) for a in node.args[0]]
            else:
                raise NovaUnsupportedError(f"FX node kind {node.op} ({node.target}) is not supported{self.where()}")
        return Lowered(self.graph, outputs or [], self.constants, dict(sorted(self.opaque.items())))

    def _lookup(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._lookup(x) for x in a)
        return a

    def _constant_attr(self, node):
        tensor = getattr(self.gm, node.target)
        if not isinstance(tensor, torch.Tensor) or isinstance(tensor, torch._subclasses.FakeTensor) \
                or tensor.device.type == "meta":
            raise NovaUnsupportedError(f"a constant tensor without a value ({node.target}){self.where()}")
        t = ir_type(tensor, node.target)
        if tensor.numel() == 1:
            return self.const(tensor.item(), t.dtype, t.shape)
        self.constants.append((node.target, tensor))
        return self.graph.input(t, f"constant.{node.target}", "const")

    def _call(self, node):
        target = node.target
        if target is operator.getitem:
            container, index = node.args
            container = self.env[container]
            return container if isinstance(container, Unmodeled) else container[index]
        if str(target) == "aten._local_scalar_dense.default":
            raise NovaUnsupportedError(f"reading a tensor's value on the host (.item(), bool(tensor)) is not "
                                       f"supported{self.where()}")
        fn = LOWERINGS.get(target)
        args = self._lookup(node.args)
        kwargs = {k: self._lookup(v) for k, v in node.kwargs.items()}
        result = None
        try:
            if fn is not None:
                try:
                    result = fn(self, *args, **kwargs)
                except Fallback:
                    fn = None
                except (TypeError, AttributeError, IndexError, KeyError, ValueError) as e:
                    raise self._lowering_failed(e, args, kwargs) from e
            if fn is None:
                if isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags:
                    hint = " (dropout with p > 0 in training mode)" if "dropout" in str(target) or "bernoulli" in str(target) else ""
                    raise NovaUnsupportedError(f"random op {target}{hint} is not supported{self.where()}")
                result = self._opaque(node, args, kwargs)
            return self._conform(result, node.meta.get("val"))
        except UnsupportedDtype as e:        # a value of a type the IR lacks: an error only if something reads it
            hint = next((h for name, h in KERNEL_HINTS.items() if name in str(target)), "")
            return Unmodeled(f"a result of {target} ({e})",
                             error=f"op {target}{hint} is not supported{self.where()}: it produces a value Nova cannot "
                                   f"hold ({e})")

    def _lowering_failed(self, e: Exception, args, kwargs) -> NovaUnsupportedError:
        """One line for a lowering that could not handle its arguments: the unsupported op an
        argument came from, if any, else this op, where, and why."""
        for a in torch.utils._pytree.tree_leaves((args, kwargs), is_leaf=lambda x: isinstance(x, Unmodeled)):
            if isinstance(a, Unmodeled) and a.error:
                return NovaUnsupportedError(a.error)
        return NovaUnsupportedError(f"op {self.node.target} is not supported with these arguments{self.where()}: "
                                    f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def _conform(self, result, val):
        """Check a lowering's result against torch's fake result; cast to torch's element type."""
        if isinstance(val, torch.Tensor):
            if isinstance(result, Unmodeled) or result is None:
                return result
            if not isinstance(result, Value):
                raise IRError(f"lowering {self.node.target} returned {type(result).__name__}, expected one value")
            expected = ir_type(val)
            if result.shape != expected.shape:
                raise IRError(f"lowering {self.node.target}{self.where()} produced {result.type}, torch has {expected}")
            return self.cast(result, expected.dtype)
        if isinstance(val, (tuple, list)) and isinstance(result, (tuple, list)):
            return tuple(self._conform(r, v) for r, v in zip(result, val)) + tuple(result[len(val):])
        return result

    def _opaque(self, node, args, kwargs):
        target = node.target
        tensors: list[Value] = []
        metas: list = []                         # each tensor input's eager value (FX meta), in order

        def encode(a, fx=None):
            if isinstance(a, Unmodeled):
                a.refuse(f"op {target} reads {a.what}, which Nova does not model{self.where()}")
            if isinstance(a, Value):
                tensors.append(a)
                metas.append(fx.meta.get("val") if isinstance(fx, torch.fx.Node) else None)
                return ("$", len(tensors) - 1)
            if isinstance(a, (list, tuple)):
                fxs = fx if isinstance(fx, (list, tuple)) and len(fx) == len(a) else (None,) * len(a)
                return tuple(encode(x, f) for x, f in zip(a, fxs))
            if a is None or isinstance(a, (bool, int, float, str)):
                return a
            raise NovaUnsupportedError(f"op {target} is not supported (no lowering, and its argument "
                                       f"{a!r} cannot be passed to an opaque aten node){self.where()}")
        if not isinstance(target, torch._ops.OpOverload):
            raise NovaUnsupportedError(f"op {target} is not supported{self.where()}")
        enc_args = encode(tuple(args), tuple(node.args))
        enc_kwargs = tuple((k, encode(v, node.kwargs.get(k))) for k, v in sorted(kwargs.items()))
        layouts = self._storage_layouts(str(target), metas)
        val = node.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else (val,)
        if not vals or not all(isinstance(v, torch.Tensor) for v in vals):
            raise NovaUnsupportedError(f"op {target} is not supported (no lowering, and it returns non-tensors)"
                                       f"{self.where()}")
        types = [ir_type(v, str(target)) for v in vals]
        name = str(target)
        self.opaque[name] = self.opaque.get(name, 0) + 1
        extra = {"layouts": layouts} if layouts else {}
        out = self.op("aten", *tensors, target=name, args=enc_args, kwargs=enc_kwargs,
                      result_types=tuple((t.shape, t.dtype) for t in types), **extra)
        return out if isinstance(val, (tuple, list)) else out

    def _storage_layouts(self, target: str, metas: list) -> tuple:
        """``(i, strides)`` for each tensor input of an op that reads storage rather than values
        (``STORAGE_OPS``: ``as_strided`` indexes its input's storage with absolute offsets): the IR
        holds values, so the op gets a fresh tensor laid out as eager's was.  That is eager's storage
        only for a tensor that owns its storage whole (offset 0, dense): an ``as_strided`` of a view
        into a larger tensor reads elements the value does not hold, refused in one line."""
        if target not in STORAGE_OPS:
            return ()
        m = metas[0] if metas else None              # the indexed tensor (as_strided_scatter's src is read by value)
        if not isinstance(m, torch.Tensor) or m.storage_offset() != 0 or not _owns_storage(m):
            raise NovaUnsupportedError(f"op {target} reads the storage of a view into a larger tensor (its "
                                       f"offsets reach elements the view does not hold), which Nova does not "
                                       f"model{self.where()}")
        return ((0, tuple(m.stride())),)


def lower(gm, input_names, input_roles, name: str = "step") -> Lowered:
    """Lower ``gm`` (placeholders in the order of ``input_names``/``input_roles``)."""
    return Lowerer(gm, list(input_names), list(input_roles), name).run()


# ====================================================================== helpers
# ATen ops that index their input's storage (absolute offsets and strides) rather than its values
STORAGE_OPS = frozenset({"aten.as_strided.default", "aten.as_strided_scatter.default",
                         "aten.as_strided_copy.default"})


def _owns_storage(t: torch.Tensor) -> bool:
    """``t`` (an FX meta value) covers its whole storage densely: a tensor that is not a view into a
    larger one (a fresh result in any dense layout, channels-last included)."""
    try:
        return bool(torch._prims_common.is_non_overlapping_and_dense(t)) and \
            t.untyped_storage().nbytes() == t.numel() * t.element_size()
    except (NotImplementedError, RuntimeError):     # a storage that cannot say its size
        return False


def _axis(d: int, rank: int) -> int:
    return d % rank if rank else 0


def _axes(dims, rank: int) -> tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(sorted(_axis(d, rank) for d in dims))


def _clamp_slice(size: int, start, end, step) -> tuple[int, int, int]:
    start = 0 if start is None else start
    end = size if end is None else end
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    return start, max(start, end), step or 1


# ====================================================================== identity and views
@lowers(aten.detach.default, aten.alias.default, aten.clone.default, aten.lift_fresh_copy.default,
        _op("_to_copy"), _op("contiguous"), _op("_conj"), _op("resolve_conj"), _op("resolve_neg"))
def _identity(ctx, x, *args, **kwargs):
    return x                                  # value semantics; _to_copy's dtype change is a cast (conform)


@lowers(aten.copy.default)
def _copy(ctx, dst, src, non_blocking=False):
    if not isinstance(src, Value):
        return ctx.const(src, dst.dtype, dst.shape)
    return ctx.expand(ctx.cast(src, dst.dtype), dst.shape)


@lowers(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.squeeze.dim, aten.squeeze.default,
        _op("squeeze", "dims"), aten.unsqueeze.default, _op("flatten", "using_ints"), _op("unflatten", "int"))
def _view(ctx, x, *args, **kwargs):
    return ctx.reshape(x, ctx.meta.shape)


@lowers(aten.expand.default)
def _expand(ctx, x, size, implicit=False):
    return ctx.expand(x, ctx.meta.shape)


@lowers(aten.t.default)
def _t(ctx, x):
    return x if x.type.rank < 2 else ctx.op("permute", x, perm=(1, 0))


@lowers(aten.transpose.int)
def _transpose(ctx, x, d0, d1):
    d0, d1 = _axis(d0, x.type.rank), _axis(d1, x.type.rank)
    if d0 == d1:
        return x
    perm = list(range(x.type.rank))
    perm[d0], perm[d1] = d1, d0
    return ctx.op("permute", x, perm=tuple(perm))


@lowers(aten.permute.default)
def _permute(ctx, x, dims):
    perm = tuple(_axis(d, x.type.rank) for d in dims)
    return x if perm == tuple(range(x.type.rank)) else ctx.op("permute", x, perm=perm)


@lowers(aten.slice.Tensor)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    axis = _axis(dim, x.type.rank)
    return ctx.slice(x, axis, *_clamp_slice(x.shape[axis], start, end, step))


@lowers(aten.select.int)
def _select(ctx, x, dim, index):
    axis = _axis(dim, x.type.rank)
    index = index + x.shape[axis] if index < 0 else index
    return ctx.reshape(ctx.slice(x, axis, index, index + 1), ctx.meta.shape)


@lowers(_op("narrow"))
def _narrow(ctx, x, dim, start, length):
    axis = _axis(dim, x.type.rank)
    start = start + x.shape[axis] if start < 0 else start
    return ctx.slice(x, axis, start, start + length)


def _split_at(ctx, x, sizes, dim):
    axis = _axis(dim, x.type.rank)
    out, start = [], 0
    for size in sizes:
        out.append(ctx.slice(x, axis, start, start + size))
        start += size
    return tuple(out)


@lowers(aten.split.Tensor)
def _split(ctx, x, split_size, dim=0):
    n = x.shape[_axis(dim, x.type.rank)]
    sizes = [min(split_size, n - i) for i in range(0, n, split_size)] if split_size else [n]
    return _split_at(ctx, x, sizes or [0], dim)


@lowers(aten.split_with_sizes.default)
def _split_with_sizes(ctx, x, split_sizes, dim=0):
    return _split_at(ctx, x, split_sizes, dim)


@lowers(aten.unbind.int)
def _unbind(ctx, x, dim=0):
    axis = _axis(dim, x.type.rank)
    shape = x.shape[:axis] + x.shape[axis + 1:]
    return tuple(ctx.reshape(s, shape) for s in _split_at(ctx, x, [1] * x.shape[axis], axis))


@lowers(aten.cat.default)
def _cat(ctx, tensors, dim=0):
    tensors = [t for t in tensors if not (t.type.rank == 1 and t.shape[0] == 0)] or list(tensors[:1])
    if len(tensors) == 1:
        return tensors[0]
    return ctx.op("concat", *tensors, axis=_axis(dim, tensors[0].type.rank))


@lowers(aten.stack.default)
def _stack(ctx, tensors, dim=0):
    rank = tensors[0].type.rank + 1
    axis = _axis(dim, rank)
    parts = [ctx.reshape(t, t.shape[:axis] + (1,) + t.shape[axis:]) for t in tensors]
    return parts[0] if len(parts) == 1 else ctx.op("concat", *parts, axis=axis)


def _pad_into(ctx, grad: Value, shape, axis: int, start: int, end: int, base: Value | None = None):
    """``base`` (zeros when None) of ``shape`` with ``grad`` in ``[start:end]`` along ``axis``."""
    size = shape[axis]
    parts = []
    if start > 0:
        parts.append(ctx.slice(base, axis, 0, start) if base is not None else
                     ctx.zeros(tuple(shape[:axis]) + (start,) + tuple(shape[axis + 1:]), grad.dtype))
    parts.append(grad)
    if end < size:
        parts.append(ctx.slice(base, axis, end, size) if base is not None else
                     ctx.zeros(tuple(shape[:axis]) + (size - end,) + tuple(shape[axis + 1:]), grad.dtype))
    return parts[0] if len(parts) == 1 else ctx.op("concat", *parts, axis=axis)


@lowers(aten.slice_backward.default)
def _slice_backward(ctx, grad, input_sizes, dim, start, end, step):
    axis = _axis(dim, len(input_sizes))
    start, end, step = _clamp_slice(input_sizes[axis], start, end, step)
    if step != 1:
        raise Fallback()
    return _pad_into(ctx, grad, tuple(input_sizes), axis, start, end)


@lowers(aten.slice_scatter.default)
def _slice_scatter(ctx, base, src, dim=0, start=None, end=None, step=1):
    axis = _axis(dim, base.type.rank)
    start, end, step = _clamp_slice(base.shape[axis], start, end, step)
    if step != 1:
        raise Fallback()
    return _pad_into(ctx, ctx.cast(src, base.dtype), base.shape, axis, start, end, base)


@lowers(aten.select_backward.default)
def _select_backward(ctx, grad, input_sizes, dim, index):
    axis = _axis(dim, len(input_sizes))
    index = index + input_sizes[axis] if index < 0 else index
    grad = ctx.reshape(grad, grad.shape[:axis] + (1,) + grad.shape[axis:])
    return _pad_into(ctx, grad, tuple(input_sizes), axis, index, index + 1)


@lowers(aten.select_scatter.default)
def _select_scatter(ctx, base, src, dim, index):
    axis = _axis(dim, base.type.rank)
    index = index + base.shape[axis] if index < 0 else index
    src = ctx.reshape(ctx.cast(src, base.dtype), src.shape[:axis] + (1,) + src.shape[axis:])
    return _pad_into(ctx, src, base.shape, axis, index, index + 1, base)


# ====================================================================== gather / scatter
@lowers(aten.embedding.default)
def _embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return ctx.op("index_select", weight, indices, axis=0)


@lowers(aten.index_select.default)
def _index_select(ctx, x, dim, index):
    return ctx.op("index_select", x, index, axis=_axis(dim, x.type.rank))


@lowers(aten.index.Tensor)
def _index(ctx, x, indices):
    present = [i for i, t in enumerate(indices) if t is not None]
    if len(present) != 1 or indices[present[0]].dtype not in ("i64", "i32"):
        raise Fallback()
    return ctx.op("index_select", x, indices[present[0]], axis=present[0])


@lowers(aten.index_put.default)
def _index_put(ctx, x, indices, values, accumulate=False):
    """``x[..., index, ...] += values`` with one integer index (index.Tensor's backward): scatter_add."""
    present = [i for i, t in enumerate(indices) if t is not None]
    if not accumulate or len(present) != 1 or indices[present[0]].dtype not in ("i64", "i32"):
        raise Fallback()
    axis, index = present[0], indices[present[0]]
    src_shape = x.shape[:axis] + index.shape + x.shape[axis + 1:]
    scattered = ctx.op("scatter_add", ctx.expand(ctx.cast(values, x.dtype), src_shape), index, axis=axis, shape=x.shape)
    producer = x.producer
    if producer is not None and producer.op == "constant" and producer.attrs["value"] == 0:
        return scattered
    return ctx.op("add", x, scattered)


@lowers(aten.embedding_dense_backward.default)
def _embedding_backward(ctx, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        raise NovaUnsupportedError(f"embedding with scale_grad_by_freq=True is not supported{ctx.where()}")
    shape = (num_weights,) + grad.shape[indices.type.rank:]
    out = ctx.op("scatter_add", grad, indices, axis=0, shape=shape)
    if padding_idx is not None and padding_idx >= 0:       # the padding row gets no gradient
        rows = ctx.reshape(ctx.op("iota", length=num_weights, dtype="i64"), (num_weights,) + (1,) * (len(shape) - 1))
        out = ctx.op("where", ctx.op("eq", rows, ctx.const(padding_idx, "i64")), ctx.const(0, out.dtype), out)
    return out


@lowers(aten.gather.default)
def _gather(ctx, x, dim, index, sparse_grad=False):
    return ctx.op("take_along_axis", x, index, axis=_axis(dim, x.type.rank))


# ====================================================================== creation
@lowers(aten.full.default, aten.full_like.default, aten.zeros.default, aten.zeros_like.default, aten.ones.default,
        aten.ones_like.default, aten.empty.memory_format, aten.empty_like.default, aten.empty_strided.default,
        aten.new_zeros.default, aten.new_ones.default, aten.new_full.default, aten.new_empty.default,
        aten.new_empty_strided.default, aten.scalar_tensor.default, aten.fill.Scalar, aten.zero.default)
def _filled(ctx, *args, **kwargs):
    name = ctx.node.target._overloadpacket.__name__
    value = {"ones": 1, "ones_like": 1, "new_ones": 1}.get(name, 0)
    if name in ("full", "full_like", "fill"):
        value = args[1]
    elif name == "new_full":
        value = args[2]
    elif name == "scalar_tensor":
        value = args[0]
    t = ctx.out_type()
    return ctx.const(value, t.dtype, t.shape)


@lowers(aten.fill.Tensor)
def _fill_tensor(ctx, x, value):
    return ctx.expand(ctx.cast(value, x.dtype), x.shape)


@lowers(aten.arange.default, aten.arange.start, aten.arange.start_step)
def _arange(ctx, *args, **kwargs):
    numbers = [a for a in args if isinstance(a, (int, float))]
    start, step = (0, 1) if len(numbers) == 1 else (numbers[0], numbers[2] if len(numbers) > 2 else 1)
    t = ctx.out_type()
    n = t.shape[0]
    if float(start).is_integer() and float(step).is_integer():
        return ctx.op("iota", length=n, dtype=t.dtype, start=int(start), step=int(step))
    i = ctx.op("iota", length=n, dtype="f64")                       # start + i * step, in double like torch
    return ctx.op("add", ctx.op("mul", i, ctx.const(step, "f64")), ctx.const(start, "f64"))


# ====================================================================== pointwise
_UNARY = {aten.neg.default: "neg", aten.exp.default: "exp", aten.log.default: "log", aten.sqrt.default: "sqrt",
          aten.rsqrt.default: "rsqrt", aten.reciprocal.default: "reciprocal", aten.abs.default: "abs",
          aten.tanh.default: "tanh", aten.erf.default: "erf", aten.sin.default: "sin", aten.cos.default: "cos",
          aten.sigmoid.default: "sigmoid", aten.relu.default: "relu", aten.silu.default: "silu",
          aten.logical_not.default: "logical_not"}
for _target, _name in _UNARY.items():
    LOWERINGS[_target] = (lambda name: lambda ctx, x: ctx.op(name, x))(_name)


@lowers(aten.sgn.default, aten.sign.default)
def _sign(ctx, x):
    """1 where x > 0, -1 where x < 0, else x * 0 (0, and NaN stays NaN); abs's backward."""
    if x.dtype == "bool":
        return x
    one, minus_one = ctx.const(1, x.dtype), ctx.const(-1, x.dtype)
    rest = ctx.op("where", ctx.binary("lt", x, 0, opmath=False), minus_one, ctx.binary("mul", x, 0, opmath=False))
    return ctx.op("where", ctx.binary("gt", x, 0, opmath=False), one, rest)


@lowers(aten.bitwise_not.default)
def _bitwise_not(ctx, x):
    if x.dtype != "bool":
        raise Fallback()
    return ctx.op("logical_not", x)


@lowers(aten.add.Tensor, aten.add.Scalar)
def _add(ctx, a, b, alpha=1):
    return ctx.binary("add", a, ctx.scaled(b, alpha))


@lowers(aten.sub.Tensor, aten.sub.Scalar)
def _sub(ctx, a, b, alpha=1):
    return ctx.binary("sub", a, ctx.scaled(b, alpha))


@lowers(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(ctx, a, b, alpha=1):
    return ctx.binary("sub", b, ctx.scaled(a, alpha))


@lowers(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div(ctx, a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise Fallback()
    t = ctx.out_type()
    if isinstance(a, Value) and a.dtype != t.dtype:        # integer / integer is a float division
        a = ctx.cast(a, t.dtype)
    if isinstance(b, Value) and b.dtype != t.dtype:
        b = ctx.cast(b, t.dtype)
    return ctx.binary("div", a, b)


@lowers(aten.clamp.default, aten.clamp.Tensor)
def _clamp(ctx, x, min=None, max=None):
    if min is not None:
        x = ctx.binary("maximum", x, min, opmath=False)
    if max is not None:
        x = ctx.binary("minimum", x, max, opmath=False)
    return x


@lowers(aten.clamp_min.default)
def _clamp_min(ctx, x, min):
    return ctx.binary("maximum", x, min, opmath=False)


@lowers(aten.clamp_max.default)
def _clamp_max(ctx, x, max):
    return ctx.binary("minimum", x, max, opmath=False)


# ATen ops that are one binary IR op of the same name (tensor or scalar operands, in opmath)
_BINARY = {aten.mul.Tensor: "mul", aten.mul.Scalar: "mul", aten.pow.Tensor_Scalar: "pow",
           aten.pow.Tensor_Tensor: "pow", aten.pow.Scalar: "pow", aten.maximum.default: "maximum",
           aten.minimum.default: "minimum", aten.logical_and.default: "logical_and",
           aten.logical_or.default: "logical_or"}
for _target, _name in _BINARY.items():
    LOWERINGS[_target] = (lambda name: lambda ctx, a, b: ctx.binary(name, a, b))(_name)
for _packet in ("eq", "ne", "lt", "le", "gt", "ge"):
    for _overload in ("Tensor", "Scalar"):
        LOWERINGS[getattr(getattr(aten, _packet), _overload)] = \
            (lambda name: lambda ctx, a, b: ctx.binary(name, a, b, opmath=False))(_packet)


@lowers(aten.where.self, _op("where", "ScalarSelf"), _op("where", "ScalarOther"), _op("where", "Scalar"))
def _where(ctx, cond, a, b):
    t = ctx.out_type()
    a = a if isinstance(a, Value) else ctx.const(a, t.dtype)
    b = b if isinstance(b, Value) else ctx.const(b, t.dtype)
    return ctx.op("where", cond, a, b)


@lowers(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx, x, mask, value):
    value = ctx.cast(value, x.dtype) if isinstance(value, Value) else ctx.const(value, x.dtype)
    return ctx.op("where", mask, value, x)


@lowers(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(ctx, start, end, weight):
    """torch's formula: weight < 0.5 ? start + weight * (end - start) : end - (end - start) * (1 - weight)."""
    diff = ctx.op("sub", end, start)
    if not isinstance(weight, Value):
        if abs(weight) < 0.5:
            return ctx.op("add", start, ctx.binary("mul", diff, weight))
        return ctx.op("sub", end, ctx.binary("mul", diff, 1 - weight))
    low = ctx.op("add", start, ctx.op("mul", weight, diff))
    high = ctx.op("sub", end, ctx.op("mul", diff, ctx.binary("sub", 1, weight)))
    return ctx.op("where", ctx.binary("lt", ctx.op("abs", weight), 0.5), low, high)


@lowers(aten.addcmul.default)
def _addcmul(ctx, x, t1, t2, value=1):
    return ctx.op("add", x, ctx.scaled(ctx.op("mul", t1, t2), value))


@lowers(aten.addcdiv.default)
def _addcdiv(ctx, x, t1, t2, value=1):
    return ctx.op("add", x, ctx.scaled(ctx.op("div", t1, t2), value))


@lowers(aten.gelu.default)
def _gelu(ctx, x, approximate="none"):
    return ctx.op("gelu_tanh" if approximate == "tanh" else "gelu_erf", x)


@lowers(aten.gelu_backward.default)
def _gelu_backward(ctx, dy, x, approximate="none"):
    return ctx.op("gelu_tanh_backward" if approximate == "tanh" else "gelu_erf_backward", dy, x)


# backward ops that are one IR op of the same name: (gradient, forward input or output)
for _name in ("silu_backward", "sigmoid_backward", "tanh_backward"):
    LOWERINGS[getattr(aten, _name).default] = (lambda name: lambda ctx, dy, x: ctx.op(name, dy, x))(_name)


@lowers(aten.threshold_backward.default)
def _threshold_backward(ctx, dy, x, threshold):
    if threshold != 0:
        raise Fallback()
    return ctx.op("relu_backward", dy, x)


def _triangle(ctx, x, diagonal, keep):
    rows, cols = x.shape[-2:]
    r = ctx.reshape(ctx.op("iota", length=rows, dtype="i64"), (rows, 1))
    c = ctx.reshape(ctx.op("iota", length=cols, dtype="i64"), (1, cols))
    mask = ctx.op(keep, ctx.op("sub", c, r), ctx.const(diagonal, "i64"))
    return ctx.op("where", mask, x, ctx.const(0, x.dtype))


@lowers(aten.tril.default)
def _tril(ctx, x, diagonal=0):
    return _triangle(ctx, x, diagonal, "le")


@lowers(aten.triu.default)
def _triu(ctx, x, diagonal=0):
    return _triangle(ctx, x, diagonal, "ge")


# ====================================================================== reductions
def _reduce(name):
    def lowering(ctx, x, dim=None, keepdim=False, dtype=None):
        if isinstance(dim, torch.dtype):           # sum.default(x, dtype)
            dim, dtype = None, dim
        axes = _axes(dim, x.type.rank)
        if not axes:                                # a 0-d input: nothing to reduce
            return x
        attrs = {"axes": axes, "keepdim": bool(keepdim)}
        if dtype is None and name == "sum" and x.dtype in ("bool", "i32"):
            attrs["dtype"] = "i64"                  # torch sums integers and booleans in int64
        if dtype is not None:
            attrs["dtype"] = ir_type(torch.empty((), dtype=dtype, device="meta")).dtype
        return ctx.op(name, x, **attrs)
    return lowering


LOWERINGS[aten.sum.default] = _reduce("sum")
LOWERINGS[aten.sum.dim_IntList] = _reduce("sum")
LOWERINGS[aten.mean.default] = _reduce("mean")
LOWERINGS[aten.mean.dim] = _reduce("mean")
LOWERINGS[aten.amax.default] = _reduce("max")
LOWERINGS[aten.amin.default] = _reduce("min")
LOWERINGS[aten.max.default] = _reduce("max")
LOWERINGS[aten.min.default] = _reduce("min")


@lowers(_op("linalg_vector_norm"))
def _vector_norm(ctx, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """2-norm (sqrt of the sum of squares), 1-norm and inf-norm; grad clipping's norms."""
    if dtype is not None:
        x = ctx.cast(x, ir_type(torch.empty((), dtype=dtype, device="meta")).dtype)
    axes = _axes(dim, x.type.rank)
    if not axes:
        raise Fallback()
    attrs = {"axes": axes, "keepdim": bool(keepdim)}
    if ord == 2:
        return ctx.op("sqrt", ctx.op("sum", ctx.op("mul", x, x), **attrs))
    if ord == 1:
        return ctx.op("sum", ctx.op("abs", x), **attrs)
    if ord == math.inf:
        return ctx.op("max", ctx.op("abs", x), **attrs)
    raise Fallback()


# ====================================================================== matmul
@lowers(aten.mm.default, aten.bmm.default)
def _mm(ctx, a, b):
    return ctx.op("matmul", a, b)


@lowers(aten.addmm.default, aten.baddbmm.default)
def _addmm(ctx, bias, a, b, beta=1, alpha=1):
    product = ctx.scaled(ctx.op("matmul", a, b), alpha)
    if beta == 0:
        return product
    return ctx.op("add", product, ctx.scaled(bias, beta))


# ====================================================================== composites
@lowers(aten._softmax.default)
def _softmax(ctx, x, dim, half_to_float=False):
    x = ctx.cast(x, "f32") if half_to_float else x
    return ctx.op("softmax", x, axis=_axis(dim, x.type.rank))


@lowers(aten._log_softmax.default)
def _log_softmax(ctx, x, dim, half_to_float=False):
    x = ctx.cast(x, "f32") if half_to_float else x
    return ctx.op("log_softmax", x, axis=_axis(dim, x.type.rank))


@lowers(aten._softmax_backward_data.default)
def _softmax_backward(ctx, dy, y, dim, input_dtype):
    return ctx.op("softmax_backward", dy, y, axis=_axis(dim, y.type.rank))


@lowers(aten._log_softmax_backward_data.default)
def _log_softmax_backward(ctx, dy, y, dim, input_dtype):
    return ctx.op("log_softmax_backward", dy, y, axis=_axis(dim, y.type.rank))


@lowers(_op("_safe_softmax"))
def _safe_softmax(ctx, x, dim, dtype=None):
    """softmax, with rows that are entirely -inf giving zeros instead of NaN."""
    if dtype is not None:
        x = ctx.cast(x, ir_type(torch.empty((), dtype=dtype, device="meta")).dtype)
    axis = _axis(dim, x.type.rank)
    y = ctx.op("softmax", x, axis=axis)
    row_max = ctx.op("max", x, axes=(axis,), keepdim=True)
    all_masked = ctx.op("eq", row_max, ctx.const(-math.inf, x.dtype))
    return ctx.op("where", all_masked, ctx.const(0, y.dtype), y)


@lowers(aten.native_layer_norm.default)
def _layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    affine = [v for v in (weight, bias) if v is not None]
    return ctx.op("layer_norm", x, *affine, normalized_shape=tuple(normalized_shape), eps=float(eps),
                  has_weight=weight is not None, has_bias=bias is not None)


@lowers(aten.native_layer_norm_backward.default)
def _layer_norm_backward(ctx, dy, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    affine = [v for v in (weight, bias) if v is not None]
    outs = ctx.op("layer_norm_backward", dy, x, mean, rstd, *affine, normalized_shape=tuple(normalized_shape),
                  has_weight=weight is not None, has_bias=bias is not None)
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    dx = outs.pop(0)
    dw = outs.pop(0) if weight is not None else None
    db = outs.pop(0) if bias is not None else None
    return tuple(v if keep else None for v, keep in zip((dx, dw, db), output_mask))


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


@lowers(aten.nll_loss_forward.default)
def _nll_loss(ctx, logp, target, weight, reduction, ignore_index):
    if weight is not None or logp.type.rank != 2:
        raise Fallback()
    return ctx.op("nll_loss", logp, target, reduction=_REDUCTIONS[reduction], ignore_index=int(ignore_index))


@lowers(aten.nll_loss_backward.default)
def _nll_loss_backward(ctx, dloss, logp, target, weight, reduction, ignore_index, total_weight):
    if weight is not None or logp.type.rank != 2:
        raise Fallback()
    return ctx.op("nll_loss_backward", dloss, logp, target, total_weight, reduction=_REDUCTIONS[reduction],
                  ignore_index=int(ignore_index))


# ---------------------------------------------------------------- attention (every SDPA kernel)
# ATen kernels that stand for a whole module, named for the user where an op of theirs is refused
KERNEL_HINTS = {"mkldnn_rnn_layer": " (nn.LSTM's fused CPU kernel: a loop over nn.LSTMCell, or nn.GRU, traces)",
                "_cudnn_rnn": " (nn.LSTM's cuDNN kernel: a loop over nn.LSTMCell, or nn.GRU, traces)"}


def _attention(ctx, q, k, v, *, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None, n_results: int,
               lse_index: int = 1):
    """Every SDPA kernel's forward -> the IR ``attention`` (natural-log log-sum-exp, f32, [B, H, T]);
    with a mask (or a non-square causal mask) -> the same computation in IR primitives.
    The kernel's own log-sum-exp output is handed over as is when torch's shape is [B, H, T];
    cuDNN's [B, H, T, 1] as a view of it; mem-efficient's (T padded to a multiple of 32) padded with
    zeros, which its backward slices off again (torch's kernels read only the first T)."""
    if dropout_p:
        raise NovaUnsupportedError(f"attention with dropout_p={dropout_p} is not supported{ctx.where()}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    attn_mask, is_causal = fold_constant_mask(ctx, attn_mask, q, k, is_causal)
    kept = _rows_kept(ctx, attn_mask, q, k, is_causal)
    mask_key = (attn_mask, bool(is_causal))
    bias, is_causal = attention_bias(ctx, attn_mask, q, k, is_causal)
    if (attn_mask is not None and bias is None) or _top_left_differs(q, k, is_causal):
        out, lse = _masked_attention(ctx, q, k, v, attn_mask, scale, is_causal)
    else:
        out, lse = ctx.op("attention", q, k, v, *([bias] if bias is not None else []), scale=scale,
                          causal=bool(is_causal))
        if kept is not None and bias is not None:   # the op masks a row whose every key is masked itself
            ctx.__dict__.setdefault("attention_masks_rows_itself", set()).add(mask_key)
            kept = None
    if kept is not None:                    # a row whose every key is masked: eager's SDPA returns 0 there
        out = ctx.op("where", kept, out, ctx.const(0.0, out.dtype))
    results = [None] * n_results
    results[0] = out
    val = ctx.meta[lse_index]
    if isinstance(val, torch.Tensor) and tuple(val.shape) == lse.shape:
        results[lse_index] = lse
    elif isinstance(val, torch.Tensor) and tuple(val.shape) == lse.shape + (1,):      # cuDNN's [B, H, T, 1]
        results[lse_index] = ctx.reshape(lse, tuple(val.shape))
    elif isinstance(val, torch.Tensor) and val.dim() == 3 and tuple(val.shape[:2]) == lse.shape[:2] \
            and val.shape[2] > lse.shape[2]:                        # mem-efficient's T padded (to 32): zeros after
        results[lse_index] = _constant_pad(ctx, lse, (0, int(val.shape[2]) - lse.shape[2]), 0.0)
    else:
        results[lse_index] = Unmodeled("the attention kernel's log-sum-exp in its own layout", lse)
    for i in range(n_results):
        if results[i] is None:
            results[i] = Unmodeled(f"result {i} of {ctx.node.target} (a seed, offset or debug mask)",
                                   bookkeeping=True)
    return tuple(results)


def _lse(ctx, x, rows: int):
    """The [B, H, T] log-sum-exp a kernel's backward takes, ``rows`` = T (cuDNN's [B, H, T, 1] viewed
    so, mem-efficient's padded T sliced)."""
    x = x.value if isinstance(x, Unmodeled) and x.value is not None else x
    p = x.producer
    if p is not None and p.op in ("reshape", "concat") and p.inputs[0].shape == x.shape[:2] + (rows,):
        return p.inputs[0]                  # the IR attention's own, as the forward lowered it (view / padding)
    if len(x.shape) == 4 and x.shape[3] == 1:
        x = ctx.reshape(x, x.shape[:3])
    return ctx.slice(x, 2, 0, rows) if x.shape[2] > rows else x


def _top_left_differs(q, k, causal) -> bool:
    """torch's causal mask is top-left aligned, the IR attention's bottom-right: they agree only
    for square score matrices."""
    return bool(causal) and q.shape[2] != k.shape[2]


def _repeat_heads(ctx, x, heads: int):
    """K/V of grouped-query attention repeated to ``heads`` heads (head h reads h // groups)."""
    b, hk, s, d = x.shape
    if hk == heads:
        return x
    g = heads // hk
    x = ctx.expand(ctx.reshape(x, (b, hk, 1, s, d)), (b, hk, g, s, d))
    return ctx.reshape(x, (b, heads, s, d))


def _causal_keep(ctx, t_q: int, t_k: int):
    """``[Tq, Tk]`` bool: torch's is_causal pattern, top-left aligned (column <= row)."""
    rows = ctx.reshape(ctx.op("iota", length=t_q, dtype="i64"), (t_q, 1))
    cols = ctx.reshape(ctx.op("iota", length=t_k, dtype="i64"), (1, t_k))
    return ctx.op("le", ctx.op("sub", cols, rows), ctx.const(0, "i64"))


def _scores(ctx, q, k, mask, scale, causal):
    """q k^T * scale (at least FP32), with the causal mask and ``mask`` (bool: keep; float: added)."""
    wide = "f64" if q.dtype == "f64" else "f32"
    s = ctx.op("mul", ctx.op("matmul", ctx.cast(q, wide), ctx.cast(k, wide), transpose_b=True), ctx.const(scale, wide))
    t_q, t_k = s.shape[-2:]
    if causal:
        s = ctx.op("where", _causal_keep(ctx, t_q, t_k), s, ctx.const(-math.inf, wide))
    if mask is not None and mask.dtype == "bool":
        s = ctx.op("where", mask, s, ctx.const(-math.inf, wide))
    elif mask is not None:
        s = ctx.op("add", s, ctx.cast(mask, wide))
    return s


def _rows_kept(ctx, mask, q, k, causal):
    """``[B|1, H|1, Tq, 1]`` bool: the score rows a runtime mask (with the causal pattern, top-left
    aligned as torch's) leaves at least one key; None without a runtime mask.  Eager's SDPA returns 0
    for a row whose every key is masked (a left-padded sequence's first queries under Hugging Face's
    causal & padding mask) and gives it no gradient, where softmax over a floored bias would average
    V; a float mask counts a key masked where it is -inf (``finfo.min`` is a key, as in eager).  The
    decision is made once per mask value (the forward and the backward agree)."""
    if mask is None or not isinstance(mask, Value):
        return None
    made = ctx.__dict__.setdefault("attention_rows_kept", {})
    if (mask, bool(causal)) in made:
        return made[(mask, bool(causal))]
    keep = mask if mask.dtype == "bool" else ctx.op("gt", mask, ctx.const(-math.inf, mask.dtype))
    if causal:
        keep = ctx.op("logical_and", keep, _causal_keep(ctx, q.shape[2], k.shape[2]))
    any_key = ctx.op("max", ctx.cast(keep, "f32"), axes=(keep.type.rank - 1,), keepdim=True)
    kept = ctx.op("gt", any_key, ctx.const(0.0, "f32"))
    made[(mask, bool(causal))] = kept
    return kept


def _masked_attention(ctx, q, k, v, mask, scale, causal):
    """Attention with a mask, in IR primitives: (out, natural-log lse [B, H, T])."""
    heads = q.shape[1]
    k, v = _repeat_heads(ctx, k, heads), _repeat_heads(ctx, v, heads)
    s = _scores(ctx, q, k, mask, scale, causal)
    row_max = ctx.op("max", s, axes=(3,), keepdim=True)
    row_max = ctx.op("where", ctx.op("eq", row_max, ctx.const(-math.inf, s.dtype)), ctx.const(0, s.dtype), row_max)
    e = ctx.op("exp", ctx.op("sub", s, row_max))
    total = ctx.op("sum", e, axes=(3,), keepdim=True)
    total = ctx.op("where", ctx.op("eq", total, ctx.const(0, s.dtype)), ctx.const(1, s.dtype), total)   # no key: 0 out
    out = ctx.op("matmul", ctx.op("div", e, total), ctx.cast(v, s.dtype))
    lse = ctx.op("add", ctx.op("log", total), row_max)
    return ctx.cast(out, q.dtype), ctx.reshape(lse, lse.shape[:3])


def _masked_attention_backward(ctx, dout, q, k, v, out, lse, mask, scale, causal):
    """dq, dk, dv of ``_masked_attention`` from its lse (scores recomputed), in IR primitives."""
    heads, kv_heads = q.shape[1], k.shape[1]
    kk, vv = _repeat_heads(ctx, k, heads), _repeat_heads(ctx, v, heads)
    s = _scores(ctx, q, kk, mask, scale, causal)
    w = s.dtype
    p = ctx.op("exp", ctx.op("sub", s, ctx.reshape(ctx.cast(lse, w), lse.shape + (1,))))
    do, o = ctx.cast(dout, w), ctx.cast(out, w)
    dv = ctx.op("matmul", p, do, transpose_a=True)
    dp = ctx.op("matmul", do, ctx.cast(vv, w), transpose_b=True)
    delta = ctx.op("sum", ctx.op("mul", do, o), axes=(3,), keepdim=True)
    ds = ctx.op("mul", p, ctx.op("sub", dp, delta))
    dq = ctx.op("mul", ctx.op("matmul", ds, ctx.cast(kk, w)), ctx.const(scale, w))
    dk = ctx.op("mul", ctx.op("matmul", ds, ctx.cast(q, w), transpose_a=True), ctx.const(scale, w))
    if kv_heads != heads:                       # sum the repeated heads back
        b, _, t_k, d = dk.shape
        g = heads // kv_heads
        dk = ctx.op("sum", ctx.reshape(dk, (b, kv_heads, g, t_k, d)), axes=(2,))
        dv = ctx.op("sum", ctx.reshape(dv, (b, kv_heads, g, t_k, v.shape[3])), axes=(2,))
    return ctx.cast(dq, q.dtype), ctx.cast(dk, k.dtype), ctx.cast(dv, v.dtype)


def _attention_backward(ctx, dout, q, k, v, out, lse, *, scale, is_causal, dropout_p=0.0, attn_mask=None,
                        n_results=3):
    if dropout_p:
        raise NovaUnsupportedError(f"attention with dropout_p={dropout_p} is not supported{ctx.where()}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    attn_mask, is_causal = fold_constant_mask(ctx, attn_mask, q, k, is_causal)
    kept = _rows_kept(ctx, attn_mask, q, k, is_causal)
    if (attn_mask, bool(is_causal)) in ctx.__dict__.get("attention_masks_rows_itself", ()):
        kept = None                         # lse is the forward op's: +inf on a masked row, so P is 0 there
    if kept is not None:                    # a row whose every key is masked gives no gradient (eager's 0 output)
        dout = ctx.op("where", kept, dout, ctx.const(0.0, dout.dtype))
    bias, is_causal = attention_bias(ctx, attn_mask, q, k, is_causal)
    if (attn_mask is not None and bias is None) or _top_left_differs(q, k, is_causal):
        grads = _masked_attention_backward(ctx, dout, q, k, v, out, _lse(ctx, lse, q.shape[2]), attn_mask, scale, is_causal)
    else:
        grads = ctx.op("attention_backward", dout, q, k, v, out, _lse(ctx, lse, q.shape[2]), *([bias] if bias is not None else []),
                       scale=scale, causal=bool(is_causal))
    return tuple(grads) + (None,) * (n_results - 3)


@lowers(_op("_scaled_dot_product_flash_attention_for_cpu"))
def _sdpa_cpu(ctx, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    return _attention(ctx, q, k, v, dropout_p=dropout_p, is_causal=is_causal, attn_mask=attn_mask, scale=scale,
                      n_results=2)


@lowers(_op("_scaled_dot_product_flash_attention_for_cpu_backward"))
def _sdpa_cpu_backward(ctx, dout, q, k, v, out, lse, dropout_p, is_causal, *, attn_mask=None, scale=None):
    return _attention_backward(ctx, dout, q, k, v, out, lse, scale=scale, is_causal=is_causal, dropout_p=dropout_p,
                               attn_mask=attn_mask)


@lowers(_op("_scaled_dot_product_flash_attention"))
def _sdpa_flash(ctx, q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    return _attention(ctx, q, k, v, dropout_p=dropout_p, is_causal=is_causal, scale=scale, n_results=9)


@lowers(_op("_scaled_dot_product_flash_attention_backward"))
def _sdpa_flash_backward(ctx, dout, q, k, v, out, lse, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                         philox_seed, philox_offset, *, scale=None):
    return _attention_backward(ctx, dout, q, k, v, out, lse, scale=scale, is_causal=is_causal, dropout_p=dropout_p)


@lowers(_op("_scaled_dot_product_efficient_attention"))
def _sdpa_efficient(ctx, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None):
    return _attention(ctx, q, k, v, dropout_p=dropout_p, is_causal=is_causal, attn_mask=attn_bias, scale=scale,
                      n_results=4)


@lowers(_op("_scaled_dot_product_efficient_attention_backward"))
def _sdpa_efficient_backward(ctx, dout, q, k, v, attn_bias, out, lse, philox_seed, philox_offset, dropout_p,
                             grad_input_mask, is_causal=False, *, scale=None):
    if attn_bias is not None and grad_input_mask[3]:
        raise Fallback()                         # the bias's own gradient
    return _attention_backward(ctx, dout, q, k, v, out, lse, scale=scale, is_causal=is_causal, dropout_p=dropout_p,
                               attn_mask=attn_bias, n_results=4)


@lowers(_op("_scaled_dot_product_cudnn_attention"))
def _sdpa_cudnn(ctx, q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                return_debug_mask=False, *, scale=None):
    return _attention(ctx, q, k, v, dropout_p=dropout_p, is_causal=is_causal, attn_mask=attn_bias, scale=scale,
                      n_results=9)


@lowers(_op("_scaled_dot_product_cudnn_attention_backward"))
def _sdpa_cudnn_backward(ctx, dout, q, k, v, out, lse, philox_seed, philox_offset, attn_bias, cum_seq_q, cum_seq_k,
                         max_q, max_k, dropout_p, is_causal, *, scale=None):
    return _attention_backward(ctx, dout, q, k, v, out, lse, scale=scale, is_causal=is_causal, dropout_p=dropout_p,
                               attn_mask=attn_bias)


# ---------------------------------------------------------------- the optimizer ops (nova::*)
def _nova_ops():
    from nova.frontend import optim  # noqa: F401  (importing it defines torch.ops.nova.*)
    ops = torch.ops.nova

    @lowers(ops.adamw.default)
    def _adamw(ctx, params, grads, exp_avgs, exp_avg_sqs, steps, hyper, decoupled, maximize):
        """Per parameter: step + 1, then the IR adamw reading the group's ``hyper`` input."""
        outs = ([], [], [], [])
        attrs = {"decoupled": bool(decoupled)} | ({"maximize": True} if maximize else {})
        for p, g, m, v, t in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
            step = ctx.op("add", t, ctx.const(1, t.dtype))
            new = ctx.op("adamw", p, g, m, v, step, hyper, **attrs) + (step,)
            for out, x in zip(outs, new):
                out.append(x)
        return tuple(x for out in outs for x in out)

    @lowers(ops.sgd.default)
    def _sgd(ctx, params, grads, buffers, hyper, with_momentum, nesterov, maximize):
        attrs = {k: True for k, on in (("with_momentum", with_momentum), ("nesterov", with_momentum and nesterov),
                                       ("maximize", maximize)) if on}
        new_params, new_buffers = [], []
        for p, g, b in zip(params, grads, buffers):
            out = ctx.op("sgd", *((p, g, hyper) if b is None else (p, g, hyper, b)), **attrs)
            out = out if isinstance(out, tuple) else (out,)
            new_params.append(out[0])
            new_buffers += list(out[1:])
        return tuple(new_params + new_buffers)


_nova_ops()


@lowers(_op("_foreach_zero"))
def _foreach_zero(ctx, tensors):
    return tuple(ctx.zeros(t.shape, t.dtype) for t in tensors)


@lowers(_op("_foreach_copy"))
def _foreach_copy(ctx, dsts, srcs, non_blocking=False):
    return tuple(_copy(ctx, d, s) for d, s in zip(dsts, srcs))


def _skip(ctx, *args, **kwargs):
    return None


for _name in ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "_assert_async"):
    for _overload in ("default", "msg"):
        if _op(_name, _overload) is not None:
            LOWERINGS[_op(_name, _overload)] = _skip


# ====================================================================== masks and padding (Hugging Face's builders)
_BOOLEAN = {"bitwise_and": "logical_and", "bitwise_or": "logical_or", "bitwise_xor": "ne"}


@lowers(_op("bitwise_and", "Tensor"), _op("bitwise_or", "Tensor"), _op("bitwise_xor", "Tensor"))
def _bitwise_bool(ctx, a, b):
    """``&``, ``|``, ``^`` of boolean masks (the attention masks' ``and_masks``/``or_masks``)."""
    if not (isinstance(a, Value) and isinstance(b, Value) and a.dtype == b.dtype == "bool"):
        raise Fallback()
    return ctx.op(_BOOLEAN[ctx.node.target._overloadpacket.__name__], a, b)


def _adjacent_indices(indices) -> list[int] | None:
    """The axes of ``indices`` (``x[..., i0, i1, ...]``) when there are several integer index
    tensors on adjacent axes, else None."""
    present = [i for i, t in enumerate(indices) if t is not None]
    if len(present) < 2 or any(indices[i].dtype not in ("i64", "i32") for i in present) \
            or present != list(range(present[0], present[0] + len(present))):
        return None
    return present


def _linear_index(ctx, x, indices, present, shape):
    """The row index into ``x`` with the axes ``present`` flattened: ``sum_j wrap(i_j) * stride_j``
    (row-major strides of those axes; a negative index wraps like torch's), expanded to ``shape``
    (the indices' broadcast shape); and that flattened ``x``."""
    first, count = present[0], len(present)
    sizes = x.shape[first:first + count]
    flat = None
    for j, axis in enumerate(present):
        index = ctx.cast(indices[axis], "i64")
        index = ctx.op("where", ctx.op("lt", index, ctx.const(0, "i64")),
                       ctx.op("add", index, ctx.const(sizes[j], "i64")), index)
        stride = math.prod(sizes[j + 1:])
        term = index if stride == 1 else ctx.op("mul", index, ctx.const(stride, "i64"))
        flat = term if flat is None else ctx.op("add", flat, term)
    flat = ctx.expand(ctx.reshape(flat, (1,) * (len(shape) - flat.type.rank) + flat.shape), shape)
    return flat, ctx.reshape(x, x.shape[:first] + (math.prod(sizes),) + x.shape[first + count:])


@lowers(aten.index.Tensor)
def _index_adjacent(ctx, x, indices):
    """``x[..., i0, i1, ...]`` with integer index tensors on adjacent axes (a mask built as
    ``padding_mask[batch_idx, kv_idx]``): one ``index_select`` of those axes flattened, at the
    linear index.  One index is the plain ``index_select``."""
    present = _adjacent_indices(indices)
    if present is None:
        return _index(ctx, x, indices)
    first, rank = present[0], max(indices[i].type.rank for i in present)
    flat, rows = _linear_index(ctx, x, indices, present, ctx.meta.shape[first:first + rank])
    return ctx.op("index_select", rows, flat, axis=first)


@lowers(aten.index_put.default)
def _index_put_adjacent(ctx, x, indices, values, accumulate=False):
    """``x[..., i0, i1, ...] += values`` on adjacent axes (the backward of ``_index_adjacent``): a
    ``scatter_add`` into ``x`` with those axes flattened.  One index is the plain lowering."""
    present = _adjacent_indices(indices)
    if present is None or not accumulate:
        return _index_put(ctx, x, indices, values, accumulate)
    from nova.ir.types import broadcast_shapes
    first = present[0]
    index_shape = broadcast_shapes(*(indices[i].shape for i in present))
    flat, rows = _linear_index(ctx, x, indices, present, index_shape)
    src_shape = x.shape[:first] + index_shape + x.shape[first + len(present):]
    scattered = ctx.op("scatter_add", ctx.expand(ctx.cast(values, x.dtype), src_shape), flat, axis=first,
                       shape=rows.shape)
    scattered = ctx.reshape(scattered, x.shape)
    producer = x.producer
    if producer is not None and producer.op == "constant" and producer.attrs["value"] == 0:
        return scattered
    return ctx.op("add", x, scattered)


@lowers(_op("constant_pad_nd"))
def _constant_pad(ctx, x, pad, value=0):
    """``F.pad(x, pad, value=value)``: per axis from the last, ``value`` blocks concatenated before
    and after (a negative pad crops: a slice); Hugging Face's shifted labels pad with -100."""
    for pair in range(len(pad) // 2):
        axis = x.type.rank - 1 - pair
        before, after = int(pad[2 * pair]), int(pad[2 * pair + 1])
        x = ctx.slice(x, axis, max(-before, 0), x.shape[axis] - max(-after, 0))
        parts = []
        for width in (before, after):
            parts.append(ctx.const(value, x.dtype, x.shape[:axis] + (width,) + x.shape[axis + 1:]) if width > 0 else None)
        pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
        x = pieces[0] if len(pieces) == 1 else ctx.op("concat", *pieces, axis=axis)
    return x


_MASK_FOLD_ELEMENTS = 1 << 25          # larger constant masks are not evaluated at capture time (32M elements:
                                       # a batch of 16 x 1024^2 causal masks, ~0.1 s on the host)


def _constant_value(value: Value, limit_nodes: int = 500):
    """The tensor of ``value`` when it depends on no graph input (a mask built from ``arange``s
    and constants), evaluated by the reference semantics; None otherwise."""
    from nova.ir.ops import opdef
    seen, stack = set(), [value]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v.producer is None or len(seen) > limit_nodes:
            return None                  # a graph input (or too large a subgraph)
        stack.extend(v.producer.inputs)
    done: dict = {}

    def run(v):
        if v not in done:
            node = v.producer
            result = opdef(node.op).reference(torch, *[run(x) for x in node.inputs], **node.attrs)
            for out, r in zip(node.outputs, result if isinstance(result, (tuple, list)) else (result,)):
                done[out] = r
        return done[v]
    return run(value)


def fold_constant_mask(ctx, mask, q, k, is_causal):
    """An attention mask that is a capture-time constant equal to "keep all" or to the causal
    pattern (Hugging Face builds one from ``arange`` position ids when no ``attention_mask`` is
    given) -> ``(None, causal)``, so the attention stays on the IR ``attention`` op; any other
    mask -> ``(mask, is_causal)`` unchanged (the masked composition).  The decision is made once
    per mask value (the forward and the backward agree)."""
    if not isinstance(mask, Value) or math.prod(mask.shape) > _MASK_FOLD_ELEMENTS:
        return mask, is_causal
    folded = ctx.__dict__.setdefault("folded_masks", {})
    if mask not in folded:
        folded[mask] = _mask_kind(_constant_value(mask), q.shape[2], k.shape[2])
    kind = folded[mask]
    if kind == "all" or (kind == "causal" and not is_causal):
        return None, is_causal or kind == "causal"
    return mask, is_causal


def attention_bias(ctx, mask, q, k, is_causal):
    """``(bias, causal)``: the runtime attention mask ``mask`` (what ``fold_constant_mask`` left) as the
    IR attention's additive bias operand, ``[B|1, H|1, Tq|1, Tk]`` f32 (f64 for f64 attention), and the
    causal flag; ``(None, is_causal)`` for no mask or one the bias cannot state (the masked composition).

    A boolean mask keeps where True: bias = where(mask, 0, -inf).  Where the mask is the causal pattern
    and'ed with a data-dependent part (Hugging Face's ``causal & padding[b, key]``, which torch's SDPA
    decomposition turns into ``where(mask, 0, -inf)``), the causal factor folds into ``causal`` (the
    kernels skip the tiles above the diagonal) and the bias is the rest: the ``[B, 1, 1, Tk]`` key-padding
    bias.  The decision is made once per mask value (the forward and the backward agree)."""
    if mask is None or not isinstance(mask, Value) or _top_left_differs(q, k, is_causal):
        return None, is_causal
    made = ctx.__dict__.setdefault("attention_biases", {})
    if mask not in made:
        made[mask] = _bias_of_mask(ctx, mask, q, k, is_causal)
    return made[mask]


def _bias_of_mask(ctx, mask, q, k, is_causal):
    t_q, t_k = q.shape[2], k.shape[2]
    wide = "f64" if q.dtype == "f64" else "f32"
    keep = _where_keep(mask)                     # a float mask built as where(keep, 0, -inf)
    if mask.dtype == "bool":
        keep = mask
    if keep is not None:
        rest = _causal_factor(keep, t_q, t_k)
        if rest is not None:
            keep, is_causal = rest, True
        mask = ctx.op("where", keep, ctx.const(0.0, wide), ctx.const(-math.inf, wide))
    shape = (1,) * (4 - mask.type.rank) + tuple(mask.shape)
    scores = (q.shape[0], q.shape[1], t_q, t_k)
    if mask.type.rank > 4 or shape[3] != t_k or any(n not in (1, m) for n, m in zip(shape, scores)):
        return None, is_causal
    if mask.dtype != wide:
        mask = ctx.cast(mask, wide)
    if tuple(mask.shape) != shape:
        mask = ctx.reshape(mask, shape)
    return mask, is_causal


def _where_keep(mask):
    """``keep`` where ``mask`` is ``where(keep, 0, -inf)`` with constant 0 and -inf; else None."""
    node = mask.producer
    if node is None or node.op != "where" or node.inputs[0].dtype != "bool":
        return None
    zero, minus = (_constant_value(x, limit_nodes=4) for x in node.inputs[1:])
    if zero is None or minus is None or zero.numel() != 1 or minus.numel() != 1:
        return None
    return node.inputs[0] if float(zero) == 0.0 and float(minus) == -math.inf else None


def _causal_factor(keep, t_q: int, t_k: int):
    """``rest`` where boolean ``keep`` is ``logical_and`` of the (constant) causal pattern and ``rest``
    (square scores: the causal pattern's own condition); else None."""
    node = keep.producer
    if node is None or node.op != "logical_and" or t_q != t_k:
        return None
    for i in (0, 1):
        pattern, rest = node.inputs[i], node.inputs[1 - i]
        if math.prod(pattern.shape) > _MASK_FOLD_ELEMENTS or rest.dtype != "bool":
            continue
        if _mask_kind(_constant_value(pattern), t_q, t_k) == "causal":
            return rest
    return None


def _mask_kind(value, t_q: int, t_k: int) -> str | None:
    """"all" (nothing masked), "causal" (keep column <= row, square scores) or None."""
    if value is None:
        return None
    keep = value if value.dtype == torch.bool else value == 0
    if value.dtype != torch.bool and not bool(torch.all((value == 0) | (value == -math.inf))):
        return None
    keep = keep.expand(*keep.shape[:-2], t_q, t_k) if keep.dim() >= 2 else keep.expand(t_q, t_k)
    if bool(keep.all()):
        return "all"
    causal = torch.ones(t_q, t_k, dtype=torch.bool).tril()
    if t_q == t_k and bool(torch.equal(keep, causal.expand_as(keep))):
        return "causal"
    return None


@lowers(_op("unsafe_split", "Tensor"))
def _unsafe_split(ctx, x, split_size, dim=0):
    return _split(ctx, x, split_size, dim)           # unsafe only about aliasing: value semantics here


@lowers(_op("unsafe_split_with_sizes"))
def _unsafe_split_with_sizes(ctx, x, split_sizes, dim=0):
    return _split_at(ctx, x, split_sizes, dim)


# ====================================================================== foreach (gradient clipping, grad scaling)
def _foreach_binary(name: str, pairwise: bool):
    """``torch._foreach_<name>(tensors, other)``: one binary IR op per tensor; ``other`` is a
    number or 0-d tensor shared by all (``Scalar``/``Tensor``) or one per tensor (``List``/
    ``ScalarList``).  Results keep each tensor's type (the conform step casts)."""
    def lowering(ctx, tensors, others, alpha=1):
        pairs = zip(tensors, others) if pairwise else ((t, others) for t in tensors)
        return tuple(ctx.binary(name, t, ctx.scaled(o, alpha) if alpha != 1 else o) for t, o in pairs)
    return lowering


for _name, _ir_name in (("add", "add"), ("sub", "sub"), ("mul", "mul"), ("div", "div"), ("pow", "pow"),
                        ("maximum", "maximum"), ("minimum", "minimum"), ("clamp_min", "maximum"),
                        ("clamp_max", "minimum")):
    for _overload, _pairwise in (("Scalar", False), ("Tensor", False), ("List", True), ("ScalarList", True)):
        if _op(f"_foreach_{_name}", _overload) is not None:
            LOWERINGS[_op(f"_foreach_{_name}", _overload)] = _foreach_binary(_ir_name, _pairwise)
for _name in ("neg", "sqrt", "abs", "exp", "log", "reciprocal", "sigmoid", "tanh"):
    if _op(f"_foreach_{_name}") is not None:
        LOWERINGS[_op(f"_foreach_{_name}")] = (lambda name: lambda ctx, tensors: tuple(ctx.op(name, t) for t in tensors))(_name)


@lowers(_op("_foreach_norm", "Scalar"))
def _foreach_norm(ctx, tensors, ord=2, dtype=None):
    """One vector norm per tensor (``clip_grad_norm_(foreach=True)``)."""
    return tuple(_vector_norm(ctx, t, ord, None, False, dtype=dtype) for t in tensors)
