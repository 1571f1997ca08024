"""An exception raised while tracing the user's step: a limitation of tracing on fake tensors
(Nova's to explain in one line), or the user's own error (theirs, passed through unchanged).

Limitations: reading a value that does not exist on fake tensors (``.item()``, ``bool(t)``,
``.numpy()``, a data-dependent shape), an op without a fake/meta kernel, a tensor that is neither
an input nor a parameter (a real tensor meeting fakes).  Everything else -- a shape mismatch in a
matmul, a ``ValueError`` the user raises -- is the user's: it keeps its type and, where an ATen op
failed, eager's message: fake tensors run an op's meta kernel, whose check can word the same
error differently ("a and b must have same reduction dim" for eager's "mat1 and mat2 shapes
cannot be multiplied"), so the failing op is replayed once on small real zero tensors of the same
shapes to get eager's own exception.
"""
from __future__ import annotations

import contextlib
import logging
import math

import torch

_LIMITATION_TYPES = ("DataDependentOutputException", "DynamicOutputShapeException", "UnsupportedOperatorException",
                     "UnsupportedFakeTensorException", "GuardOnDataDependentSymNode", "DataDependentOutputError",
                     "PendingUnbackedSymbolNotFound", "UnsupportedMutationAliasingException")
_LIMITATION_TEXT = ("FakeTensor", "FunctionalTensor", "convert all Tensors", "tensor subclass", "data pointer",
                    "data-dependent", "Unbacked", "unbacked")
_REPLAY_ELEMENTS = 1 << 24           # larger operands are not materialised to replay a failing op


def is_tracing_limitation(e: BaseException) -> bool:
    """``e`` comes from tracing on fake tensors, not from the user's program."""
    if any(cls.__name__ in _LIMITATION_TYPES for cls in type(e).__mro__):
        return True
    text = str(e)
    return any(marker in text for marker in _LIMITATION_TEXT)


def users_error(e: BaseException) -> BaseException:
    """The exception to raise for the user's own error ``e``: eager's exception for the ATen op
    that failed on fake tensors (same type as ``e``), else ``e`` itself."""
    eager = _replayed(e)
    if eager is not None and type(eager) is type(e):
        return eager.with_traceback(e.__traceback__)
    return e


def _replayed(e: BaseException):
    """Eager's exception for the op whose fake kernel raised ``e``, or None."""
    frame = _fake_dispatch_frame(e.__traceback__)
    if frame is None:
        return None
    func, args, kwargs = frame.f_locals.get("func"), frame.f_locals.get("args"), frame.f_locals.get("kwargs")
    if not isinstance(func, torch._ops.OpOverload) or args is None:
        return None
    fakes = [a for a in torch.utils._pytree.tree_leaves((args, kwargs or {})) if isinstance(a, torch.Tensor)]
    if any(math.prod(t.shape) > _REPLAY_ELEMENTS for t in fakes):
        return None

    def real(a):
        if isinstance(a, torch.Tensor):
            return torch.zeros(tuple(a.shape), dtype=a.dtype)
        return a
    try:
        real_args, real_kwargs = torch.utils._pytree.tree_map(real, (tuple(args), dict(kwargs or {})))
        func(*real_args, **real_kwargs)
    except Exception as eager:               # the error eager raises for these shapes
        return eager
    return None


def _fake_dispatch_frame(tb):
    """The innermost frame of FakeTensorMode's dispatch in a traceback (holds func, args, kwargs)."""
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "_dispatch_impl" and code.co_filename.endswith("fake_tensor.py"):
            found = tb.tb_frame
        tb = tb.tb_next
    return found


class _DropMetaFailure(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("failed while attempting to run meta")


@contextlib.contextmanager
def quiet_meta_failures():
    """FakeTensorMode logs a traceback at ERROR level each time a meta kernel raises, before the
    exception reaches Nova; the exception is the one report, so that log is dropped while tracing."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    drop = _DropMetaFailure()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)
