"""A small Llama-style model: RMSNorm (``nn.RMSNorm``), rotary position embeddings (cos/sin
tables as non-persistent buffers, rotate-half form), SwiGLU MLP, causal SDPA with grouped-query
attention (K/V heads repeated), untied LM head.

    model = Llama(CONFIGS["tiny"], seed=0)
    loss = model(idx, targets)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from nova.models.common import LanguageModel, PreNormBlock


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    dim: int
    n_layer: int
    n_head: int
    n_kv_head: int
    hidden_dim: int          # SwiGLU inner width
    max_seq_len: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def block_size(self) -> int:
        """The longest sequence (the rotary tables' length), under the name the GPT configs use."""
        return self.max_seq_len


CONFIGS = {
    "tiny": LlamaConfig(vocab_size=80, dim=32, n_layer=2, n_head=4, n_kv_head=2, hidden_dim=64, max_seq_len=16),
    # GPT-42M's budget in the Llama recipe: vocab 32768, d 512, 8 layers, 8 query / 4 key-value heads,
    # SwiGLU at 8/3 d rounded to a multiple of 64 (1344), sequences of 512; 56.4M parameters (the head untied)
    "llama42m": LlamaConfig(vocab_size=32768, dim=512, n_layer=8, n_head=8, n_kv_head=4, hidden_dim=1344,
                            max_seq_len=512),
}


def rotary_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, [max_seq_len, head_dim], each frequency repeated for both halves."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), freqs)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x, cos, sin):
    """x [B, H, T, D]; cos/sin [T, D]."""
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.head_dim = cfg.dim // cfg.n_head
        self.wq = nn.Linear(cfg.dim, cfg.n_head * self.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_head * self.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_head * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_head * self.head_dim, cfg.dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        groups = self.n_head // self.n_kv_head
        if groups > 1:                                   # repeat K/V heads (grouped-query attention)
            k = k[:, :, None].expand(b, self.n_kv_head, groups, t, self.head_dim).reshape(b, self.n_head, t, -1)
            v = v[:, :, None].expand(b, self.n_kv_head, groups, t, self.head_dim).reshape(b, self.n_head, t, -1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def block(cfg: LlamaConfig) -> PreNormBlock:
    # RMSNorm, attention, RMSNorm, SwiGLU feed-forward under Llama's names (the state_dict keys)
    return PreNormBlock(attention_norm=nn.RMSNorm(cfg.dim, eps=cfg.norm_eps), attention=Attention(cfg),
                        ffn_norm=nn.RMSNorm(cfg.dim, eps=cfg.norm_eps), feed_forward=FeedForward(cfg))


class Llama(LanguageModel):
    CONFIGS = CONFIGS

    def build(self, cfg: LlamaConfig):
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(block(cfg) for _ in range(cfg.n_layer))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rotary_tables(cfg.dim // cfg.n_head, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def logits(self, idx):
        t = idx.shape[1]
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.output(self.norm(x))
