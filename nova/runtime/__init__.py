"""Nova's runtime: load, launch and cache generated kernels with the CUDA driver (cuda-python).

Importing this package touches neither the GPU nor MLIR: the driver initialises on the first
launch, and the code generator is imported only when a kernel must be compiled (online mode,
cache miss).  Main entry points: ``nova.matmul`` = ``nova.runtime.matmul.matmul`` (framework tensors;
the submodule ``nova.runtime.matmul`` is deliberately not shadowed by the function), ``launch_gemm`` (raw pointers),
``KernelCache`` / ``kernel_key`` (the on-disk kernel cache), ``set_offline`` (cache-only mode).
"""
from nova.runtime.cache import (CODEGEN_ABI, CODEGEN_TOOLCHAIN, CacheCorruptionWarning, CompilerUnavailableError,
                                KernelCache, NotPrecompiledError, default_cache_dir, get_or_compile, is_offline,
                                kernel_key, set_offline, summary_line)
from nova.runtime.driver import NoGPUError, NovaRuntimeError, gpu_available
from nova.runtime.matmul import launch_gemm, preset_for_device_name, reset, resolve_kernel, resolve_target

__all__ = ["launch_gemm", "resolve_kernel", "resolve_target", "preset_for_device_name", "reset",
           "KernelCache", "kernel_key", "summary_line", "get_or_compile", "default_cache_dir",
           "set_offline", "is_offline", "CODEGEN_TOOLCHAIN", "CODEGEN_ABI",
           "NovaRuntimeError", "NoGPUError", "NotPrecompiledError", "CompilerUnavailableError",
           "CacheCorruptionWarning", "gpu_available"]
