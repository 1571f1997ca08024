"""Lowering of the IR's ``matmul`` (+ a bias/activation epilogue) to GEMM launches.

Nova GEMM kernels (``nova.matmul(a, b, out=c, bias=, activation=)``) take 2-D operands that are
row-major or the transpose of a row-major matrix (read in place), or 3-D batches of such matrices
(any batch stride, 0 broadcasting), a row-major output ([B, M, N] batched), a [N] bias (f32 for
TF32 inputs, else the output's type) and relu / gelu (tanh) / silu.  An IR matmul
``[..., M, K] x [..., K, N]`` (``transpose_a/b`` read the operand's last two axes swapped)
becomes:

  * 2-D x 2-D: one launch, transposed operands as ``x.mT`` views;
  * batched x 2-D (a linear layer on [B, T, C]) whose rows merge into one [B*T, K] view: one
    launch on the flattened rows;
  * otherwise (truly batched, or a 2-D A against batched B): one batched launch whose batch is the
    result's batch axes, each operand viewed as [batch, rows, cols] with one batch stride (its
    broadcast axes stride 0: ``layout.merged_batch_stride``); where the axes do not merge into one
    stride, one batched launch per element of the leading axes that do not (up to
    ``MAX_BATCH_LOOP`` launches); beyond that, and for any operand Nova cannot read (layout, dtype,
    16-byte alignment, empty dimensions), ``torch.matmul`` (cuBLAS) with the reason recorded.

Epilogue fusion: the nodes right after a matmul in the same group are folded into the launch when
they are ``add(mm, bias[N])`` and/or one of relu / gelu_tanh / silu, each reading only the previous
result, whose intermediate values nobody else reads (a pre-activation that the backward needs is
left to its own ATen kernel, and so is everything after it).

Workspace: a Nova launch's operand-prep copies and split-K partials (``workspace_bytes``) are a launch
workspace of its group, which the plan places in the arena; the executor hands it to each call.

On CPU (and whenever no Nova backend is given) every matmul runs on ``torch.matmul(out=)``.
The lowering is a pure function of the tensors' shapes, strides, dtypes and addresses, so running
it on meta tensors lists exactly the GEMM problems a CUDA program launches (``gemm_problems``).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

from nova.compiler.aten_kernels import Kernel, overlap
from nova.passes.layout import merged_batch_stride

NOVA_DTYPES = {torch.float32: "tf32", torch.bfloat16: "bf16", torch.float16: "fp16"}
OUT_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
ACTIVATIONS = {"relu": "relu", "gelu_tanh": "gelu", "silu": "silu"}
MAX_BATCH_LOOP = 64          # batched matmuls needing more launches go to torch.matmul (one cuBLAS batched call)
ALIGN_BYTES = 16             # the widest vector access / TMA base alignment of Nova's kernels


@dataclass
class GemmCall:
    a: object                    # 2-D [M, K] (row-major or transposed view), or batched [count, M, K]
    b: object                    # 2-D [K, N], or batched [count, K, N] (batch stride 0: broadcast)
    out: object                  # 2-D [M, N] row-major, or batched [count, M, N]
    bias: object = None          # [N] or None

    def problem_fields(self) -> tuple:
        """``(M, N, K, trans_a, trans_b, (batch, stride_a, stride_b, stride_c) or ())`` as
        ``nova.matmul`` states the problem (``GemmProblem`` then normalises the batch)."""
        a, b, out = self.a, self.b, self.out
        M, K = (int(d) for d in a.shape[-2:])
        N = int(b.shape[-1])
        trans_a, trans_b = layout(a) == "col", layout(b) == "col"
        if out.dim() == 2 or out.shape[0] == 1:
            return M, N, K, trans_a, trans_b, ()
        strides = tuple(int(t.stride(0)) if t.shape[0] > 1 else 0 for t in (a, b, out))
        return M, N, K, trans_a, trans_b, (int(out.shape[0]),) + strides


@dataclass
class GemmLaunch:
    """One IR matmul (and the epilogue nodes it absorbed) as Nova launches or one torch.matmul."""
    node: object
    epilogue: list = field(default_factory=list)      # IR nodes folded into the launch
    calls: list = field(default_factory=list)         # GemmCall per Nova launch
    activation: str = "none"
    backend: str = "torch"                            # "nova" | "torch"
    reason: str = ""                                  # why torch when Nova was asked for
    torch_args: tuple = ()                            # (A, B, C) for the torch path

    def problems(self) -> list:
        """The ``nova.kernels.gemm.problem.GemmProblem`` of each Nova launch (deterministic as
        ``nova.matmul`` decides when the launch runs: ``default_deterministic``)."""
        from nova import options
        from nova.kernels.gemm.problem import GemmProblem
        from nova.runtime.matmul import default_deterministic
        deterministic = default_deterministic(options.current())
        out = []
        for c in self.calls:
            M, N, K, trans_a, trans_b, batch = c.problem_fields()
            out.append(GemmProblem(M, N, K, NOVA_DTYPES[c.a.dtype], trans_a, trans_b, c.bias is not None,
                                   self.activation, OUT_DTYPES[c.out.dtype], "rna", deterministic, *batch))
        return out

    def describe(self) -> str:
        if self.backend == "torch":
            return "torch.matmul" + (f" ({self.reason})" if self.reason else "")
        a, b, c = self.calls[0].a, self.calls[0].b, self.calls[0].out
        shape = f"{'x'.join(map(str, c.shape))}x{a.shape[-1]} {NOVA_DTYPES[a.dtype]} " \
                f"{'T' if layout(a) == 'col' else 'N'}{'T' if layout(b) == 'col' else 'N'}"
        extra = (" +bias" if self.calls[0].bias is not None else "") + \
                (f" +{self.activation}" if self.activation != "none" else "")
        times = f" x{len(self.calls)}" if len(self.calls) > 1 else ""
        return f"nova gemm {shape}{extra}{times}"

    def kernel(self, gemm, target=None, workspace=None) -> Kernel:
        """The launch as a ``Kernel``: Nova's calls through ``gemm`` (``nova.matmul``'s signature; each
        call given ``workspace``, the launch's, when there is one), else ``torch.matmul``."""
        if self.backend == "nova":
            calls, act = self.calls, self.activation
            extra = {} if workspace is None else {"workspace": workspace}

            def run():
                for c in calls:
                    gemm(c.a, c.b, out=c.out, bias=c.bias, activation=act, target=target, **extra)
            return Kernel(run, self.describe())
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


def _calls(A, B, C) -> tuple[list, str]:
    """2-D (a, b, out) launches computing ``C = A @ B`` (with broadcasting), or ([], reason)."""
    batch = tuple(C.shape[:-2])
    if not batch:
        return [GemmCall(A, B, C)], ""
    B2 = _two_d(B)
    if B2 is not None and A.dim() == C.dim() and tuple(A.shape[:-2]) == batch:
        try:
            flat = GemmCall(A.view(-1, A.shape[-1]), B2, C.view(-1, C.shape[-1]))
        except RuntimeError:           # rows do not merge into one 2-D view: loop over the batch
            flat = None
        if flat is not None and layout(flat.a) is not None and layout(flat.out) == "row":
            return [flat], ""
    return _batched_calls(A, B, C, batch)


def _batched_calls(A, B, C, batch) -> tuple[list, str]:
    """Batched launches of ``C = A @ B``: the batch axes from the first whose trailing axes merge
    into one stride for A, B and C (``merged_batch_stride``; all of them, usually: one launch), one
    launch per element of the axes before it; or ([], reason) beyond ``MAX_BATCH_LOOP`` launches."""
    Ae = A.expand(batch + tuple(A.shape[-2:]))
    Be = B.expand(batch + tuple(B.shape[-2:]))
    for split in range(len(batch)):
        inner = batch[split:]
        strides = [merged_batch_stride(inner, t.stride()[split:len(batch)]) for t in (Ae, Be, C)]
        if None in strides:
            continue
        count, launches = math.prod(inner), math.prod(batch[:split])
        if launches > MAX_BATCH_LOOP:
            return [], f"batched matmul of {launches} > {MAX_BATCH_LOOP} launches (its batch axes do not merge)"

        def view(t, s):              # [count, rows, cols], the batch s elements apart
            return t.as_strided((count,) + tuple(t.shape[-2:]), (s,) + t.stride()[-2:], t.storage_offset())
        return [GemmCall(*(view(t[idx], s) for t, s in zip((Ae, Be, C), strides)))
                for idx in itertools.product(*map(range, batch[:split]))], ""
    return [], "batch axes that merge into no stride"      # not reached: one axis always has one


def _operands(node, a, b):
    return (a.mT if node.attrs.get("transpose_a") else a), (b.mT if node.attrs.get("transpose_b") else b)


def fusable_epilogue(node, following, users, live_out) -> list:
    """The epilogue nodes (bias add, then one activation) right after matmul ``node`` that a Nova
    launch can absorb; ``users`` maps a value to its readers, ``live_out`` holds values that must
    exist after the step (graph outputs)."""
    chain, current = [], node.outputs[0]

    def dead_after(value, reader):
        return value not in live_out and users.get(value, []) == [reader]

    rest = list(following)
    if rest and rest[0].op == "add" and current in rest[0].inputs and dead_after(current, rest[0]):
        add = rest[0]
        bias = add.inputs[1] if add.inputs[0] is current else add.inputs[0]
        n = current.type.shape[-1]
        bias_type = "f32" if current.type.dtype == "f32" else current.type.dtype
        if bias is not current and bias.type.shape in ((n,), (1, n)) and bias.type.dtype == bias_type \
                and add.outputs[0].type == current.type:
            chain.append(add)
            current = add.outputs[0]
            rest = rest[1:]
    if rest and rest[0].op in ACTIVATIONS and rest[0].inputs == (current,) and dead_after(current, rest[0]):
        chain.append(rest[0])
    return chain


def lower_matmul(node, following, tensor_of, users, live_out, use_nova: bool) -> GemmLaunch:
    """The launch(es) of matmul ``node``; ``following`` are the nodes after it in its group,
    ``tensor_of(value)`` gives each value's bound tensor."""
    a, b = (tensor_of(v) for v in node.inputs)
    A, B = _operands(node, a, b)
    C = tensor_of(node.outputs[0])
    if not use_nova:
        return GemmLaunch(node, torch_args=(A, B, C))
    chain = fusable_epilogue(node, following, users, live_out)
    while True:                           # the longest fusable prefix Nova can run
        final = tensor_of(chain[-1].outputs[0]) if chain else C
        bias = activation = None
        for e in chain:
            if e.op == "add":
                bias_value = e.inputs[1] if e.inputs[0] is node.outputs[0] else e.inputs[0]
                bias = tensor_of(bias_value).reshape(-1)
            else:
                activation = ACTIVATIONS[e.op]
        calls, reason = _calls(A, B, final)
        if chain and any(t is not None and overlap(final, t) for t in (A, B, bias)):
            # the plan may put the epilogue's result on an operand that is dead after the matmul:
            # written by the fused launch while it reads that operand, it would be corrupted
            reason = "the epilogue's result shares bytes with an operand"
        for c in calls:
            c.bias = bias
            reason = reason or _nova_problem_reason(c)
        if not reason:
            return GemmLaunch(node, chain, calls, activation or "none", "nova")
        if not chain:
            return GemmLaunch(node, torch_args=(A, B, C), reason=reason)
        chain = chain[:-1]
