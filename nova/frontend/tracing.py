"""While Nova traces a step, libraries that ask "am I being compiled?" hear yes.

Libraries branch on ``torch.compiler.is_compiling()`` to skip eager-only work that reads tensor
values on the host: Hugging Face's ``masking_utils`` checks ``is_tracing(mask)`` (which asks
``torch.compiler.is_compiling()``, then whether the tensor is an ``fx.Proxy`` or a
``FakeTensor``) before ``torch.all(attention_mask == 1)`` or a packed-sequence test, and
``torch_compilable_check`` turns its asserts into ``torch._check`` hints.  Nova's capture hands
the model functional wrappers around fake tensors (neither a Proxy nor, at the top level, a
FakeTensor), so without this flag such code reads a value that does not exist.

``torch.compiler.is_compiling()`` returns the module global ``torch.compiler._is_compiling_flag``
(set the same way by ``torch.compiler._compile_session_context`` and ``torch.export``'s
``_compiling_state_context``); ``compiling()`` sets it for the duration of the trace and
restores the previous value afterwards, also when the trace fails.  ``is_exporting()`` is left
False: libraries treat export as stricter (no data-dependent shortcuts at all, e.g. no
``is_causal`` fast path), which a training step does not need.  The flag is process-wide, like
torch's own: another thread running eager code during a capture would also hear yes.
"""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def compiling():
    """``torch.compiler.is_compiling()`` is True inside; the previous value is restored after."""
    compiler = torch.compiler
    if hasattr(compiler, "_is_compiling_flag"):
        previous = compiler._is_compiling_flag
        compiler._is_compiling_flag = True
        try:
            yield
        finally:
            compiler._is_compiling_flag = previous
        return
    original = compiler.is_compiling                     # a torch without the flag: patch the function
    compiler.is_compiling = lambda: True
    try:
        yield
    finally:
        compiler.is_compiling = original
