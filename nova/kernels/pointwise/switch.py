"""``NOVA_POINTWISE``: which memory-bound groups the plan puts on Nova's kernels (A/B measurements
against ATen).

    unset or 1    fused pointwise groups and optimizer updates on Nova kernels (the default)
    0             both on ATen
    fused         only the fused pointwise groups (optimizer updates on ATen's foreach kernels)
    optimizer     only the optimizer updates (multi-tensor kernels)

The variable is read here only (``memory_bound_kernels``); the answer is passed down explicitly
(``nova.passes.pipeline(..., kernels=...)``, ``nova.passes.fusion.fuse``) and is part of the plan
cache's key, so a plan made under one setting is never reused under another.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

VARIABLE = "NOVA_POINTWISE"


@dataclass(frozen=True)
class MemoryBoundKernels:
    pointwise: bool = True          # fused pointwise groups on nova/kernels/pointwise
    optimizer: bool = True          # optimizer updates on nova/kernels/optimizer (one launch per group)

    def key(self) -> str:
        """The setting as ``NOVA_POINTWISE`` spells it."""
        return {(True, True): "1", (False, False): "0", (True, False): "fused",
                (False, True): "optimizer"}[(self.pointwise, self.optimizer)]


SETTINGS = {"1": MemoryBoundKernels(), "0": MemoryBoundKernels(False, False),
            "fused": MemoryBoundKernels(True, False), "optimizer": MemoryBoundKernels(False, True)}


def memory_bound_kernels(environ=None) -> MemoryBoundKernels:
    """The setting of ``NOVA_POINTWISE`` (a ValueError naming the accepted values for another one)."""
    text = (os.environ if environ is None else environ).get(VARIABLE, "1").strip().lower() or "1"
    try:
        return SETTINGS[text]
    except KeyError:
        raise ValueError(f"{VARIABLE} must be one of {', '.join(SETTINGS)}, got {text!r}") from None
