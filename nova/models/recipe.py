"""A training step's recipe: what a real script adds to forward / backward / update (autocast, a
padding mask, gradient clipping), and the command-line flags that state it (``explain train``,
``nova precompile train``, the benchmarks)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class TrainRecipe:
    """How a training step runs beyond forward / backward / update, as real scripts write it:

    * ``autocast``: ``"bf16"`` or ``"fp16"`` runs the forward under ``torch.autocast`` of the step's
      device (FP32 master weights, 16-bit GEMMs and attention), None keeps FP32;
    * ``padded``: the step takes a third argument, a ``[batch, seq]`` attention mask (1 = token, 0 =
      padding), passed to the model (Hugging Face models only: the built-in ones take no mask);
    * ``clip_grad_norm``: ``clip_grad_norm_`` to this norm before the update (0: off).
    """
    autocast: str | None = None
    padded: bool = False
    clip_grad_norm: float = 0.0

    def __post_init__(self):
        if self.autocast is not None and self.autocast not in AUTOCAST_DTYPES:
            raise ValueError(f"autocast {self.autocast!r} is not one of {', '.join(AUTOCAST_DTYPES)}")
        if not self.clip_grad_norm >= 0:
            raise ValueError(f"clip_grad_norm must be >= 0, got {self.clip_grad_norm}")

    def describe(self) -> str:
        parts = ([f"autocast {self.autocast}"] if self.autocast else []) + (["padded"] if self.padded else []) \
            + ([f"clip {self.clip_grad_norm:g}"] if self.clip_grad_norm else [])
        return ", ".join(parts) or "plain"


def add_recipe_args(p: argparse.ArgumentParser) -> None:
    """The step's recipe (``nova.models.TrainRecipe``): what a real script adds to the plain step."""
    p.add_argument("--autocast", default=None, choices=["bf16", "fp16"],
                   help="run the forward under torch.autocast(\"cuda\", dtype): 16-bit GEMMs and attention, FP32 "
                        "master weights (default: FP32 with TF32 GEMMs)")
    p.add_argument("--padded", action="store_true",
                   help="the step takes an attention mask ([batch, seq], 0 = padding; padded labels -100), as padded "
                        "batches do; Hugging Face models only")
    p.add_argument("--clip-grad-norm", type=float, default=0.0, metavar="NORM",
                   help="clip_grad_norm_ to NORM before the update (default 0: off)")


RECIPE_FLAGS = {"autocast": None, "padded": False, "clip_grad_norm": 0.0}
