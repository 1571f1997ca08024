"""ATen kernels of the executor: for each IR op, a builder that binds one node's input tensors and
output tensors (arena views, constants, the user's bound tensors) and returns a ``Kernel``, a
closure that computes the node's results *into* its outputs.  Every decision (which ATen
overload, which view, which workspace) is taken when the kernel is built; the closure only
calls ATen, so a CUDA graph can capture it and nothing in it synchronises with the host.

Where ATen has an out variant it is used (``torch.add(x, y, out=o)``,
``aten.native_layer_norm.out``, ``aten._log_softmax.out``, ``aten.gelu_backward.grad_input``,
``aten.nll_loss_forward.output`` ...).  Where it has none (scaled-dot-product attention, opaque
``aten`` ops, the reference fallback) the kernel computes and ``copy_``-s into the output; each
such copy is counted in ``Kernel.copies`` (``Program.stats["copies"]``).

Attention: on CUDA Nova's fused kernels (``nova_attention``: ``nova.attention``/``nova.attention_backward``)
where the plan gives the group its ``AttentionProblem`` (``nova/passes/attention.py``), reading and
writing the arena's strided views in place (the q/k/v slices of the fused projection, the
transposed dout); otherwise on CPU
``aten._scaled_dot_product_flash_attention_for_cpu`` (+ ``_backward``); on
CUDA ``aten._scaled_dot_product_efficient_attention`` (+ ``_backward``) for f32/bf16/f16.  Both
return the natural-log log-sum-exp per query row in f32, which is the IR's ``lse``; the CPU
kernel's is a strided [B, H, T] view, the CUDA kernel's is [B, H, ceil(T/32)*32] with +inf in
the padding, and its backward relies on that padding (it reads whole 32-row blocks without a
bounds check), so the backward gets a static padded workspace whose padding stays +inf.
Grouped-query attention repeats K/V heads for the kernel and sums dK/dV over the groups.
Causal attention with T_q != T_k (the IR masks bottom-right, the kernels top-left) and dtypes
the kernels lack run the IR reference (and copy).

Cross-entropy (``cross_entropy``/``cross_entropy_backward``, f32/f64): the logits in row chunks
of at most ``cost.CROSS_ENTROPY_CHUNK_BYTES`` (an L2-sized static workspace), two ATen launches
per chunk and a few on [N] vectors; no [N, C] temporary (``torch.logsumexp`` would allocate one
and read the logits three times).  The backward is elementwise over the logits, so the planner
may write dlogits over them.

AdamW: in place on the (donated) parameter and moments with ``torch._foreach_*`` over the
consecutive adamw nodes of a group that share hyper-parameters and the step tensor; the bias
corrections are computed on the device from the 0-d step tensor (no ``.item()``), so the update
is CUDA-graph capturable.  SGD: in-place ATen ops per node.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from nova.ir.ops import opdef
from nova.ir.types import TORCH_NAMES

aten = torch.ops.aten


@dataclass
class Kernel:
    run: Callable[[], None]
    what: str                    # for describe(): the ATen overload(s) it calls
    copies: int = 0              # copy_ launches after a compute that has no out variant
    attention: tuple | None = None   # Nova attention: (AttentionProblem, roles of the kernels it launches)
    rows: object = None              # Nova rows kernels: the RowsProblem they compute
    embedding: object = None         # Nova embedding kernels: the EmbeddingProblem they compute
    pointwise: object = None         # Nova pointwise kernel: its PointwiseProblem
    optimizer: object = None         # Nova multi-tensor optimizer kernel: its UpdateRule
    multi_sum: object = None         # Nova multi-tensor sum kernel: its SumRule
    copied: dict | None = None       # Nova attention: {operand: bytes} its launcher copies densely while it runs
    partials: int = 0                # Nova attention: bytes of its split kernels' FP32 partials (launch.partial_sizes)


@dataclass
class KernelContext:
    """What builders need besides the tensors: the device kind the program runs on ("cpu" or
    "cuda"; the tensors may be meta during a dry run), a static workspace allocator, and the launch
    workspaces the plan placed in the arena (``launch_workspace``)."""
    kind: str
    device: torch.device
    workspaces: list = field(default_factory=list)
    group: int | None = None                           # the group whose kernels are being built
    owners: list = field(default_factory=list)         # the group of each workspace
    arena: object = None                               # the program's arena (uint8) the launch workspaces lie in
    placed: dict = field(default_factory=dict)         # group -> (arena offset, bytes): MemoryPlan.workspaces
    needs: dict = field(default_factory=dict)          # group -> (bytes, what): the launch workspace it asked for
    private: list = field(default_factory=list)        # (group, tensor): launch workspaces the plan does not hold
    shared: object = None                              # one buffer every unplaced launch workspace shares (uint8)
    target: object = None                              # GPUModel the Nova kernels are sized for (None: the device's)

    def workspace(self, shape, dtype, fill=None):
        """A buffer allocated once for the program's lifetime (not in the arena), optionally filled:
        for contents that outlive one launch (an argument table written at bind, a padding that
        stays +inf) and the ATen fallbacks' scratch."""
        t = torch.empty(tuple(shape), dtype=dtype, device=self.device)
        if fill is not None:
            t.fill_(fill)
        self.workspaces.append(t)
        self.owners.append(self.group)
        return t

    def launch_workspace(self, nbytes: int, what: str):
        """``nbytes`` of scratch (uint8) that the current group's kernels write and read within its launch
        only: the arena bytes the plan placed for the group (``MemoryPlan.workspaces``); else the start of
        ``shared``, the one buffer of the program that every launch the plan places no workspace for
        shares (launches run one after the other on one stream); else a buffer of its own, listed in
        ``private``.  None for 0 bytes.  Every kernel of a group shares the group's one workspace (they
        run one after the other); its size is the largest asked for."""
        if nbytes <= 0:
            return None
        if nbytes > self.needs.get(self.group, (0, ""))[0]:
            self.needs[self.group] = (nbytes, what)
        placed = self.placed.get(self.group)
        if placed is not None and placed[1] >= nbytes and self.arena is not None:
            return self.arena[placed[0]:placed[0] + nbytes]
        if self.shared is not None and self.shared.numel() >= nbytes:
            return self.shared[:nbytes]
        t = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        self.private.append((self.group, t))
        return t

    @property
    def workspace_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.workspaces)


def torch_dtype(ir_dtype: str):
    return getattr(torch, TORCH_NAMES[ir_dtype])


# =============================================================== the fallback: reference + copy
def reference_kernel(node, ins, outs, ctx, why: str = "") -> Kernel:
    """Run the op's IR reference (factory calls default to the program's device) and copy each
    result into its output."""
    ref = opdef(node.op).reference
    attrs = dict(node.attrs)
    device = ctx.device

    def run():
        with torch.device(device):
            res = ref(torch, *ins, **attrs)
        res = res if isinstance(res, (tuple, list)) else (res,)
        for o, r in zip(outs, res):
            if r.numel() == 0 and o.numel():     # a placeholder the kernel leaves empty where its meta function
                continue                         # states a shape (EmbeddingBag's max indices outside max mode)
            o.copy_(r)
    return Kernel(run, f"IR reference {node.op} + copy_" + (f" ({why})" if why else ""), len(outs))


# =============================================================== pointwise
def _gelu(approximate):
    return lambda x, out: aten.gelu.out(x, approximate=approximate, out=out)


UNARY = {
    "neg": (torch.neg, "aten.neg.out"), "exp": (torch.exp, "aten.exp.out"), "log": (torch.log, "aten.log.out"),
    "sqrt": (torch.sqrt, "aten.sqrt.out"), "rsqrt": (torch.rsqrt, "aten.rsqrt.out"),
    "reciprocal": (torch.reciprocal, "aten.reciprocal.out"), "abs": (torch.abs, "aten.abs.out"),
    "tanh": (torch.tanh, "aten.tanh.out"), "erf": (torch.erf, "aten.erf.out"), "sin": (torch.sin, "aten.sin.out"),
    "cos": (torch.cos, "aten.cos.out"), "sigmoid": (torch.sigmoid, "aten.sigmoid.out"),
    "relu": (lambda x, out: aten.relu.out(x, out=out), "aten.relu.out"),
    "silu": (lambda x, out: aten.silu.out(x, out=out), "aten.silu.out"),
    "gelu_tanh": (_gelu("tanh"), "aten.gelu.out(approximate=tanh)"),
    "gelu_erf": (_gelu("none"), "aten.gelu.out"),
    "logical_not": (torch.logical_not, "aten.logical_not.out"),
}
BINARY = {name: getattr(torch, name) for name in
          ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
           "logical_and", "logical_or")}


def _grad_input(overload, **kw):
    return lambda dy, x, out: overload(dy, x, **kw, grad_input=out)


BACKWARD = {
    "gelu_tanh_backward": (_grad_input(aten.gelu_backward.grad_input, approximate="tanh"),
                           "aten.gelu_backward.grad_input"),
    "gelu_erf_backward": (_grad_input(aten.gelu_backward.grad_input), "aten.gelu_backward.grad_input"),
    "silu_backward": (_grad_input(aten.silu_backward.grad_input), "aten.silu_backward.grad_input"),
    "sigmoid_backward": (_grad_input(aten.sigmoid_backward.grad_input), "aten.sigmoid_backward.grad_input"),
    "tanh_backward": (_grad_input(aten.tanh_backward.grad_input), "aten.tanh_backward.grad_input"),
    "relu_backward": (lambda dy, y, out: aten.threshold_backward.grad_input(dy, y, 0, grad_input=out),
                      "aten.threshold_backward.grad_input"),
}


def pointwise(node, ins, outs, ctx) -> Kernel:
    (o,) = outs
    if any(x.dtype != o.dtype and overlap(x, o) for x in ins):
        # a narrower input in the first bytes of its widened result (a GEMM epilogue's 16-bit product
        # computed unfused, plan_view._fused_into): torch refuses the partial overlap, so the result
        # is computed apart and copied over
        apart = torch.empty_like(o)
        inner = pointwise(node, ins, [apart], ctx)
        return Kernel(lambda: (inner.run(), o.copy_(apart)), inner.what + " + copy_ (over its input)", inner.copies + 1)
    op = node.op
    if op == "cast":
        (x,) = ins
        return Kernel(lambda: o.copy_(x), "copy_ (cast)")
    if op == "where":
        c, x, y = ins
        return Kernel(lambda: torch.where(c, x, y, out=o), "aten.where.self_out")
    if op in UNARY:
        fn, what = UNARY[op]
        (x,) = ins
        return Kernel(lambda: fn(x, out=o), what)
    if op in BINARY:
        fn = BINARY[op]
        x, y = ins
        return Kernel(lambda: fn(x, y, out=o), f"aten.{op}.out")
    if op in BACKWARD:
        fn, what = BACKWARD[op]
        dy, x = ins
        return Kernel(lambda: fn(dy, x, out=o), what)
    return reference_kernel(node, ins, outs, ctx, "no out variant listed")


# =============================================================== reductions
def reduction(node, ins, outs, ctx) -> Kernel:
    (x,), (o,) = ins, outs
    attrs = node.attrs
    axes = tuple(a % x.dim() for a in attrs["axes"]) if x.dim() else ()
    keep = bool(attrs.get("keepdim", False))
    dtype = torch_dtype(attrs["dtype"]) if attrs.get("dtype") else None
    if not axes:                                     # the IR's reduction over no axes is a copy
        return Kernel(lambda: o.copy_(x), "copy_ (reduction over no axes)")
    if node.op in ("sum", "mean"):
        fn = torch.sum if node.op == "sum" else torch.mean
        return Kernel(lambda: fn(x, dim=axes, keepdim=keep, dtype=dtype, out=o), f"aten.{node.op}.out")
    fn = torch.amax if node.op == "max" else torch.amin
    if x.dtype == o.dtype:
        return Kernel(lambda: fn(x, dim=axes, keepdim=keep, out=o), f"aten.{fn.__name__}.out")
    return Kernel(lambda: o.copy_(fn(x.to(o.dtype), dim=axes, keepdim=keep)), f"aten.{fn.__name__} + copy_", 1)


# =============================================================== views (materialised)
def view_of(node, x):
    """The torch view the IR view op ``node`` makes of tensor ``x`` (raises when a reshape needs a copy)."""
    a = node.attrs
    if node.op == "reshape":
        return x.view(tuple(a["shape"]))
    if node.op == "permute":
        return x.permute(tuple(a["perm"]))
    if node.op == "expand":
        return x.expand(tuple(a["shape"]))
    if node.op == "slice":
        index = [slice(None)] * x.dim()
        index[a["axis"] % x.dim()] = slice(a["start"], a["end"], a.get("step", 1))
        return x[tuple(index)]
    raise ValueError(f"{node.op} is not a view op")


def view_copy(node, ins, outs, ctx) -> Kernel:
    """A view the planner did not alias (its layout needs data movement): one copy kernel."""
    (x,), (o,) = ins, outs
    if node.op == "reshape":
        if o.is_contiguous():                        # x's elements in row-major order, no temporary
            dst = o.view(x.shape)
            return Kernel(lambda: dst.copy_(x), "copy_ (materialised reshape)")
        return Kernel(lambda: o.copy_(x.reshape(o.shape)), "copy_ (materialised reshape)")
    src = view_of(node, x)
    return Kernel(lambda: o.copy_(src), f"copy_ (materialised {node.op})")


# =============================================================== memory ops
def _flat_index_shape(shape, axis, index):
    return tuple(shape[:axis]) + (index.numel(),) + tuple(shape[axis + 1:])


def memory(node, ins, outs, ctx) -> Kernel:
    (o,) = outs
    op, attrs = node.op, node.attrs
    if op == "concat":
        xs = list(ins)
        axis = attrs["axis"] % xs[0].dim()
        return Kernel(lambda: torch.cat(xs, axis, out=o), "aten.cat.out")
    if op == "index_select":
        x, index = ins
        axis = attrs["axis"] % x.dim()
        flat_shape = _flat_index_shape(x.shape, axis, index)
        if o.is_contiguous():
            o_flat = o.view(flat_shape)
            return Kernel(lambda: torch.index_select(x, axis, index.reshape(-1), out=o_flat), "aten.index_select.out")
        return Kernel(lambda: o.copy_(torch.index_select(x, axis, index.reshape(-1)).view(o.shape)),
                      "aten.index_select + copy_", 1)
    if op == "take_along_axis":
        x, index = ins
        axis = attrs["axis"] % x.dim()
        return Kernel(lambda: torch.gather(x, axis, index, out=o), "aten.gather.out")
    if op == "scatter_add":
        src, index = ins
        axis = attrs["axis"] % len(attrs["shape"])
        flat_shape = _flat_index_shape(attrs["shape"], axis, index)

        def run():
            o.zero_()
            o.index_add_(axis, index.reshape(-1), src.reshape(flat_shape))
        return Kernel(run, "aten.zero_ + aten.index_add_")
    return reference_kernel(node, ins, outs, ctx)


# =============================================================== composites
def _mixed_dtypes(*tensors) -> bool:
    """ATen's norm kernels take one dtype for all their tensors; the IR's norms compute mixed ones in
    FP32 (``nova/ir/ops.py``)."""
    return len({t.dtype for t in tensors if t is not None and t.is_floating_point()}) > 1


def _cpu_low_statistics(x, mean) -> bool:
    """ATen's CPU LayerNorm keeps a 16-bit input's mean and rstd in the input's type; the IR's are FP32
    (as CUDA's): the widening reference then."""
    return x.device.type == "cpu" and mean.dtype != x.dtype


def layer_norm(node, ins, outs, ctx) -> Kernel:
    a = node.attrs
    x, rest = ins[0], list(ins[1:])
    weight = rest.pop(0) if a.get("has_weight", True) else None
    bias = rest.pop(0) if a.get("has_bias", True) else None
    shape, eps = list(a["normalized_shape"]), float(a["eps"])
    y, mean, rstd = outs
    if _mixed_dtypes(x, weight, bias, y) or _cpu_low_statistics(x, mean):
        return reference_kernel(node, ins, outs, ctx)    # autocast's bf16 rows, f32 affine: the widening reference
    return Kernel(lambda: aten.native_layer_norm.out(x, shape, weight, bias, eps, out0=y, out1=mean, out2=rstd),
                  "aten.native_layer_norm.out")


def layer_norm_backward(node, ins, outs, ctx) -> Kernel:
    a = node.attrs
    dy, x, mean, rstd, rest = ins[0], ins[1], ins[2], ins[3], list(ins[4:])
    has_w, has_b = a.get("has_weight", True), a.get("has_bias", True)
    weight = rest.pop(0) if has_w else None
    bias = rest.pop(0) if has_b else None
    shape = list(a["normalized_shape"])
    mask = [True, bool(has_w), bool(has_b)]
    if _mixed_dtypes(dy, x, weight, bias, *outs) or _cpu_low_statistics(x, mean):
        return reference_kernel(node, ins, outs, ctx)    # a 16-bit dy or dx under autocast: the widening reference
    if all(mask):
        dx, dw, db = outs
        return Kernel(lambda: aten.native_layer_norm_backward.out(dy, x, shape, mean, rstd, weight, bias, mask,
                                                                  out0=dx, out1=dw, out2=db),
                      "aten.native_layer_norm_backward.out")

    def run():           # without every output the out variant has nothing to write to: compute + copy
        res = aten.native_layer_norm_backward(dy, x, shape, mean, rstd, weight, bias, mask)
        for o, r in zip(outs, [r for r, keep in zip(res, mask) if keep]):
            o.copy_(r)
    return Kernel(run, "aten.native_layer_norm_backward + copy_", len(outs))


def softmax_family(node, ins, outs, ctx) -> Kernel:
    (o,) = outs
    axis = node.attrs["axis"]
    if node.op in ("softmax", "log_softmax"):
        (x,) = ins
        axis %= max(x.dim(), 1)
        fn = aten._softmax.out if node.op == "softmax" else aten._log_softmax.out
        return Kernel(lambda: fn(x, axis, False, out=o), f"aten._{node.op}.out")
    dy, y = ins
    axis %= max(y.dim(), 1)
    if node.op == "softmax_backward":
        return Kernel(lambda: aten._softmax_backward_data.out(dy, y, axis, y.dtype, grad_input=o),
                      "aten._softmax_backward_data.out")
    return Kernel(lambda: aten._log_softmax_backward_data.out(dy, y, axis, y.dtype, out=o),
                  "aten._log_softmax_backward_data.out")


REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def nll_loss(node, ins, outs, ctx) -> Kernel:
    red = REDUCTIONS[node.attrs.get("reduction", "mean")]
    ignore = int(node.attrs.get("ignore_index", -100))
    if node.op == "nll_loss":
        logp, target = ins
        loss, total_weight = outs
        return Kernel(lambda: aten.nll_loss_forward.output(logp, target, None, red, ignore, output=loss,
                                                           total_weight=total_weight), "aten.nll_loss_forward.output")
    dloss, logp, target, total_weight = ins
    (o,) = outs
    return Kernel(lambda: aten.nll_loss_backward.grad_input(dloss, logp, target, None, red, ignore, total_weight,
                                                            grad_input=o), "aten.nll_loss_backward.grad_input")


# =============================================================== cross-entropy
CROSS_ENTROPY_DTYPES = (torch.float32, torch.float64)


def _cross_entropy_attrs(node, x):
    """``(ignore_index, reduction is mean, rows, row chunks)`` of a cross-entropy node over logits ``x``."""
    return (int(node.attrs.get("ignore_index", -100)), node.attrs.get("reduction", "mean") == "mean", x.shape[0],
            _cross_entropy_chunks(x))


def _cross_entropy_chunks(x) -> list[tuple[int, int]]:
    from nova.compiler import cost
    n, c = x.shape
    rows = cost.cross_entropy_chunk_rows(n, c * x.element_size())
    return [(r, min(r + rows, n)) for r in range(0, n, rows)]


def _cross_entropy_rows(t, ignore, ctx):
    """Per-row workspaces and the kernels that fill them: kept-row mask (bool [N]) and targets
    with ignored rows pointing at class 0 (int64 [N, 1], a valid gather/scatter index)."""
    keep = ctx.workspace(t.shape, torch.bool)
    safe = ctx.workspace((t.shape[0], 1), torch.int64)
    safe_flat = safe[:, 0]

    def run():
        torch.ne(t, ignore, out=keep)
        torch.mul(t, keep, out=safe_flat)
    return keep, safe, run


def cross_entropy(node, ins, outs, ctx) -> Kernel:
    """loss and per-row log-sum-exp without writing log-probabilities: per row chunk (at most
    ``cost.CROSS_ENTROPY_CHUNK_BYTES``) ``_log_softmax`` into a static L2-sized workspace and its
    row max (value and column: the logits' argmax, where log p = -log(sum exp(x - max)) has the
    smallest magnitude), so lse = x[argmax] - log p[argmax]; then on [N] vectors the target logits
    (one gather), per-row losses lse - x[target] masked by ignore_index, their sum (/ kept rows for
    'mean': 0/0 = nan when every row is ignored, as torch).  The logits are read once; nothing
    synchronises with the host."""
    x, t = ins
    loss, lse = outs
    if x.dtype not in CROSS_ENTROPY_DTYPES or lse.dtype != x.dtype:
        return reference_kernel(node, ins, outs, ctx, f"no cross-entropy kernel for {x.dtype}")
    ignore, mean, n, chunks = _cross_entropy_attrs(node, x)
    ws = ctx.workspace((chunks[0][1] - chunks[0][0] if chunks else 0, x.shape[1]), x.dtype)
    lp_max = ctx.workspace((n, 1), x.dtype)
    arg = ctx.workspace((n, 1), torch.int64)
    x_arg = ctx.workspace((n, 1), x.dtype)
    x_t = ctx.workspace((n, 1), x.dtype)
    per_row = ctx.workspace((n,), x.dtype)
    count = ctx.workspace((), torch.int64)
    keep, safe, rows = _cross_entropy_rows(t, ignore, ctx)

    def run():
        rows()
        for r0, r1 in chunks:
            w = ws[:r1 - r0]
            aten._log_softmax.out(x[r0:r1], 1, False, out=w)
            torch.max(w, 1, keepdim=True, out=(lp_max[r0:r1], arg[r0:r1]))
        torch.gather(x, 1, arg, out=x_arg)
        torch.sub(x_arg[:, 0], lp_max[:, 0], out=lse)
        torch.gather(x, 1, safe, out=x_t)
        torch.sub(lse, x_t[:, 0], out=per_row)
        per_row.mul_(keep)
        torch.sum(per_row, 0, out=loss)
        if mean:
            torch.sum(keep, 0, out=count)
            loss.div_(count)
    return Kernel(run, f"cross_entropy: {len(chunks)} row chunk(s) of aten._log_softmax.out + max.dim_max "
                       f"(workspace), gathers and [N] reductions")


def cross_entropy_backward(node, ins, outs, ctx) -> Kernel:
    """dlogits = exp(x - lse) * s - s * onehot(target), s = dloss / kept rows ('mean') or dloss,
    per row, zero for ignored rows.  Per row chunk two passes, the second over the chunk the first
    just wrote (in L2): ``sub.out`` (x - lse) and ``elu_backward.grad_input`` with grad_output s[:, None],
    alpha = scale = input_scale = 1, which is s * exp(y) for y <= 0 (x - lse is never positive:
    lse >= max x) in one pass; then one ``scatter_add_`` of -s at the targets.  Elementwise over
    the logits (each element read before its own result is written, nothing read afterwards), so
    dlogits may be the logits' own buffer (the planner's in-place rule).  The scale stays on the
    device (no ``.item()``): CUDA-graph capturable."""
    dloss, x, t, lse = ins
    (dx,) = outs
    if x.dtype not in CROSS_ENTROPY_DTYPES or lse.dtype != x.dtype:
        return reference_kernel(node, ins, outs, ctx, f"no cross-entropy kernel for {x.dtype}")
    ignore, mean, n, chunks = _cross_entropy_attrs(node, x)
    count = ctx.workspace((), torch.int64)
    scale = ctx.workspace((), x.dtype)
    row_scale = ctx.workspace((n, 1), x.dtype)
    neg_row_scale = ctx.workspace((n, 1), x.dtype)
    keep, safe, rows = _cross_entropy_rows(t, ignore, ctx)
    keep_col = keep[:, None]
    lse_col = lse[:, None]

    def run():
        rows()
        if mean:
            torch.sum(keep, 0, out=count)
            count.clamp_min_(1)                       # no kept row: a zero gradient, as torch
            torch.div(dloss, count, out=scale)
            torch.mul(keep_col, scale, out=row_scale)
        else:
            torch.mul(keep_col, dloss, out=row_scale)
        for r0, r1 in chunks:
            d = dx[r0:r1]
            torch.sub(x[r0:r1], lse_col[r0:r1], out=d)
            aten.elu_backward.grad_input(row_scale[r0:r1], 1.0, 1.0, 1.0, False, d, grad_input=d)
        torch.neg(row_scale, out=neg_row_scale)
        dx.scatter_add_(1, safe, neg_row_scale)
    return Kernel(run, f"cross_entropy_backward: {len(chunks)} row chunk(s) of aten.sub.out + "
                       f"aten.elu_backward.grad_input (scale * exp), aten.scatter_add_ at the targets")


SDPA_CUDA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
LSE_ALIGN = 32             # the CUDA efficient kernel pads its log-sum-exp rows to a multiple of 32


def _repeat_heads(t, groups):
    return t.repeat_interleave(groups, dim=1) if groups > 1 else t


def _sum_head_groups(grad, out, groups):
    """dK/dV of grouped-query attention: the repeated heads' gradients summed into ``out``."""
    if groups == 1:
        out.copy_(grad)
    else:
        torch.sum(grad.unflatten(1, (out.shape[1], groups)), dim=2, out=out)


def _attention_fallback_reason(node, q, k, ctx) -> str:
    if len(node.inputs) == {"attention": 4, "attention_backward": 7}[node.op]:
        return ("an additive bias (attention mask) off Nova's kernels: matmul, softmax, matmul in the IR reference "
                "(the SDPA kernels' fully masked rows differ from the IR's clamped bias)")
    if node.attrs.get("causal") and q.shape[2] != k.shape[2]:
        return "causal with T_q != T_k: the IR masks bottom-right, the SDPA kernels top-left"
    if ctx.kind == "cuda" and q.dtype not in SDPA_CUDA_DTYPES:
        return f"no efficient-attention kernel for {q.dtype}"
    if ctx.kind == "cpu" and q.dtype not in SDPA_CUDA_DTYPES + (torch.float64,):
        return f"no CPU flash-attention kernel for {q.dtype}"
    return ""


def nova_attention(node, ins, outs, ctx) -> Kernel:
    """Forward or backward on Nova's kernels, written into the arena's views.  Strided operands
    (the q/k/v views of the fused projection, a transposed dout, strided outputs) are addressed in
    place; one the kernels cannot address (``launch.plan_operands``: its head dimension not contiguous,
    a stride not a multiple of 16 bytes) is copied by the launcher, counted as a copy and named in
    ``what``.  ``Kernel.attention`` holds the problem (with the strides) and the kernels it runs: what
    ``nova precompile train`` compiles (``Program.attention_kernels``, the meta dry run's strides)."""
    from nova.kernels.attention.launch import attention, attention_backward, plan_operands
    scale, causal = float(node.attrs["scale"]), bool(node.attrs.get("causal", False))
    if node.op == "attention":
        q, k, v = ins[:3]
        bias = ins[3] if len(ins) == 4 else None
        o, lse = outs
        problem, copies = plan_operands(q, k, v, causal, scale, bias=bias, out=o)
        named = {"q": q, "k": k, "v": v, "bias": bias, "out": o}
        return Kernel(lambda: attention(q, k, v, causal=causal, scale=scale, bias=bias, out=o, lse=lse),
                      "nova.attention (fwd kernel)" + _copy_note(copies), len(copies), (problem, ("fwd",)),
                      copied=_copied_bytes(copies, named), partials=_partial_bytes(problem, ("fwd",), ctx))
    dout, q, k, v, out, lse = ins[:6]
    bias = ins[6] if len(ins) == 7 else None
    dq, dk, dv = outs
    problem, copies = plan_operands(q, k, v, causal, scale, bias=bias, out=out, dout=dout, dq=dq, dk=dk, dv=dv)
    if not lse.is_contiguous():
        copies["lse"] = "lse is not contiguous"
    named = {"q": q, "k": k, "v": v, "bias": bias, "out": out, "dout": dout, "dq": dq, "dk": dk, "dv": dv, "lse": lse}
    return Kernel(lambda: attention_backward(dout, q, k, v, out, lse, causal=causal, scale=scale, bias=bias,
                                                  dq=dq, dk=dk, dv=dv),
                  "nova.attention_backward (bwd_pre, bwd_dkv, bwd_dq kernels)" + _copy_note(copies), len(copies),
                  (problem, ("bwd_pre", "bwd_dkv", "bwd_dq")), copied=_copied_bytes(copies, named),
                  partials=_partial_bytes(problem, ("bwd_dkv", "bwd_dq"), ctx))


_PARTIALS: dict = {}                 # (problem, roles, target name, options) -> bytes: a step's layers share one


def _partial_bytes(problem, roles, ctx) -> int:
    """The most bytes of FP32 partials one of ``roles``' split kernels holds during the call (its
    workspace lives from its launch to its combine's: one role's at a time); configured once per
    problem, target and options (a step's layers repeat one attention problem)."""
    from nova import options
    from nova.compiler.role_kernels import device_target
    from nova.kernels.attention.derive import configure_attention
    from nova.kernels.attention.launch import partial_sizes
    target = device_target(ctx)
    key = (problem, roles, target.name, options.current())
    if key not in _PARTIALS:
        schedule = configure_attention(problem, target).schedule
        _PARTIALS[key] = max((4 * sum(partial_sizes(schedule, problem, r)) for r in roles), default=0)
    return _PARTIALS[key]


def _copied_bytes(copies: dict, named: dict) -> dict:
    """{operand: bytes of the dense copy the attention launcher makes of it} (a bias in FP32)."""
    out = {}
    for name in copies:
        t = named.get(name)
        if t is not None:
            out[name] = math.prod(n for n, x in zip(t.shape, t.stride()) if x) * 4 if name == "bias" else \
                t.numel() * t.element_size()
    return out


def _copy_note(copies: dict) -> str:
    return "".join(f" + copy {name} ({why})" for name, why in copies.items())


def reference_attention(node, ins, outs, ctx, q, k) -> Kernel | None:
    """The IR reference kernel where the SDPA kernels would differ from the IR (the fallback's
    reason); else None (the caller's ATen kernel)."""
    why = _attention_fallback_reason(node, q, k, ctx)
    return reference_kernel(node, ins, outs, ctx, why) if why else None


def attention(node, ins, outs, ctx) -> Kernel:
    q, k, v = ins[:3]
    o, lse = outs
    scale, causal = float(node.attrs["scale"]), bool(node.attrs.get("causal", False))
    chosen = reference_attention(node, ins, outs, ctx, q, k)
    if chosen is not None:
        return chosen
    groups = q.shape[1] // k.shape[1]
    t_q = q.shape[2]
    if ctx.kind == "cuda":
        def run():
            out, lse_padded, _, _ = aten._scaled_dot_product_efficient_attention(
                q, _repeat_heads(k, groups), _repeat_heads(v, groups), None, True, 0.0, causal, scale=scale)
            o.copy_(out)
            lse.copy_(lse_padded[..., :t_q])
        return Kernel(run, "aten._scaled_dot_product_efficient_attention + copy_ (out, lse[..., :T])", 2)

    def run_cpu():
        out, l = aten._scaled_dot_product_flash_attention_for_cpu(
            q, _repeat_heads(k, groups), _repeat_heads(v, groups), 0.0, causal, scale=scale)
        o.copy_(out)
        lse.copy_(l)
    return Kernel(run_cpu, "aten._scaled_dot_product_flash_attention_for_cpu + copy_ (out, lse)", 2)


def attention_backward(node, ins, outs, ctx) -> Kernel:
    dout, q, k, v, out, lse = ins[:6]
    dq, dk, dv = outs
    scale, causal = float(node.attrs["scale"]), bool(node.attrs.get("causal", False))
    chosen = reference_attention(node, ins, outs, ctx, q, k)
    if chosen is not None:
        return chosen
    groups = q.shape[1] // k.shape[1]
    if ctx.kind == "cuda":
        b, h, t_q = lse.shape
        padded = -(-t_q // LSE_ALIGN) * LSE_ALIGN
        lse_in = lse if padded == t_q and lse.is_contiguous() else \
            ctx.workspace((b, h, padded), torch.float32, fill=math.inf)       # padding stays +inf
        seed = torch.zeros((), dtype=torch.int64)     # philox seed/offset: read only with dropout > 0
        offset = torch.zeros((), dtype=torch.int64)
        copies = 3 + (lse_in is not lse)

        def run():
            if lse_in is not lse:
                lse_in[..., :t_q].copy_(lse)
            gq, gk, gv, _ = aten._scaled_dot_product_efficient_attention_backward(
                dout, q, _repeat_heads(k, groups), _repeat_heads(v, groups), None, out, lse_in, seed, offset,
                0.0, [True, True, True, False], causal, scale=scale)
            dq.copy_(gq)
            _sum_head_groups(gk, dk, groups)
            _sum_head_groups(gv, dv, groups)
        return Kernel(run, "aten._scaled_dot_product_efficient_attention_backward (lse padded to 32 with +inf) "
                           "+ copy_ (dq, dk, dv)", copies)

    def run_cpu():
        gq, gk, gv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, _repeat_heads(k, groups), _repeat_heads(v, groups), out, lse, 0.0, causal, scale=scale)
        dq.copy_(gq)
        _sum_head_groups(gk, dk, groups)
        _sum_head_groups(gv, dv, groups)
    return Kernel(run_cpu, "aten._scaled_dot_product_flash_attention_for_cpu_backward + copy_ (dq, dk, dv)", 3)


# =============================================================== optimizers
FOREACH_CHUNK_BYTES = 64 << 20      # temporaries of one foreach batch (sqrt of the second moments)


def _foreach_scalar(name):
    """``aten._foreach_<name>_.Tensor`` (a 0-d tensor scalar), else a per-tensor loop."""
    overload = getattr(getattr(aten, f"_foreach_{name}_"), "Tensor", None)
    if overload is not None:
        return overload
    method = f"{name}_"
    return lambda ts, s: [getattr(t, method)(s) for t in ts]


def _byte_range(t) -> tuple:
    """(storage identity, first byte, one past the last byte) that ``t`` can touch."""
    start = t.storage_offset() * t.element_size()
    span = 0 if t.numel() == 0 else (1 + sum((d - 1) * s for d, s in zip(t.shape, t.stride()))) * t.element_size()
    return t.untyped_storage()._cdata, start, start + span


def overlap(a, b) -> bool:
    """Whether tensors ``a`` and ``b`` may share bytes (same storage, intersecting byte ranges)."""
    sa, a0, a1 = _byte_range(a)
    sb, b0, b1 = _byte_range(b)
    return sa == sb and a0 < b1 and b0 < a1


def can_join_batch(batch_ins, batch_outs, ins, outs) -> bool:
    """A node may join a foreach batch only if its outputs touch no input of the batch's nodes and
    its inputs no output of theirs: the batch writes every output before it reads every input."""
    return not any(overlap(o, i) for o in outs for group in batch_ins for i in group) and \
        not any(overlap(o, i) for group in batch_outs for o in group for i in ins)


def adamw(nodes, ins_list, outs_list, ctx) -> Kernel:
    """One foreach AdamW/Adam update of ``nodes`` (same attributes, one hyper-parameter vector), in
    place on their outputs; an output that is not its input's storage (not donated) is first copied
    from it.  Every scalar comes from the device at run time: the hyper-parameter vector (a
    learning-rate schedule changes it between replays of the same CUDA graph) and the step tensors
    (one shared tensor, or one per parameter, stacked into a vector)."""
    a = nodes[0].attrs
    decoupled, maximize = bool(a.get("decoupled", True)), bool(a.get("maximize", False))
    hyper = ins_list[0][5]
    steps = [ins[4] for ins in ins_list]
    shared_step = all(t is steps[0] for t in steps)
    params = [outs[0] for outs in outs_list]
    grads = [ins[1] for ins in ins_list]
    exp_avgs = [outs[1] for outs in outs_list]
    exp_avg_sqs = [outs[2] for outs in outs_list]
    pre_copies = [(o, i) for ins, outs in zip(ins_list, outs_list)
                  for o, i in ((outs[0], ins[0]), (outs[1], ins[2]), (outs[2], ins[3])) if o is not i]
    # a gradient an output shares bytes with (the memory plan may put a result that is not donated
    # over a dying gradient: ``memory.elementwise_reader``) is read into its own buffer before any
    # output is written; the copies and the foreach steps below write outputs before the last read
    outputs = [o for outs in outs_list for o in outs]
    aliased = [j for j, g in enumerate(grads) if any(overlap(o, g) for o in outputs)]
    chunks = _foreach_chunks(params)
    mul_, div_, add_ = _foreach_scalar("mul"), _foreach_scalar("div"), _foreach_scalar("add")
    low = (torch.float32, torch.bfloat16, torch.float16)
    scalar_dtype = torch.float32 if params[0].dtype in low else params[0].dtype

    def run():
        read = list(grads)
        for j in aliased:
            read[j] = grads[j].clone()
        for o, i in pre_copies:
            o.copy_(i)
        lr, beta1, beta2, eps, wd = hyper.unbind(0)                 # f64, like the reference's Python math
        t = (steps[0] if shared_step else torch.stack(steps)).to(torch.float64)
        neg_step_size = (-lr / (1 - torch.pow(beta1, t))).to(scalar_dtype)
        bias_correction2_sqrt = torch.sqrt(1 - torch.pow(beta2, t)).to(scalar_dtype)
        decay = (1 - lr * wd).to(scalar_dtype)
        h = hyper.to(scalar_dtype)                                  # one cast: the betas, eps, wd as views
        beta1_s, beta2_s, eps_s, wd_s = h.unbind(0)[1:]
        one_minus_beta1, one_minus_beta2 = (1 - h[1:3]).unbind(0)
        for idx in chunks:
            P = [params[j] for j in idx]
            M = [exp_avgs[j] for j in idx]
            V = [exp_avg_sqs[j] for j in idx]
            G = [read[j] for j in idx]
            if maximize:
                G = torch._foreach_neg(G)
            if decoupled:
                mul_(P, decay)
            else:
                G = torch._foreach_add(G, torch._foreach_mul(P, wd_s))
            # m = lerp(m, g, 1 - beta1) = m * beta1 + g * (1 - beta1)
            mul_(M, beta1_s)
            torch._foreach_add_(M, torch._foreach_mul(G, one_minus_beta1))
            mul_(V, beta2_s)
            torch._foreach_addcmul_(V, torch._foreach_mul(G, one_minus_beta2), G)
            # param -= step_size * m / (sqrt(v) / bc2_sqrt + eps)   (lr = 0 is a no-op, not 0/0)
            D = torch._foreach_sqrt(V)
            if shared_step:
                div_(D, bias_correction2_sqrt)
                U = torch._foreach_mul(M, neg_step_size)
            else:
                torch._foreach_div_(D, [bias_correction2_sqrt[j] for j in idx])
                U = torch._foreach_mul(M, [neg_step_size[j] for j in idx])
            add_(D, eps_s)
            torch._foreach_addcdiv_(P, U, D)
    what = f"{'adamw' if decoupled else 'adam'} x{len(nodes)}: aten._foreach_mul_/add_/addcmul_/sqrt/div_/addcdiv_ " \
           f"({len(chunks)} batch{'es' if len(chunks) != 1 else ''}), hyper-parameters and bias corrections from " \
           f"the device"
    return Kernel(run, what + (f" + copy_ x{len(pre_copies)} (not donated)" if pre_copies else ""), len(pre_copies))


def _foreach_chunks(params) -> list[list[int]]:
    """Indices of ``params`` in batches of at most ``FOREACH_CHUNK_BYTES`` (a batch's temporaries)."""
    chunks, current, size = [], [], 0
    for j, p in enumerate(params):
        nbytes = p.numel() * p.element_size()
        if current and size + nbytes > FOREACH_CHUNK_BYTES:
            chunks.append(current)
            current, size = [], 0
        current.append(j)
        size += nbytes
    if current:
        chunks.append(current)
    return chunks


def sgd(node, ins, outs, ctx) -> Kernel:
    """torch.optim.SGD's update, its scalars read from the hyper-parameter vector on the device at run
    time: in place on its donated inputs, or else every input read before any output is written (the
    arithmetic into temporaries, then the outputs).  An update is an elementwise composite, so the
    memory plan may put a result that is not donated over a dying input's bytes
    (``memory.elementwise_reader``: the new parameter over its gradient), and copying the old
    parameter into the result first destroyed the gradient it then read."""
    a = node.attrs
    with_momentum, nesterov, maximize = (bool(a.get(k, False)) for k in ("with_momentum", "nesterov", "maximize"))
    param, grad, hyper = ins[0], ins[1], ins[2]
    buf_in = ins[3] if len(ins) > 3 else None
    param_out = outs[0]
    buf_out = outs[1] if with_momentum else None
    written = [o for o in (param_out, buf_out) if o is not None]
    in_place = param_out is param and (buf_in is None or buf_out is buf_in) and \
        not any(overlap(o, grad) for o in written)

    def run():
        lr, momentum, dampening, wd = (x.to(param_out.dtype) for x in hyper.unbind(0))
        g = -grad if maximize else grad
        g = g + wd * param
        if in_place:
            if with_momentum:
                if buf_in is None:
                    buf_out.copy_(g)
                else:
                    buf_out.mul_(momentum).add_(g * (1 - dampening))
                g = g + momentum * buf_out if nesterov else buf_out
            param_out.sub_(lr * g)
            return
        buf = None
        if with_momentum:
            buf = (g.clone() if buf_in is None else buf_in * momentum + g * (1 - dampening)).to(buf_out.dtype)
            g = g + momentum * buf if nesterov else buf
        new_param = param - lr * g
        if buf is not None:
            buf_out.copy_(buf)
        param_out.copy_(new_param)
    if in_place:
        return Kernel(run, "sgd: in-place aten.add_/mul_, scalars from the device", 0)
    return Kernel(run, "sgd: aten.add/mul into temporaries, then copy_ into the outputs (not donated), scalars "
                  "from the device", len(written))


# =============================================================== the table
BUILDERS = {
    "pointwise": pointwise,
    "reduce": reduction,
    "view": view_copy,
    "memory": memory,
}
COMPOSITES = {
    "layer_norm": layer_norm, "layer_norm_backward": layer_norm_backward,
    "softmax": softmax_family, "log_softmax": softmax_family,
    "softmax_backward": softmax_family, "log_softmax_backward": softmax_family,
    "nll_loss": nll_loss, "nll_loss_backward": nll_loss,
    "cross_entropy": cross_entropy, "cross_entropy_backward": cross_entropy_backward,
    "attention": attention, "attention_backward": attention_backward,
    "sgd": sgd,
}


def build_kernel(node, ins, outs, ctx) -> Kernel:
    """The kernel of one node (matmul and adamw are built by the executor: GEMM lowering, batching)."""
    if node.op in COMPOSITES:
        return COMPOSITES[node.op](node, ins, outs, ctx)
    builder = BUILDERS.get(opdef(node.op).kind)
    if builder is not None:
        return builder(node, ins, outs, ctx)
    if node.op == "adamw":
        return adamw([node], [ins], [outs], ctx)
    if opdef(node.op).kind == "collective":
        from nova.compiler.collectives import collective_launch
        return Kernel(*collective_launch(node, ins, outs, ctx.kind))
    return reference_kernel(node, ins, outs, ctx, "opaque aten op" if node.op == "aten" else "")
