"""Binding of the plan's GEMM groups to launches: the executor's side of a ``gemm`` group.

The fusion pass decides each matmul's kernel once (``nova.passes.fusion.classify_gemm``): a Nova GEMM
group carries its ``GemmProblem`` (bias and activation included) and its ``Epilogue`` (the bias
value; the group's nodes after the matmul are the epilogue it absorbs); any other matmul runs on
``torch.matmul`` (cuBLAS), the group's reason saying why.  This module only binds: it views the
bound tensors as the launch's operands, as ``nova.matmul`` takes them, and checks that they are the
planned problem:

  * 2-D x 2-D: one launch, transposed operands as ``x.mT`` views;
  * batched x 2-D (a linear layer on [B, T, C]) whose rows merge into one [B*T, K] view: one
    launch on the flattened rows;
  * otherwise (truly batched, or a 2-D A against batched B): one batched launch whose batch is the
    result's batch axes, each operand viewed as [batch, rows, cols] with one batch stride (its
    broadcast axes stride 0: ``layout.merged_batch_stride``).

The plan's problem is stated for the IR's types (inputs dense, as the layout analysis sees them);
a user's tensor bound in place may arrive with other strides or at an address off 16 bytes.  When
the bound views are not exactly the planned problem (layout, alignment, an epilogue result placed
on an operand's bytes), the group runs unfused on ``torch.matmul`` and ATen, and the executor notes
which group and why: the decision is not made again, only refused for those tensors.

``deterministic`` is a run-time option of the GEMM (``NOVA_DETERMINISTIC``, torch's deterministic
flag), read once when the program is built and stated to each launch.

Workspace: a Nova launch's operand-prep copies and split-K partials (``workspace_bytes``) are a launch
workspace of its group, which the plan places in the arena; the executor hands it to each call.

On CPU (and whenever no Nova backend is given) every matmul runs on ``torch.matmul(out=)``.
Binding is a pure function of the tensors' shapes, strides, dtypes and addresses, so running it on
meta tensors lists exactly the GEMM problems a CUDA program launches (``gemm_problems``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from nova.compiler.aten_kernels import Kernel, overlap
from nova.dtypes import ELEMENT_TYPES, MODE_OF_STORAGE
from nova.kernels.gemm.problem import GemmProblem
from nova.passes.layout import merged_batch_stride

OUT_DTYPES = {getattr(torch, ELEMENT_TYPES[s].torch): s for s in MODE_OF_STORAGE}   # torch dtype -> storage
NOVA_DTYPES = {t: MODE_OF_STORAGE[s] for t, s in OUT_DTYPES.items()}                  # torch dtype -> GEMM mode
ALIGN_BYTES = 16             # the widest vector access / TMA base alignment of Nova's kernels


@dataclass
class GemmCall:
    a: object                    # 2-D [M, K] (row-major or transposed view), or batched [count, M, K]
    b: object                    # 2-D [K, N], or batched [count, K, N] (batch stride 0: broadcast)
    out: object                  # 2-D [M, N] row-major, or batched [count, M, N]
    bias: object = None          # [N] or None
    residual: object = None      # R: out's shape, type and strides, or None
    preactivation: object = None  # P: out's shape, type and strides, or None

    def problem(self, planned: GemmProblem) -> GemmProblem:
        """The problem these views state, as ``nova.matmul`` reads them (``GemmProblem`` normalises
        the batch); what the views cannot show (activation, rounding, deterministic) is
        ``planned``'s."""
        a, b, out = self.a, self.b, self.out
        M, K = (int(d) for d in a.shape[-2:])
        N = int(b.shape[-1])
        batch = ()
        if out.dim() == 3 and out.shape[0] > 1:
            batch = (int(out.shape[0]),) + tuple(int(t.stride(0)) if t.shape[0] > 1 else 0 for t in (a, b, out))
        return GemmProblem(M, N, K, NOVA_DTYPES[a.dtype], layout(a) == "col", layout(b) == "col",
                           self.bias is not None, planned.activation, OUT_DTYPES[out.dtype], planned.tf32_rounding,
                           planned.deterministic, *batch, residual=self.residual is not None,
                           preactivation=self.preactivation is not None, round_through=planned.round_through,
                           activation_grad=planned.activation_grad)


@dataclass
class GemmLaunch:
    """One gemm group as one Nova launch of the plan's problem, or as torch.matmul (its epilogue
    nodes then run on ATen)."""
    node: object
    epilogue: list = field(default_factory=list)      # IR nodes the Nova launch computes after the product
    call: GemmCall | None = None                      # the Nova launch's operands
    problem: GemmProblem | None = None                # the plan's problem, deterministic as the program states it
    backend: str = "torch"                            # "nova" | "torch"
    reason: str = ""                                  # why torch when the plan asked for Nova
    torch_args: tuple = ()                            # (A, B, C) for the torch path

    def problems(self) -> list:
        """``[problem]`` of the Nova launch; ``[]`` on torch.matmul."""
        return [self.problem] if self.backend == "nova" else []

    def describe(self) -> str:
        if self.backend == "torch":
            return "torch.matmul" + (f" ({self.reason})" if self.reason else "")
        a, b, c, p = self.call.a, self.call.b, self.call.out, self.problem
        shape = f"{'x'.join(map(str, c.shape))}x{a.shape[-1]} {p.dtype} " \
                f"{'T' if p.trans_a else 'N'}{'T' if p.trans_b else 'N'}"
        extra = (" +bias" if p.bias else "") + (f" +{p.activation}" if p.activation != "none" else "") \
            + (" (its derivative at R)" if p.activation_grad else "") \
            + (" +preact" if p.preactivation else "") + (f" +cast({p.round_through}->f32)" if p.round_through else "") \
            + (" +residual" if p.residual else "")
        return f"nova gemm {shape}{extra}"

    def kernel(self, gemm, target=None, workspace=None, replayed: bool = False) -> Kernel:
        """The launch as a ``Kernel``: the Nova launch through ``gemm`` (``nova.matmul``'s signature;
        given ``workspace``, the launch's, when there is one; ``replayed``: ``eager=False``, the device
        pick the plan priced and ``nova precompile`` built), else ``torch.matmul``."""
        if self.backend == "nova":
            c, p = self.call, self.problem
            extra = {} if workspace is None else {"workspace": workspace}
            if replayed:
                extra["eager"] = False
            extra.update({name: t for name, t in (("residual", c.residual), ("preactivation", c.preactivation))
                          if t is not None})
            if p.round_through:
                extra["round_through"] = True
            if p.activation_grad:
                extra["activation_grad"] = True
            return Kernel(lambda: gemm(c.a, c.b, out=c.out, bias=c.bias, activation=p.activation, target=target,
                                       deterministic=p.deterministic, **extra), self.describe())
        A, B, C = self.torch_args
        if C.dtype == torch.promote_types(A.dtype, B.dtype):
            return Kernel(lambda: torch.matmul(A, B, out=C), self.describe())
        return Kernel(lambda: C.copy_(torch.matmul(A, B)), self.describe() + " + copy_ (out dtype)", 1)


def workspace_bytes(problem, target) -> int:
    """Bytes of one launch's workspace of Nova GEMM ``problem`` on ``target`` (a ``GPUModel``): the
    operand-prep copies and split-K/stream-K partials of the schedule ``nova.matmul`` configures for it
    (``nova.runtime.tma.workspace_layout``; 0 for an mma.sync schedule).  The executor takes it from its
    arena, where the plan placed it (``MemoryPlan.workspaces``)."""
    from nova.runtime.matmul import configure_schedule
    from nova.runtime.tma import workspace_layout
    return workspace_layout(configure_schedule(problem, target), problem.M, problem.N, problem.K)[1]


# --------------------------------------------------------------------------- layouts
def _c_contiguous(shape, strides) -> bool:
    """Row-major dense; a size-1 dimension's stride does not matter (nova.runtime.tensors' rule)."""
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def layout(t) -> str | None:
    """"row" (row-major), "col" (transpose of a row-major matrix) or None, as Nova reads a 2-D operand
    or each matrix of a 3-D batch (the batch stride is free)."""
    if t.dim() not in (2, 3):
        return None
    shape, strides = tuple(t.shape)[-2:], t.stride()[-2:]
    if _c_contiguous(shape, strides):
        return "row"
    if _c_contiguous(shape[::-1], strides[::-1]):
        return "col"
    return None


def address(t) -> int:
    """Device address of ``t``'s first element; on meta tensors the byte offset into the storage
    (a fresh allocation is at least 256-byte aligned)."""
    if t.device.type == "meta":
        return t.storage_offset() * t.element_size()
    return t.data_ptr()


def _nova_problem_reason(c: GemmCall) -> str:
    """Empty when Nova can run ``c``; else why not."""
    a, b, out = c.a, c.b, c.out
    if a.dtype not in NOVA_DTYPES or b.dtype != a.dtype:
        return f"operands {a.dtype}/{b.dtype}: Nova GEMMs take f32 (TF32), bf16 or f16 pairs"
    if out.dtype not in OUT_DTYPES:
        return f"output {out.dtype}"
    if min(*a.shape, b.shape[-1]) == 0:
        return "an empty dimension"
    if layout(a) is None or layout(b) is None:
        return "an operand neither row-major nor transposed row-major"
    if layout(out) != "row":
        return "output not row-major"
    if c.bias is not None and (c.bias.dim() != 1 or (c.bias.numel() > 1 and c.bias.stride(0) != 1)):
        return "bias not a contiguous vector"
    for name, t in (("a", a), ("b", b), ("out", out), ("bias", c.bias)):
        if t is not None and address(t) % ALIGN_BYTES:
            return f"{name} not {ALIGN_BYTES}-byte aligned"
    return ""


def _two_d(t):
    """``t`` with all-ones batch dimensions dropped (a view), or None."""
    if t.dim() == 2:
        return t
    if all(d == 1 for d in t.shape[:-2]):
        return t.reshape(t.shape[-2:])
    return None


def _call(A, B, C) -> tuple[GemmCall | None, str]:
    """The one launch's views computing ``C = A @ B`` (with broadcasting), or (None, why not): 2-D;
    the rows of a batched A and C flattened against a 2-D B; or [count, rows, cols] views whose
    batch axes merge into one stride each (``merged_batch_stride``)."""
    batch = tuple(C.shape[:-2])
    if not batch:
        return GemmCall(A, B, C), ""
    B2 = _two_d(B)
    if B2 is not None and A.dim() == C.dim() and tuple(A.shape[:-2]) == batch:
        try:
            flat = GemmCall(A.view(-1, A.shape[-1]), B2, C.view(-1, C.shape[-1]))
        except RuntimeError:           # rows do not merge into one 2-D view: a batched launch
            flat = None
        if flat is not None and layout(flat.a) is not None and layout(flat.out) == "row":
            return flat, ""
    Ae = A.expand(batch + tuple(A.shape[-2:]))
    Be = B.expand(batch + tuple(B.shape[-2:]))
    strides = [merged_batch_stride(batch, t.stride()[:len(batch)]) for t in (Ae, Be, C)]
    if None in strides:
        return None, "batch axes that do not merge into one stride"
    count = math.prod(batch)
    return GemmCall(*(t.as_strided((count,) + tuple(t.shape[-2:]), (s,) + t.stride()[-2:], t.storage_offset())
                      for t, s in zip((Ae, Be, C), strides))), ""


def _operands(node, a, b):
    return (a.mT if node.attrs.get("transpose_a") else a), (b.mT if node.attrs.get("transpose_b") else b)


def _as_product(t, C):
    """``t`` (the epilogue's result, R or P) in the matmul result ``C``'s shape: a linear layer on
    [B, T, C] unflattens its rows after the matmul, and that reshape joins the epilogue (a view)."""
    if tuple(t.shape) == tuple(C.shape):
        return t
    try:
        return t.view(C.shape)
    except RuntimeError:                 # not a view: the bound views then are not the planned problem
        return t


def _like_out(t, final, out):
    """``t`` (R or P) viewed as the launch's ``out`` views ``final``, or None when ``t`` is not laid
    out as ``final`` (the kernel reads and writes it where it stores C)."""
    if tuple(t.shape) != tuple(final.shape) or t.stride() != final.stride() or t.dtype != final.dtype:
        return None
    return t.as_strided(out.shape, out.stride(), t.storage_offset() + out.storage_offset() - final.storage_offset())


def bind_gemm(node, epilogue: list, epilogue_values, problem: GemmProblem | None, tensor_of) -> GemmLaunch:
    """The launch of a gemm group: ``node`` its matmul, ``epilogue`` the group's nodes after it (the
    plan's), ``epilogue_values`` its ``fusion.Epilogue`` (the bias, residual and pre-activation
    Values; None: none), ``problem`` the plan's ``GemmProblem`` (None: torch.matmul);
    ``tensor_of(value)`` gives each value's bound tensor.  The Nova launch when the bound views are
    exactly ``problem``, else torch.matmul with the reason."""
    a, b = (tensor_of(v) for v in node.inputs)
    A, B = _operands(node, a, b)
    C = tensor_of(node.outputs[0])
    if problem is None:
        return GemmLaunch(node, torch_args=(A, B, C))
    final = _as_product(tensor_of(epilogue[-1].outputs[0]), C) if epilogue else C
    values = {name: getattr(epilogue_values, name, None) for name in ("bias", "residual", "preactivation")}
    bias = tensor_of(values["bias"]).reshape(-1) if values["bias"] is not None else None
    call, reason = _call(A, B, final)
    if call is not None:
        call.bias = bias
        reason = _nova_problem_reason(call)
    for name in ("residual", "preactivation"):
        if not reason and values[name] is not None:
            view = _like_out(_as_product(tensor_of(values[name]), C), final, call.out)
            if view is None:
                reason = f"the {name} is not laid out as the result"
            elif address(view) % ALIGN_BYTES:
                reason = f"{name} not {ALIGN_BYTES}-byte aligned"
            setattr(call, name, view)
    bound = call.problem(problem) if not reason else None
    if bound is not None and bound != problem:
        reason = f"the bound tensors are {bound.describe()}, the plan's GEMM {problem.describe()}"
    if not reason and epilogue and any(t is not None and overlap(final, t) for t in (A, B, bias, call.residual)):
        # a plan that puts the epilogue's result on an operand dead after the matmul (against the
        # planner's rule): a fused launch would write those bytes while it reads them
        reason = "the epilogue's result shares bytes with an operand"
    if not reason and call.preactivation is not None and any(
            t is not None and overlap(call.preactivation, t) for t in (A, B, bias, call.residual, final)):
        reason = "the pre-activation output shares bytes with an operand or the result"
    if reason:
        return GemmLaunch(node, torch_args=(A, B, C), reason=reason)
    return GemmLaunch(node, list(epilogue), call, problem, "nova")
