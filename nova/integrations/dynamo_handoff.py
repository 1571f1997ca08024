"""What crosses between AOTAutograd and the backend's Nova programs, without copies.

    plan = plan_inputs(gm, part, static, donated)   # at compile time, from the FX graph's fake tensors
    plan.module                                     # the graph Nova lowers (one input per storage read)
    tensors = plan.gather(args)                     # per call: the program's inputs, from AOTAutograd's
    copies = output_copies(vals, roots, plan)       # results whose storage must not be shared

**Inputs.**  The forward's (and an inference graph's) inputs are the user's: parameters are read
in place (role ``param``), data inputs are copied into the program's static slots.  The backward's
inputs are the tensors the forward saved (handed over by AOTAutograd, which drops its own
references before the call: ``ctx.maybe_clear_saved_tensors``, the boxed calling convention) and
the tangents.  Every saved tensor is read in place, as a view of the storage it lives in, so that
it is held once, by whoever produced it:

* saved tensors on one storage (the trace's fake tensors share it exactly where the real ones do:
  a ``detach`` of a saved tensor, q, k and v slicing one projection) that are exact duplicates
  (same shape, strides and offset) are one input: the duplicates' uses read the first;
* a storage read through one contiguous view is that view, read in place;
* a storage read through several views, or a non-contiguous one, is one 1-D input spanning them
  (``StorageInput``), each saved tensor its view chain over it (``view_chain``: slice, view,
  slice per strided axis, view, permute, view: IR view ops, no copy);
* a tangent (``"tangents" in node.target``, AOTAutograd's own test, ``_aot_autograd.utils._is_tangent``)
  is copied into a static slot (small, and a new tensor each call);
* so is a storage of at most ``STAGED_BYTES`` (the batch the forward saved for the embedding's
  gradient, a per-row statistic, a small output the forward handed over as a copy): such a tensor
  may sit at a new address every step, and the program's launches are bound to the addresses of
  what it reads in place (a new address: a new binding and CUDA graph), while copying it costs
  microseconds.

Per call, ``gather`` checks that the real tensors sit in their storage as the trace says (one
storage per group, the traced strides and relative offsets; a lone input: contiguous); where they
do not (a forward that fell back, a layout Nova chose differently) it copies that group into a
fresh buffer of the traced layout, so a plan is never read through a wrong layout.

**Donation.**  AOTAutograd lists the saved tensors that nothing else aliases (``bw_donated_idxs``:
not an input or a user output of the forward, not a gradient) and refuses ``retain_graph`` once it
has; such a tensor is single-use, so the backward may overwrite its storage once it is dead
(``memory.Handoff.donated_inputs``: the planner writes a result there in place, or places a later
buffer, a gradient say, in its dead bytes).  An input is
donated when it is a lone contiguous view whose every duplicate is donated.  Per call, ``gather``
copies a donated input that shares its storage with another input (which the trace did not
foresee: a forward whose Nova plan merged two results) before the program may overwrite it.

**Outputs.**  A program returns its results without copies (``executor.build(..., per_call=True)``):
each output buffer is allocated per run for the caller, an output viewing an input is that view.
AOTAutograd relies on the trace's aliasing (a result the trace made fresh must not alias an input
or another result, a donated buffer must be the backward's alone): ``output_copies`` lists the
results whose Nova storage is shared where the trace's is not (Nova's value semantics lower
``clone`` and ``detach`` to the value itself), which the backend copies.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from nova.passes.memory import ALIGNMENT

STAGED_BYTES = 1 << 20          # a saved storage at most this large is copied into a static slot, not read in place
DONATED_ALIGNMENT = ALIGNMENT   # bytes: a donated input starting elsewhere is copied (the plan's buffer alignment)


def _storage_key(t: torch.Tensor):
    from torch.multiprocessing.reductions import StorageWeakRef
    return StorageWeakRef(t.untyped_storage())


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def is_contiguous(shape, strides) -> bool:
    """Row-major (size-1 axes may have any stride)."""
    return all(n == 1 or s == c for n, s, c in zip(shape, strides, _contiguous_strides(shape)))


# ====================================================================== a strided tensor as views
@dataclass(frozen=True)
class ViewChain:
    """A tensor of ``shape``/``strides`` at element ``offset`` of its storage, read as views of the
    storage's elements [start, start + length) as a 1-D tensor: ``ops``, in order, each
    ``("slice", axis, begin, end)``, ``("view", shape)`` or ``("permute", perm)``."""
    start: int
    length: int
    ops: tuple


def view_chain(shape, strides, offset: int) -> ViewChain | None:
    """The view chain of a non-overlapping strided tensor (None when there is none: a broadcast
    axis, overlapping elements, strides that do not nest).

    The axes longer than 1, outermost (largest stride) first, are merged where one continues the
    next (stride = size x stride) into ``(M_j, T_j)``.  The storage elements from ``start`` then
    form the dense grid ``(M_0, T_0 / T_1, ..., T_{L-2} / T_{L-1}, T_{L-1})`` (the last axis only
    when ``T_{L-1} > 1``), which holds the tensor as the slice ``[b_j, b_j + M_j)`` of each inner
    grid axis, ``b_j`` the digits of ``offset`` in the grid's strides.  Its ops: slice the 1-D span,
    view it as the grid, slice the inner axes, view the merged axes split into the tensor's axes in
    stride order, permute them into the tensor's order, view to insert its size-1 axes."""
    shape, strides = tuple(int(n) for n in shape), tuple(int(s) for s in strides)
    axes = [i for i, n in enumerate(shape) if n != 1]
    if any(strides[i] <= 0 for i in axes):
        return None
    order = sorted(axes, key=lambda i: -strides[i])
    merged = []                                         # [M, T, axes in stride order]
    for i in order:
        if merged and merged[-1][1] == shape[i] * strides[i]:
            merged[-1] = [merged[-1][0] * shape[i], strides[i], merged[-1][2] + [i]]
        else:
            merged.append([shape[i], strides[i], [i]])
    if not merged:                                      # a scalar, or all axes of size 1
        return ViewChain(offset, 1, (("slice", 0, offset, offset + 1), ("view", shape)))
    inner = merged[-1][1]
    grid, begins = [merged[0][0]], [0]
    rest = offset % merged[0][1]
    for (_, outer_stride, _), (size, stride, _) in zip(merged, merged[1:]):
        if outer_stride % stride or outer_stride < size * stride:
            return None
        grid.append(outer_stride // stride)
        begins.append((rest % outer_stride) // stride)
        if begins[-1] + size > grid[-1]:
            return None
    if inner > 1:
        grid.append(inner)
        begins.append(rest % inner)
    grid_strides = [m[1] for m in merged] + ([1] if inner > 1 else [])
    start = offset - sum(b * s for b, s in zip(begins[1:], grid_strides[1:]))
    ops = [("slice", 0, start, start + merged[0][0] * merged[0][1]), ("view", tuple(grid))]
    sizes = [m[0] for m in merged] + ([1] if inner > 1 else [])
    for axis in range(1, len(grid)):
        if (begins[axis], sizes[axis]) != (0, grid[axis]):
            ops.append(("slice", axis, begins[axis], begins[axis] + sizes[axis]))
    physical = [i for m in merged for i in m[2]]
    ops.append(("view", tuple(shape[i] for i in physical)))
    perm = tuple(physical.index(i) for i in axes)
    if perm != tuple(range(len(perm))):
        ops.append(("permute", perm))
    if len(axes) != len(shape):
        ops.append(("view", shape))
    return ViewChain(start, merged[0][0] * merged[0][1], tuple(ops))


def apply_chain(storage: torch.Tensor, ops) -> torch.Tensor:
    """A ``ViewChain``'s ``ops`` applied to the 1-D tensor of a whole storage's elements."""
    t = storage
    for op in ops:
        if op[0] == "slice":
            t = t[(slice(None),) * op[1] + (slice(op[2], op[3]),)]
        elif op[0] == "view":
            t = t.view(op[1])
        else:
            t = t.permute(op[1])
    return t


# ====================================================================== the input plan
@dataclass(frozen=True)
class Member:
    """One saved tensor of a ``StorageInput``: its placeholder's argument index and its traced
    geometry (elements of the storage)."""
    arg: int
    shape: tuple
    strides: tuple
    offset: int
    chain: ViewChain


@dataclass(frozen=True)
class StorageInput:
    """One IR input standing for the elements [start, start + length) of a storage that saved
    tensors view (``members``; their duplicates read the same views)."""
    members: tuple
    start: int
    length: int
    dtype: torch.dtype


@dataclass
class InputPlan:
    """How the program's inputs come from AOTAutograd's arguments (module docstring).

    ``sources[k]``: IR input k is ``("arg", i)`` (argument i itself) or ``("storage", StorageInput)``;
    ``in_place``/``donated``: IR input indices read in place / donated; ``duplicates``: argument
    index -> the arguments that are its exact duplicates (merged into it); ``fake_storages[k]``: the
    trace's storage of IR input k (for ``output_copies``); ``module``: the FX graph Nova lowers."""
    sources: list
    in_place: frozenset = frozenset()
    donated: frozenset = frozenset()
    duplicates: dict = field(default_factory=dict)
    fake_storages: list = field(default_factory=list)
    module: object = None
    roles: list = field(default_factory=list)
    names: list = field(default_factory=list)
    tangents: frozenset = frozenset()   # argument indices of the backward's tangents
    arguments: int = 0                  # how many arguments AOTAutograd passes

    def copied_bytes(self, args) -> int:
        """Bytes ``gather`` copies for ``args`` (tensors of any device, meta included): the storage
        inputs whose members are not laid out as traced, and the inputs read in place that are
        not contiguous."""
        total = 0
        for k, source in enumerate(self.sources):
            if source[0] == "storage" and as_traced(source[1], args) is None:
                total += source[1].length * torch.empty((), dtype=source[1].dtype).element_size()
            elif source[0] == "arg" and k in self.in_place and isinstance(args[source[1]], torch.Tensor) \
                    and not args[source[1]].is_contiguous():
                x = args[source[1]]
                total += x.numel() * x.element_size()
        return total

    def gather(self, args: list, donate: bool = True) -> list:
        """The program's inputs for one call (checked as the module docstring says); without
        ``donate``, copies of the donated inputs (a run that may fail and fall back to torch, which
        then reads the originals)."""
        out = []
        for k, source in enumerate(self.sources):
            if source[0] == "arg":
                x = args[source[1]]
                if k in self.in_place and isinstance(x, torch.Tensor) and not x.is_contiguous():
                    x = x.contiguous()
                out.append(x)
            else:
                out.append(_storage_tensor(source[1], args))
        if self.donated and not donate:
            for k in self.donated:
                out[k] = out[k].clone()
        elif self.donated:
            self._unshare_donated(args, out)
        return out

    def _unshare_donated(self, args, out) -> None:
        """A donated input whose storage another argument (not one of its duplicates) shares is
        copied: the program overwrites what it is given; so is a CUDA one whose first byte is not
        ``DONATED_ALIGNMENT``-aligned (the plan places later buffers at aligned bytes of it, which
        the kernels read with vector and TMA accesses; the caching allocator's blocks are)."""
        counts = {}
        for x in args:
            if isinstance(x, torch.Tensor) and x.device.type != "meta":
                key = x.untyped_storage().data_ptr()
                counts[key] = counts.get(key, 0) + 1
        for k in self.donated:
            i = self.sources[k][1]
            if out[k] is args[i] and out[k].device.type != "meta" and (
                    counts[out[k].untyped_storage().data_ptr()] > 1 + len(self.duplicates.get(i, ()))
                    or (out[k].is_cuda and out[k].data_ptr() % DONATED_ALIGNMENT)):
                out[k] = out[k].clone()


def _storage_id(t: torch.Tensor):
    storage = t.untyped_storage()
    return storage._cdata if t.device.type == "meta" else storage.data_ptr()     # meta storages have no address


def as_traced(s: StorageInput, args) -> int | None:
    """The storage offset of ``s``'s span when its members' tensors in ``args`` sit in one storage
    as the trace laid them out (dtype, strides, offsets relative to each other, inside the
    storage), else None."""
    first = args[s.members[0].arg]
    base_offset = first.storage_offset() - (s.members[0].offset - s.start)
    storage = first.untyped_storage()
    if base_offset < 0 or (base_offset + s.length) * first.element_size() > storage.nbytes():
        return None
    for m in s.members:
        x = args[m.arg]
        if x.dtype != s.dtype or _storage_id(x) != _storage_id(first) or tuple(x.stride()) != m.strides \
                or x.storage_offset() - base_offset != m.offset - s.start:
            return None
    return base_offset


def _storage_tensor(s: StorageInput, args) -> torch.Tensor:
    """The 1-D view of ``s``'s storage span, or a fresh copy of its members in the traced layout
    when the real tensors do not sit in one storage as traced."""
    first = args[s.members[0].arg]
    base_offset = as_traced(s, args)
    if base_offset is not None:
        return torch.as_strided(first.detach(), (s.length,), (1,), base_offset)
    base = torch.empty(s.length, dtype=s.dtype, device=first.device)
    for m in s.members:
        torch.as_strided(base, m.shape, m.strides, m.offset - s.start).copy_(args[m.arg])
    return base


def plan_inputs(gm: torch.fx.GraphModule, part: str, static: set, donated: set) -> InputPlan:
    """The input plan of AOTAutograd's ``part`` graph ``gm`` (forward, inference: its placeholders as
    they are, ``static`` ones parameters; backward: the module docstring), ``donated``: AOTAutograd's
    ``bw_donated_idxs``."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    vals = [n.meta.get("val") for n in placeholders]
    if part != "backward":
        return InputPlan([("arg", i) for i in range(len(placeholders))],
                         fake_storages=[_storage_key(v) if isinstance(v, torch.Tensor) else None for v in vals],
                         module=gm, roles=["param" if i in static else "data" for i in range(len(placeholders))],
                         names=[n.name for n in placeholders], arguments=len(placeholders))
    groups = {}                                         # storage -> [argument index]
    for i, (node, val) in enumerate(zip(placeholders, vals)):
        if isinstance(val, torch.Tensor) and "tangents" not in str(node.target):
            groups.setdefault(_storage_key(val), []).append(i)

    def geometry(i):
        return tuple(vals[i].shape), tuple(vals[i].stride()), int(vals[i].storage_offset())

    role_of = {}                                        # argument index -> ("arg",) | ("dup", i) | ("member", S)
    for members in groups.values():
        distinct = {}
        for i in members:
            rep = distinct.setdefault(geometry(i), i)
            if rep != i:
                role_of[i] = ("dup", rep)
        reps = list(distinct.values())
        if sum(vals[i].numel() * vals[i].element_size() for i in reps) <= STAGED_BYTES:
            for i in reps:                              # small: copied, its address never in the binding's key
                role_of[i] = ("staged",)
            continue
        if len(reps) == 1 and is_contiguous(*geometry(reps[0])[:2]):
            role_of[reps[0]] = ("arg",)
            continue
        chains = {i: view_chain(*geometry(i)) for i in reps}
        if any(c is None for c in chains.values()):
            for i in reps:                              # no view chain: each copied into a static slot
                role_of[i] = ("staged",)
            continue
        start = min(c.start for c in chains.values())
        stop = max(c.start + c.length for c in chains.values())
        s = StorageInput(tuple(Member(i, *geometry(i), chains[i]) for i in reps), start, stop - start, vals[reps[0]].dtype)
        for i in reps:
            role_of[i] = ("member", s)
    return _build(gm, placeholders, vals, role_of, donated)


def _build(gm, placeholders, vals, role_of, donated) -> InputPlan:
    """The lowering module and the plan for ``role_of``."""
    graph = torch.fx.Graph()
    env, sources, in_place, donated_k, fake, names = {}, [], set(), set(), [], []
    duplicates = {}
    for i, rep in ((i, r[1]) for i, r in role_of.items() if r[0] == "dup"):
        duplicates.setdefault(rep, []).append(i)
    bases = {}                                          # StorageInput -> its placeholder
    for i, node in enumerate(placeholders):
        role = role_of.get(i, ("staged",))
        if role[0] == "dup":
            continue
        if role[0] == "member":
            s = role[1]
            if id(s) in bases:
                continue
            new = graph.placeholder(f"{node.name}_storage")
            new.meta["val"] = torch.empty((s.length,), dtype=s.dtype, device="meta")
            bases[id(s)] = new
            sources.append(("storage", s))
        else:
            new = graph.node_copy(node)
            env[node] = new
            sources.append(("arg", i))
            if role[0] == "arg":
                if {i, *duplicates.get(i, ())} <= set(donated):
                    donated_k.add(len(sources) - 1)
        if role[0] != "staged" and "tangents" not in str(node.target):
            in_place.add(len(sources) - 1)
        fake.append(_storage_key(vals[i]) if isinstance(vals[i], torch.Tensor) else None)
        names.append(new.name)
    for i, node in enumerate(placeholders):             # the saved tensors' view chains, then duplicates
        role = role_of.get(i, ("staged",))
        if role[0] == "member":
            s = role[1]
            m = next(m for m in s.members if m.arg == i)
            env[node] = _emit_chain(graph, bases[id(s)], m.chain, s.start)
    for i, node in enumerate(placeholders):
        role = role_of.get(i)
        if role is not None and role[0] == "dup":
            env[node] = env[placeholders[role[1]]]
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            env[node] = graph.node_copy(node, lambda n: env[n])
    module = torch.fx.GraphModule(gm, graph)
    tangents = frozenset(i for i, n in enumerate(placeholders) if "tangents" in str(n.target))
    return InputPlan(sources, frozenset(in_place), frozenset(donated_k), duplicates, fake, module,
                     ["data"] * len(sources), names, tangents, len(placeholders))


def _emit_chain(graph, base, chain: ViewChain, start: int):
    aten = torch.ops.aten
    val = base.meta["val"]
    node = base
    for n, op in enumerate(chain.ops):
        if op[0] == "slice":
            begin, end = (op[2] - start, op[3] - start) if n == 0 else (op[2], op[3])
            if n == 0 and (begin, end) == (0, val.shape[0]):
                continue
            node = graph.call_function(aten.slice.Tensor, (node, op[1], begin, end))
            val = val[(slice(None),) * op[1] + (slice(begin, end),)]
        elif op[0] == "view":
            node = graph.call_function(aten.view.default, (node, list(op[1])))
            val = val.view(op[1])
        else:
            node = graph.call_function(aten.permute.default, (node, list(op[1])))
            val = val.permute(op[1])
        node.meta["val"] = val
    return node


# ====================================================================== the outputs
def output_copies(vals, roots, plan: InputPlan) -> frozenset:
    """FX result indices whose tensor must be copied: its storage (``roots[r]``: ``("input", k)``
    for IR input k's storage, ``("buffer", key)`` for a program buffer, None when it is no tensor)
    is shared with an input or an earlier result where the trace's (``vals[r]``'s fake storage) is not."""
    claimed = {}
    copies = set()
    for r, (val, root) in enumerate(zip(vals, roots)):
        if root is None or not isinstance(val, torch.Tensor):
            continue
        fake = _storage_key(val)
        if root[0] == "input" and plan.fake_storages[root[1]] != fake:
            copies.add(r)
            continue
        if claimed.setdefault(root, fake) != fake:
            copies.add(r)
    return frozenset(copies)
