"""Kernel families: per family, the problem, the schedule, the derivation and the MLIR builder side by side.

Importing this package registers the built-in families with ``nova.kernels.family`` (no MLIR is
imported): GEMM (``gemm/family.py``) and attention (``attention/compile.py``).
"""
from nova.kernels.attention import compile as _attention_family  # noqa: F401  (registers "attention")
from nova.kernels.gemm import family as _gemm_family  # noqa: F401  (registers "gemm")
