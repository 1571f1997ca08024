"""Tensors of a trace the step leaves where its Python reaches them.

A compiled step replays only tensor work, so a step that stores a tensor it computes in a global
list (``history.append(loss)``), on a module (``self.last_output = y``) or in a closure's dict would
store it once, at capture: a placeholder of the trace (a ``FunctionalTensor``) in the user's
container, nothing afterwards.  ``escaped`` looks where ``python_values.snapshot`` looks (the user's
modules' attributes, the globals and closure cells of the step and its helpers, two levels into
containers) after a capture; the capture refuses such a step in one line and ``forget`` takes the
placeholders out of the user's lists and dicts again.
"""
from __future__ import annotations

import types

import torch

from nova.frontend.discover import modules_of
from nova.frontend.python_values import _MAX_ITEMS, _SKIPPED_ATTRS, _user_class, function_places


def _traced(value) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor
    return isinstance(value, (FakeTensor, FunctionalTensor))


def _escaped_in(path: str, value, out: list, depth: int, holder=None) -> None:
    """``(path, tensor, holder)`` for the traced tensors ``value`` is or holds (containers and plain
    objects, ``depth`` levels down; ``holder``: the list, tuple, set or dict a tensor sits in)."""
    if isinstance(value, torch.Tensor):
        if _traced(value):
            out.append((path, value, holder))
        return
    if depth == 0 or isinstance(value, (torch.nn.Module, type, types.ModuleType)) or callable(value):
        return
    if isinstance(value, dict):
        for k, v in list(value.items())[:_MAX_ITEMS]:
            _escaped_in(f"{path}[{k!r}]", v, out, depth - 1, value)
    elif isinstance(value, (list, tuple, set)):
        for i, v in enumerate(list(value)[-_MAX_ITEMS:]):
            _escaped_in(f"{path}[{i}]", v, out, depth - 1, value)
    elif hasattr(value, "__dict__") and _user_class(type(value)):
        for name, v in list(vars(value).items()):
            _escaped_in(f"{path}.{name}", v, out, depth - 1)


def forget(escapes) -> None:
    """Take the traced tensors of ``escaped`` out of the lists, sets and dicts they were put in (an
    attribute is left as the step set it)."""
    for _, tensor, holder in escapes:
        if isinstance(holder, list):
            holder[:] = [v for v in holder if v is not tensor]
        elif isinstance(holder, set):
            holder.discard(tensor)
        elif isinstance(holder, dict):
            for k in [k for k, v in holder.items() if v is tensor]:
                del holder[k]


def escaped(fn, found) -> list:
    """``[(path, tensor, holder)]``: tensors of the trace left where the step's Python can reach them after a
    capture -- appended to a global list (``history.append(loss)``), kept on a module
    (``self.last_loss = loss``), put in a closure's dict.  A compiled step replays only tensor work, so
    such a store happened once, with a placeholder of the trace; the same places ``snapshot`` reads."""
    out: list = []
    for name, model in found.models:
        for path, module in modules_of(model):
            if not _user_class(type(module)):            # torch's own modules keep traced tensors by design (an
                continue                                 # RNN's flat weights) and restore them themselves
            for attr, value in vars(module).items():
                if attr not in _SKIPPED_ATTRS:
                    _escaped_in(f"{name}.{path}.{attr}" if path else f"{name}.{attr}", value, out, 2)
    for f in dict.fromkeys(getattr(f, "__func__", f) for f in (fn, *found.functions)):
        for path, value in function_places(f):
            _escaped_in(path, value, out, 2)
    return out
