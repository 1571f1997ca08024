"""Bindings: where each graph input comes from in the user's world and where each graph output
goes back, so that after a compiled step ``model.parameters()``, their ``.grad`` and ``opt.state``
hold what eager would hold.

    tensors, pending = bindings.gather(flat_args)      # one tensor per graph input
    outputs = engine(tensors)                           # one tensor per graph output
    result = bindings.scatter(outputs, flat_args, pending)

Write-back rules (eager's): parameters are updated in place (``p.copy_``, skipped when the engine
already wrote into ``p``); optimizer state that exists is updated in place, state created by the
first step is installed into ``opt.state[p]`` in torch's key order with torch's dtype and device;
``.grad`` is updated in place when it exists, created (``empty_like(p)``) when it did not, and set to
``None`` where the step leaves it ``None`` (``zero_grad(set_to_none=True)``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from nova.frontend.optim import StateInit
from nova.frontend.schedulers import SchedulerCalls


@dataclass(eq=False)
class InputBinding:
    """One graph input: ``kind`` is param | buffer | grad | opt_state | hyper | data | const
    (``hyper``: an optimizer parameter group's hyper-parameters, read from ``param_groups`` on
    every call as a CPU f64 vector)."""
    kind: str
    name: str
    tensor: Any = None                 # param/buffer: the object; grad/opt_state: the parameter; const: the tensor
    optimizer: Any = None
    key: str = ""                      # opt_state: the state entry ("exp_avg", "step", ...)
    arg_index: int = -1                # data: position among the flattened (args, kwargs) leaves
    init: StateInit | None = None      # opt_state missing at capture: how eager creates it
    group_index: int = -1              # hyper: the parameter group
    handler: Any = None                # hyper: the optimizer's handler (nova.frontend.optim)

    def fetch(self, flat_args, pending: list) -> torch.Tensor:
        if self.kind in ("param", "buffer", "const"):
            return self.tensor
        if self.kind == "grad":
            return self.tensor.grad
        if self.kind == "data":
            return flat_args[self.arg_index]
        if self.kind == "hyper":
            return self.handler.hyper_tensor(self.optimizer, self.optimizer.param_groups[self.group_index])
        state = self.optimizer.state.get(self.tensor)
        value = state.get(self.key) if state else None
        if value is None:
            value = self.init.create(self.tensor)
            pending.append((self, value))
        return value


@dataclass(eq=False)
class OutputBinding:
    """One graph output: ``kind`` is result | param | grad | opt_state | check (a boolean that must
    hold, ``name`` the message raised when it does not; ``nova.frontend.checks``)."""
    kind: str
    name: str
    tensor: Any = None                 # param/grad/opt_state: the parameter
    optimizer: Any = None
    key: str = ""
    result_index: int = -1             # result: position among the returned value's leaves


@dataclass
class Bindings:
    inputs: list[InputBinding]
    outputs: list[OutputBinding]
    result_spec: Any                   # pytree spec of the user's return value
    result_leaves: list                # per leaf: ("output", k) | ("value", v) | ("input", InputBinding)
    grads_to_none: list = field(default_factory=list)    # parameters whose .grad the step leaves None
    stepped: list = field(default_factory=list)          # optimizers whose step() the function calls
    schedulers: SchedulerCalls = field(default_factory=SchedulerCalls)   # LR scheduler steps run on the host

    def gather(self, flat_args) -> tuple[list[torch.Tensor], list]:
        pending: list = []
        tensors = [b.fetch(flat_args, pending) for b in self.inputs]
        updated = self.updated_parameters
        if len({tensors[i].data_ptr() for i in updated}) != len(updated):
            _refuse_shared_parameters([(self.inputs[i], tensors[i]) for i in updated])
        return tensors, pending

    @functools.cached_property
    def updated_parameters(self) -> tuple[int, ...]:
        """Positions of the inputs that are parameters the step writes back (the bindings never change)."""
        written = {id(o.tensor) for o in self.outputs if o.kind == "param"}
        return tuple(i for i, b in enumerate(self.inputs) if b.kind == "param" and id(b.tensor) in written)

    def failed_check(self, outputs) -> str | None:
        """The message of the first check output that is False (read on the host), else None."""
        for binding, value in zip(self.outputs, outputs):
            if binding.kind == "check" and not bool(value):
                return binding.name
        return None

    def scatter(self, outputs, flat_args, pending, *, result_device=None, outputs_alias_engine=False):
        """Write ``outputs`` back into the user's objects; returns the function's return value.  An
        output that is its target already (the engine wrote the user's tensor in place) costs one
        identity check."""
        if len(outputs) != len(self.outputs):
            raise RuntimeError(f"the engine returned {len(outputs)} outputs, the graph has {len(self.outputs)}")
        for binding, value in pending:                    # state the first step creates (zeros, step 0)
            self._state(binding.optimizer, binding.tensor)[binding.key] = value
        targets = [_target(b) for b in self.outputs]
        written = [t for t, v in zip(targets, outputs) if isinstance(t, torch.Tensor) and v is not t]
        if written:
            outputs = _unalias(outputs, targets, written)
        results = {}
        with torch.no_grad():
            for binding, target, value in zip(self.outputs, targets, outputs):
                if value is target:
                    continue
                if binding.kind == "result":
                    results[binding.result_index] = value
                elif binding.kind == "param":
                    target.copy_(value)
                elif binding.kind == "opt_state":
                    if _same_layout(target, value):
                        target.copy_(value)
                    else:
                        self._state(binding.optimizer, binding.tensor)[binding.key] = _fresh_like(binding.tensor, value)
                elif binding.kind == "grad":
                    if _same_layout(target, value):
                        target.copy_(value)
                    else:
                        binding.tensor.grad = _fresh_like(binding.tensor, value)
        for p in self.grads_to_none:
            p.grad = None
        for opt in self.stepped:
            if hasattr(opt.step, "_wrapped_by_lr_sched"):    # what the LR scheduler's wrapper records
                opt._opt_called = True
        leaves = []
        for kind, what in self.result_leaves:
            if kind == "output":
                value = results[what]
                if outputs_alias_engine:
                    value = value.clone()
                if result_device is not None and value.device != result_device:
                    value = value.to(result_device)
                leaves.append(value)
            elif kind == "input":
                leaves.append(what.fetch(flat_args, []))
            else:
                leaves.append(what)
        return pytree.tree_unflatten(leaves, self.result_spec)

    @staticmethod
    def _state(opt, param) -> dict:
        return opt.state[param]           # a defaultdict: creates the entry like eager's first step


def _target(binding: OutputBinding):
    """The user's object an output is written into now (None for a result or a check)."""
    if binding.kind == "param":
        return binding.tensor
    if binding.kind == "grad":
        return binding.tensor.grad
    if binding.kind == "opt_state":
        state = binding.optimizer.state.get(binding.tensor)
        return state.get(binding.key) if state else None
    return None


def _same_layout(current, value) -> bool:
    return isinstance(current, torch.Tensor) and current.shape == value.shape and current.dtype == value.dtype


def _fresh_like(param: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A new tensor the user owns, laid out like the parameter (as eager's grads and buffers are)."""
    if value.shape == param.shape:
        out = torch.empty_like(param, dtype=value.dtype, memory_format=torch.preserve_format)
    else:
        out = torch.empty(value.shape, dtype=value.dtype, device=param.device)
    return out.copy_(value)


def _refuse_shared_parameters(params) -> None:
    """Two distinct parameters the step updates, on one storage (``b.weight.data = a.weight.data``,
    weights tied the old way): eager applies both updates to the shared memory one after the other,
    a program computes each from the values it read (the last write would win, or a multi-tensor
    kernel race): one line, checked on every call (a tie made between calls)."""
    from nova.frontend.errors import NovaUnsupportedError
    first: dict = {}
    for binding, tensor in params:
        other = first.setdefault(tensor.data_ptr(), binding.name)
        if other != binding.name:
            raise NovaUnsupportedError(
                f"parameters {other} and {binding.name}, both updated by the step, share one storage (tied "
                f"through .data): tie them as one Parameter (make {binding.name} the same object as {other})")


def _unalias(outputs, targets, written) -> list:
    """Clone any output that shares memory with a tensor about to be written (``written``) and is
    not its own target, so write-back order cannot corrupt it."""
    storages = {_storage(t) for t in written}
    return [value.clone() if isinstance(value, torch.Tensor) and value is not target and _storage(value) in storages
            else value for value, target in zip(outputs, targets)]


def _storage(t: torch.Tensor):
    try:
        return (t.device, t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return (t.device, id(t))
