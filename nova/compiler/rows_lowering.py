"""The launches of a Nova rows group (``nova/passes/rows.py``): the rows kernels of its ``RowsProblem`` on
CUDA; on CPU its nodes one by one, each by the executor's kernel of its op (``aten_kernels.build_kernel``:
ATen's out= variant of the op's IR reference semantics, or the reference itself), so CI checks the same
plans and the values the rows kernel never writes live in scratch.

CUDA: every operand of the problem is the tensor the program bound to its value (arena views, the user's
parameters); the kernels address them with the problem's static row strides, so a binding whose layout
differs from the planned one (a parameter replaced by a strided tensor, a misaligned base) runs the
references instead, with a note in ``Program.stats["fallbacks"]``.  The workspace (cross-entropy's
per-row losses and scale, the column stage's partials) is written and read within the group's launch:
the launch workspace the plan places in the arena (``KernelContext.launch_workspace``), at a fixed
address, so a CUDA graph captures the launches; a meta program states its size.  Kernels are resolved (loaded, or compiled, or ``NotPrecompiledError``
offline) by the executor before the first step; launches go to torch's current stream.
"""
from __future__ import annotations

from nova.compiler.aten_kernels import Kernel, build_kernel, reference_kernel
from nova.compiler.role_kernels import RoleKernels, device_target, meta_only


def layout_reason(t, o, rows: int, n: int) -> str:
    """Why tensor ``t`` is not operand ``o`` as the kernels address it ('' when it is)."""
    if o.layout != "row":
        return "" if t.is_contiguous() else f"{o.name} is not contiguous"
    if t.numel() != rows * n:
        return f"{o.name} has {t.numel()} elements, not {rows}x{n}"
    dims = [(d, s) for d, s in zip(t.shape, t.stride()) if d != 1]
    inner = 1
    while dims and inner < n:
        d, s = dims.pop()
        if s != inner:
            return f"{o.name}'s rows are not contiguous"
        inner *= d
    if inner != n:
        return f"{o.name}'s rows do not split at {n} elements"
    span = 1
    for d, s in reversed(dims):
        if s != o.stride * span:
            return f"{o.name}'s row stride is not {o.stride}"
        span *= d
    return ""


def rows_kernels(group, nodes, tensors, ctx, note) -> list[Kernel]:
    """The group's kernels: one ``Kernel`` launching the rows kernels (CUDA, meta), or the references (CPU)."""
    if ctx.kind == "cpu":
        return [build_kernel(n, [tensors[v] for v in n.inputs], [tensors[v] for v in n.outputs], ctx) for n in nodes]
    p = group.rows
    named = {name: tensors[v] for name, v in group.bindings.items()}
    streamed = any(o.layout in ("row", "col") for o in p.operands)
    for o in p.operands:
        t = named[o.name]
        why = layout_reason(t, o, p.rows, p.n) or ("" if streamed else "no operand streams its rows (a constant's "
                                                                         "reduction)")
        if not why and t.device.type == "cuda" and t.data_ptr() % min(o.align, 16):
            why = f"{o.name}'s address is not {o.align}-byte aligned"
        if why:
            note(f"group {group.index}: {p.kind} on its nodes' references ({why})")
            own = {v: ctx.workspace(v.shape, t.dtype) for n in nodes for v in n.outputs
                   if (t := tensors[v]).device.type == "meta" and ctx.device.type != "meta"}   # unwritten values
            at = {**tensors, **own}
            return [reference_kernel(n, [at[v] for v in n.inputs], [at[v] for v in n.outputs], ctx, why)
                    for n in nodes]
    from nova.kernels.rows.launch import LAUNCHER, schedule_for
    from nova.kernels.rows.abi import workspace_layout
    workspace_size = workspace_layout(p, schedule_for(p, device_target(ctx)))[1]
    workspace = ctx.launch_workspace(workspace_size, f"rows workspace of {p.kind} {p.rows}x{p.n}")
    if ctx.device.type == "meta":
        return [Kernel(meta_only, f"nova rows {p.kind}", rows=p)]
    pointers = {name: t.data_ptr() for name, t in named.items()}
    launcher = RoleKernels(LAUNCHER, p, pointers, workspace, ctx.device)
    return [Kernel(launcher, f"nova rows {p.kind} ({p.rows}x{p.n})", rows=p)]
