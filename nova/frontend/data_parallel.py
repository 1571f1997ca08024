"""``torch.nn.parallel.DistributedDataParallel`` in a captured step.

DDP averages the gradients over its process group in autograd hooks of its C++ reducer, on the
real gradients, during ``backward``; on fake tensors under ``make_fx`` that machinery cannot run
(and would not be traced).  So capture sees through the wrapper:

- ``discover`` records each DDP wrapper and finds its ``module`` in its place (the parameters
  keep the module's own names, without DDP's ``module.`` prefix);
- while tracing, the wrapper's ``forward`` is its module's, without the reducer; it arms the
  gradient reduction of the next backward when DDP would (grad mode on and
  ``require_backward_grad_sync``, which ``no_sync()`` clears);
- a post-accumulate-grad hook on each of the module's traced parameters (those DDP reduces: not
  in ``parameters_to_ignore``, requiring grad) replaces the accumulated ``.grad`` by its
  ``all_reduce`` (avg) over DDP's process group when armed: explicit IR ops, placed where the
  gradient is final, which ``nova.passes.buckets`` groups into buckets.

What eager DDP does and this does too: the average of the ranks' accumulated gradients (after
``no_sync`` steps, the local sums are averaged by the first synchronised backward).  Not modelled:
DDP's buffer broadcast at each forward (``broadcast_buffers``; Nova refuses steps that mutate
buffers, so they are the constants DDP broadcast at construction), communication hooks, mixed
precision, ``static_graph`` and delayed all-reduce parameters (each refused in one line).
"""
from __future__ import annotations

import contextlib

import torch

from nova.frontend.errors import NovaUnsupportedError


def ddp_class():
    try:
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:        # torch built without distributed
        return None
    return DistributedDataParallel


def is_data_parallel(obj) -> bool:
    cls = ddp_class()
    return cls is not None and isinstance(obj, cls)


def check_supported(name: str, ddp) -> None:
    """One line for a DDP feature Nova does not replay."""
    if getattr(ddp, "_comm_hooks", None) or getattr(ddp, "_delay_all_reduce_params", None):
        raise NovaUnsupportedError(f"{name} (DistributedDataParallel) has a communication hook or delayed all-reduce "
                                   f"parameters; Nova replays DDP's default gradient averaging only")
    if getattr(ddp, "mixed_precision", None) is not None:
        raise NovaUnsupportedError(f"{name} (DistributedDataParallel) uses DDP's mixed_precision; not supported "
                                   f"(use torch.autocast in the step)")
    if getattr(ddp, "static_graph", False):
        raise NovaUnsupportedError(f"{name} (DistributedDataParallel) has static_graph=True; not supported")


def signature(name: str, ddp) -> tuple:
    """What a captured graph depends on in the wrapper (part of the guard key): whether the next
    backward synchronises, and the group it reduces over."""
    group = ddp.process_group
    return (name, id(ddp), bool(ddp.require_backward_grad_sync), group.group_name, group.size())


def reduced_parameters(ddp) -> list[torch.nn.Parameter]:
    """The parameters whose gradients DDP averages, in registration order."""
    ignored = getattr(ddp, "parameters_to_ignore", set())
    return [p for n, p in ddp.module.named_parameters() if n not in ignored and p.requires_grad]


@contextlib.contextmanager
def traced(found, leaf_of):
    """While tracing: each DDP wrapper's forward without its reducer, and the gradient all-reduce
    of its parameters as explicit collectives (``leaf_of(param)``: the traced leaf of a parameter; inside
    capture the modules already hold their traced leaves)."""
    wrappers = list(getattr(found, "data_parallel", ()))
    if not wrappers:
        yield
        return
    import torch.distributed._functional_collectives as funcol
    armed: dict[int, bool] = {}
    handles, patched = [], []

    def make_forward(ddp):
        def forward(*args, **kwargs):
            armed[id(ddp)] = torch.is_grad_enabled() and bool(ddp.require_backward_grad_sync)
            return ddp.module(*args, **kwargs)
        return forward

    def make_hook(ddp):
        group = ddp.process_group

        def hook(leaf):
            if armed.get(id(ddp)) and leaf.grad is not None:
                leaf.grad.copy_(funcol.all_reduce(leaf.grad, "avg", group))
        return hook

    try:
        for name, ddp in wrappers:
            check_supported(name, ddp)
            patched.append((ddp, ddp.__dict__.get("forward")))
            ddp.forward = make_forward(ddp)
            hook = make_hook(ddp)
            for p in reduced_parameters(ddp):
                handles.append(leaf_of(p).register_post_accumulate_grad_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()
        for ddp, forward in patched:
            if forward is None:
                ddp.__dict__.pop("forward", None)
            else:
                ddp.forward = forward
