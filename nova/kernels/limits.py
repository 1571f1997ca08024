"""Sizes no GPU Nova models can hold: the GEMM problem refuses them (``gemm/problem.py``), and each
``nova-config explain`` of another kernel kind before its derivation starts (an attention derivation
walks its CTAs: an impossible problem took minutes).  A step's planner prices candidates itself and
states what fits its memory (``passes/budget.py``)."""
from __future__ import annotations

MAX_DIM = 2**31 - 1                  # TMA tensor coordinates and CUDA grid x are signed 32-bit
# The largest device memory among the presets (nova/hwmodel/presets.py): the H200's 6 HBM3e stacks
# of 24 GiB (141 GB usable; nvidia-smi reports 143,771 MiB).  Raise it with a larger preset.
MAX_GPU_BYTES = 144 * 2**30
MAX_GPU_NAME = "H200"


def refuse_too_large(what: str, nbytes: int, error: type) -> None:
    """Raise ``error`` (the family's problem error: one line, exit 2) when ``what``'s tensors, read and
    written once, take more than ``MAX_GPU_BYTES``."""
    if nbytes > MAX_GPU_BYTES:
        raise error(f"{what}: its tensors take {nbytes / 1e9:.1f} GB, more than the {MAX_GPU_BYTES / 1e9:.1f} GB of "
                    f"the largest GPU Nova models ({MAX_GPU_NAME})")
