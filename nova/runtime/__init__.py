"""Nova's runtime: load, launch and cache generated kernels with the CUDA driver (cuda-python).

Importing this package touches neither the GPU nor MLIR: the driver initialises on the first
launch, and the code generator is imported only when a kernel must be compiled (online mode,
cache miss).  Main entry points: ``nova.matmul`` = ``nova.runtime.matmul.matmul`` (framework tensors),
``nova.runtime.matmul.launch_gemm`` (raw pointers),
``KernelCache`` (the on-disk kernel cache; keys come from ``nova.kernels.family``), ``set_offline``
(cache-only mode).
"""
from nova.runtime.cache import (CODEGEN_TOOLCHAIN, CacheCorruptionWarning, CompilerUnavailableError, KernelCache,
                                NotPrecompiledError, default_cache_dir, is_offline, set_offline, summary_line)
from nova.runtime.driver import NoGPUError, NovaRuntimeError, gpu_available

__all__ = ["KernelCache", "summary_line", "default_cache_dir",
           "set_offline", "is_offline", "CODEGEN_TOOLCHAIN",
           "NovaRuntimeError", "NoGPUError", "NotPrecompiledError", "CompilerUnavailableError",
           "CacheCorruptionWarning", "gpu_available"]
