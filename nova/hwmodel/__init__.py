"""Symbolic GPU models: presets with sourced numbers, and ``from_device()`` for the live GPU."""
from nova.hwmodel.device import from_device, model_from_attributes
from nova.hwmodel.formula import Formula
from nova.hwmodel.model import MMA_DTYPES, MMA_FAMILIES, GPUModel, Quantity, TargetError
from nova.hwmodel.presets import PRESETS


def get_target(name: "str | GPUModel") -> GPUModel:
    """A preset by name, ``"auto"`` for the live GPU, or a ``GPUModel`` passed through."""
    if isinstance(name, GPUModel):
        return name
    key = str(name).strip().lower()
    if key == "auto":
        return from_device()
    if key not in PRESETS:
        raise TargetError(f"unknown target {name!r}; choose one of {', '.join(PRESETS)} or auto")
    return PRESETS[key]


__all__ = ["GPUModel", "Quantity", "Formula", "TargetError", "PRESETS", "MMA_DTYPES", "MMA_FAMILIES",
           "get_target", "from_device", "model_from_attributes"]
