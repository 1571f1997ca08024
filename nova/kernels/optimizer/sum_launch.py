"""Run a multi-tensor sum kernel on torch tensors (runtime only: no MLIR import).

    kernel = bind(rule, tensors)            # checks the tensors, writes the argument table, resolves the kernel
    kernel()                                # one launch on torch's current stream

``tensors`` holds one dict per tensor: ``{"entry": k, "in0": tensor, ..., "st0": tensor (when entry k
stores), "out": one-element tensor (when entry k sums)}``.  ``bind`` checks them once (element types,
element counts, contiguous, 16-byte aligned, one device; no written tensor overlapping another), writes the argument
table (``sum_problem.py``) and allocates the workspace (its completion counter zeroed: the kernel leaves
it zero after every launch), so the launch passes only two addresses and a CUDA graph captures it.
"""
from __future__ import annotations

import threading

from nova.kernels.optimizer.problem import OptimizerProblemError
from nova.kernels.optimizer.sum_problem import SumRule, table_words, workspace_words
from nova.kernels.pointwise.types import FROM_TORCH_NAMES

ALIGN = 16
_memo: dict[tuple, tuple] = {}
_lock = threading.RLock()


def resolve(rule: SumRule, device_index=None, target=None):
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
        from nova.kernels.optimizer.compile import SUM_ROLE, describe, get_or_compile
        from nova.kernels.optimizer.sum_derive import configure_sum_rule
        schedule = configure_sum_rule(rule, model)
        art, key, _ = get_or_compile(rule, schedule, model, role=SUM_ROLE)
        hit = _memo[memo] = (schedule, driver.load_kernel(art, device, describe(rule, SUM_ROLE, model), key))
        return hit


def _dtype(t) -> str:
    return FROM_TORCH_NAMES[str(t.dtype).removeprefix("torch.")]


def mismatch(rule: SumRule, tensors: list[dict]) -> str:
    """Why these tensors are not ``rule``'s to sum in one launch ("" when they are)."""
    if not tensors:
        return "no tensors"
    device = tensors[0]["in0"].device
    spans = []                              # (start, end, is a write, tensor, name)
    for i, row in enumerate(tensors):
        k = row.get("entry")
        if not isinstance(k, int) or not 0 <= k < len(rule.entries):
            return f"tensor {i}'s entry {k!r} is not one of the rule's {len(rule.entries)}"
        entry = rule.entries[k]
        names = [f"in{j}" for j in range(len(entry.dtypes))] + (["st0"] if entry.stored else []) + \
            (["out"] if entry.reduces else [])
        missing = [n for n in names if n not in row]
        if missing:
            return f"tensor {i} lacks {', '.join(missing)}"
        numel = row["in0"].numel()
        types = dict(zip(names, list(entry.dtypes) + ([entry.stored] if entry.stored else []) + [entry.out]))
        for name in names:
            t = row[name]
            count = 1 if name == "out" else numel
            if t.device != device:
                return f"tensor {i}'s {name} is on {t.device}, not {device}"
            if _dtype(t) != types[name] or t.numel() != count or not t.is_contiguous():
                return f"tensor {i}'s {name} is not a contiguous {types[name]} tensor of {count} elements"
            if name != "out" and numel and t.data_ptr() % ALIGN:
                return f"tensor {i}'s {name} does not start on a {ALIGN}-byte boundary"
            if t.numel():
                spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), name in ("st0", "out"),
                              i, name))
    spans.sort()
    for k, (start, end, write, i, name) in enumerate(spans):
        for start2, end2, write2, i2, name2 in spans[k + 1:]:
            if start2 >= end:
                break
            if write or write2:
                return f"tensor {i}'s {name} overlaps tensor {i2}'s {name2}"
    return ""


class Bound:
    """One kernel with its argument table and workspace: calling it launches on torch's current stream."""

    def __init__(self, kernel, table, work, device):
        self.kernel, self.table, self.work, self.device = kernel, table, work, device
        self.pointers = (table.data_ptr(), work.data_ptr())

    def __call__(self) -> None:
        import torch
        self.kernel.launch(self.pointers, torch.cuda.current_stream(self.device).cuda_stream)


def bind(rule: SumRule, tensors: list[dict], target=None, workspace=None) -> Bound:
    """The launch summing ``tensors`` (raises ``OptimizerProblemError`` when they are not ``rule``'s);
    ``workspace(shape, dtype)`` allocates the device buffers (default ``torch.empty``)."""
    import torch
    why = mismatch(rule, tensors)
    if why:
        raise OptimizerProblemError(f"{rule.describe()}: {why}")
    device = tensors[0]["in0"].device
    schedule, kernel = resolve(rule, device.index, target)
    rows = [{"entry": row["entry"], **{name: row[name].data_ptr() for name in rule.pointers() if name in row},
             "numel": row["in0"].numel()} for row in tensors]
    words = table_words(rule, rows, schedule.chunk, schedule.grid)
    alloc = workspace or (lambda shape, dtype: torch.empty(shape, dtype=dtype, device=device))
    table = alloc((len(words),), torch.int64)
    table.copy_(torch.tensor(words, dtype=torch.int64))
    work = alloc((workspace_words(len(tensors), schedule.grid)[1],), torch.float32)
    work.zero_()                            # the completion counter starts at zero (the kernel leaves it so)
    return Bound(kernel, table, work, device)
