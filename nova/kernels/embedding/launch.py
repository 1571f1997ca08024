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

from nova.kernels.role_launch import RoleLauncher
from nova.kernels.embedding import abi


def schedule_for(problem, target):
    from nova.kernels.embedding.derive import configure_embedding
    return configure_embedding(problem, target).schedule


def _compile_module():
    from nova.kernels.embedding import compile as compiled
    return compiled


LAUNCHER = RoleLauncher(schedule_for, _compile_module, abi)   # the memo, resolve and launch_args (role_launch.py)
_memo = LAUNCHER.memo
resolve = LAUNCHER.resolve
launch_args = LAUNCHER.launch_args
reset = LAUNCHER.reset


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
