"""Every Nova kernel a ``torch.compile(model, backend="nova")`` run on a GPU will launch, compiled
into the kernel cache on a host without a GPU (what ``nova precompile train`` does for
``nova.compile``), so that the GPU machine runs it with ``NOVA_OFFLINE=1``.

    from nova.integrations.dynamo_precompile import precompile
    precompile(model, (idx, targets), target="h200", training=True)      # Python
    nova precompile dynamo --step my_pkg.my_module:make_model --target h200   # command line

The model (on any device, the meta device included) and its example inputs are copied to the
CPU (``_on_cpu``: a tensor modules share, such as a tied embedding, stays one tensor, as on the
GPU) and run once through TorchDynamo and AOTAutograd with the backend's own settings
(``nova_backend``'s decompositions, partition and calling convention); no kernel runs (each
compiled graph returns zeros).  With ``training=True`` the output is back-propagated, so that
AOTAutograd compiles the backward graphs too.  Each graph is lowered by
the backend's ``lower_graph`` and planned by its ``plan_for_gpu`` (the very functions its CUDA
engine runs: same pipeline, storage and strides), and every kernel of the plans' CUDA programs is
compiled by ``nova.compiler.precompile.precompile_planned``.  A graph the backend would leave to
torch is reported (one line, the same reason) and has no kernels.

The one difference between the host's trace and a CUDA one is the attention kernel torch picks
for ``scaled_dot_product_attention``: on the CPU torch spells it out as the math composite, on
CUDA it calls one fused kernel.  The host's trace therefore calls, in its place, the kernel CUDA
picks (``cuda_attention_kernel``), whose meta implementation torch provides; both spellings lower
to the same IR ``attention`` op, but their graphs differ in what the forward saves for the
backward (a padded log-sum-exp, the random seeds), which decides the plans.  (Fake tensors on a
``cuda`` device are not an option on a CPU-only torch: autograd needs a CUDA device guard there.)
"""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field

import torch

FLASH, EFFICIENT, MATH, CUDNN = "flash", "efficient", "math", "cudnn"


class DynamoPrecompileError(ValueError):
    """A model or example inputs that cannot be precompiled (one line)."""


# ====================================================================== the attention kernel CUDA picks
def cuda_attention_kernel(query, key, value, attn_mask=None, dropout_p: float = 0.0, enable_gqa: bool = False,
                          sm: int = 90, prefer_cudnn: bool | None = None) -> str:
    """The kernel torch's CUDA ``scaled_dot_product_attention`` runs (``sdp_utils.cpp``,
    ``select_sdp_backend``): the first of its priority order whose constraints the inputs meet.  The
    order is ``torch._C._get_sdp_priority_order()`` (flash, efficient, math, cuDNN), except that
    cuDNN comes first where torch prefers it (``check_prefer_cudnn_attention``: torch 2.9 and later
    with cuDNN 9.9 or later, on compute capability 9.0 and 10.0; ``prefer_cudnn`` None means those
    devices -- the host cannot see the device's cuDNN).  cuDNN attention: FP16/BF16, the same head
    dimension for Q, K and V, at most 128 and a multiple of 8, no mask, no grouped-query heads;
    flash attention: FP16/BF16, compute capability 8.0 or more, no mask, a head dimension of at most
    256 and a multiple of 8; memory-efficient attention: FP32, FP16 or BF16, the same head dimension
    for Q, K and V (a multiple of 4 for FP32, of 8 otherwise), no grouped-query heads; else the math
    composite."""
    head = query.shape[-1]
    same_heads = query.shape[-3] == key.shape[-3] == value.shape[-3] if query.dim() == 4 else True
    low = query.dtype in (torch.float16, torch.bfloat16)
    candidates = {
        FLASH: low and sm >= 80 and attn_mask is None and head <= 256
        and head % 8 == 0 and value.shape[-1] == head and query.dim() == 4,
        EFFICIENT: query.dtype in (torch.float32, torch.float16, torch.bfloat16) and key.shape[-1] == head
        and value.shape[-1] == head and head % (4 if query.dtype == torch.float32 else 8) == 0
        and (same_heads or not enable_gqa) and query.dim() == 4,
        CUDNN: low and sm >= 80 and attn_mask is None and head <= 128 and head % 8 == 0 and key.shape[-1] == head
        and value.shape[-1] == head and same_heads and query.dim() == 4,
    }
    names = {1: FLASH, 2: EFFICIENT, 0: MATH, 3: CUDNN}
    order = [names.get(int(backend)) for backend in torch._C._get_sdp_priority_order()]
    if prefer_cudnn is None:
        prefer_cudnn = sm in (90, 100) and tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 9)
    if prefer_cudnn and CUDNN in order:
        order = [CUDNN] + [name for name in order if name != CUDNN]
    for name in order:
        if name == MATH or (name is not None and candidates[name]):
            return name
    return MATH


def cuda_sdpa(sm: int):
    """``scaled_dot_product_attention`` as CUDA's dispatcher runs it on compute capability ``sm``:
    the fused kernel ``cuda_attention_kernel`` picks, called as torch's CUDA composite calls it
    (``attention.cpp``: the log-sum-exp computed when an input requires a gradient)."""
    aten = torch.ops.aten

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        kernel = cuda_attention_kernel(query, key, value, attn_mask, dropout_p, enable_gqa, sm)
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if kernel == FLASH:
            return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False,
                                                            scale=scale)[0]
        if kernel == CUDNN:
            return aten._scaled_dot_product_cudnn_attention(query, key, value, None, grad, dropout_p, is_causal,
                                                            False, scale=scale)[0]
        if kernel == EFFICIENT:
            if attn_mask is not None and attn_mask.dtype == torch.bool:      # convert_boolean_attn_mask
                attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(~attn_mask, float("-inf"))
            return aten._scaled_dot_product_efficient_attention(query, key, value, attn_mask, grad, dropout_p,
                                                                is_causal, scale=scale)[0]
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                                                scale=scale, enable_gqa=enable_gqa)
    return sdpa


SDPA_TARGETS = (torch.nn.functional.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention)


def with_cuda_attention(gm: torch.fx.GraphModule, sm: int) -> int:
    """Replace, in Dynamo's graph ``gm``, each ``scaled_dot_product_attention`` call by the kernel
    CUDA runs for it; returns how many were replaced."""
    replaced = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in SDPA_TARGETS:
            node.target = cuda_sdpa(sm)
            replaced += 1
    if replaced:
        gm.recompile()
    return replaced


# ====================================================================== trace and plan
@dataclass
class PlannedGraph:
    """One AOTAutograd graph of the run: its name (``forward graph 3``), the plan the CUDA path runs
    (None when the backend leaves it to torch) and why not, and the backend's lowering of it
    (``dynamo.LoweredGraph``: how its inputs come from AOTAutograd's arguments, its results)."""
    name: str
    planned: object = None
    reason: str = ""
    lowered: object = None


@dataclass
class DynamoPlans:
    """The graphs a ``torch.compile(model, backend="nova")`` run compiles, in compilation order."""
    graphs: list = field(default_factory=list)

    @property
    def planned(self) -> list:
        return [g.planned for g in self.graphs if g.planned is not None]


def plan_dynamo(model, example_inputs, target, training: bool = True) -> DynamoPlans:
    """Trace ``model(*example_inputs)`` (and, training, its backward) through Dynamo and AOTAutograd
    as ``nova_backend`` does, on meta copies, and plan each graph for ``target`` as the CUDA path
    does.  ``target``: a ``GPUModel``."""
    from functorch.compile import default_partition
    from torch._dynamo.backends.common import aot_autograd
    from nova.integrations import dynamo
    sm = int(str(target.arch).removeprefix("sm_").rstrip("a"))
    plans = DynamoPlans()
    counter = iter(range(1 << 30))

    def compiler(gm, example, *, part):
        name = f"{part} graph {next(counter)}"
        try:
            lowered = dynamo.lower_graph(gm, part, name)
            plans.graphs.append(PlannedGraph(name, dynamo.plan_for_gpu(lowered.graph, target, lowered.handoff, lowered.inputs.in_place),
                                             lowered=lowered))
        except Exception as e:       # as compile_graph: the backend runs this graph on torch
            plans.graphs.append(PlannedGraph(name, None, dynamo.fallback_reason(e)))
        return _Stand_in(gm)

    def backend(gm, example):
        with_cuda_attention(gm, sm)
        return aot_autograd(fw_compiler=functools.partial(compiler, part="forward"),
                            bw_compiler=functools.partial(compiler, part="backward"),
                            inference_compiler=functools.partial(compiler, part="inference"),
                            decompositions=dynamo.decompositions(), partition_fn=default_partition,
                            keep_inference_input_mutations=False)(gm, example)

    cpu_model, cpu_inputs = _on_cpu(model, example_inputs)
    cpu_model.train(training)
    torch._dynamo.reset()
    try:
        with torch.set_grad_enabled(training):
            out = torch.compile(cpu_model, backend=backend, dynamic=False)(*cpu_inputs)
            if training:
                outputs = [t for t in torch.utils._pytree.tree_leaves(out)
                           if isinstance(t, torch.Tensor) and t.requires_grad]
                if not outputs:
                    raise DynamoPrecompileError("training=True but the model's output does not require a gradient "
                                                "(no parameter reaches it); pass training=False for inference")
                torch.autograd.backward(outputs, [torch.ones_like(t) for t in outputs])
    except DynamoPrecompileError:
        raise
    except Exception as e:
        raise DynamoPrecompileError(f"tracing the model failed: {type(e).__name__}: "
                                    f"{dynamo.first_line(e)}") from None
    finally:
        torch._dynamo.reset()
    return plans


class _Stand_in:
    """A compiled graph's stand-in for the trace: zeros of the shapes, dtypes and strides torch
    promised for its results (no kernel runs; only the graphs AOTAutograd compiles matter)."""

    def __init__(self, gm: torch.fx.GraphModule):
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        self.vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in output.args[0]]
        self._boxed_call = True

    def __call__(self, args: list) -> list:
        args.clear()
        return [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype).zero_()
                if isinstance(v, torch.Tensor) else v for v in self.vals]


def _on_cpu(model, example_inputs):
    """A CPU copy of ``model`` and of the example inputs, each tensor of its shape, dtype and strides:
    a meta tensor's copy is zeros, any other's its values (values never matter to the trace: no
    kernel runs).  Each example input is a tensor of its own, as a GPU run's batches are.

    The model's parameters and buffers are swapped in one ``deepcopy`` through its memo, so that a
    tensor two modules share stays one tensor in the copy: a tied embedding (GPT's ``wte`` and
    ``lm_head``) stays tied, as on the GPU, where the backward graph sums its two gradients (a
    kernel of the CUDA run).  ``Module.to_empty`` unties it: it moves each module's parameters on
    their own, and from the meta device makes a new parameter for each."""
    if not isinstance(model, torch.nn.Module):
        raise DynamoPrecompileError(f"the model must be a torch.nn.Module, got a {type(model).__name__}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise DynamoPrecompileError(f"example_inputs must be a tuple of the model's arguments, got a "
                                    f"{type(example_inputs).__name__}")

    def copy_on_cpu(x: torch.Tensor) -> torch.Tensor:
        cpu = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
        return cpu.zero_() if x.device.type == "meta" else cpu.copy_(x.detach())

    memo = {id(p): torch.nn.Parameter(copy_on_cpu(p), requires_grad=p.requires_grad) for p in model.parameters()}
    memo.update({id(b): copy_on_cpu(b) for b in model.buffers()})
    copied = copy.deepcopy(model, memo)

    def on_cpu(x):
        return copy_on_cpu(x).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
    return copied, tuple(torch.utils._pytree.tree_map(on_cpu, tuple(example_inputs)))


# ====================================================================== precompile
def precompile(model, example_inputs, target="h200", training: bool = True, cache_dir=None, log=print) -> dict:
    """Compile, for ``target`` (a preset name or ``GPUModel``) into the kernel cache (``cache_dir``,
    default ``$NOVA_CACHE_DIR`` or ``~/.cache/nova``), every Nova kernel the CUDA run of
    ``torch.compile(model, backend="nova")(*example_inputs)`` (and, ``training``, its backward)
    launches, on a host without a GPU.  Returns the counts by status (``compiled``, ``cached``,
    ``failed``) and ``graphs``/``on_torch`` (how many graphs, how many the backend leaves to torch)."""
    from nova.compiler.precompile import precompile_planned
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    target = get_target(target) if isinstance(target, str) else target
    plans = plan_dynamo(model, example_inputs, target, training)
    cache = KernelCache(cache_dir)
    total = {"compiled": 0, "cached": 0, "failed": 0}
    for graph in plans.graphs:
        if graph.planned is None:
            log(f"{graph.name}: runs on torch (eager ATen), no Nova kernels: {graph.reason}")
            continue
        log(f"{graph.name}:")
        counts = precompile_planned(graph.planned, target, cache, log=log)
        for k in total:
            total[k] += counts[k]
    on_torch = sum(1 for g in plans.graphs if g.planned is None)
    log(f"torch.compile(backend='nova'): {len(plans.graphs)} graphs ({on_torch} on torch), {total['compiled']} "
        f"kernels compiled, {total['cached']} already cached, {total['failed']} failed for {target.name} into "
        f"{cache.root}")
    return {**total, "graphs": len(plans.graphs), "on_torch": on_torch}


def precompile_factory(spec: str, target, cache_dir=None, training: bool = True, log=print, **values) -> dict:
    """``nova precompile dynamo --step MODULE:FACTORY``: the factory (``nova.integrations.user_step``'s
    loading rules; called on the meta device with the ``values`` its signature takes) returns
    ``(model, example_inputs)``."""
    from nova.integrations.user_step import StepSpecError, load_factory, make_model
    model, example_inputs = make_model(load_factory(spec), spec, **values)
    try:
        return precompile(model, example_inputs, target, training, cache_dir, log)
    except DynamoPrecompileError as e:
        raise StepSpecError(f"--step {spec!r}: {e}") from None
