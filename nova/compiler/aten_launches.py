"""The CUDA kernels behind one ATen call, as ``explain`` prices them: their kind, how many, and the
bytes they move.  Counted by running the executor's own launches on meta tensors under a dispatch
mode (``CountKernels``); nothing runs on a GPU.

Kinds (``KINDS``) follow the kernel families of a CUPTI profile (``nova.bench.train_profile``), so
that a profile's per-family totals calibrate them (``nova.bench.calibrate_aten``):

    elementwise             at::native elementwise/vectorized kernels: pointwise ops, fills, copies
                            that cast or transpose, gather/scatter_add (scatter_gather_elementwise),
                            and the per-tensor loop of a foreach op off its fast path
    reduction               reduce_kernel (sum, max.dim, ...) and index_add_ (its kernel is
                            templated on ReduceAdd)
    softmax                 (log-)softmax forward and backward
    layer_norm              LayerNorm forward, and the input gradient of its backward
    layer_norm_weight_grad  the backward's second kernel, the weight/bias gradients (GammaBetaBackward)
    foreach                 multi_tensor_apply kernels of a foreach op on its fast path
    cat                     cat/stack (CatArrayBatchedCopy)
    memcpy                  cudaMemcpyAsync device copies: copy_ between same-dtype contiguous
                            tensors, and each result of an out= overload that has no kernel of its
                            own (ATen computes into a temporary, then copies into ``out``)
    gather                  index_select (vectorized_gather_kernel)
    other                   anything else (e.g. nll_loss, embedding_dense_backward)

Bytes a kernel moves: each distinct tensor it reads once plus each it writes once (an in-place
operand both), a broadcast operand by its distinct elements; gather/index_select read as many
source elements as they write, scatter_add_/index_add_ read and write as many destination elements
as the source has.  Views and allocations launch nothing.  Whether the bytes come from DRAM or from
L2 (the cross-entropy chunks' intermediates) is not modelled here; a calibration of the kinds
absorbs it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("elementwise", "reduction", "softmax", "layer_norm", "layer_norm_weight_grad", "foreach", "cat",
         "memcpy", "gather", "other")

# ATen calls that allocate or alias without running a kernel
NO_KERNEL = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::detach", "aten::alias",
                       "aten::lift_fresh", "aten::_unsafe_view"})
# GEMMs and attention are priced by their own models
PRICED_ELSEWHERE = frozenset({"mm", "addmm", "bmm", "baddbmm", "_efficient_attention_forward",
                              "_efficient_attention_backward", "_scaled_dot_product_efficient_attention",
                              "_scaled_dot_product_efficient_attention_backward"})
REDUCTIONS = frozenset({"sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "prod", "norm", "var", "std",
                        "var_mean", "std_mean", "logsumexp", "any", "all", "linalg_vector_norm", "index_add_",
                        "index_add"})
SOFTMAX = frozenset({"_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data"})
OTHER = frozenset({"nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
                   "embedding_dense_backward"})

# multi_tensor_apply (ATen/native/cuda/MultiTensorApply.cuh): a kernel takes at most this many
# tensors (by the number of tensor lists, "depth") and 320 blocks of 65,536 elements each.
MTA_MAX_TENSORS = (110, 64, 48, 36, 30)
MTA_MAX_TENSORS_SCALARLIST = (96, 64, 48, 36, 30)
MTA_MAX_BLOCKS = 320
MTA_CHUNK = 65536


@dataclass
class Dispatched:
    """One group's ATen calls: how many, per kind [kernels, bytes], and each call's
    ``(kind, kernels, bytes)`` records in order."""
    calls: int = 0
    kinds: dict = field(default_factory=dict)
    records: list = field(default_factory=list)

    def add(self, kind: str, kernels: int, nbytes: int) -> None:
        entry = self.kinds.setdefault(kind, [0, 0])
        entry[0] += kernels
        entry[1] += nbytes
        self.records.append((kind, kernels, nbytes))

    @property
    def kernels(self) -> int:
        return sum(k for k, _ in self.kinds.values())

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.kinds.values())


def tensor_bytes(t) -> int:
    """Distinct bytes of ``t``: a broadcast (stride-0) axis counts once."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size() if t.numel() else 0


def multi_tensor_apply_launches(lists, scalar_list: bool = False) -> int:
    """Kernels multi_tensor_apply launches for ``lists`` (equal-length tensor lists): one whenever
    the tensors of a launch reach the depth's limit or its blocks reach MTA_MAX_BLOCKS."""
    depth = len(lists)
    max_tensors = (MTA_MAX_TENSORS_SCALARLIST if scalar_list else MTA_MAX_TENSORS)[min(depth, 5) - 1]
    tensors = [t for t in lists[0] if t.numel()]
    launches = in_launch = blocks = 0
    for i, t in enumerate(tensors):
        in_launch += 1
        chunks = -(-t.numel() // MTA_CHUNK)
        for c in range(chunks):
            blocks += 1
            last_chunk = c == chunks - 1
            if (in_launch == max_tensors and last_chunk) or blocks == MTA_MAX_BLOCKS or \
                    (i == len(tensors) - 1 and last_chunk):
                launches += 1
                blocks = 0
                in_launch = 0 if last_chunk else 1
    return launches


def _tensors(value):
    import torch
    from torch.utils._pytree import tree_leaves
    return [x for x in tree_leaves(value) if isinstance(x, torch.Tensor)]


def _bound(func, args, kwargs) -> list:
    """``[(schema argument, value)]`` of a call, positional and keyword."""
    schema = func._schema
    return list(zip(schema.arguments, args)) + [(a, kwargs[a.name]) for a in schema.arguments if a.name in kwargs]


def _read_written(func, args, kwargs, out) -> tuple[dict, dict]:
    """{id: bytes} of the tensors the call reads and of those it writes (schema: ``out`` arguments
    are written, mutated ones read and written, fill_/zero_ only write; new results are written)."""
    fill = func._schema.name in ("aten::zero_", "aten::fill_")
    read, written = {}, {}
    for arg, value in _bound(func, args, kwargs):
        mutated = arg.alias_info is not None and arg.alias_info.is_write
        for t in _tensors(value):
            if arg.is_out or (mutated and fill):
                written[id(t)] = tensor_bytes(t)
            elif mutated:
                read[id(t)] = written[id(t)] = tensor_bytes(t)
            else:
                read[id(t)] = tensor_bytes(t)
    for t in _tensors(out):
        if id(t) not in read:
            written[id(t)] = tensor_bytes(t)
    return read, written


def _has_own_kernel(func) -> bool:
    """Whether an out= overload has a backend kernel (CUDA, and CPU in a CPU-only build), rather than
    only ATen's generated CompositeExplicitAutograd wrapper that computes and copies into ``out``."""
    import torch
    name = f"{func._schema.name}.{func._overloadname}"
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key) for key in ("CUDA", "CPU"))


def _foreach(func, base, named, out, nbytes) -> list[tuple[str, int, int]]:
    import torch
    lists = [list(v) for v in named.values()
             if isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v)]
    if not base.endswith("_"):
        lists.append(_tensors(out))
    first = lists[0]
    fast = all(len(ts) == len(first) and all(a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()
                                             for a, b in zip(ts, first)) for ts in lists)
    if not fast:                          # ATen's slow path: one kernel per tensor of the list
        return [("elementwise", len(first), nbytes)]
    return [("foreach", multi_tensor_apply_launches(lists, func._overloadname.startswith("ScalarList")), nbytes)]


def kernels_of(func, args, kwargs, out) -> list[tuple[str, int, int]]:
    """``[(kind, kernels, bytes)]`` that the ATen call ``func(*args, **kwargs) -> out`` launches on a
    CUDA device (empty for views, allocations and what other models price)."""
    if func.is_view or func._schema.name in NO_KERNEL:
        return []
    base = func._schema.name.split("::")[1]
    if base in PRICED_ELSEWHERE:
        return []
    read, written = _read_written(func, args, kwargs, out)
    nbytes = sum(read.values()) + sum(written.values())
    named = {a.name: v for a, v in _bound(func, args, kwargs)}
    result = _kind_of(func, base, named, out, nbytes)
    if any(a.is_out for a in func._schema.arguments) and not _has_own_kernel(func):
        result += [("memcpy", 1, 2 * tensor_bytes(t)) for t in _tensors(out)]
    return result


def _kind_of(func, base, named, out, nbytes) -> list[tuple[str, int, int]]:
    """The kernels of one call by kind (``named``: its arguments by schema name)."""
    if base.startswith("_foreach_"):
        return _foreach(func, base, named, out, nbytes)
    if base == "native_layer_norm_backward":
        outs = [named[k] for k in ("out0", "out1", "out2")] if "out0" in named else list(out)
        dx, dw, db = outs
        reads = sum(tensor_bytes(named[k]) for k in ("grad_out", "input", "mean", "rstd"))
        weight = named.get("weight")
        kernels = [("layer_norm", 1, reads + (tensor_bytes(weight) if weight is not None else 0)
                    + (tensor_bytes(dx) if dx is not None else 0))]
        if dw is not None or db is not None:
            kernels.append(("layer_norm_weight_grad", 1, reads + sum(tensor_bytes(t) for t in (dw, db) if t is not None)))
        return kernels
    if base == "native_layer_norm":
        return [("layer_norm", 1, nbytes)]
    if base in SOFTMAX:
        return [("softmax", 1, nbytes)]
    if base in ("cat", "stack"):
        return [("cat", 1, nbytes)]
    if base in ("gather", "index_select"):
        moved = 2 * sum(tensor_bytes(t) for t in _tensors(out)) + tensor_bytes(named["index"])
        return [("gather" if base == "index_select" else "elementwise", 1, moved)]
    if base in ("scatter_add", "scatter_add_", "index_add", "index_add_"):
        src = named["src"] if "src" in named else named["source"]
        moved = 3 * tensor_bytes(src) + tensor_bytes(named["index"])
        return [("reduction" if base.startswith("index_add") else "elementwise", 1, moved)]
    if base == "copy_":
        dst, src = named["self"], named.get("src", named.get("other"))
        same = hasattr(src, "dtype") and dst.dtype == src.dtype and dst.is_contiguous() and src.is_contiguous()
        return [("memcpy" if same else "elementwise", 1, nbytes)]
    if base in REDUCTIONS:
        return [("reduction", 1, nbytes)]
    if base in OTHER:
        return [("other", 1, nbytes)]
    return [("elementwise", 1, nbytes)]


def counting_mode():
    """A TorchDispatchMode that records every call's kernels into ``mode.dispatched`` (a
    ``Dispatched``); calls on other devices than meta (host bookkeeping) are not kernels."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountKernels(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.dispatched = Dispatched()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if not any(t.device.type == "meta" for t in _tensors((args, kwargs, out))):
                return out
            kernels = kernels_of(func, args, kwargs, out)
            if kernels:
                self.dispatched.calls += 1
                for kind, n, nbytes in kernels:
                    self.dispatched.add(kind, n, nbytes)
            return out

    return CountKernels()
