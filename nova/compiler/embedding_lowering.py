"""The launches of a Nova embedding group (``nova/passes/embedding.py``): the embedding kernels of its
``EmbeddingProblem`` on CUDA (the gather; or the backward's radix-sort passes and ordered accumulate,
``nova/kernels/embedding``); on CPU its node by the executor's kernel of its op
(``aten_kernels.build_kernel``), so CI checks the same plans.

CUDA: every operand is the tensor the program bound to its value; the kernels address the index view
and the rows with the problem's static strides, so a binding whose layout differs from the planned one
(a strided tensor where a dense one was planned, a misaligned base) runs the op's reference instead,
with a note in ``Program.stats["fallbacks"]``.  The backward's workspace (sort counts, keys and
positions) is written and read within its launch: the launch workspace the plan places in the arena
(``KernelContext.launch_workspace``), at a fixed address, so a CUDA graph captures the launches.
"""
from __future__ import annotations

from nova.compiler.aten_kernels import Kernel, build_kernel, reference_kernel
from nova.compiler.role_kernels import RoleKernels, device_target, meta_only


def layout_reason(p, named: dict) -> str:
    """Why the bound tensors are not the operands the kernels address ('' when they are)."""
    from nova.kernels.embedding.problem import merge_index_axes
    idx = named["idx"]
    if merge_index_axes(idx.shape, idx.stride()) != (p.index_shape, p.index_strides):
        return f"the indices' strides {list(idx.stride())} are not the planned {list(p.index_strides)}"
    rows = named["table"] if p.direction == "forward" else named["dy"]
    flat = rows.reshape(-1, p.dim) if rows.is_contiguous() else None
    if flat is None:
        if rows.stride(-1) != 1:
            return "the rows read are not contiguous"
    elif p.stride != p.dim:
        return f"the rows read are {p.dim} apart, not the planned {p.stride}"
    if rows.device.type == "cuda" and rows.data_ptr() % p.align:
        return f"the rows read are not {p.align}-byte aligned"
    result = named["out"] if p.direction == "forward" else named["grad"]
    if not result.is_contiguous():
        return "the result is not contiguous"
    base = named.get("base")
    if p.base and (not base.is_contiguous() or base.device.type == "cuda" and base.data_ptr() % 16):
        return "the base is not a contiguous 16-byte aligned tensor"
    return ""


def embedding_kernels(group, nodes, tensors, ctx, note) -> list[Kernel]:
    """The group's kernels: one ``Kernel`` launching the embedding kernels (CUDA, meta), or the op (CPU)."""
    if ctx.kind == "cpu":
        return [build_kernel(n, [tensors[v] for v in n.inputs], [tensors[v] for v in n.outputs], ctx) for n in nodes]
    p = group.embedding
    named = {name: tensors[v] for name, v in group.bindings.items()}
    what = f"nova embedding {p.direction} ({p.count}x{p.dim} of {p.vocab} rows)"
    from nova.kernels.embedding.abi import workspace_layout
    from nova.kernels.embedding.launch import LAUNCHER, schedule_for
    if ctx.device.type == "meta":       # the dry run states the workspace the plan places
        nbytes = workspace_layout(p, schedule_for(p, device_target(ctx)))[1]
        ctx.launch_workspace(nbytes, f"embedding workspace of {p.direction} {p.count}x{p.dim}")
        return [Kernel(meta_only, what, embedding=p)]
    why = layout_reason(p, named)
    if why:
        note(f"group {group.index}: {group.head.op} on its reference ({why})")
        own = {v: ctx.workspace(v.shape, t.dtype) for n in nodes for v in n.outputs      # the sum a base is added to
               if (t := tensors[v]).device.type == "meta" and ctx.device.type != "meta"}
        at = {**tensors, **own}
        return [reference_kernel(n, [at[v] for v in n.inputs], [at[v] for v in n.outputs], ctx, why) for n in nodes]
    nbytes = workspace_layout(p, schedule_for(p, device_target(ctx)))[1]
    workspace = ctx.launch_workspace(nbytes, f"embedding workspace of {p.direction} {p.count}x{p.dim}")
    pointers = {name: t.data_ptr() for name, t in named.items()}
    return [Kernel(RoleKernels(LAUNCHER, p, pointers, workspace, ctx.device), what, embedding=p)]
