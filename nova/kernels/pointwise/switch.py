"""``NOVA_POINTWISE`` (``nova.options``): which memory-bound groups the plan puts on Nova's kernels
(A/B measurements against ATen).

    all (1)       fused pointwise groups and optimizer updates on Nova kernels (the default)
    none (0)      both on ATen
    fused         only the fused pointwise groups (optimizer updates on ATen's foreach kernels)
    optimizer     only the optimizer updates (multi-tensor kernels)

The option is read once by the caller that plans (``nova.compiler.plan_cache.plan``, or
``nova.passes.pipeline`` when given nothing) through ``memory_bound_kernels``; the answer is passed
down explicitly (``pipeline(..., kernels=...)``, ``nova.passes.fusion.fuse``) and is part of the
plan cache's key, so a plan made under one setting is never reused under another.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryBoundKernels:
    pointwise: bool = True          # fused pointwise groups on nova/kernels/pointwise
    optimizer: bool = True          # optimizer updates on nova/kernels/optimizer (one launch per group)

    def key(self) -> str:
        """The setting as ``NOVA_POINTWISE`` spells it."""
        return {(True, True): "all", (False, False): "none", (True, False): "fused",
                (False, True): "optimizer"}[(self.pointwise, self.optimizer)]


SETTINGS = {"all": MemoryBoundKernels(), "none": MemoryBoundKernels(False, False),
            "fused": MemoryBoundKernels(True, False), "optimizer": MemoryBoundKernels(False, True)}


def memory_bound_kernels(options=None) -> MemoryBoundKernels:
    """The ``NOVA_POINTWISE`` setting of ``options`` (None: ``nova.options.current()``, the environment's;
    a bad value is ``OptionError``'s one line)."""
    if options is None:
        from nova import options as nova_options
        options = nova_options.current()
    return SETTINGS[options.pointwise]
