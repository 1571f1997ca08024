"""Optimizers: recognised ``torch.optim`` classes are not traced (their default step calls
``.item()``); their ``step()`` is replaced, while capturing, by Nova's own update emitted as the
custom ops ``nova::adamw`` / ``nova::sgd`` (one per parameter group), which the lowering expands
into the IR composites ``adamw`` / ``sgd``, one per parameter.  The numeric hyper-parameters of each
parameter group (lr, betas, eps, weight decay, momentum, dampening) are a runtime input of the
program, one f64 vector per group (``Handler.hyper_values``, read from ``param_groups`` on every
call), so a learning-rate schedule never recaptures; only what changes the program (``maximize``,
``nesterov``, momentum on or off, Adam's coupled or AdamW's decoupled decay) is guarded.  The
optimizer state (``step``, ``exp_avg``, ``exp_avg_sq``, ``momentum_buffer``) becomes graph
inputs and outputs.  Lazily-initialised state is created exactly as eager torch would create it
(``StateInit``) on the first compiled call.

Supported: ``torch.optim.AdamW``, ``torch.optim.Adam`` (coupled or decoupled weight decay),
``torch.optim.SGD`` (momentum, dampening, nesterov, weight decay), each with ``maximize``;
``foreach``/``fused``/``capturable`` only change where eager keeps ``step`` (matched).  Not:
``amsgrad``, ``differentiable``, a closure, a grad scaler's ``grad_scale``/``found_inf``, step
hooks, subclasses, other optimizers: ``NovaUnsupportedError``.
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import MutableMapping
from dataclasses import dataclass

import torch

from nova.frontend.errors import NovaUnsupportedError
from nova.ir.ops import ADAMW_HYPER, SGD_HYPER, ref_adamw, ref_sgd

_HYPER: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # optimizer -> {id(group): (group, vector)}

# =================================================================== the custom ops
# One op per parameter group (a traced op costs milliseconds; a model has hundreds of parameters).
# Each returns the new values flat: adamw -> params, exp_avgs, exp_avg_sqs, steps (the step count
# incremented); sgd -> params[, momentum buffers].  The lowering expands them per parameter.
_SCHEMAS = {
    "adamw": "adamw(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] steps, "
             "Tensor hyper, bool decoupled, bool maximize) -> Tensor[]",
    "sgd": "sgd(Tensor[] params, Tensor[] grads, Tensor?[] momentum_buffers, Tensor hyper, bool with_momentum, "
           "bool nesterov, bool maximize) -> Tensor[]",
}


def _adamw_impl(params, grads, exp_avgs, exp_avg_sqs, steps, hyper, decoupled, maximize):
    outs = ([], [], [], [])
    for p, g, m, v, t in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
        new = ref_adamw(torch, p, g, m, v, t + 1, hyper, decoupled, maximize) + (t + 1,)
        for out, x in zip(outs, new):
            out.append(x)
    return [x for out in outs for x in out]


def _sgd_impl(params, grads, momentum_buffers, hyper, with_momentum, nesterov, maximize):
    new_params, new_buffers = [], []
    for p, g, b in zip(params, grads, momentum_buffers):
        out = ref_sgd(torch, p, g, hyper, *(() if b is None else (b,)), with_momentum=with_momentum,
                      nesterov=nesterov, maximize=maximize)
        new_params.append(out[0])
        new_buffers += list(out[1:])
    return new_params + new_buffers


def _adamw_fake(params, grads, exp_avgs, exp_avg_sqs, steps, *rest):
    return [torch.empty_like(t) for t in (*params, *exp_avgs, *exp_avg_sqs, *steps)]


def _sgd_fake(params, grads, momentum_buffers, hyper, with_momentum, *rest):
    buffers = [torch.empty_like(p if b is None else b) for p, b in zip(params, momentum_buffers)]
    return [torch.empty_like(p) for p in params] + (buffers if with_momentum else [])     # distinct tensors


def _define_ops():
    try:
        torch.ops.nova.adamw
        return None                           # already defined (module reloaded)
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("nova", "FRAGMENT")
    for name, impl, fake in (("adamw", _adamw_impl, _adamw_fake), ("sgd", _sgd_impl, _sgd_fake)):
        lib.define(_SCHEMAS[name])
        lib.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"nova::{name}", fake, lib=lib)
    return lib


_LIB = _define_ops()


def live_groups(opt, ctx):
    """``(group index, group, params with a gradient, their leaves)`` of each of ``opt``'s parameter
    groups that has any parameter with a gradient."""
    for gi, group in enumerate(opt.param_groups):
        ps = [p for p in group["params"] if ctx.leaf(p).grad is not None]
        if ps:
            yield gi, group, ps, [ctx.leaf(p) for p in ps]


# =================================================================== state creation
@dataclass(frozen=True)
class StateInit:
    """How eager torch creates a missing state entry on its first step: ``zeros_like`` the
    parameter, or a 0-d ``step`` of ``dtype`` on ``device`` (None: the parameter's device)."""
    kind: str                       # "zeros_like" | "step"
    dtype: torch.dtype | None = None
    device: str | None = None

    def create(self, param: torch.Tensor) -> torch.Tensor:
        if self.kind == "zeros_like":
            return torch.zeros_like(param, memory_format=torch.preserve_format)
        return torch.zeros((), dtype=self.dtype, device=self.device or param.device)

    def signature(self, param: torch.Tensor) -> tuple:
        if self.kind == "zeros_like":
            return (tuple(param.shape), param.dtype, param.device.type)
        return ((), self.dtype, self.device or param.device.type)


def tensor_signature(t) -> tuple:
    return (t.shape, t.dtype, t.device.type) if isinstance(t, torch.Tensor) else ("value", type(t).__name__)


def _scalar_dtype(is_fused=None):
    from torch.optim import optimizer as base
    fn = getattr(base, "_get_scalar_dtype", None)
    if fn is None:
        return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    return fn(is_fused=is_fused) if is_fused is not None else fn()


@functools.lru_cache(maxsize=None)
def _adam_state_inputs(capturable: bool, fused, default_dtype) -> tuple:
    """Adam's state entries for a group's flags (and torch's default dtype, which the step's dtype
    follows): the same for every parameter of the group, made once (the guard asks at every call)."""
    on_device = capturable or fused
    step = StateInit("step", _scalar_dtype(is_fused=fused) if on_device else _scalar_dtype(),
                     None if on_device else "cpu")
    zeros = StateInit("zeros_like")
    return (("step", step), ("exp_avg", zeros), ("exp_avg_sq", zeros))


def _float(x) -> float:
    return float(x.item()) if isinstance(x, torch.Tensor) else float(x)


# =================================================================== handlers
class TraceContext:
    """What a handler's traced step sees: the traced parameter leaves, the traced state and, per
    parameter group, the traced hyper-parameter vector (a graph input)."""

    def leaf(self, param) -> torch.Tensor: ...
    def state(self, opt, param) -> dict: ...
    def hyper(self, opt, group_index: int) -> torch.Tensor: ...


class TracedState(MutableMapping):
    """``opt.state`` as the step's own code sees it while tracing: ``opt.state[p]`` (``p`` the
    parameter or its traced leaf) is the traced state -- the program's state inputs before the
    update, the update's results after it -- so a step that reads a momentum buffer or ``exp_avg``
    reads what eager would, and nothing of the trace lands in the user's ``opt.state``."""

    def __init__(self, opt, ctx: TraceContext, real: dict):
        self._opt, self._ctx, self._real = opt, ctx, real
        self._params = {}
        for group in opt.param_groups:
            for p in group["params"]:
                self._params[id(p)] = p
                leaf = ctx.leaves.get(id(p)) if hasattr(ctx, "leaves") else None
                if leaf is not None:
                    self._params[id(leaf)] = p

    def _param(self, key):
        return self._params.get(id(key))

    def __getitem__(self, key):
        param = self._param(key)
        if param is None:
            return self._real[key]
        return self._ctx.state(self._opt, param)

    def __setitem__(self, key, value):
        param = self._param(key)
        if param is None:
            self._real[key] = value
            return
        state = self._ctx.state(self._opt, param)
        state.clear()
        state.update(value)

    def __delitem__(self, key):
        param = self._param(key)
        if param is None:
            del self._real[key]
        else:
            self._ctx.state(self._opt, param).clear()

    def __contains__(self, key):
        param = self._param(key)
        return key in self._real if param is None else bool(self._ctx.state(self._opt, param))

    def __iter__(self):
        return iter([p for p in dict.fromkeys(self._params.values()) if self._ctx.state(self._opt, p)])

    def __len__(self):
        return sum(1 for _ in self)


class RecordedGroup(dict):
    """A parameter group as the step's own code sees it while tracing: a copy of the user's dict
    that notes the keys the code reads and writes (``record(kind, key)``, kind ``"read"`` or
    ``"write"``) while ``active()`` -- not while Nova's own update reads its hyper-parameters.  A
    rate the step reads as a Python number is baked into the trace (the caller guards it); one the
    step sets would change once, at capture (the caller refuses it)."""

    def __init__(self, group: dict, record, active):
        super().__init__(group)
        self._record, self._active = record, active

    def _note(self, kind: str, key) -> None:
        if key != "params" and self._active():
            self._record(kind, key)

    def __getitem__(self, key):
        self._note("read", key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note("read", key)
        return super().get(key, default)

    def __setitem__(self, key, value):
        self._note("write", key)
        super().__setitem__(key, value)

    def update(self, *args, **kwargs):
        for key in dict(*args, **kwargs):
            self._note("write", key)
        super().update(*args, **kwargs)

    def setdefault(self, key, default=None):
        self._note("write", key)
        return super().setdefault(key, default)


class Handler:
    """One optimizer family: its checks, its state layout, its hyper-parameters, its traced update.

    ``hyper_names`` are the numbers a scheduler or a user may change between steps: they reach the
    program as one f64 vector per parameter group (``hyper_values``), never as constants.
    ``structure`` is what changes the program itself (guarded: a change recaptures)."""
    classes: tuple = ()
    name = ""
    hyper_names: tuple = ()

    def check(self, opt, where: str) -> None:
        for attr in ("grad_scale", "found_inf"):
            if getattr(opt, attr, None) is not None:
                raise NovaUnsupportedError(f"{where}: {type(opt).__name__} with a grad scaler's {attr} is not supported")
        for i, group in enumerate(opt.param_groups):
            if group.get("differentiable"):
                raise NovaUnsupportedError(f"{where}: {type(opt).__name__}(differentiable=True) is not supported "
                                           f"(param_groups[{i}])")

    def state_inputs(self, opt, group, param) -> list[tuple[str, StateInit | None]]:
        """The state entries the update reads, as (key, how to create it when missing)."""
        raise NotImplementedError

    def group_state_inputs(self, opt, group):
        """``state_inputs`` when it is the same for every parameter of ``group`` (read once per group
        by the guard), else None."""
        return None

    def state_signature(self, opt, group, param, inputs=None) -> tuple:
        """What the captured graph assumes about ``opt.state[param]`` (missing entries that the
        first step creates count as created, so the first and later steps share one graph).
        ``inputs``: the group's ``group_state_inputs`` when it has them."""
        state = opt.state.get(param) or {}
        return tuple((key, tensor_signature(state[key]) if key in state else init.signature(param))
                     for key, init in (inputs or self.state_inputs(opt, group, param)))

    def hyper_values(self, opt, group) -> list[float]:
        """The group's ``hyper_names`` as Python floats (a tensor ``lr`` read as its value)."""
        raise NotImplementedError

    def structure(self, opt, group) -> dict:
        """The group's settings that change the program (booleans)."""
        raise NotImplementedError

    def lifted_keys(self) -> tuple:
        """The ``param_groups`` keys whose values reach the program through ``hyper_values``
        (left out of the guard)."""
        return self.hyper_names

    def hyper_tensor(self, opt, group) -> torch.Tensor:
        """The group's hyper-parameters as one CPU f64 vector: the same tensor at every call for a
        group (its values written in place), so a program that reads it by pointer binds it once
        (a fresh tensor per call would rebind a CPU program at every step)."""
        values = torch.tensor(self.hyper_values(opt, group), dtype=torch.float64)
        held = _HYPER.setdefault(opt, {})
        kept = held.get(id(group))
        if kept is None or kept[0] is not group or kept[1].shape != values.shape:
            held[id(group)] = (group, values)
            return values
        kept[1].copy_(values)
        return kept[1]

    def step(self, opt, ctx: TraceContext) -> None:
        raise NotImplementedError


class AdamHandler(Handler):
    classes = (torch.optim.Adam, torch.optim.AdamW)
    name = "adam"
    hyper_names = ADAMW_HYPER

    def check(self, opt, where):
        super().check(opt, where)
        for i, group in enumerate(opt.param_groups):
            if group.get("amsgrad"):
                raise NovaUnsupportedError(f"{where}: {type(opt).__name__}(amsgrad=True) is not supported "
                                           f"(param_groups[{i}])")

    def state_inputs(self, opt, group, param):
        return _adam_state_inputs(bool(group.get("capturable")), group.get("fused"), torch.get_default_dtype())

    def group_state_inputs(self, opt, group):
        return self.state_inputs(opt, group, None)

    def hyper_values(self, opt, group):
        beta1, beta2 = (_float(b) for b in group["betas"])
        return [_float(group["lr"]), beta1, beta2, _float(group["eps"]), _float(group["weight_decay"])]

    def lifted_keys(self):
        return ("lr", "betas", "eps", "weight_decay")

    def structure(self, opt, group):
        return dict(maximize=bool(group.get("maximize", False)),
                    decoupled=bool(group.get("decoupled_weight_decay", isinstance(opt, torch.optim.AdamW))))

    def step(self, opt, ctx):
        for gi, group, ps, leaves in live_groups(opt, ctx):
            st = self.structure(opt, group)
            states = [ctx.state(opt, p) for p in ps]
            new = torch.ops.nova.adamw(
                leaves, [x.grad for x in leaves], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                [s["step"] for s in states], ctx.hyper(opt, gi), st["decoupled"], st["maximize"])
            n = len(ps)
            torch._foreach_copy_(leaves, new[:n])
            for i, state in enumerate(states):
                state.update(step=new[3 * n + i], exp_avg=new[n + i], exp_avg_sq=new[2 * n + i])


class SGDHandler(Handler):
    classes = (torch.optim.SGD,)
    name = "sgd"
    hyper_names = SGD_HYPER

    def state_inputs(self, opt, group, param):
        if group["momentum"] != 0 and opt.state.get(param, {}).get("momentum_buffer") is not None:
            return [("momentum_buffer", None)]
        return []                  # first step: the buffer starts as the gradient (an output only)

    def state_signature(self, opt, group, param, inputs=None):
        return (group["momentum"] != 0,) + super().state_signature(opt, group, param, inputs)

    def hyper_values(self, opt, group):
        return [_float(group["lr"]), _float(group["momentum"]), _float(group["dampening"]),
                _float(group["weight_decay"])]

    def structure(self, opt, group):
        return dict(with_momentum=_float(group["momentum"]) != 0, nesterov=bool(group["nesterov"]),
                    maximize=bool(group.get("maximize", False)))

    def step(self, opt, ctx):
        for gi, group, ps, leaves in live_groups(opt, ctx):
            st = self.structure(opt, group)
            momentum = st["with_momentum"]
            buffers = [ctx.state(opt, p).get("momentum_buffer") for p in ps] if momentum else [None] * len(ps)
            new = torch.ops.nova.sgd(leaves, [x.grad for x in leaves], buffers, ctx.hyper(opt, gi), momentum,
                                     st["nesterov"], st["maximize"])
            n = len(ps)
            torch._foreach_copy_(leaves, new[:n])
            if momentum:
                for i, p in enumerate(ps):
                    ctx.state(opt, p)["momentum_buffer"] = new[n + i]


HANDLERS = (AdamHandler(), SGDHandler())


def handler_for(opt, where: str = "") -> Handler:
    """The handler of ``opt``'s exact class (a subclass may override ``step``: not recognised)."""
    for handler in HANDLERS:
        if type(opt) in handler.classes:
            handler.check(opt, where or type(opt).__name__)
            return handler
    raise NovaUnsupportedError(f"{where or 'optimizer'}: optimizer class {type(opt).__module__}.{type(opt).__qualname__} "
                               f"is not supported (Nova recognises torch.optim.AdamW, Adam and SGD)")


def hyper_parameters(opt) -> tuple:
    """Every param group's settings that the program depends on, hashable: all but its parameters
    and the numbers lifted to the program's hyper-parameter input (``Handler.lifted_keys``), plus
    the group's ``structure`` (a zero momentum is structure: it removes the buffer)."""
    handler = handler_for(opt)
    lifted = set(handler.lifted_keys()) | {"params"}
    groups = []
    for group in opt.param_groups:
        settings = tuple((k, _hashable(v)) for k, v in sorted(group.items()) if k not in lifted)
        groups.append(settings + tuple(sorted(handler.structure(opt, group).items())))
    return tuple(groups)


def _hashable(v):
    if isinstance(v, torch.Tensor):
        return float(v.item()) if v.numel() == 1 else ("tensor", tuple(v.shape))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)
