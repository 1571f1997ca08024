"""Shared by tests/test_executor.py (CPU) and tests/test_executor_gpu.py: plans made of the real
planner's types (``nova.passes``: ``Planned``, ``Group``, ``MemoryPlan``, ``ValuePlan``) and
hand-built IR graphs (a training step of an MLP with layer norm and AdamW, an attention block with
its backward, embedding / memory / reduction ops with SGD, grouped-query and cross attention,
pointwise ops).

Plans:

* ``planned(graph)``: the real pipeline, ``nova.passes.pipeline`` (optimized graph, fusion groups,
  memory-greedy order, an arena whose bytes are reused over time, in-place updates, donation).
* ``slot_per_value(planned, donate=True)``: the same graph and groups, memory planned by hand: every
  value the real plan keeps in the arena (and, with ``donate=False``, every donated output) gets
  bytes of its own for the whole step: nothing shares arena bytes, nothing is written in place.
* ``node_groups(graph)``: the graph as captured (not optimized), one group per node in program
  order (real ``Group`` objects built here; a matmul's group classified as the fusion pass does), its
  memory planned by the real ``nova.passes.plan_memory`` (reuse, in place, donation).

Plans the tests break on purpose (overlapping live values, unsafe donations, aliases of non-views)
are made by editing these with ``dataclasses.replace``.  Every plan made here passes the planner's
own ``validate_memory_plan``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from nova.ir import Graph, TensorType
from nova.ir.ops import kind
from nova.passes import Group, Planned, ValuePlan, pipeline, plan_memory, validate_memory_plan
from nova.passes import layout as layout_analysis
from nova.passes.fusion import Epilogue, boundary, classify_gemm
from nova.passes.memory import aligned

CREATION = ("constant", "iota")


# =============================================================== plans
def planned(graph: Graph, target=None, kernels=None) -> Planned:
    """The real pipeline's plan of ``graph`` (its ``graph`` is the optimized copy: look nodes up there),
    as ``nova.compile`` makes it: with the compiler's account of what the CUDA program allocates besides
    its values (the launches' workspaces placed in the arena, ``nova.compiler.outside_arena``), for
    ``target`` (default: ``NOVA_TARGET`` when set, the target the CUDA program then runs its kernels
    for, else h200).  ``kernels``: a ``nova.kernels.switch.KernelSwitch`` (default: the options')."""
    from nova import options
    from nova.compiler.outside_arena import account
    if target is None and options.current().target:
        from nova.hwmodel import get_target
        target = get_target(options.current().target)
    return pipeline(graph, target, kernels, outside_arena=account)


def slot_per_value(plan: Planned, *, donate: bool = True) -> Planned:
    """``plan`` with every stored value on arena bytes of its own (see the module docstring);
    aliases, graph inputs and fused values stay as they are; without ``donate`` the updating outputs
    are arena values like any other and the inputs keep their old values."""
    mem = plan.memory
    end = len(plan.order)
    values: dict = {}
    top = 0
    for v, p in mem.values.items():
        if p.kind == "arena" or (p.donated and not donate):
            values[v] = ValuePlan("arena", p.nbytes, p.category, offset=top, live=(0, end),
                                  view=p.view if p.kind == "arena" else None)
            top += aligned(p.nbytes, mem.alignment)
        else:
            values[v] = p
    for v, p in values.items():           # aliases describe their root's (possibly new) storage
        if p.kind == "alias":
            root = values[p.alias_of]
            values[v] = dataclasses.replace(p, offset=root.offset, input_index=root.input_index)
    workspaces = []                       # each launch workspace on bytes of its own too
    for w in mem.workspaces:
        workspaces.append(dataclasses.replace(w, offset=top))
        top += aligned(w.nbytes, mem.alignment)
    external = mem.external_bytes + mem.outside_bytes
    memory = dataclasses.replace(
        mem, values=values, arena_bytes=top, peak_bytes=top + external, live_peak_bytes=top + external,
        breakdown={**mem.breakdown, "arena_slack": 0}, donations=list(mem.donations) if donate else [],
        workspaces=workspaces)
    out = dataclasses.replace(plan, memory=memory)
    validate_memory_plan(out.graph, out.groups, out.memory)
    return out


GROUP_KINDS = {"matmul": "gemm", "pointwise": "pointwise", "creation": "pointwise", "reduce": "reduction",
               "view": "view", "composite": "composite", "memory": "composite", "opaque": "opaque"}


def node_groups(graph: Graph, *, gemm_kernel: str = "nova") -> Planned:
    """One real ``Group`` per node of ``graph`` (not optimized), in program order, planned by the real
    ``plan_memory``.  Views that are strided views of their input launch nothing (``kernel="none"``),
    other views are one copy; a matmul's group runs on a Nova GEMM when the fusion pass's
    ``classify_gemm`` gives it a problem and ``gemm_kernel`` is "nova", else on torch.matmul."""
    layouts = layout_analysis.analyze(graph)
    users, outputs = graph.users(), set(graph.output_values())
    groups = []
    for node in graph.nodes:
        k = GROUP_KINDS[kind(node.op)]
        kernel = "aten"
        if k == "view":
            kernel = "aten" if layout_analysis.is_copy(node, layouts) else "none"
        problem = epilogue = None
        if k == "gemm":
            problem, _ = classify_gemm(node, layouts) if gemm_kernel == "nova" else (None, "")
            kernel, epilogue = ("nova", Epilogue()) if problem is not None else ("aten", None)
        ins, outs = boundary([node], users, outputs)
        groups.append(Group(k, [node], f"{node.op}: one node per group (test plan)", kernel, ins, outs,
                            epilogue, problem))
    memory = plan_memory(graph, groups, layouts)
    validate_memory_plan(graph, groups, memory)
    return Planned(graph, groups, [n for g in groups for n in g.nodes], memory)


def arena_values(plan: Planned) -> list:
    """(value, ValuePlan) of every value the plan stores in the arena."""
    return [(v, p) for v, p in plan.memory.values.items() if p.kind == "arena"]


def fused_values(plan: Planned) -> list:
    """Values the plan never writes of a Nova GEMM's epilogue.  The CPU program
    computes those groups unfused (torch.matmul, then the bias add and activation as ATen kernels),
    so it needs them: they are what a CPU program's scratch holds."""
    gemm = {n for g in plan.groups if g.kind == "gemm" for n in g.nodes}
    return [v for v, p in plan.memory.values.items() if p.kind == "fused" and v.producer in gemm]


def rows_scratch_bytes(plan: Planned) -> int:
    """Scratch a CPU program needs for the values a Nova rows kernel keeps inside (the cross-entropy
    forward-backward kernel's row statistics): on CPU the group runs node by node, so they are written
    there; on CUDA never.  A value whose one reader in the group is elementwise (a norm backward's dx
    before the residual add) is computed in the bytes of that reader's result, no scratch
    (``PlanView.fused_into``).  Each value's bytes rounded up to the arena's 256-byte alignment."""
    from nova.compiler.plan_view import read_plan
    from nova.passes.memory import aligned
    rows = {n for g in plan.groups if g.kernel == "nova" and g.kind == "composite" for n in g.nodes}
    in_result = read_plan(plan).fused_into
    return sum(aligned(v.type.nbytes) for v, p in plan.memory.values.items()
               if p.kind == "fused" and v.producer in rows and v not in in_result)


def kernel_values(plan: Planned) -> list:
    """Intermediates of Nova pointwise kernels: in registers on CUDA, temporaries of the IR reference on CPU."""
    kernels = {n for g in plan.groups if g.kind == "pointwise" and g.kernel == "nova" for n in g.nodes}
    return [v for v, p in plan.memory.values.items() if p.kind == "fused" and v.producer in kernels]


def scratch_bytes(values) -> int:
    """What the executor sets aside for ``values`` (each rounded up to 256 bytes)."""
    return sum(aligned(v.type.nbytes) for v in values)


# =============================================================== graphs
@dataclass
class Case:
    """A graph and a function that makes fresh inputs for it: ``inputs(seed, device)``."""
    graph: Graph
    make: object

    def inputs(self, seed: int = 0, device="cpu") -> list:
        return self.make(torch.Generator().manual_seed(seed), device)


def _randn(gen, shape, device, scale=1.0, dtype=torch.float32):
    return (torch.randn(shape, generator=gen) * scale).to(dtype=dtype, device=device)


def _state_inputs(gen, device, types):
    return [_randn(gen, t.shape, device, 0.1) if role != "v" else
            (torch.rand(t.shape, generator=gen) * 0.01).to(device) for role, t in types]


def mlp_training_step(B=2, T=4, C=8, H=16, V=12, wd=0.1) -> Case:
    """layer_norm -> linear + bias -> gelu -> linear + bias -> log_softmax -> nll, its backward, and
    one AdamW step on every parameter (moments and the step count updated)."""
    g = Graph("mlp_step")
    f32 = "f32"
    x = g.input(TensorType((B, T, C), f32), "x", "data")
    target = g.input(TensorType((B * T,), "i64"), "target", "data")
    params = {
        "ln.weight": g.input(TensorType((C,), f32), "ln.weight", "param"),
        "ln.bias": g.input(TensorType((C,), f32), "ln.bias", "param"),
        "fc1.weight": g.input(TensorType((H, C), f32), "fc1.weight", "param"),
        "fc1.bias": g.input(TensorType((H,), f32), "fc1.bias", "param"),
        "fc2.weight": g.input(TensorType((V, H), f32), "fc2.weight", "param"),
        "fc2.bias": g.input(TensorType((V,), f32), "fc2.bias", "param"),
    }
    moments = {name: (g.input(p.type, f"{name}.exp_avg", "opt_state"), g.input(p.type, f"{name}.exp_avg_sq", "opt_state"))
               for name, p in params.items()}
    hyper = g.input(TensorType((5,), "f64"), "hyper", "opt_state")      # lr, beta1, beta2, eps, weight decay
    step = g.input(TensorType((), f32), "step", "opt_state")
    # forward
    xn, mean, rstd = g.op("layer_norm", x, params["ln.weight"], params["ln.bias"], normalized_shape=(C,), eps=1e-5)
    h_pre = g.op("matmul", xn, params["fc1.weight"], transpose_b=True)
    h_b = g.op("add", h_pre, params["fc1.bias"])
    h = g.op("gelu_tanh", h_b)
    z = g.op("matmul", h, params["fc2.weight"], transpose_b=True)
    z_b = g.op("add", z, params["fc2.bias"])
    logits = g.op("reshape", z_b, shape=(B * T, V))
    logp = g.op("log_softmax", logits, axis=-1)
    loss, total_weight = g.op("nll_loss", logp, target)
    # backward
    one = g.op("constant", value=1.0, dtype=f32)
    dlogp = g.op("nll_loss_backward", one, logp, target, total_weight)
    dlogits = g.op("log_softmax_backward", dlogp, logp, axis=-1)
    grads = {"fc2.bias": g.op("sum", dlogits, axes=(0,))}
    h2 = g.op("reshape", h, shape=(B * T, H))
    grads["fc2.weight"] = g.op("matmul", dlogits, h2, transpose_a=True)
    dh2 = g.op("matmul", dlogits, params["fc2.weight"])
    dh = g.op("reshape", dh2, shape=(B, T, H))
    dh_b = g.op("gelu_tanh_backward", dh, h_b)
    grads["fc1.bias"] = g.op("sum", dh_b, axes=(0, 1))
    dh_b2 = g.op("reshape", dh_b, shape=(B * T, H))
    xn2 = g.op("reshape", xn, shape=(B * T, C))
    grads["fc1.weight"] = g.op("matmul", dh_b2, xn2, transpose_a=True)
    dxn = g.op("matmul", dh_b, params["fc1.weight"])
    dx, grads["ln.weight"], grads["ln.bias"] = g.op("layer_norm_backward", dxn, x, mean, rstd, params["ln.weight"],
                                                    params["ln.bias"], normalized_shape=(C,))
    # optimizer
    step1 = g.op("add", step, one)
    index = {spec.value: i for i, spec in enumerate(g.inputs)}
    g.output(loss, "loss")
    g.output(dx, "x.grad", "grad")
    for name, p in params.items():
        m, v = moments[name]
        p1, m1, v1 = g.op("adamw", p, grads[name], m, v, step1, hyper, decoupled=True)
        g.output(p1, name, "param", updates=index[p])
        g.output(m1, f"{name}.exp_avg", "opt_state", updates=index[m])
        g.output(v1, f"{name}.exp_avg_sq", "opt_state", updates=index[v])
    g.output(step1, "step", "opt_state", updates=index[step])

    def make(gen, device):
        out = [_randn(gen, (B, T, C), device), torch.randint(0, V, (B * T,), generator=gen).to(device)]
        out += [_randn(gen, p.type.shape, device, 0.5) + (1.0 if name == "ln.weight" else 0.0)
                for name, p in params.items()]
        for name, p in params.items():
            out += [_randn(gen, p.type.shape, device, 0.01), (torch.rand(p.type.shape, generator=gen) * 1e-3).to(device)]
        out.append(torch.tensor([1e-2, 0.9, 0.999, 1e-8, wd], dtype=torch.float64, device=device))
        out.append(torch.tensor(3.0, device=device))
        return out
    return Case(g, make)


def attention_block(B=2, T=8, heads=2, D=4, causal=True) -> Case:
    """qkv projection -> split heads (views) -> attention -> merge heads -> output projection, and the
    backward of it all from an upstream gradient ``dy``."""
    C = heads * D
    g = Graph("attention_block")
    x = g.input(TensorType((B, T, C), "f32"), "x", "data")
    w_qkv = g.input(TensorType((3 * C, C), "f32"), "qkv.weight", "param")
    w_o = g.input(TensorType((C, C), "f32"), "proj.weight", "param")
    dy = g.input(TensorType((B, T, C), "f32"), "dy", "data")
    scale = 1.0 / math.sqrt(D)
    qkv = g.op("matmul", x, w_qkv, transpose_b=True)                                  # [B, T, 3C]

    def head(j):
        part = g.op("slice", qkv, axis=2, start=j * C, end=(j + 1) * C)               # strided view
        split = g.op("reshape", part, shape=(B, T, heads, D))                         # materialised (stand-in)
        return g.op("permute", split, perm=(0, 2, 1, 3))                              # [B, H, T, D] view
    q, k, v = head(0), head(1), head(2)
    o, lse = g.op("attention", q, k, v, scale=scale, causal=causal)
    merged = g.op("reshape", g.op("permute", o, perm=(0, 2, 1, 3)), shape=(B, T, C))   # a copy
    y = g.op("matmul", merged, w_o, transpose_b=True)
    dy2 = g.op("reshape", dy, shape=(B * T, C))
    d_wo = g.op("matmul", dy2, g.op("reshape", merged, shape=(B * T, C)), transpose_a=True)
    d_merged = g.op("matmul", dy, w_o)
    d_o = g.op("permute", g.op("reshape", d_merged, shape=(B, T, heads, D)), perm=(0, 2, 1, 3))
    dq, dk, dv = g.op("attention_backward", d_o, q, k, v, o, lse, scale=scale, causal=causal)
    parts = [g.op("reshape", g.op("permute", t, perm=(0, 2, 1, 3)), shape=(B, T, C)) for t in (dq, dk, dv)]
    d_qkv = g.op("concat", *parts, axis=2)                                             # [B, T, 3C]
    d_wqkv = g.op("matmul", g.op("reshape", d_qkv, shape=(B * T, 3 * C)), g.op("reshape", x, shape=(B * T, C)),
                  transpose_a=True)
    dx = g.op("matmul", d_qkv, w_qkv)
    g.output(y, "y")
    g.output(lse, "lse")
    g.output(dx, "x.grad", "grad")
    g.output(d_wqkv, "qkv.weight.grad", "grad")
    g.output(d_wo, "proj.weight.grad", "grad")

    def make(gen, device):
        return [_randn(gen, (B, T, C), device), _randn(gen, (3 * C, C), device, 0.3), _randn(gen, (C, C), device, 0.3),
                _randn(gen, (B, T, C), device)]
    return Case(g, make)


def grouped_attention(B=2, Hq=4, Hk=2, Tq=6, Tk=6, D=8, causal=True) -> Case:
    """Attention and its backward on grouped-query heads (Hq = 2 Hk) and, with Tq != Tk, cross
    attention with the IR's bottom-right causal mask; plus a truly batched matmul (scores)."""
    g = Graph("grouped_attention")
    q = g.input(TensorType((B, Hq, Tq, D), "f32"), "q", "data")
    k = g.input(TensorType((B, Hk, Tk, D), "f32"), "k", "data")
    v = g.input(TensorType((B, Hk, Tk, D), "f32"), "v", "data")
    do = g.input(TensorType((B, Hq, Tq, D), "f32"), "dout", "data")
    scale = 1.0 / math.sqrt(D)
    o, lse = g.op("attention", q, k, v, scale=scale, causal=causal)
    dq, dk, dv = g.op("attention_backward", do, q, k, v, o, lse, scale=scale, causal=causal)
    k_first = g.op("slice", k, axis=1, start=0, end=1)                                 # [B, 1, Tk, D]
    scores = g.op("matmul", q, k_first, transpose_b=True)                              # batched, broadcast
    for value, name in ((o, "out"), (lse, "lse"), (dq, "dq"), (dk, "dk"), (dv, "dv"), (scores, "scores")):
        g.output(value, name)

    def make(gen, device):
        return [_randn(gen, (B, Hq, Tq, D), device), _randn(gen, (B, Hk, Tk, D), device),
                _randn(gen, (B, Hk, Tk, D), device), _randn(gen, (B, Hq, Tq, D), device)]
    return Case(g, make)


def memory_ops_step(B=2, T=6, C=8, V=10, Tmax=8) -> Case:
    """Embedding lookup (index_select) + positions (iota), reductions, softmax and its backward,
    where/compare/cast, concat, take_along_axis, expand/slice views, an opaque aten op,
    scatter_add (embedding backward) and an SGD step with momentum and Nesterov."""
    g = Graph("memory_ops")
    idx = g.input(TensorType((B, T), "i64"), "idx", "data")
    pick = g.input(TensorType((B, T, 1), "i64"), "pick", "data")
    emb = g.input(TensorType((V, C), "f32"), "emb.weight", "param")
    pos_table = g.input(TensorType((Tmax, C), "f32"), "pos.weight", "param")
    buf = g.input(TensorType((V, C), "f32"), "emb.momentum_buffer", "opt_state")
    hyper = g.input(TensorType((4,), "f64"), "emb.hyper", "opt_state")    # lr, momentum, dampening, weight decay
    e = g.op("index_select", emb, idx, axis=0)                                         # [B, T, C]
    pos = g.op("iota", length=T, dtype="i64")
    pe = g.op("index_select", pos_table, pos, axis=0)                                  # [T, C]
    h = g.op("add", e, pe)
    rowsum = g.op("sum", h, axes=(2,), keepdim=True, dtype="f64")                      # [B, T, 1] f64
    colmax = g.op("max", h, axes=(1,))                                                 # [B, C]
    mean = g.op("mean", h, axes=(0, 1))                                                # [C]
    centered = g.op("sub", h, g.op("expand", g.op("reshape", mean, shape=(1, 1, C)), shape=(B, T, C)))
    sm = g.op("softmax", centered, axis=-1)
    dsm = g.op("softmax_backward", h, sm, axis=-1)
    zero = g.op("constant", value=0.0, dtype="f32")
    absval = g.op("where", g.op("gt", h, zero), h, g.op("neg", h))
    wide = g.op("cast", absval, dtype="f64")
    both = g.op("concat", h, absval, axis=2)                                           # [B, T, 2C]
    picked = g.op("take_along_axis", both, pick, axis=2)                               # [B, T, 1]
    odd = g.op("slice", h, axis=1, start=1, end=T, step=2)                             # strided view
    csum = g.op("aten", odd, target="aten.cumsum.default", args=(("$", 0), 1),
                result_types=(((B, len(range(1, T, 2)), C), "f32"),))
    grad_emb = g.op("scatter_add", dsm, idx, axis=0, shape=(V, C))
    index = {spec.value: i for i, spec in enumerate(g.inputs)}
    emb1, buf1 = g.op("sgd", emb, grad_emb, hyper, buf, with_momentum=True, nesterov=True)
    for value, name in ((rowsum, "rowsum"), (colmax, "colmax"), (dsm, "dsm"), (wide, "wide"), (picked, "picked"),
                        (csum, "cumsum"), (grad_emb, "emb.grad")):
        g.output(value, name)
    g.output(emb1, "emb.weight", "param", updates=index[emb])
    g.output(buf1, "emb.momentum_buffer", "opt_state", updates=index[buf])

    def make(gen, device):
        return [torch.randint(0, V, (B, T), generator=gen).to(device),
                torch.randint(0, 2 * C, (B, T, 1), generator=gen).to(device),
                _randn(gen, (V, C), device), _randn(gen, (Tmax, C), device), _randn(gen, (V, C), device, 0.1),
                torch.tensor([0.1, 0.9, 0.0, 0.01], dtype=torch.float64, device=device)]
    return Case(g, make)


def pointwise_zoo(N=6, M=10) -> Case:
    """Every pointwise op of the IR, chained (positive inputs where the op needs them)."""
    g = Graph("pointwise_zoo")
    x = g.input(TensorType((N, M), "f32"), "x", "data")
    y = g.input(TensorType((M,), "f32"), "y", "data")
    pos = g.op("add", g.op("abs", x), g.op("constant", value=0.5, dtype="f32"))
    results = {}
    for op in ("neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "abs", "tanh", "erf", "sin", "cos",
               "sigmoid", "relu", "silu", "gelu_tanh", "gelu_erf"):
        results[op] = g.op(op, pos if op in ("log", "sqrt", "rsqrt", "reciprocal") else x)
    for op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        results[op] = g.op(op, x, y)
    results["pow"] = g.op("pow", pos, y)
    cmp = {op: g.op(op, x, y) for op in ("eq", "ne", "lt", "le", "gt", "ge")}
    results["logic"] = g.op("logical_or", g.op("logical_and", cmp["lt"], g.op("logical_not", cmp["eq"])), cmp["ge"])
    results.update({f"cmp_{k}": v for k, v in cmp.items()})
    for op in ("gelu_tanh_backward", "gelu_erf_backward", "silu_backward"):
        results[op] = g.op(op, results["mul"], x)
    results["sigmoid_backward"] = g.op("sigmoid_backward", x, results["sigmoid"])
    results["tanh_backward"] = g.op("tanh_backward", x, results["tanh"])
    results["relu_backward"] = g.op("relu_backward", x, results["relu"])
    results["min"] = g.op("min", x, axes=(0,), keepdim=True)
    results["sum_all"] = g.op("sum", x, axes=())
    for name, value in results.items():
        g.output(value, name)

    def make(gen, device):
        return [_randn(gen, (N, M), device), _randn(gen, (M,), device)]
    return Case(g, make)


def linear_inference(B=2, T=4, C=8, H=16, activation="gelu_tanh") -> Case:
    """linear + bias + activation whose pre-activation nobody reads (fully fusable), a second
    linear without bias, and a matmul whose output is also a graph output (not fusable)."""
    g = Graph("linear_inference")
    x = g.input(TensorType((B, T, C), "f32"), "x", "data")
    w1 = g.input(TensorType((H, C), "f32"), "fc1.weight", "param")
    b1 = g.input(TensorType((H,), "f32"), "fc1.bias", "param")
    w2 = g.input(TensorType((C, H), "f32"), "fc2.weight", "param")
    h = g.op(activation, g.op("add", g.op("matmul", x, w1, transpose_b=True), b1))
    y = g.op("matmul", h, w2, transpose_b=True)
    r = g.op("relu", y)
    g.output(y, "y")
    g.output(r, "relu_y")

    def make(gen, device):
        return [_randn(gen, (B, T, C), device), _randn(gen, (H, C), device, 0.3), _randn(gen, (H,), device),
                _randn(gen, (C, H), device, 0.3)]
    return Case(g, make)


def batched_attention_step(B=2, H=3, T=6, D=4) -> Case:
    """Attention spelled with true batched matmuls (``torch.bmm``/``torch.matmul`` on [B, H, T, D]) and
    its backward: every matmul is one batched GEMM of B*H matrices (transposes in place)."""
    g = Graph("batched_attention")
    q, k, v, do = (g.input(TensorType((B, H, T, D), "f32"), name, "data") for name in ("q", "k", "v", "dout"))
    s = g.op("matmul", q, k, transpose_b=True)                                          # [B, H, T, T]
    p = g.op("softmax", s, axis=-1)
    o = g.op("matmul", p, v)
    dv = g.op("matmul", p, do, transpose_a=True)
    ds = g.op("softmax_backward", g.op("matmul", do, v, transpose_b=True), p, axis=-1)
    dq = g.op("matmul", ds, k)
    dk = g.op("matmul", ds, q, transpose_a=True)
    for value, name in ((o, "out"), (dq, "dq"), (dk, "dk"), (dv, "dv")):
        g.output(value, name)

    def make(gen, device):
        return [_randn(gen, (B, H, T, D), device) for _ in range(4)]
    return Case(g, make)


def deep_k_gradient(K=8192, M=64, N=128) -> Case:
    """A weight gradient over many rows, dW = tanh(x)ᵀ·dy (TN, K deep): on an H200 a split-K launch
    whose operand prep and FP32 partials are its launch workspace in the arena (``workspace_layout``)."""
    g = Graph("deep_k_gradient")
    x = g.input(TensorType((K, M), "f32"), "x", "data")
    dy = g.input(TensorType((K, N), "f32"), "dy", "data")
    dw = g.op("matmul", g.op("tanh", x), dy, transpose_a=True)
    g.output(dw, "dw")
    g.output(g.op("relu", dw), "relu_dw")

    def make(gen, device):
        return [_randn(gen, (K, M), device), _randn(gen, (K, N), device, 0.1)]
    return Case(g, make)


def example_case(graph: Graph, int_high: int = 2) -> Case:
    """A ``Case`` of one of ``nova.passes.examples``' graphs (inputs from its ``random_inputs``;
    integers below ``int_high``, e.g. the vocabulary size for token ids)."""
    from nova.passes.examples import random_inputs

    def make(gen, device):
        return [t.to(device) for t in random_inputs(graph, gen.initial_seed(), int_high)]
    return Case(graph, make)


ALL_CASES = {"mlp": mlp_training_step, "attention": attention_block, "grouped": grouped_attention,
             "memory": memory_ops_step, "pointwise": pointwise_zoo, "linear": linear_inference,
             "bmm": batched_attention_step}


# =============================================================== comparisons
def _wide(x):
    """f32 -> f64 in a type name or an attribute value (tuples recursively)."""
    if x == "f32":
        return "f64"
    if isinstance(x, tuple):
        return tuple(_wide(y) for y in x)
    return x


def widen(graph) -> Graph:
    """The same graph computing in float64 where it computes in float32 (inputs, constants,
    casts, accumulation types, opaque result types): the GPU tests' reference."""
    g = Graph(graph.name + "_f64")
    env = {}
    for spec in graph.inputs:
        env[spec.value] = g.input(TensorType(spec.value.type.shape, _wide(spec.value.type.dtype)), spec.name, spec.role)
    for n in graph.nodes:
        attrs = {k: (_wide(v) if k in ("dtype", "out_dtype", "result_types") else v) for k, v in n.attrs.items()}
        res = g.op(n.op, *[env[v] for v in n.inputs], **attrs)
        for v, w in zip(n.outputs, res if isinstance(res, tuple) else (res,)):
            env[v] = w
    for o in graph.outputs:
        g.output(env[o.value], o.name, o.role, o.updates)
    return g



def rel_error(got, ref) -> float:
    """Relative Frobenius error of floats (absolute when the reference is ~0); mismatches of
    integers/booleans count as 1.0."""
    if got.shape != ref.shape:
        return math.inf
    if not ref.is_floating_point():
        return 0.0 if torch.equal(got.cpu(), ref.cpu()) else 1.0
    g, r = got.detach().cpu().double(), ref.detach().cpu().double()
    if torch.isnan(g).any():
        return math.inf
    denom = float(r.norm())
    return float((g - r).norm()) / (denom if denom > 1e-30 else 1.0)
