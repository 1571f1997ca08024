"""The user's own parameter and buffer objects, wherever the step reaches them, stand for their traced leaves.

Capture puts the traced leaves into the user's modules (``capture._swapped_tensors``), so the
model's forward sees them.  A step also reaches its parameters by other roads: the optimizer's
``param_groups`` (``clip_grad_norm_(opt.param_groups[0]["params"], 1.0)``), a list built before
``nova.compile`` (``params = list(model.parameters())``), a closure cell.  Those hold the original
objects, whose ``.grad`` is None and whose values are the user's real (or meta) tensors: read during
the trace, the clipping would see no gradients and vanish, and a penalty over the list would be
folded in as a constant -- a silent wrong step.

``OriginalsResolved`` is a ``TorchFunctionMode`` (it sees every torch call and tensor attribute
access, ``Tensor.grad.__get__``/``__set__`` included): each argument that is one of the user's
originals is replaced by its traced leaf before the call runs, so every road reads and writes the
same traced tensors as the model does.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree


class OriginalsResolved(TorchFunctionMode):
    """``replacements``: ``id(original) -> traced leaf`` for the step's parameters and buffers."""

    def __init__(self, replacements: dict[int, torch.Tensor]):
        super().__init__()
        self.replacements = replacements

    def _resolve(self, value):
        if isinstance(value, torch.Tensor):
            return self.replacements.get(id(value), value)
        return value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.replacements:
            args, kwargs = pytree.tree_map(self._resolve, (args, kwargs))
        return func(*args, **kwargs)
