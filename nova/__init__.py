"""Nova: an MLIR deep-learning compiler with an Analytic Configurator.

Layers (data flows one way):  hwmodel -> configurator -> codegen -> runtime;  report reads results.

Importing ``nova`` is cheap and never imports MLIR or the CUDA driver; ``nova.matmul`` loads the
runtime on first access, ``nova.compile`` (whole-step graph compilation) the frontend and compiler.
"""
from nova.version import __version__

__all__ = ["matmul", "compile", "attention", "attention_backward", "NovaUnsupportedError", "__version__"]


def __getattr__(name: str):
    """``nova.matmul`` is ``nova.runtime.matmul.matmul`` itself, imported on first access: no
    wrapper (an import statement and ``**kwargs`` repacking, ~0.5 us) on every call."""
    if name == "matmul":
        from nova.runtime.matmul import matmul
        globals()["matmul"] = matmul
        return matmul
    if name in ("attention", "attention_backward"):     # nova/kernels/attention/launch.py
        from nova.kernels.attention import launch
        globals()[name] = getattr(launch, name)
        return globals()[name]
    if name == "compile":
        from nova.compiler import compile
        globals()["compile"] = compile
        return compile
    if name == "NovaUnsupportedError":
        from nova.frontend.errors import NovaUnsupportedError
        globals()["NovaUnsupportedError"] = NovaUnsupportedError
        return NovaUnsupportedError
    raise AttributeError(f"module 'nova' has no attribute {name!r}")
