"""Guards: what must stay true for a captured graph to be reused.

``GuardKey`` is a hashable snapshot of everything the captured graph depends on: the inputs'
shapes/dtypes/devices (and non-tensor arguments' values), grad mode, each model's parameters and
buffers (identity, shape, dtype, device, ``requires_grad``, whether ``.grad`` is set), module
training flags and hook counts, each optimizer's class, the settings of its parameter groups that
change the program (not the numbers lifted to its hyper-parameter input: lr, betas, eps, weight
decay, momentum, dampening), parameter groups and state structure, and every plain Python value
the step may read (``python_values``: module attributes, globals, closure cells, config entries).  ``nova.compile`` keys its cache on it; ``describe_change`` says in one line which
part changed (for ``CompiledStep.stats``).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch.utils import _pytree as pytree

from nova.frontend import data_parallel, python_values
from nova.frontend.discover import modules_of
from nova.frontend.optim import handler_for, hyper_parameters, tensor_signature


@dataclass(frozen=True)
class GuardKey:
    inputs: tuple
    treespec: str
    grad_enabled: bool
    models: tuple
    optimizers: tuple
    python_values: tuple = ()
    data_parallel: tuple = ()         # each DDP wrapper: gradient sync on or off (no_sync), its group

    def describe_change(self, other: "GuardKey | None") -> str:
        """One line: what differs from ``other`` (the previous call's key), every part that changed."""
        if other is None:
            return "first call"
        reasons = []
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine == theirs:
                continue
            if f.name == "optimizers":
                reasons.append(_optimizer_change(mine, theirs))
            elif f.name == "models":
                reasons.append(_model_change(mine, theirs))
            elif f.name == "python_values":
                reasons.append(python_values.describe_change(mine, theirs))
            else:
                reasons.append({"inputs": "input shapes, dtypes or values changed",
                                "treespec": "the arguments' structure changed",
                                "grad_enabled": "grad mode changed",
                                "data_parallel": "DistributedDataParallel's gradient sync (no_sync) or process "
                                                 "group changed"}[f.name])
        return "; ".join(reasons) or "no change"


def arg_signature(leaf) -> tuple:
    if isinstance(leaf, torch.Tensor):
        return ("tensor", tuple(leaf.shape), leaf.dtype, leaf.device.type, leaf.requires_grad)
    try:
        hash(leaf)
        return ("value", type(leaf).__name__, leaf)
    except TypeError:
        return ("object", type(leaf).__name__, id(leaf))


def _module_hooks(m: torch.nn.Module) -> int:
    return len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) \
        + len(getattr(m, "_backward_pre_hooks", ()))


def _tensor_hooks(p: torch.Tensor) -> int:
    return len(p._backward_hooks or ()) + len(getattr(p, "_post_accumulate_grad_hooks", None) or ())


def model_signature(name: str, model: torch.nn.Module, modules=None) -> tuple:
    """``(name, id, parameters, buffers, training flags, hook count)``: each parameter as (its
    ``named_parameters`` name, id, shape, dtype, device, requires_grad, its grad's signature or None),
    each buffer as (name, id, shape, dtype, device).  One walk over the modules reads all of it
    (``modules``: that walk, ``modules_of(model)``, where the caller has it)."""
    params, buffers, training = [], [], []
    hooks = 0
    seen_params, seen_buffers = set(), set()
    for path, m in modules if modules is not None else modules_of(model):
        training.append(m.training)
        hooks += _module_hooks(m)
        prefix = path + "." if path else ""
        for k, p in m._parameters.items():
            if p is None or id(p) in seen_params:
                continue
            seen_params.add(id(p))
            grad = p.grad
            params.append((prefix + k, id(p), p.shape, p.dtype, p.device, p.requires_grad,
                           None if grad is None else (grad.shape, grad.dtype, grad.device)))
            hooks += _tensor_hooks(p)
        for k, b in m._buffers.items():
            if b is None or id(b) in seen_buffers:
                continue
            seen_buffers.add(id(b))
            buffers.append((prefix + k, id(b), b.shape, b.dtype, b.device))
    return (name, id(model), tuple(params), tuple(buffers), tuple(training), hooks)


def optimizer_signature(name: str, opt: torch.optim.Optimizer, guarded: frozenset | set = frozenset()) -> tuple:
    """The optimizer's class, settings, groups, state layout and hooks.  A parameter whose id is in
    ``guarded`` (a model's signature holds its shape, dtype and grad) is keyed by id and state only."""
    handler = handler_for(opt, name)
    groups = []
    for group in opt.param_groups:
        inputs = handler.group_state_inputs(opt, group)
        groups.append(tuple(
            (id(p), handler.state_signature(opt, group, p, inputs)) if id(p) in guarded else
            (id(p), p.shape, p.dtype, None if p.grad is None else tensor_signature(p.grad),
             handler.state_signature(opt, group, p, inputs)) for p in group["params"]))
    hooks = len(getattr(opt, "_optimizer_step_pre_hooks", ())) + len(getattr(opt, "_optimizer_step_post_hooks", ()))
    return (name, id(opt), type(opt).__name__, hyper_parameters(opt), tuple(groups), hooks)


def guard_key(found, args, kwargs, fn=None) -> GuardKey:
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    walks = {id(m): modules_of(m) for _, m in found.models}       # each model walked once a call
    models = tuple(model_signature(n, m, walks[id(m)]) for n, m in found.models)
    guarded = {p[1] for m in models for p in m[2]}          # parameter ids whose layout and grad a model guards
    return GuardKey(
        inputs=tuple(arg_signature(x) for x in leaves),
        treespec=str(spec),
        grad_enabled=torch.is_grad_enabled(),
        models=models,
        optimizers=tuple(optimizer_signature(n, o, guarded) for n, o in found.optimizers),
        python_values=python_values.snapshot(fn, found, found.functions, walks) if fn is not None else (),
        data_parallel=tuple(data_parallel.signature(n, d) for n, d in getattr(found, "data_parallel", ())),
    )


def _model_change(mine: tuple, theirs: tuple) -> str:
    """Which model changed and how: replaced, parameters or buffers added/removed/replaced, a
    gradient created or dropped, training mode, hooks."""
    if len(mine) != len(theirs) or any(a[0] != b[0] for a, b in zip(mine, theirs)):
        return "the set of models changed"
    for a, b in zip(mine, theirs):
        name = a[0]
        if a[1] != b[1]:
            return f"model {name} was replaced"
        if a[2] != b[2]:
            old, new = {p[0]: p for p in b[2]}, {p[0]: p for p in a[2]}
            added, removed = sorted(new.keys() - old.keys()), sorted(old.keys() - new.keys())
            if added or removed:
                return f"model {name}: parameters " + ", ".join([f"{p} added" for p in added] +
                                                                [f"{p} removed" for p in removed])
            for p, now in new.items():
                before = old[p]
                if now[1] != before[1]:
                    return f"model {name}: parameter {p} was replaced"
                if now[2:6] != before[2:6]:
                    return f"model {name}: parameter {p} changed shape, dtype, device or requires_grad"
                if (now[6] is None) != (before[6] is None):
                    return f"model {name}: {p}.grad {'created' if now[6] is not None else 'set to None'}"
                if now[6] != before[6]:
                    return f"model {name}: {p}.grad changed shape, dtype or device"
        if a[3] != b[3]:
            return f"model {name}: buffers changed"
        if a[4] != b[4]:
            return f"model {name}: training mode changed (train()/eval())"
        if a[5] != b[5]:
            return f"model {name}: hooks changed"
    return "a model changed"


def _optimizer_change(mine: tuple, theirs: tuple) -> str:
    if len(mine) != len(theirs):
        return "the set of optimizers changed"
    for a, b in zip(mine, theirs):
        if a[1:3] != b[1:3]:
            return f"optimizer {a[0]} was replaced"
        if len(a[4]) != len(b[4]):
            return f"optimizer {a[0]}: parameter groups {len(b[4])} -> {len(a[4])} (add_param_group)"
        if a[3] != b[3]:
            changes = []
            for i, (ga, gb) in enumerate(zip(a[3], b[3])):
                da, db = dict(ga), dict(gb)
                changes += [f"param_groups[{i}].{k} {db.get(k)!r} -> {da.get(k)!r}"
                            for k in sorted(set(da) | set(db)) if da.get(k) != db.get(k)]
            return f"optimizer {a[0]} hyper-parameters changed: " + (", ".join(changes) or "groups added or removed")
        if a[4] != b[4]:
            return f"optimizer {a[0]} parameter groups or state changed"
        if a[5] != b[5]:
            return f"optimizer {a[0]} hooks changed"
    return "optimizers changed"
