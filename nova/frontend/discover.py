"""Finding the ``nn.Module``s and ``torch.optim.Optimizer``s a step function uses.

Looked at, in order: explicit ``models=`` / ``optimizers=``; the function itself when it is a
module (or a bound method of one, or of an object holding modules and optimizers as attributes);
its closure cells; the globals its code names (also in nested functions and lambdas).  Containers
(list, tuple, dict) one level deep are searched too.  Called on every step (cheap): a rebound global
(``model = GPT(...)`` again) is seen on the next call.  A ``DistributedDataParallel`` wrapper is
recorded in ``data_parallel`` and its ``module`` found in its place (``data_parallel.py``).
"""
from __future__ import annotations

import types
from dataclasses import dataclass, field

import torch

from nova.frontend.data_parallel import is_data_parallel


@dataclass
class Discovered:
    """The user's stateful objects a step touches: ``models`` as (name, module) and ``optimizers``
    as (name, optimizer), each without duplicates, in the order found."""
    models: list[tuple[str, torch.nn.Module]] = field(default_factory=list)
    optimizers: list[tuple[str, torch.optim.Optimizer]] = field(default_factory=list)
    functions: list = field(default_factory=list)      # the user's helper functions the step calls
    data_parallel: list = field(default_factory=list)  # (name, DistributedDataParallel) whose module is in models

    def add(self, name: str, obj) -> None:
        if is_data_parallel(obj):                       # capture sees through DDP (data_parallel.py)
            if all(d is not obj for _, d in self.data_parallel):
                self.data_parallel.append((name, obj))
            self.add(name, obj.module)
        elif isinstance(obj, torch.nn.Module):
            if all(m is not obj for _, m in self.models):
                self.models.append((name, obj))
        elif isinstance(obj, torch.optim.Optimizer):
            if all(o is not obj for _, o in self.optimizers):
                self.optimizers.append((name, obj))
        elif isinstance(obj, (list, tuple)):
            for i, item in enumerate(obj):
                if isinstance(item, (torch.nn.Module, torch.optim.Optimizer)):
                    self.add(f"{name}[{i}]", item)
        elif isinstance(obj, dict):
            for k, item in obj.items():
                if isinstance(item, (torch.nn.Module, torch.optim.Optimizer)):
                    self.add(f"{name}[{k!r}]", item)


def _code_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _code_names(const)
    return names


def discover(fn, models=None, optimizers=None) -> Discovered:
    found = Discovered()
    _discover_into(found, fn, models, optimizers, depth=0, seen=set())
    return found


def _discover_into(found: Discovered, fn, models, optimizers, depth: int, seen: set) -> None:
    for i, m in enumerate(_as_list(models)):
        found.add("model" if i == 0 and len(_as_list(models)) == 1 else f"models[{i}]", m)
    for i, o in enumerate(_as_list(optimizers)):
        found.add("optimizer" if len(_as_list(optimizers)) == 1 else f"optimizers[{i}]", o)

    if isinstance(fn, torch.nn.Module):
        found.add(type(fn).__name__, fn)
        fn = fn.forward
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        if isinstance(owner, torch.nn.Module):
            found.add(type(owner).__name__, owner)
        else:
            for name, value in vars(owner).items() if hasattr(owner, "__dict__") else ():
                found.add(f"self.{name}", value)
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None or id(fn) in seen:
        return
    seen.add(id(fn))
    referenced = []
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            referenced.append((name, cell.cell_contents))
        except ValueError:        # an empty cell (a variable assigned later)
            pass
    glob = getattr(fn, "__globals__", {})
    referenced += [(name, glob[name]) for name in dict.fromkeys(_code_names(code)) if name in glob]
    for name, value in referenced:
        found.add(name, value)
        # a helper function of the user's that the step calls: look into it too (not into libraries)
        if isinstance(value, types.FunctionType) and depth < _MAX_DEPTH \
                and not (getattr(value, "__module__", "") or "").startswith(("torch", "nova.frontend", "nova.compiler")):
            if all(f is not value for f in found.functions):
                found.functions.append(value)
            _discover_into(found, value, None, None, depth + 1, seen)


_MAX_DEPTH = 3


def modules_of(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``model.named_modules()`` as a list (preorder, each module once), walked without its nested
    generators: the guard walks every model at every call."""
    out, seen, stack = [], set(), [("", model)]
    while stack:
        path, m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append((path, m))
        prefix = path + "." if path else ""
        stack.extend(reversed([(prefix + k, c) for k, c in m._modules.items() if c is not None]))
    return out


def _as_list(x) -> list:
    if x is None:
        return []
    if isinstance(x, (torch.nn.Module, torch.optim.Optimizer)):
        return [x]
    return list(x)
