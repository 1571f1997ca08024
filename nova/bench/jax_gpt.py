"""The JAX twin of ``nova.models.gpt``: the same GPT in pure JAX, for the training benchmark.

Same math as the PyTorch model: pre-LN blocks (LayerNorm, causal attention, residual; LayerNorm,
Linear 4d, GELU-tanh, Linear d, residual), learned positions, a final LayerNorm, the LM head tied to
the token embedding, mean cross-entropy.  Attention is ``jax.nn.dot_product_attention(...,
is_causal=True)`` (softmax(QKᵀ/√h + causal mask)·V, the math of ``F.scaled_dot_product_attention``).

The parameters are initialised FROM the torch model's ``state_dict()`` (numpy arrays, names mapped
by :func:`params_from_torch`), so both frameworks start from the very same weights.  Linear weights
are stored ``(in, out)`` (torch keeps ``(out, in)``); :func:`grads_to_torch` maps a gradient tree
back to torch names and layouts for comparison.

The optimizer is ``optax.adamw`` with the harness's hyper-parameters (``nova.bench.train.ADAMW``);
:func:`make_train_step` jits one step (forward, backward, update) with the parameters and the
optimizer state donated.

Importing this module imports jax and optax; nothing else in Nova needs them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import jax
import jax.numpy as jnp
import optax


@dataclass(frozen=True)
class TwinConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    seq_len: int
    bias: bool = True                # Linear and LayerNorm biases (GPTConfig.bias)
    ln_eps: float = 1e-5             # nn.LayerNorm's default
    mlp_ratio: int = 4


# ---------------------------------------------------------------------------------------------
# torch state_dict -> parameter tree
# ---------------------------------------------------------------------------------------------
# Canonical leaves of the tree, and the torch names they come from.  ``{i}`` is the layer index.
# Linear weights are transposed to (in, out); ``qkv_w``/``qkv_b`` concatenate q, k, v when the
# torch model keeps them apart.  Adjust the names here (and only here) if nova/models/gpt.py moves.
TOP_NAMES = {
    "wte": "transformer.wte.weight",
    "wpe": "transformer.wpe.weight",
    "lnf_w": "transformer.ln_f.weight",
    "lnf_b": "transformer.ln_f.bias",
}
BLOCK_MODULES = {   # leaf prefix: (torch module of block {i}, a Linear: its weight is transposed)
    "ln1": ("ln_1", False),
    "qkv": ("attn.c_attn", True),
    "proj": ("attn.c_proj", True),
    "ln2": ("ln_2", False),
    "fc": ("mlp.c_fc", True),
    "fc2": ("mlp.c_proj", True),
}
# leaf: (torch name, transpose); each module's weight is leaf <prefix>_w and its bias <prefix>_b
BLOCK_NAMES = {f"{prefix}_{leaf}": (f"transformer.h.{{i}}.{module}.{param}", linear and param == "weight")
               for prefix, (module, linear) in BLOCK_MODULES.items()
               for leaf, param in (("w", "weight"), ("b", "bias"))}
# A state_dict entry that is the tied LM head (the same tensor as ``wte``): not a separate leaf.
TIED_HEAD = "lm_head.weight"


def config_from_torch(cfg) -> TwinConfig:
    """The twin's config from ``nova.models.gpt.GPTConfig``."""
    return TwinConfig(vocab_size=cfg.vocab_size, d_model=cfg.n_embd, n_layers=cfg.n_layer,
                      n_heads=cfg.n_head, seq_len=cfg.block_size, bias=bool(getattr(cfg, "bias", True)))


def _np(t) -> np.ndarray:
    if hasattr(t, "detach"):       # a torch tensor
        t = t.detach().cpu().numpy()
    return np.array(t, dtype=np.float32, copy=True)     # never a view of the torch tensor


def torch_name_map(tc: TwinConfig) -> dict[tuple, tuple[str, bool]]:
    """Path in the parameter tree -> (torch name, transposed).  Paths: ``("wte",)``,
    ``("blocks", i, "qkv_w")``."""
    keep = (lambda leaf: tc.bias or not leaf.endswith("_b"))
    out: dict[tuple, tuple[str, bool]] = {(k,): (v, False) for k, v in TOP_NAMES.items() if keep(k)}
    for i in range(tc.n_layers):
        for leaf, (name, tr) in BLOCK_NAMES.items():
            if keep(leaf):
                out[("blocks", i, leaf)] = (name.format(i=i), tr)
    return out


def params_from_torch(state_dict, tc: TwinConfig) -> dict:
    """The parameter tree (numpy float32) from a torch ``state_dict()``; every entry of the
    state_dict must be used exactly once (the tied head excepted), so a renamed or new torch
    parameter fails here instead of being silently left at some other value."""
    sd = {k: v for k, v in state_dict.items()}
    used = set()
    tree: dict = {"blocks": [dict() for _ in range(tc.n_layers)]}
    for path, (name, tr) in torch_name_map(tc).items():
        if name not in sd:
            raise KeyError(f"jax twin: torch parameter {name!r} not found (state_dict has "
                           f"{sorted(sd)[:8]}...); update TOP_NAMES/BLOCK_MODULES in nova/bench/jax_gpt.py")
        a = _np(sd[name])
        a = np.ascontiguousarray(a.T) if tr else a
        used.add(name)
        if path[0] == "blocks":
            tree["blocks"][path[1]][path[2]] = a
        else:
            tree[path[0]] = a
    if TIED_HEAD in sd:
        if not np.array_equal(_np(sd[TIED_HEAD]), tree["wte"]):
            raise ValueError("jax twin: lm_head.weight differs from the token embedding (the twin ties them)")
        used.add(TIED_HEAD)
    extra = [k for k in sd if k not in used]
    if extra:
        raise KeyError(f"jax twin: torch state_dict entries without a twin leaf: {extra[:8]}")
    return tree


def grads_to_torch(grads, tc: TwinConfig) -> dict[str, np.ndarray]:
    """A gradient (or parameter) tree back to torch names and layouts (numpy)."""
    out = {}
    for path, (name, tr) in torch_name_map(tc).items():
        g = grads["blocks"][path[1]][path[2]] if path[0] == "blocks" else grads[path[0]]
        g = np.asarray(g)
        out[name] = g.T if tr else g
    return out


# ---------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------
def _layer_norm(x, w, b, eps):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)    # biased, as nn.LayerNorm
    y = (x - mean) * jax.lax.rsqrt(var + eps) * w
    return y if b is None else y + b


def _linear(x, w, b):
    y = x @ w                       # w is (in, out)
    return y if b is None else y + b


def _block(p, x, tc: TwinConfig):
    B, T, C = x.shape
    H = tc.n_heads
    qkv = _linear(_layer_norm(x, p["ln1_w"], p.get("ln1_b"), tc.ln_eps), p["qkv_w"], p.get("qkv_b"))
    q, k, v = jnp.split(qkv, 3, axis=-1)
    q, k, v = (t.reshape(B, T, H, C // H) for t in (q, k, v))          # (B, T, heads, head_dim)
    y = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(B, T, C)
    x = x + _linear(y, p["proj_w"], p.get("proj_b"))
    h = _linear(_layer_norm(x, p["ln2_w"], p.get("ln2_b"), tc.ln_eps), p["fc_w"], p.get("fc_b"))
    h = jax.nn.gelu(h, approximate=True)
    return x + _linear(h, p["fc2_w"], p.get("fc2_b"))


def logits_fn(params, idx, tc: TwinConfig):
    T = idx.shape[1]
    x = params["wte"][idx] + params["wpe"][:T]
    for p in params["blocks"]:
        x = _block(p, x, tc)
    x = _layer_norm(x, params["lnf_w"], params.get("lnf_b"), tc.ln_eps)
    return x @ params["wte"].T                                          # tied head


def loss_fn(params, idx, targets, tc: TwinConfig):
    """Mean cross-entropy over all B*T positions (``F.cross_entropy``'s default)."""
    logits = logits_fn(params, idx, tc)
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


# ---------------------------------------------------------------------------------------------
# optimizer and the jitted step
# ---------------------------------------------------------------------------------------------
def make_optimizer(lr: float, betas: tuple[float, float], eps: float, weight_decay: float):
    """``optax.adamw`` = torch AdamW: decoupled decay ``p -= lr*wd*p`` on every parameter, bias-
    corrected moments, ``eps`` added to ``sqrt(v_hat)``; constant learning rate."""
    return optax.adamw(learning_rate=lr, b1=betas[0], b2=betas[1], eps=eps, eps_root=0.0,
                       weight_decay=weight_decay, mask=None)


def make_train_step(tc: TwinConfig, opt, *, donate: bool = True):
    """``step(params, opt_state, idx, targets) -> (params, opt_state, loss)``, jitted, the
    parameters and the optimizer state donated (updated in place by XLA)."""
    def step(params, opt_state, idx, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, idx, targets, tc)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss
    return jax.jit(step, donate_argnums=(0, 1) if donate else ())
