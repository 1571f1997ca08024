"""Run embedding kernels on torch tensors: the kernels of one ``EmbeddingProblem`` resolved once, launched
with bare pointers on torch's current stream (a CUDA graph captures them).  Runtime only: no MLIR import.

    from nova.kernels.embedding.launch import embedding_forward, embedding_backward
    out = embedding_forward(table, idx)                       # table[idx] (idx any shape, int32/int64)
    grad = embedding_backward(dy, idx, vocab)                 # zeros(vocab, dim).index_add_(0, idx, dy), in index order

The first use of a problem configures it (``derive.py``), looks its kernels up in Nova's kernel cache by
structural key (compiling on a miss unless offline: ``NOVA_OFFLINE=1`` raises the one-line
``NotPrecompiledError``) and loads them; later uses only launch.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from nova.kernels.embedding.abi import params, workspace_layout


@dataclass
class Resolved:
    problem: object
    schedule: object
    kernels: dict                   # role -> driver.LoadedKernel
    workspace: dict                 # name -> (byte offset, i32 words)
    workspace_bytes: int


_memo: dict[tuple, Resolved] = {}
_lock = threading.RLock()


def schedule_for(problem, target):
    from nova.kernels.embedding.derive import configure_embedding
    return configure_embedding(problem, target).schedule


def resolve(problem, device_index=None, target=None) -> Resolved:
    """The schedule and the loaded kernels of ``problem`` on the device (memoised)."""
    from nova.runtime import driver
    from nova.runtime.matmul import resolve_target
    device = driver.get_device(device_index)
    model = resolve_target(target, device)
    key = (problem, model.name, device.ordinal)
    hit = _memo.get(key)
    if hit is not None:
        return hit
    with _lock:
        from nova.kernels.embedding.compile import get_or_compile, summary
        schedule = schedule_for(problem, model)
        kernels = {}
        for role in schedule.roles:
            art, k, _ = get_or_compile(problem, schedule, role, model)
            kernels[role] = driver.load_kernel(art, device, summary(problem, role, model), k)
        ws, nbytes = workspace_layout(problem, schedule)
        hit = _memo[key] = Resolved(problem, schedule, kernels, ws, nbytes)
        return hit


def launch_args(r: Resolved, pointers: dict, workspace_ptr: int) -> list[tuple[object, tuple[int, ...]]]:
    """``[(kernel, pointer arguments)]`` in launch order: operands by name, workspace buffers by offset."""
    out = []
    for role in r.schedule.roles:
        args = [workspace_ptr + r.workspace[what[3:]][0] if what.startswith("ws:") else pointers[what]
                for _, what in params(r.problem, r.schedule, role)]
        out.append((r.kernels[role], tuple(args)))
    return out


def problem_of(direction: str, rows, idx, vocab: int):
    """The ``EmbeddingProblem`` of torch tensors: ``rows`` the table (forward) or dy (backward), ``idx`` the indices."""
    from nova.kernels.embedding.problem import EmbeddingProblem
    dtype = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(str(rows.dtype).replace("torch.", ""), "?")
    index_dtype = {"int32": "i32", "int64": "i64"}.get(str(idx.dtype).replace("torch.", ""), "?")
    dim = rows.shape[-1]
    stride = rows.stride(0) if rows.dim() == 2 and rows.stride(-1) == 1 else dim
    count = idx.numel()
    align = 16
    while align > rows.element_size() and rows.data_ptr() % align:
        align //= 2
    return EmbeddingProblem(direction, count, vocab, dim, dtype, index_dtype, tuple(idx.shape) or (1,),
                            tuple(idx.stride()) or (1,), stride, align)


def run(problem, pointers: dict, device, target=None) -> None:
    """Launch ``problem``'s kernels on ``pointers`` (workspace allocated per call) on the current stream."""
    import torch
    r = resolve(problem, device.index, target)
    workspace = torch.empty(max(1, r.workspace_bytes), dtype=torch.uint8, device=device)
    stream = torch.cuda.current_stream(device).cuda_stream
    for kernel, args in launch_args(r, pointers, workspace.data_ptr()):
        kernel.launch(args, stream)


def embedding_forward(table, idx, target=None):
    """``table[idx]``: rows of a 2-D ``table`` (rows may be ``stride`` apart, elements contiguous) gathered by
    ``idx`` (int32/int64, any shape, strided views in place)."""
    import torch
    if table.dim() != 2 or table.stride(-1) != 1:
        table = table.reshape(table.shape[0], -1).contiguous()
    p = problem_of("forward", table, idx, table.shape[0])
    out = torch.empty(tuple(idx.shape) + (p.dim,), dtype=table.dtype, device=table.device)
    run(p, {"idx": idx.data_ptr(), "table": table.data_ptr(), "out": out.data_ptr()}, table.device, target)
    return out


def embedding_backward(dy, idx, vocab: int, target=None):
    """The embedding gradient: ``grad[v] = sum of dy[i] over idx[i] == v`` in index order (bit-identical
    across runs), every row written; ``dy`` is ``idx.shape + [dim]`` or ``[count, dim]``."""
    import torch
    dy2 = dy.reshape(-1, dy.shape[-1])
    if dy2.stride(-1) != 1:
        dy2 = dy2.contiguous()
    p = problem_of("backward", dy2, idx, vocab)
    grad = torch.empty((vocab, p.dim), dtype=dy.dtype, device=dy.device)
    run(p, {"idx": idx.data_ptr(), "dy": dy2.data_ptr(), "grad": grad.data_ptr()}, dy.device, target)
    return grad


def reset() -> None:
    with _lock:
        _memo.clear()
