"""Layout analysis: where each value's elements live, as a strided view of some root's storage.

Rule: a graph input and the result of every non-view node is a *root*: it owns a dense row-major
buffer.  A view node (``reshape``, ``permute``, ``expand``, ``slice``) describes its result by shape,
strides and a storage offset over its input's root, the way torch does: permute permutes strides,
slice offsets and scales one stride, expand gives broadcast axes stride 0, and reshape keeps the
storage when torch's ``view`` can (``view_strides``, a port of ATen's rule, checked against torch
meta tensors in the tests, so Nova and the executor's ``as_strided`` agree).  A reshape that cannot
be a view (e.g. merging axes a permute made non-adjacent) is a root of its own: the executor copies
it.

A result may be stored otherwise when the storage pass (``storage.py``) decides so: its kernel writes
it at other strides (its axes in another order), or into a slice of a ``concat``'s buffer (the
concat's result is then its root).  ``analyze(graph, storage)`` starts such a result's layout from
that decision, and its views follow from there by the same rules.

Views are free for the planner (they alias their root); copies are the only views that launch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from nova.ir.graph import Graph, Value
from nova.ir.ops import kind


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Layout:
    root: Value                  # the value that owns the storage (itself for roots)
    shape: tuple[int, ...]
    strides: tuple[int, ...]     # in elements
    offset: int = 0              # storage offset in elements from the root's first element

    @property
    def dense(self) -> bool:
        """Row-major contiguous (axes of extent 1 may have any stride)."""
        expected = contiguous_strides(self.shape)
        return all(d == 1 or s == e for d, s, e in zip(self.shape, self.strides, expected))

    @property
    def whole_root(self) -> bool:
        """Reads the root's buffer element for element in order: dense, offset 0, same size."""
        return self.dense and self.offset == 0 and math.prod(self.shape) == self.root.type.numel

    def describe(self) -> str:
        return f"shape {list(self.shape)} strides {list(self.strides)} offset {self.offset}"


def merged_batch_stride(shape, strides) -> int | None:
    """The one stride s with strides[d] = s * prod(shape[d+1:]) for every axis of extent > 1 (0 when
    none, or broadcast): batch axes of ``shape`` whose matrices lie s elements apart in their flat
    (row-major) order, i.e. one batch dimension for a batched GEMM; None when no such s exists."""
    s, inner = None, 1
    for n, st in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if n != 1:
            if s is None:
                s = st
            elif st != s * inner:
                return None
        inner *= n
    return s or 0


def view_strides(old_shape, old_strides, new_shape) -> tuple[int, ...] | None:
    """The strides of ``view(new_shape)`` of a tensor with ``old_shape``/``old_strides``, or None
    when no strides express it.  A port of ATen's ``computeStride`` (TensorUtils.cpp), so it agrees
    with ``torch.Tensor.view`` (the tests check it against meta tensors): walk both shapes from the
    innermost axis, in chunks of old axes that are contiguous with each other; each chunk must be
    covered exactly by a run of new axes."""
    old_shape, old_strides, new_shape = tuple(old_shape), tuple(old_strides), tuple(new_shape)
    if not old_shape:
        return (1,) * len(new_shape)
    numel = math.prod(old_shape)
    if numel == 0:
        return old_strides if old_shape == new_shape else contiguous_strides(tuple(max(d, 1) for d in new_shape))
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base_stride = old_strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (old_shape[tensor_d - 1] != 1
                             and old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_strides) if view_d == -1 else None


def root_layout(value: Value) -> Layout:
    return Layout(value, value.shape, contiguous_strides(value.shape), 0)


def view_layout(op: str, base: Layout, attrs: dict, out_shape) -> Layout | None:
    """The layout of ``op(base)``; None when it cannot be a strided view of the same storage."""
    shape, strides = list(base.shape), list(base.strides)
    if op == "permute":
        perm = attrs["perm"]
        return Layout(base.root, tuple(shape[p] for p in perm), tuple(strides[p] for p in perm), base.offset)
    if op == "slice":
        axis = attrs["axis"] % len(shape)
        step = attrs.get("step", 1)
        offset = base.offset + attrs["start"] * strides[axis] if out_shape[axis] else base.offset
        strides[axis] *= step
        return Layout(base.root, tuple(out_shape), tuple(strides), offset)
    if op == "expand":
        lead = len(out_shape) - len(shape)
        new = [0] * lead + [0 if d == 1 and n != 1 else s for d, n, s in zip(shape, out_shape[lead:], strides)]
        return Layout(base.root, tuple(out_shape), tuple(new), base.offset)
    if op == "reshape":
        strides = view_strides(base.shape, base.strides, tuple(out_shape))
        return Layout(base.root, tuple(out_shape), strides, base.offset) if strides is not None else None
    raise ValueError(f"{op} is not a view op")


def analyze(graph: Graph, storage=None) -> dict[Value, Layout]:
    """Each value of ``graph`` -> its layout (roots are their own); ``storage`` (a
    ``storage.StoragePlan``, None: none) gives the stored layout of the node results it decides."""
    stored = storage.layouts if storage is not None else {}
    layouts = {spec.value: root_layout(spec.value) for spec in graph.inputs}
    for node in graph.nodes:
        if kind(node.op) == "view":
            out = node.outputs[0]
            layout = view_layout(node.op, layouts[node.inputs[0]], node.attrs, out.shape)
            layouts[out] = layout if layout is not None else root_layout(out)
        else:
            for v in node.outputs:
                layouts[v] = stored.get(v) or root_layout(v)
    return layouts


def is_copy(node, layouts: dict[Value, Layout]) -> bool:
    """A view node whose result needs its own buffer (one copy launch)."""
    return kind(node.op) == "view" and layouts[node.outputs[0]].root is node.outputs[0]
