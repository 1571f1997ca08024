"""Where each traced op came from: the user's module path and source line.

``OriginTracker`` is a ``TorchFunctionMode`` active while the user's step runs under ``make_fx``.
For each torch function call it finds, by walking the Python stack, the innermost ``nn.Module``
whose method is running (its qualified name) and the innermost source line outside torch and
Nova's frontend, and stamps every FX node created during the call with
``node.meta["nova_origin"] = "transformer.h.0.attn (gpt.py:47)"``.

Backward ops have no Python frame of the user's: the tracker tags each forward result's autograd
node with its origin and registers a pre-hook on it, so the ops the autograd engine emits while
running that node are stamped ``"... [backward]"``.  The optimizer update is stamped by the
frontend itself (``tracker.set("optimizer AdamW")``).
"""
from __future__ import annotations

import os
import sys

import torch
from torch.overrides import TorchFunctionMode

_NOVA = os.path.dirname(os.path.dirname(__file__))
_SKIP_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.join(_NOVA, "frontend") + os.sep,
              os.path.join(_NOVA, "compiler") + os.sep)
_STDLIB = os.path.dirname(os.__file__) + os.sep
_KEY = "nova_origin"


def _is_library_file(filename: str) -> bool:
    """torch, Nova's frontend/compiler, the standard library and ``<frozen ...>`` code."""
    if filename.startswith(_SKIP_DIRS) or filename.startswith("<"):
        return True
    return filename.startswith(_STDLIB) and "site-packages" not in filename


def user_location(frame) -> str:
    """``file.py:line`` of the innermost frame outside torch, the frontend and the stdlib."""
    while frame is not None:
        if not _is_library_file(frame.f_code.co_filename):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def traceback_location(tb) -> str:
    """The innermost user frame of an exception's traceback (``file.py:line``), or ''."""
    where = ""
    while tb is not None:
        if not _is_library_file(tb.tb_frame.f_code.co_filename):
            where = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


class OriginTracker(TorchFunctionMode):
    """Stamps FX nodes with their origin; see the module docstring."""

    def __init__(self, module_names: dict[int, str]):
        super().__init__()
        self.module_names = module_names       # id(module) -> its path ("transformer.h.0")
        self.current = ""
        self.paused = False
        self._graph = None
        self._last = None

    # ------------------------------------------------------------------ FX bookkeeping
    def attach(self) -> None:
        """Call inside the traced function: find the FX graph make_fx is building."""
        from torch.fx.experimental.proxy_tensor import get_proxy_mode
        mode = get_proxy_mode()
        self._graph = mode.tracer.graph if mode is not None else None
        self._last = self._graph._root.prev if self._graph is not None else None

    def flush(self) -> None:
        """Stamp the nodes created since the last flush with the current origin."""
        if self._graph is None:
            return
        root = self._graph._root
        node = self._last.next
        while node is not root:
            node.meta.setdefault(_KEY, self.current)
            self._last = node
            node = node.next

    def set(self, origin: str) -> None:
        self.flush()
        self.current = origin

    # ------------------------------------------------------------------ where
    def where(self, frame=None) -> str:
        """``"<module path> (<file>:<line>)"`` for the code running now."""
        frame = frame or sys._getframe(1)
        line, path = "", None
        while frame is not None and (not line or path is None):
            if not line and not _is_library_file(frame.f_code.co_filename):
                line = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
            if path is None and "self" in frame.f_code.co_varnames:
                owner = frame.f_locals.get("self")
                if owner is not None and id(owner) in self.module_names:
                    path = self.module_names[id(owner)]
            frame = frame.f_back
        if path and line:
            return f"{path} ({line})"
        return path or line

    # ------------------------------------------------------------------ the mode
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused or getattr(func, "__name__", "") in ("__get__", "__set__"):
            return func(*args, **kwargs)
        origin = self.where(sys._getframe(1))
        self.set(origin)
        out = func(*args, **kwargs)
        self.flush()
        if torch.is_grad_enabled():
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor):
                    self._tag(t.grad_fn, origin)
        return out

    def _tag(self, grad_fn, origin: str) -> None:
        if grad_fn is None or _KEY in grad_fn.metadata:
            return
        grad_fn.metadata[_KEY] = origin
        backward = f"{origin} [backward]" if origin else "[backward]"

        def enter(grad_outputs, backward=backward):
            self.set(backward)
        grad_fn.register_prehook(enter)
