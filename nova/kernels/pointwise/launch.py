"""Run a fused pointwise kernel on torch tensors (runtime only: no MLIR import).

    kernel = bind(problem, inputs, outputs)      # checks the tensors once, resolves the kernel
    kernel()                                     # one launch on torch's current stream

``resolve`` configures the problem for the device's target, looks its kernel up in Nova's kernel cache
through the family protocol (``family.get_or_compile``: compiled on a miss unless offline, where the
miss is the one-line ``NotPrecompiledError``) and loads it, memoised.  ``bind`` checks that the tensors
are the problem's (element types; the inputs' strides, broadcast and coalesced as the problem was;
the outputs contiguous, or at the strides the problem writes them; base pointers aligned as the
derivation assumed) and keeps their pointers: the
launch itself is one driver call, capturable in a CUDA graph.
"""
from __future__ import annotations

import threading

from nova.kernels.pointwise.problem import ALIGN_MAX, Operand, PointwiseProblem, PointwiseProblemError
from nova.kernels.pointwise.types import FROM_TORCH_NAMES

_memo: dict[tuple, tuple] = {}
_lock = threading.RLock()


def resolve(problem: PointwiseProblem, device_index=None, target=None):
    """``(schedule, LoadedKernel)`` of ``problem`` on the device (memoised)."""
    from nova.runtime import driver
    from nova.runtime.matmul import resolve_target
    device = driver.get_device(device_index)
    model = resolve_target(target, device)
    memo = (problem, model.name, device.ordinal)
    hit = _memo.get(memo)
    if hit is not None:
        return hit
    with _lock:
        from nova.kernels.pointwise.compile import describe, get_or_compile
        from nova.kernels.pointwise.derive import configure_pointwise
        schedule = configure_pointwise(problem, model).schedule
        art, key, _ = get_or_compile(problem, schedule, model)
        hit = _memo[memo] = (schedule, driver.load_kernel(art, device, describe(problem, "pointwise", model), key))
        return hit


def tensor_operand(t, shape, like: Operand | None = None) -> Operand:
    """The operand a tensor is when read over ``shape`` (broadcast axes stride 0), as the problem's
    operand ``like`` is read: a table, or a window starting where ``like``'s does."""
    from nova.kernels.pointwise.problem import alignment, broadcast_strides, table_operand, windowed_operand
    dtype = FROM_TORCH_NAMES[str(t.dtype).removeprefix("torch.")]
    align = alignment(t.data_ptr() % ALIGN_MAX)
    if like is not None and like.table:
        return table_operand(dtype, tuple(t.shape), tuple(t.stride()), tuple(shape), align)
    if like is not None and like.window is not None:
        return windowed_operand(dtype, tuple(t.shape), tuple(t.stride()), tuple(shape), like.window.start, align)
    strides = broadcast_strides(tuple(t.shape), tuple(t.stride()), tuple(shape))
    return Operand(dtype, strides, align)


def mismatch(problem: PointwiseProblem, inputs, outputs) -> str:
    """Why these tensors are not ``problem``'s ("" when they are)."""
    from nova.kernels.pointwise.canonical import coalesce
    if len(inputs) != len(problem.inputs) or len(outputs) != len(problem.outputs):
        return f"{len(inputs)} inputs and {len(outputs)} outputs for a kernel of {len(problem.inputs)} and " \
               f"{len(problem.outputs)}"
    shape = tuple(outputs[0].shape)
    for k, (o, dtype) in enumerate(zip(outputs, problem.output_dtypes())):
        if problem.stores:                        # written strided: checked with the inputs below
            if tuple(o.shape) != shape or FROM_TORCH_NAMES[str(o.dtype).removeprefix("torch.")] != dtype:
                return f"output {k} is not a {dtype} tensor of shape {list(shape)}"
            continue
        if not o.is_contiguous() or FROM_TORCH_NAMES[str(o.dtype).removeprefix("torch.")] != dtype:
            return f"output {k} is not a contiguous {dtype} tensor"
        if o.data_ptr() % ALIGN_MAX:
            return f"output {k} does not start on a {ALIGN_MAX}-byte boundary"
    try:
        operands = tuple(tensor_operand(t, shape, like) for t, like in zip(inputs, problem.inputs))
        stores = tuple(tensor_operand(t, shape) for t in outputs) if problem.stores else ()
    except PointwiseProblemError as e:
        return str(e)
    got_shape, got = coalesce(shape, operands + stores)
    if got_shape != problem.shape:
        return f"iteration shape {list(got_shape)} is not the kernel's {list(problem.shape)}"
    named = [(f"input {k}", x) for k, x in enumerate(problem.inputs)] + \
        [(f"output {k}", x) for k, x in enumerate(problem.stores)]
    for (what, b), a in zip(named, got):
        if a.dtype != b.dtype or a.strides != b.strides or a.align < b.align or a.window != b.window \
                or a.table != b.table:
            return f"{what} ({a.dtype}, strides {list(a.strides)}, {a.align}-byte aligned) is not the kernel's " \
                   f"({b.dtype}, strides {list(b.strides)}, {b.align}-byte aligned)"
    return ""


class Bound:
    """One kernel with its tensors' pointers fixed: calling it launches on torch's current stream."""

    def __init__(self, kernel, pointers, device):
        self.kernel, self.pointers, self.device = kernel, tuple(pointers), device

    def __call__(self) -> None:
        import torch
        self.kernel.launch(self.pointers, torch.cuda.current_stream(self.device).cuda_stream)


def bind(problem: PointwiseProblem, inputs, outputs, target=None) -> Bound:
    """The launch of ``problem`` on these tensors (raises ``PointwiseProblemError`` when they are not its)."""
    why = mismatch(problem, inputs, outputs)
    if why:
        raise PointwiseProblemError(f"{problem.describe()}: {why}")
    device = outputs[0].device
    _, kernel = resolve(problem, device.index, target)
    return Bound(kernel, [t.data_ptr() for t in list(inputs) + list(outputs)], device)
