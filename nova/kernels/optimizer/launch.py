"""Run a multi-tensor optimizer kernel on torch tensors (runtime only: no MLIR import).

    kernel = bind(rule, tensors, hyper)      # checks the tensors, writes the argument table, resolves the kernel
    kernel()                                 # one launch on torch's current stream

``tensors`` holds one dict per tensor of the group, ``{name: tensor}`` for every name of
``rule.pointers()`` (``param``, ``grad``, ..., ``step``, ``grad_scale``, ``param_out``, ...); an output may be the very
storage of its input (updated in place).  ``bind`` checks them once (element types, contiguous,
16-byte aligned, one device; no output overlapping anything but its own input), writes the argument
table (``table.py``) into a device buffer and keeps it: the launch passes only the table's and the
hyper-parameter vector's addresses, so it is capturable in a CUDA graph and a new learning rate or
step count written into those tensors is read by the next replay.
"""
from __future__ import annotations

import threading

from nova.kernels.optimizer.problem import OptimizerProblemError, UpdateRule
from nova.kernels.pointwise.types import FROM_TORCH_NAMES
from nova.kernels.optimizer.table import table_words

ALIGN = 16                      # bytes: the 16-byte vector accesses
_memo: dict[tuple, tuple] = {}
_lock = threading.RLock()


def resolve(rule: UpdateRule, device_index=None, target=None):
    """``(schedule, LoadedKernel)`` of ``rule`` on the device (memoised)."""
    from nova.runtime import driver
    from nova.runtime.matmul import resolve_target
    device = driver.get_device(device_index)
    model = resolve_target(target, device)
    memo = (rule, model.name, device.ordinal)
    hit = _memo.get(memo)
    if hit is not None:
        return hit
    with _lock:
        from nova.kernels.optimizer.compile import ROLE, describe, get_or_compile
        from nova.kernels.optimizer.derive import configure_rule
        schedule = configure_rule(rule, model)
        art, key, _ = get_or_compile(rule, schedule, model)
        hit = _memo[memo] = (schedule, driver.load_kernel(art, device, describe(rule, ROLE, model), key))
        return hit


def _dtype(t) -> str:
    return FROM_TORCH_NAMES[str(t.dtype).removeprefix("torch.")]


def _span(t) -> tuple[int, int]:
    return t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()


def mismatch(rule: UpdateRule, tensors: list[dict], hyper) -> str:
    """Why these tensors are not ``rule``'s to update in one launch ("" when they are)."""
    names = rule.pointers()
    if not tensors:
        return "no tensors"
    device = tensors[0]["param"].device
    if hyper.device != device or _dtype(hyper) != "f64" or tuple(hyper.shape) != (len(rule.hyper),) \
            or not hyper.is_contiguous():
        return f"the hyper-parameters are not a contiguous f64[{len(rule.hyper)}] on {device}"
    spans = []                              # (start, end, is a write, tensor, name)
    for i, row in enumerate(tensors):
        missing = [n for n in names if n not in row]
        if missing:
            return f"tensor {i} lacks {', '.join(missing)}"
        numel = row["param"].numel()
        for name in names:
            t = row[name]
            if t.device != device:
                return f"tensor {i}'s {name} is on {t.device}, not {device}"
            if name == "step":
                if _dtype(t) != rule.step_dtype or t.numel() != 1:
                    return f"tensor {i}'s step is not one {rule.step_dtype} count"
                continue
            if name == "grad_scale":
                if _dtype(t) != rule.dtype or t.numel() != 1:
                    return f"tensor {i}'s gradient scale is not one {rule.dtype} value"
                continue
            if _dtype(t) != rule.dtype or t.numel() != numel or not t.is_contiguous():
                return f"tensor {i}'s {name} is not a contiguous {rule.dtype} tensor of {numel} elements"
            if numel and t.data_ptr() % ALIGN:
                return f"tensor {i}'s {name} does not start on a {ALIGN}-byte boundary"
            if numel:
                spans.append((*_span(t), name.endswith("_out"), i, name))
    return _overlap(spans)


def _overlap(spans) -> str:
    """An output's bytes may be its own input's (the same span: updated in place), nothing else's."""
    spans = sorted(spans)
    for k, (start, end, write, i, name) in enumerate(spans):
        for start2, end2, write2, i2, name2 in spans[k + 1:]:
            if start2 >= end:
                break
            if not (write or write2):
                continue
            base = name.removesuffix("_out")
            twins = i == i2 and {name, name2} == {base, f"{base}_out"}
            if twins and (start, end) == (start2, end2):
                continue
            return f"tensor {i}'s {name} overlaps tensor {i2}'s {name2}"
    return ""


class Bound:
    """One kernel with its argument table written: calling it launches on torch's current stream."""

    def __init__(self, kernel, table, hyper, device):
        self.kernel, self.table, self.hyper, self.device = kernel, table, hyper, device
        self.pointers = (table.data_ptr(), hyper.data_ptr())

    def __call__(self) -> None:
        import torch
        self.kernel.launch(self.pointers, torch.cuda.current_stream(self.device).cuda_stream)


def bind(rule: UpdateRule, tensors: list[dict], hyper, target=None, workspace=None) -> Bound:
    """The launch updating ``tensors`` (raises ``OptimizerProblemError`` when they are not ``rule``'s);
    ``workspace(shape, dtype)`` allocates the table's device buffer (default ``torch.empty``)."""
    import torch
    why = mismatch(rule, tensors, hyper)
    if why:
        raise OptimizerProblemError(f"multi-tensor {rule.describe()}: {why}")
    device = hyper.device
    schedule, kernel = resolve(rule, device.index, target)
    rows = [{**{name: row[name].data_ptr() for name in rule.pointers()}, "numel": row["param"].numel()}
            for row in tensors]
    words = table_words(rule, rows, schedule.chunk)
    table = workspace((len(words),), torch.int64) if workspace is not None else \
        torch.empty(len(words), dtype=torch.int64, device=device)
    table.copy_(torch.tensor(words, dtype=torch.int64))
    return Bound(kernel, table, hyper, device)
