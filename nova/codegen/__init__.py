"""Nova's code generator, family-independent: the MLIR text scaffold (``builder``), the lowering
pipeline to PTX (``lower``), ptxas (``ptxas``), ``lower_and_assemble`` (``assemble``) and the artifact
(``artifact``).  The kernel families' builders live in ``nova/kernels/<family>/`` (the GEMM's:
``nova.kernels.gemm.compile.compile_gemm`` and ``build_module``).

Importing this package is cheap: MLIR is imported lazily inside the functions (the runtime imports
``nova.codegen.artifact`` on machines without MLIR).
"""
from __future__ import annotations

from nova.codegen.assemble import MLIR_TOOLCHAIN, check_mma_sync_target, lower_and_assemble
from nova.codegen.errors import CodegenError

__all__ = ["CodegenError", "MLIR_TOOLCHAIN", "check_mma_sync_target", "lower_and_assemble"]
