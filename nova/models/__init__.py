"""Built-in models: the paper's GPTs and a small Llama-style model for tests.

    GPT("gpt42m") / GPT("gpt144m") / GPT("tiny")     pre-LN GPT-2 style, tied head
    Llama("tiny")                                     RMSNorm, rotary, SwiGLU, grouped-query attention
"""
from nova.models.gpt import CONFIGS as GPT_CONFIGS
from nova.models.gpt import GPT, GPTConfig
from nova.models.llama import CONFIGS as LLAMA_CONFIGS
from nova.models.llama import Llama, LlamaConfig

__all__ = ["GPT", "GPTConfig", "GPT_CONFIGS", "Llama", "LlamaConfig", "LLAMA_CONFIGS", "make_train_step"]


def make_train_step(model, opt):
    """The standard training step: forward with targets (the loss), backward, optimizer step, zero grads."""
    def train_step(idx, targets):
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return train_step
