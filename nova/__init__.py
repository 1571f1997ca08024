"""Nova: an MLIR deep-learning compiler with an Analytic Configurator.

Layers (data flows one way):  hwmodel -> configurator -> codegen -> runtime;  report reads results.

Importing ``nova`` is cheap and never imports MLIR or the CUDA driver; ``nova.matmul`` loads the
runtime on first use.
"""
__version__ = "0.1.0"


def matmul(a, b, **kwargs):
    """``C = A @ B`` on the GPU with a Nova-generated kernel (see ``nova.runtime.matmul``)."""
    from nova.runtime.matmul import matmul as _matmul
    return _matmul(a, b, **kwargs)


__all__ = ["matmul", "__version__"]
