"""A pre-LN GPT (GPT-2 style): learned positions, tied LM head, GELU-tanh MLP (x4), causal SDPA.

    cfg = CONFIGS["gpt42m"]                  # or GPTConfig(...)
    model = GPT(cfg, seed=0)                 # deterministic init
    loss = model(idx, targets)               # cross-entropy when targets are given
    logits = model(idx)                      # [B, T, vocab] otherwise

Parameter counts (the tied head counted once): ``gpt42m`` 42,272,256 and ``gpt144m`` 145,735,680
(see ``GPT.num_parameters``).  Built on ``device="meta"`` it allocates nothing (for capture only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int
    n_embd: int
    n_layer: int
    n_head: int
    block_size: int          # the longest sequence (learned positions)
    bias: bool = True


CONFIGS = {
    "tiny": GPTConfig(vocab_size=96, n_embd=32, n_layer=2, n_head=4, block_size=16),
    "gpt42m": GPTConfig(vocab_size=32768, n_embd=512, n_layer=8, n_head=8, block_size=512),
    "gpt144m": GPTConfig(vocab_size=50304, n_embd=768, n_layer=15, n_head=12, block_size=1024),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig | str, seed: int = 0):
        super().__init__()
        cfg = CONFIGS[cfg] if isinstance(cfg, str) else cfg
        self.config = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer)),
            ln_f=nn.LayerNorm(cfg.n_embd, bias=cfg.bias),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight          # tied
        init_weights(self, seed, residual_scale=1 / math.sqrt(2 * cfg.n_layer))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, targets=None):
        b, t = idx.shape
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


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
