"""A pre-LN GPT (GPT-2 style): learned positions, tied LM head, GELU-tanh MLP (x4), causal SDPA.

    cfg = CONFIGS["gpt42m"]                  # or GPTConfig(...)
    model = GPT(cfg, seed=0)                 # deterministic init
    loss = model(idx, targets)               # cross-entropy when targets are given
    logits = model(idx)                      # [B, T, vocab] otherwise

Parameter counts (the tied head counted once): ``gpt42m`` 42,259,456 and ``gpt144m`` 145,739,520
(``GPT.num_parameters``; tested).  Built on ``device="meta"`` it allocates nothing (for capture only).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from nova.models.common import LanguageModel, PreNormBlock


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


def block(cfg: GPTConfig) -> PreNormBlock:
    # LayerNorm, attention, LayerNorm, MLP under GPT-2's names (the state_dict keys)
    return PreNormBlock(ln_1=nn.LayerNorm(cfg.n_embd, bias=cfg.bias), attn=CausalSelfAttention(cfg),
                        ln_2=nn.LayerNorm(cfg.n_embd, bias=cfg.bias), mlp=MLP(cfg))


class GPT(LanguageModel):
    CONFIGS = CONFIGS
    IGNORE_INDEX = -1

    def build(self, cfg: GPTConfig):
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList(block(cfg) for _ in range(cfg.n_layer)),
            ln_f=nn.LayerNorm(cfg.n_embd, bias=cfg.bias),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight          # tied

    def logits(self, idx):
        b, t = idx.shape
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))
