"""Hugging Face causal LMs at the built-in models' sizes, for benchmarks and ``explain train``.

    HFCausalLM("hf-gpt2-42m")     transformers.GPT2LMHeadModel, gpt42m's sizes, GPT-2's own
                                  activation (``gelu_new``: tanh GELU written op by op)
    HFCausalLM("hf-gpt2-144m")    the same at gpt144m's sizes (the 12 GiB target's Hugging Face twin)
    HFCausalLM("hf-llama-42m")    transformers.LlamaForCausalLM, llama42m's sizes

Built from a config with random weights (nothing downloaded); dropout off, ``use_cache=False``.
``model(idx)`` is the logits; ``model(idx, targets)`` the loss the way Hugging Face scripts ask for
it, ``labels=idx`` (the model shifts the labels and pads the last position with -100 itself).
``targets`` is only checked to be the next tokens' shape: the benchmark's streams give every
framework the same ``idx``, so the loss is comparable across frameworks, but it covers ``T - 1``
positions, not the built-in models' ``T``.  Needs ``transformers`` (``pip install -e .[dev]``).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass(frozen=True)
class HFConfig:
    architecture: str        # "gpt2" or "llama"
    vocab_size: int
    n_embd: int
    n_layer: int
    n_head: int
    block_size: int
    n_kv_head: int = 0       # llama: grouped-query heads
    hidden_dim: int = 0      # llama: the SwiGLU width


CONFIGS = {
    "hf-gpt2-42m": HFConfig("gpt2", vocab_size=32768, n_embd=512, n_layer=8, n_head=8, block_size=512),
    "hf-gpt2-144m": HFConfig("gpt2", vocab_size=50304, n_embd=768, n_layer=15, n_head=12, block_size=1024),
    "hf-llama-42m": HFConfig("llama", vocab_size=32768, n_embd=512, n_layer=8, n_head=8, block_size=512,
                             n_kv_head=4, hidden_dim=1344),
}


def transformers_config(cfg: HFConfig):
    """The ``transformers`` config of ``cfg`` (ValueError naming the missing package)."""
    try:
        import transformers
    except ImportError:
        raise ValueError("the Hugging Face models need transformers (pip install -e .[dev])") from None
    if cfg.architecture == "gpt2":
        # no special tokens (the built-in models have no tokenizer): GPT-2's default bos/eos id 50256 lies
        # outside a 32768-token vocabulary, and transformers warns about it; neither enters the loss
        return transformers.GPT2Config(vocab_size=cfg.vocab_size, n_positions=cfg.block_size, n_embd=cfg.n_embd,
                                       n_layer=cfg.n_layer, n_head=cfg.n_head, resid_pdrop=0.0, embd_pdrop=0.0,
                                       attn_pdrop=0.0, use_cache=False, bos_token_id=None, eos_token_id=None,
                                       pad_token_id=None)
    return transformers.LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.n_embd, intermediate_size=cfg.hidden_dim,
                                    num_hidden_layers=cfg.n_layer, num_attention_heads=cfg.n_head,
                                    num_key_value_heads=cfg.n_kv_head, max_position_embeddings=cfg.block_size,
                                    use_cache=False)


class HFCausalLM(nn.Module):
    """A ``transformers`` causal LM behind the built-in models' call: ``model(idx[, targets])``."""

    def __init__(self, cfg: HFConfig | str, seed: int = 0):
        super().__init__()
        cfg = CONFIGS[cfg] if isinstance(cfg, str) else cfg
        self.config = cfg
        import transformers
        hf_config = transformers_config(cfg)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            cls = transformers.GPT2LMHeadModel if cfg.architecture == "gpt2" else transformers.LlamaForCausalLM
            self.model = cls(hf_config)
        # the causal-LM loss, named: GPT2LMHeadModel's class name maps to no loss, so transformers warns
        # before falling back to this same loss (LlamaForCausalLM's name maps to it)
        self.model.loss_type = "ForCausalLM"

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, targets=None, attention_mask=None):
        """The logits, or with ``targets`` the loss.  ``attention_mask`` (``[batch, seq]``, 1 = token,
        0 = padding) is Hugging Face's: padded keys are masked in attention, and the padded positions'
        labels are ``-100`` (ignored by the loss), as a padding collator writes them."""
        if targets is None:
            return self.model(input_ids=idx, attention_mask=attention_mask, use_cache=False).logits
        if targets.shape != idx.shape:
            raise ValueError(f"targets {list(targets.shape)} must have the inputs' shape {list(idx.shape)}")
        labels = idx if attention_mask is None else idx.masked_fill(attention_mask == 0, -100)
        return self.model(input_ids=idx, attention_mask=attention_mask, labels=labels, use_cache=False).loss
