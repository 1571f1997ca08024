"""What the built-in models share: the config (given, or named in the model's ``CONFIGS``), GPT-2's
initialisation from one seed, the parameter count, the loss, and the pre-norm residual block."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LanguageModel(nn.Module):
    """A causal language model: ``model(idx)`` is the logits [B, T, vocab], ``model(idx, targets)``
    the mean cross-entropy.  A model names its ``CONFIGS``, creates its modules in ``build(cfg)``
    (initialised from ``seed`` afterwards) and computes ``logits(idx)``."""
    CONFIGS: dict = {}
    IGNORE_INDEX = -100          # a target that takes no part in the loss (F.cross_entropy's default)

    def __init__(self, cfg, seed: int = 0):
        super().__init__()
        cfg = self.CONFIGS[cfg] if isinstance(cfg, str) else cfg
        self.config = cfg
        self.build(cfg)
        init_weights(self, seed, residual_scale=1 / math.sqrt(2 * cfg.n_layer))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, targets=None):
        logits = self.logits(idx)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=self.IGNORE_INDEX)


class PreNormBlock(nn.Module):
    """A pre-norm transformer block: ``x = x + attn(attn_norm(x))``, then ``x + mlp(mlp_norm(x))``.

    Its four modules are given by keyword in that order (the attention's norm, the attention, the
    MLP's norm, the MLP); the keywords are their attribute names, so each model keeps its own
    state_dict keys (GPT-2's ``ln_1, attn, ln_2, mlp``, Llama's ``attention_norm, attention,
    ffn_norm, feed_forward``).  ``forward(x, *args)`` passes ``args`` (Llama's rotary tables) on
    to the attention."""

    def __init__(self, **modules: nn.Module):
        super().__init__()
        if len(modules) != 4:
            raise TypeError(f"PreNormBlock takes 4 modules (attention norm, attention, MLP norm, MLP), got {list(modules)}")
        self.names = tuple(modules)          # attention norm, attention, MLP norm, MLP
        for name, module in modules.items():
            self.add_module(name, module)

    def forward(self, x, *attn_args):
        attn_norm, attn, mlp_norm, mlp = (getattr(self, name) for name in self.names)
        x = x + attn(attn_norm(x), *attn_args)
        return x + mlp(mlp_norm(x))


def init_weights(model: nn.Module, seed: int, residual_scale: float = 1.0, std: float = 0.02) -> None:
    """GPT-2's init from one seed: N(0, std) weights (``c_proj``/``wo``/``w2`` scaled by
    ``residual_scale``), zero biases, unit norm weights.  Nothing to do on the meta device."""
    if any(p.device.type == "meta" for p in model.parameters()):
        return
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias":
                p.zero_()
            elif p.dim() == 1:                            # norm weights
                p.fill_(1.0)
            else:
                scale = residual_scale if name.endswith(("c_proj.weight", "wo.weight", "w2.weight")) else 1.0
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).mul_(std * scale))
