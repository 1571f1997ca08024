"""A reference runner for a ``Planned`` step: the plan's contract, executable on CPU.

``run_planned`` runs the groups in order over ONE arena (a byte tensor, poisoned with 0xFF so a read
of never-written bytes shows up as NaN or a bad index) and the caller's input tensors as external
storage: every value is read where the memory plan says it lives (arena offset, an input's storage,
or an ``as_strided`` alias of its root: a kernel result the storage pass placed in a concat's buffer
is written through that alias, and the concat only checks what its buffer holds) and every node result
is written there.  A node computes
all its results before writing any (what an elementwise kernel writing in place, or an ``out=``
call, does).  An offloaded value's copy to host is taken when the group that writes it ends (where
the copy engine starts it) and its bytes must still hold it when the ``offload`` node runs (where
the copy is done); ``host`` values live in host tensors of their own.  The tests compare it with ``nova.ir.interpreter.run``: if the plan let two live
values share bytes, or a donation overwrote an input still to be read, the results differ.  The
executor (``nova/compiler``) does the same on GPU with real kernels.
"""
from __future__ import annotations

from nova.ir.ops import kind, opdef
from nova.ir.types import TORCH_NAMES


def run_planned(planned, inputs, *, check_views: bool = True):
    """Run ``planned`` on ``inputs`` (which it writes: donated outputs land in them); returns the
    outputs as fresh tensors."""
    import torch

    mem = planned.memory
    arena = torch.full((max(mem.arena_bytes, 1),), 0xFF, dtype=torch.uint8)
    storage = list(inputs)
    fused: dict = {}
    host: dict = {}                   # offloaded copies (``host`` values)
    group_of = {n: i for i, g in enumerate(planned.groups) for n in g.nodes}
    copies_after: dict = {}           # group index -> the offload nodes whose copy starts when it ends
    for node in planned.graph.nodes:
        if node.op == "offload":
            copies_after.setdefault(group_of[node.inputs[0].producer], []).append(node)

    def dtype(v):
        return getattr(torch, TORCH_NAMES[v.dtype])

    def root_tensor(v):
        p = mem[v]
        if p.in_dead_input:                                      # at a byte of a dead donated input
            t = storage[p.input_index]
            assert t.is_contiguous() and p.offset + v.type.nbytes <= t.numel() * t.element_size()
            flat = t.reshape(-1).view(torch.uint8)
            return flat[p.offset:p.offset + v.type.nbytes].view(dtype(v)).reshape(v.shape)
        if p.kind == "external":
            t = storage[p.input_index]
            assert tuple(t.shape) == v.shape and t.is_contiguous()
            return t.view(dtype(v)) if t.dtype != dtype(v) else t
        if p.kind == "arena" and p.view is not None:           # stored at the strides its kernel writes
            return arena[p.offset:p.offset + p.nbytes].view(dtype(v)).as_strided(p.view.shape, p.view.strides)
        if p.kind == "arena":
            return arena[p.offset:p.offset + p.nbytes].view(dtype(v)).reshape(v.shape)
        if p.kind == "host":
            return host[v]
        return fused[v]

    def aliased(v):
        p = mem[v]
        base = fused.get(p.alias_of)    # a root computed earlier in the running fused group, not yet written
        if base is None or mem[p.alias_of].view is not None:
            base = root_tensor(p.alias_of)
        return base.as_strided(p.view.shape, p.view.strides, base.storage_offset() + p.view.offset)

    def written(v):                    # where a node writes its result: its root, or its slice of one
        return aliased(v) if mem[v].kind == "alias" else root_tensor(v)

    def read(v):
        if v in fused:                 # computed earlier in the running fused group
            return fused[v]
        return aliased(v) if mem[v].kind == "alias" else root_tensor(v)

    for index, group in enumerate(planned.groups):
        pending = []                   # a fused group (one kernel) writes its results after reading everything
        for node in group.nodes:
            if node.op == "offload":   # the copy ends here: the bytes it read must not have changed
                assert _same_bits(read(node.inputs[0]), host[node.outputs[0]]), \
                    f"the bytes of offloaded {node.inputs[0].type} changed before its copy to host ended"
                continue
            args = [read(v) for v in node.inputs]
            result = opdef(node.op).reference(torch, *args, **node.attrs)
            results = [r.clone() for r in (result if isinstance(result, (tuple, list)) else (result,))]
            if (kind(node.op) == "view" and mem[node.outputs[0]].kind == "alias") or node in planned.storage.assembled:
                if check_views:
                    assert torch.equal(results[0].nan_to_num(0.0) if results[0].is_floating_point() else results[0],
                                       read(node.outputs[0]).nan_to_num(0.0)
                                       if results[0].is_floating_point() else read(node.outputs[0])), \
                        f"alias of {node.op} does not read what the view computes"
                continue
            for v, r in zip(node.outputs, results):
                if mem[v].kind == "fused" or group.fused:
                    fused[v] = r
                if mem[v].kind != "fused":
                    pending.append((v, r))
                    if not group.fused:
                        written(v).copy_(r)
        if group.fused:
            for v, r in pending:
                written(v).copy_(r)
        fused.clear()
        for node in copies_after.get(index, ()):              # the copy engine starts the offload's copy
            host[node.outputs[0]] = read(node.inputs[0]).clone()
    return [read(o.value).clone() for o in planned.graph.outputs]


def _same_bits(a, b) -> bool:
    import torch
    return a.dtype == b.dtype and a.shape == b.shape and \
        torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
