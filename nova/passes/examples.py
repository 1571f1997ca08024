"""Hand-built IR graphs shaped like what the frontend captures, for tests and demonstrations.

``transformer_step`` is the training step of a small GPT (token and position embeddings, ``layers``
pre-norm blocks of attention and MLP, final layer norm, a weight-tied LM head, cross-entropy loss),
its backward and an AdamW update of every parameter, written the way ATen/autograd decompose it:
linear layers as ``matmul(x, permute(w))`` + bias add, weight gradients as
``permute(matmul(permute(x), dy))``, head splits as slice/reshape/permute, duplicated ``view``s of
the targets.  So the passes meet the transposes, identity views and duplicates they will meet in
captured graphs.
"""
from __future__ import annotations

import math

from nova.ir.graph import Graph, Value
from nova.ir.types import TORCH_NAMES, TensorType


class _Step:
    """Helpers that emit torch-style decompositions into one graph."""

    def __init__(self, graph: Graph, dtype: str):
        self.g = graph
        self.dtype = dtype

    def op(self, name, *xs, **attrs):
        return self.g.op(name, *xs, **attrs)

    def t(self, x: Value) -> Value:                   # aten.t
        return self.op("permute", x, perm=(1, 0))

    def linear(self, h: Value, w: Value, b: Value | None) -> Value:     # aten.addmm(b, h, t(w))
        y = self.op("matmul", h, self.t(w))
        return self.op("add", y, b) if b is not None else y

    def linear_backward(self, dy: Value, h: Value, w: Value, has_bias: bool):
        """(dh, dw, db) as autograd emits them for ``addmm(b, h, t(w))``."""
        wt = self.t(w)
        dh = self.op("matmul", dy, self.t(wt))
        dw = self.t(self.op("matmul", self.t(h), dy))
        db = self.op("sum", dy, axes=(0,)) if has_bias else None
        return dh, dw, db


def transformer_step(batch: int = 2, seq: int = 8, dim: int = 16, heads: int = 2, vocab: int = 32,
                     dtype: str = "f32", grads_as_outputs: bool = True, layers: int = 1,
                     name: str = "gpt_block_step") -> Graph:
    """One training step of a GPT with ``layers`` blocks and AdamW (see the module docstring)."""
    g = Graph(name)
    s = _Step(g, dtype)
    B, T, C, H, V = batch, seq, dim, heads, vocab
    D = C // H
    BT = B * T
    scale = 1.0 / math.sqrt(D)
    f = lambda *shape: TensorType(shape, dtype)                      # noqa: E731

    idx = g.input(TensorType((B, T), "i64"), "idx", "data")
    targets = g.input(TensorType((B, T), "i64"), "targets", "data")
    block_shapes = {
        "ln1.weight": (C,), "ln1.bias": (C,),
        "attn.c_attn.weight": (3 * C, C), "attn.c_attn.bias": (3 * C,),
        "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,),
        "ln2.weight": (C,), "ln2.bias": (C,),
        "mlp.c_fc.weight": (4 * C, C), "mlp.c_fc.bias": (4 * C,),
        "mlp.c_proj.weight": (C, 4 * C), "mlp.c_proj.bias": (C,),
    }
    shapes = {"wte": (V, C), "wpe": (T, C)}
    for i in range(layers):
        prefix = f"h.{i}." if layers > 1 else ""
        shapes.update({prefix + n: shape for n, shape in block_shapes.items()})
    shapes.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    p = {n: g.input(f(*shape), n, "param") for n, shape in shapes.items()}
    first_param = 2
    moments = {}
    for n, shape in shapes.items():
        moments[n] = (g.input(f(*shape), f"{n}.exp_avg", "opt_state"),
                      g.input(f(*shape), f"{n}.exp_avg_sq", "opt_state"))
    hyper = {decay: g.input(TensorType((5,), "f64"), f"hyper.weight_decay_{decay}", "opt_state")
             for decay in (0.1, 0.0)}       # AdamW's [lr, beta1, beta2, eps, weight_decay] per parameter group
    step = g.input(TensorType((), "f32"), "step", "opt_state")

    def block_forward(x0, w):
        ln1, mean1, rstd1 = s.op("layer_norm", x0, w["ln1.weight"], w["ln1.bias"], normalized_shape=(C,), eps=1e-5)
        h1 = s.op("reshape", ln1, shape=(BT, C))
        qkv = s.linear(h1, w["attn.c_attn.weight"], w["attn.c_attn.bias"])     # [BT,3C]
        qkv3 = s.op("reshape", qkv, shape=(B, T, 3 * C))

        def heads_of(i):
            part = s.op("slice", qkv3, axis=2, start=i * C, end=(i + 1) * C)
            return s.op("permute", s.op("reshape", part, shape=(B, T, H, D)), perm=(0, 2, 1, 3))
        q, k, v = heads_of(0), heads_of(1), heads_of(2)
        att, lse = s.op("attention", q, k, v, scale=scale, causal=True)
        y = s.op("reshape", s.op("permute", att, perm=(0, 2, 1, 3)), shape=(BT, C))   # a copy: not a view
        proj = s.linear(y, w["attn.c_proj.weight"], w["attn.c_proj.bias"])
        x1 = s.op("add", x0, s.op("reshape", proj, shape=(B, T, C)))
        ln2, mean2, rstd2 = s.op("layer_norm", x1, w["ln2.weight"], w["ln2.bias"], normalized_shape=(C,), eps=1e-5)
        h2 = s.op("reshape", ln2, shape=(BT, C))
        pre = s.linear(h2, w["mlp.c_fc.weight"], w["mlp.c_fc.bias"])          # [BT,4C]
        act = s.op("gelu_tanh", pre)
        mlp = s.linear(act, w["mlp.c_proj.weight"], w["mlp.c_proj.bias"])
        x2 = s.op("add", x1, s.op("reshape", mlp, shape=(B, T, C)))
        return x2, dict(x0=x0, mean1=mean1, rstd1=rstd1, h1=h1, q=q, k=k, v=v, att=att, lse=lse, y=y, x1=x1,
                        mean2=mean2, rstd2=rstd2, h2=h2, pre=pre, act=act)

    def block_backward(dx2, w, t):
        """dx0 and the block's parameter gradients (by short name)."""
        dmlp = s.op("reshape", dx2, shape=(BT, C))
        dact, dfc2_w, dfc2_b = s.linear_backward(dmlp, t["act"], w["mlp.c_proj.weight"], True)
        dpre = s.op("gelu_tanh_backward", dact, t["pre"])
        dh2, dfc_w, dfc_b = s.linear_backward(dpre, t["h2"], w["mlp.c_fc.weight"], True)
        dx1_ln, dln2_w, dln2_b = s.op("layer_norm_backward", s.op("reshape", dh2, shape=(B, T, C)), t["x1"],
                                      t["mean2"], t["rstd2"], w["ln2.weight"], w["ln2.bias"], normalized_shape=(C,))
        dx1 = s.op("add", dx2, dx1_ln)
        dproj = s.op("reshape", dx1, shape=(BT, C))
        dy, dproj_w, dproj_b = s.linear_backward(dproj, t["y"], w["attn.c_proj.weight"], True)
        datt = s.op("permute", s.op("reshape", dy, shape=(B, T, H, D)), perm=(0, 2, 1, 3))
        dq, dk, dv = s.op("attention_backward", datt, t["q"], t["k"], t["v"], t["att"], t["lse"],
                          scale=scale, causal=True)
        merge = lambda d: s.op("reshape", s.op("permute", d, perm=(0, 2, 1, 3)), shape=(B, T, C))   # noqa: E731
        dqkv = s.op("reshape", s.op("concat", merge(dq), merge(dk), merge(dv), axis=2), shape=(BT, 3 * C))
        dh1, dattn_w, dattn_b = s.linear_backward(dqkv, t["h1"], w["attn.c_attn.weight"], True)
        dx0_ln, dln1_w, dln1_b = s.op("layer_norm_backward", s.op("reshape", dh1, shape=(B, T, C)), t["x0"],
                                      t["mean1"], t["rstd1"], w["ln1.weight"], w["ln1.bias"], normalized_shape=(C,))
        dx0 = s.op("add", dx1, dx0_ln)
        return dx0, {"ln1.weight": dln1_w, "ln1.bias": dln1_b, "attn.c_attn.weight": dattn_w,
                     "attn.c_attn.bias": dattn_b, "attn.c_proj.weight": dproj_w, "attn.c_proj.bias": dproj_b,
                     "ln2.weight": dln2_w, "ln2.bias": dln2_b, "mlp.c_fc.weight": dfc_w, "mlp.c_fc.bias": dfc_b,
                     "mlp.c_proj.weight": dfc2_w, "mlp.c_proj.bias": dfc2_b}

    # ---------------------------------------------------------------- forward
    pos_ids = s.op("iota", length=T, dtype="i64")
    tok = s.op("index_select", p["wte"], idx, axis=0)                     # [B,T,C]
    pos = s.op("index_select", p["wpe"], pos_ids, axis=0)                 # [T,C]
    x = s.op("add", tok, pos)
    blocks = []
    for i in range(layers):
        prefix = f"h.{i}." if layers > 1 else ""
        w = {n: p[prefix + n] for n in block_shapes}
        x, saved = block_forward(x, w)
        blocks.append((prefix, w, saved))
    lnf, meanf, rstdf = s.op("layer_norm", x, p["ln_f.weight"], p["ln_f.bias"], normalized_shape=(C,), eps=1e-5)
    hf = s.op("reshape", lnf, shape=(BT, C))
    logits = s.linear(hf, p["wte"], None)                                 # weight-tied head [BT,V]
    logp = s.op("log_softmax", logits, axis=1)
    loss, total_weight = s.op("nll_loss", logp, s.op("reshape", targets, shape=(BT,)))

    # ---------------------------------------------------------------- backward
    dloss = s.op("constant", value=1.0, dtype=dtype)
    dlogp = s.op("nll_loss_backward", dloss, logp, s.op("reshape", targets, shape=(BT,)), total_weight)
    dlogits = s.op("log_softmax_backward", dlogp, logp, axis=1)
    dhf, dwte_head, _ = s.linear_backward(dlogits, hf, p["wte"], has_bias=False)
    dx, dlnf_w, dlnf_b = s.op("layer_norm_backward", s.op("reshape", dhf, shape=(B, T, C)), x, meanf, rstdf,
                              p["ln_f.weight"], p["ln_f.bias"], normalized_shape=(C,))
    grads = {"ln_f.weight": dlnf_w, "ln_f.bias": dlnf_b}
    for prefix, w, saved in reversed(blocks):
        dx, block_grads = block_backward(dx, w, saved)
        grads.update({prefix + n: d for n, d in block_grads.items()})
    grads["wte"] = s.op("add", dwte_head, s.op("scatter_add", dx, idx, axis=0, shape=(V, C)))
    grads["wpe"] = s.op("scatter_add", s.op("sum", dx, axes=(0,)), pos_ids, axis=0, shape=(T, C))

    # ---------------------------------------------------------------- AdamW
    g.output(loss, "loss")
    new_step = s.op("add", step, s.op("constant", value=1.0, dtype="f32"))
    names = list(shapes)
    for i, n in enumerate(names):
        decay = 0.1 if len(shapes[n]) == 2 else 0.0
        m, v2 = moments[n]
        new_p, new_m, new_v = s.op("adamw", p[n], grads[n], m, v2, new_step, hyper[decay], decoupled=True)
        g.output(new_p, n, "param", updates=first_param + i)
        g.output(new_m, f"{n}.exp_avg", "opt_state", updates=first_param + len(names) + 2 * i)
        g.output(new_v, f"{n}.exp_avg_sq", "opt_state", updates=first_param + len(names) + 2 * i + 1)
    g.output(new_step, "step", "opt_state", updates=len(g.inputs) - 1)
    if grads_as_outputs:
        for n in names:
            g.output(grads[n], f"{n}.grad", "grad")
    return g


def linear_bias_gelu(m: int = 64, k: int = 32, n: int = 48, dtype: str = "f32") -> Graph:
    """Inference ``gelu_tanh(x @ w.T + b)``: the GEMM + bias + activation epilogue case."""
    g = Graph("linear_bias_gelu")
    s = _Step(g, dtype)
    x = g.input(TensorType((m, k), dtype), "x", "data")
    w = g.input(TensorType((n, k), dtype), "w", "param")
    b = g.input(TensorType((n,), "f32" if dtype == "f32" else dtype), "b", "param")
    g.output(s.op("gelu_tanh", s.linear(x, w, b)), "y")
    return g


def random_inputs(graph: Graph, seed: int = 0, int_high: int = 2) -> list:
    """Random CPU tensors for ``graph``'s inputs: floats ~ N(0, 0.5²) (second moments and scalar
    step counts positive), integers uniform in [0, int_high)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    tensors = []
    for spec in graph.inputs:
        t = spec.value.type
        torch_dtype = getattr(torch, TORCH_NAMES[t.dtype])
        if t.is_float:
            x = torch.randn(t.shape, generator=gen, dtype=torch.float64) * 0.5
            if spec.name.endswith("exp_avg_sq"):
                x = x.abs()
            if spec.role == "opt_state" and t.rank == 0:
                x = torch.tensor(3.0, dtype=torch.float64)
            if spec.name.startswith("hyper."):             # AdamW's lr, betas, eps, weight decay
                x = torch.tensor([1e-3, 0.9, 0.95, 1e-8, float(spec.name.rsplit("_", 1)[1])], dtype=torch.float64)
            tensors.append(x.to(torch_dtype))
        elif t.dtype == "bool":
            tensors.append(torch.randint(0, 2, t.shape, generator=gen).bool())
        else:
            tensors.append(torch.randint(0, int_high, t.shape, generator=gen, dtype=torch_dtype))
    return tensors
