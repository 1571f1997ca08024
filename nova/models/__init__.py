"""Built-in models: the paper's GPTs and a small Llama-style model for tests.

    GPT("gpt42m") / GPT("gpt144m") / GPT("tiny")     pre-LN GPT-2 style, tied head
    Llama("tiny")                                     RMSNorm, rotary, SwiGLU, grouped-query attention
    HFCausalLM("hf-gpt2-42m"), ("hf-llama-42m")       Hugging Face's GPT-2 and Llama at the same sizes
                                                      (needs transformers)
"""
from importlib import import_module

from nova.models.recipe import AUTOCAST_DTYPES, TrainRecipe

# the model classes and configs load on first use: ``nova.models.recipe`` (the CLI's recipe flags) and
# this package stay importable without torch, so the runtime and the CLI never import it at import time
_LAZY = {"GPT": ("nova.models.gpt", "GPT"), "GPTConfig": ("nova.models.gpt", "GPTConfig"),
         "GPT_CONFIGS": ("nova.models.gpt", "CONFIGS"),
         "HFCausalLM": ("nova.models.hf", "HFCausalLM"), "HF_CONFIGS": ("nova.models.hf", "CONFIGS"),
         "Llama": ("nova.models.llama", "Llama"), "LlamaConfig": ("nova.models.llama", "LlamaConfig"),
         "LLAMA_CONFIGS": ("nova.models.llama", "CONFIGS")}


def _models() -> dict:
    """Every built-in model by the name the CLI and the benchmarks take: (class, config)."""
    from nova.models.gpt import CONFIGS as gpt_configs, GPT
    from nova.models.hf import CONFIGS as hf_configs, HFCausalLM
    from nova.models.llama import CONFIGS as llama_configs, Llama
    return {**{name: (GPT, cfg) for name, cfg in gpt_configs.items()},
            **{("llama-tiny" if name == "tiny" else name): (Llama, cfg) for name, cfg in llama_configs.items()},
            **{name: (HFCausalLM, cfg) for name, cfg in hf_configs.items()}}


def _registry() -> dict:
    """``MODELS``, built once: the same dict ``nova.models.MODELS`` gives (so a model a caller adds
    to it, or removes, is seen here too)."""
    return globals()["MODELS"] if "MODELS" in globals() else __getattr__("MODELS")


def __getattr__(name: str):
    if name == "MODELS":
        value = _models()
    elif name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(import_module(module), attribute)
    else:
        raise AttributeError(f"module 'nova.models' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = ["BENCH_BATCH", "GPT", "GPTConfig", "GPT_CONFIGS", "HFCausalLM", "HF_CONFIGS", "describe", "Llama", "LlamaConfig", "LLAMA_CONFIGS", "MODELS", "build",
           "config", "make_train_step", "TrainRecipe", "AUTOCAST_DTYPES"]

# the batch the benchmarks train each model at (bench/README.md): ``explain train``'s default --batch
BENCH_BATCH = {"tiny": 4, "gpt42m": 32, "gpt144m": 16, "llama-tiny": 4, "llama42m": 32,
               "hf-gpt2-42m": 32, "hf-gpt2-144m": 16, "hf-llama-42m": 32}


def describe(name: str) -> str:
    """One line on model ``name``: its sizes, as the CLI lists it."""
    cfg = config(name)
    heads = getattr(cfg, "n_kv_head", 0)
    width = getattr(cfg, "n_embd", None) or getattr(cfg, "dim", None)
    return (f"{name} (vocab {cfg.vocab_size}, d {width}, {cfg.n_layer} layers"
            + (f", {cfg.n_head} query / {heads} key-value heads" if heads and heads != cfg.n_head else "") + ")")


def config(name: str):
    """The config of the built-in model ``name`` (ValueError naming the known ones)."""
    try:
        return _registry()[name][1]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; built-in models: {', '.join(_registry())}") from None


def build(name: str, seed: int = 0):
    """The built-in model ``name`` with its weights drawn from ``seed`` (under ``torch.device(...)``
    to build it elsewhere than the CPU, e.g. on the meta device)."""
    models = _registry()
    cls, cfg = models[name] if name in models else (None, config(name))
    return cls(cfg, seed=seed)


def make_train_step(model, opt, recipe: TrainRecipe = TrainRecipe()):
    """The standard training step: forward with targets (the loss), backward, optimizer step, zero
    grads; ``recipe`` adds autocast, an attention mask argument and gradient clipping.  A step on the
    meta device (planned on a host for a GPU target) autocasts as on "cuda"."""
    import torch
    from nova.models.hf import HFCausalLM
    dtype = getattr(torch, AUTOCAST_DTYPES[recipe.autocast]) if recipe.autocast else None
    if recipe.padded and not isinstance(model, HFCausalLM) and not isinstance(getattr(model, "_orig_mod", None),
                                                                               HFCausalLM):
        raise ValueError(f"a padded step passes an attention mask, which only the Hugging Face models take "
                         f"(not {type(model).__name__})")

    def train_step(idx, targets, *mask):
        device_type = "cuda" if idx.device.type == "meta" else idx.device.type
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            loss = model(idx, targets, *mask)
        loss.backward()
        if recipe.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_([p for group in opt.param_groups for p in group["params"]],
                                           recipe.clip_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return train_step
