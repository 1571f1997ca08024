"""Which groups the plan may put on Nova's kernels besides GEMMs, from two options (``nova.options``),
for A/B measurements against ATen:

``NOVA_POINTWISE``, the memory-bound groups:

    all (1)       fused pointwise groups and optimizer updates on Nova kernels (the default)
    none (0)      both on ATen
    fused         only the fused pointwise groups (optimizer updates on ATen's foreach kernels)
    optimizer     only the optimizer updates (multi-tensor kernels)

``NOVA_ATTENTION``: ``nova`` (the default) lets the plan give attention nodes Nova's fused kernels
where they cover them (``nova.passes.attention``); ``aten`` keeps every one on ATen.

The options are read once by the caller that plans (``nova.compiler.plan_cache.plan``, or
``nova.passes.pipeline`` when given nothing) through ``kernel_switch``; the answer is passed down
explicitly (``pipeline(..., kernels=...)``, ``nova.passes.fusion.fuse``) and is part of the plan
cache's key, so a plan made under one setting is never reused under another.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelSwitch:
    pointwise: bool = True          # fused pointwise groups on nova/kernels/pointwise
    optimizer: bool = True          # optimizer updates on nova/kernels/optimizer (one launch per group)
    attention: bool = True          # attention nodes on nova/kernels/attention where they cover them

    def pointwise_key(self) -> str:
        """The memory-bound part as ``NOVA_POINTWISE`` spells it."""
        return {(True, True): "all", (False, False): "none", (True, False): "fused",
                (False, True): "optimizer"}[(self.pointwise, self.optimizer)]

    def key(self) -> str:
        """The setting, for the plan cache's key: ``NOVA_POINTWISE``'s spelling, ``+aten-attention``
        when ``NOVA_ATTENTION=aten``."""
        return self.pointwise_key() + ("" if self.attention else "+aten-attention")


POINTWISE_SETTINGS = {"all": (True, True), "none": (False, False), "fused": (True, False), "optimizer": (False, True)}


def kernel_switch(options=None) -> KernelSwitch:
    """The ``NOVA_POINTWISE`` and ``NOVA_ATTENTION`` settings of ``options`` (None:
    ``nova.options.current()``, the environment's; a bad value is ``OptionError``'s one line)."""
    if options is None:
        from nova import options as nova_options
        options = nova_options.current()
    return KernelSwitch(*POINTWISE_SETTINGS[options.pointwise], attention=options.attention == "nova")
