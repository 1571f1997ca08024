"""Checks a step makes on tensor values, kept in the graph instead of read on the host while tracing.

``clip_grad_norm_(..., error_if_nonfinite=True)`` (and ``get_total_norm``) raise when the total
norm is NaN or infinite: ``if torch.logical_or(norm.isnan(), norm.isinf()): raise`` -- a host read
that tracing on fake tensors cannot do.  While Nova traces, ``finite_norm_checks`` replaces
``torch.nn.utils.clip_grad._get_total_norm`` (the function both call) by one that computes the norm
the same way without the test and records ``isfinite(norm)`` with torch's message.  Each check
becomes a boolean graph output; the step's updates are kept only where every check holds
(``where(ok, new, old)``, so a program updating in place leaves the old values), and the compiled
step raises torch's ``RuntimeError`` before writing anything back when one fails.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch


@dataclass
class Check:
    ok: torch.Tensor            # the traced 0-d boolean
    message: str                # what eager raises when it is False


def _nonfinite_message(norm_type: float) -> str:
    """torch's own text (``torch/nn/utils/clip_grad.py``, ``_get_total_norm``)."""
    return (f"The total norm of order {float(norm_type)} for gradients from `parameters` is non-finite, so it cannot "
            f"be clipped. To disable this error and scale the gradients by the non-finite norm anyway, set "
            f"`error_if_nonfinite=False`")


@contextlib.contextmanager
def finite_norm_checks(checks: list):
    """While tracing: ``error_if_nonfinite=True`` records a ``Check`` in ``checks`` instead of
    reading the norm on the host."""
    from torch.nn import utils
    from torch.nn.utils import clip_grad
    original = clip_grad._get_total_norm

    @functools.wraps(original)
    def total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
        norm = original(tensors, norm_type, False, foreach)
        if error_if_nonfinite:
            with torch.no_grad():
                checks.append(Check(torch.isfinite(norm), _nonfinite_message(norm_type)))
        return norm
    patched = [(clip_grad, "_get_total_norm"), (clip_grad, "get_total_norm"), (utils, "get_total_norm")]
    saved = [(module, name, module.__dict__[name]) for module, name in patched
             if module.__dict__.get(name) is original]
    for module, name, _ in saved:
        setattr(module, name, total_norm)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
