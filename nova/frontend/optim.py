"""Optimizers: recognised ``torch.optim`` classes are not traced (their default step calls
``.item()``); their ``step()`` is replaced, while capturing, by Nova's own update emitted as the
custom ops ``nova::adamw`` / ``nova::sgd`` (one per parameter group), which the lowering expands
into the IR composites ``adamw`` / ``sgd``, one per parameter.  Hyper-parameters are read from ``param_groups`` (and guarded);
the optimizer state (``step``, ``exp_avg``, ``exp_avg_sq``, ``momentum_buffer``) becomes graph
inputs and outputs.  Lazily-initialised state is created exactly as eager torch would create it
(``StateInit``) on the first compiled call.

Supported: ``torch.optim.AdamW``, ``torch.optim.Adam`` (coupled or decoupled weight decay),
``torch.optim.SGD`` (momentum, dampening, nesterov, weight decay), each with ``maximize``;
``foreach``/``fused``/``capturable`` only change where eager keeps ``step`` (matched).  Not:
``amsgrad``, ``differentiable``, a closure, a grad scaler's ``grad_scale``/``found_inf``, step
hooks, subclasses, other optimizers: ``NovaUnsupportedError``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nova.frontend.errors import NovaUnsupportedError
from nova.ir.ops import ref_adamw, ref_sgd

# =================================================================== the custom ops
# One op per parameter group (a traced op costs milliseconds; a model has hundreds of parameters).
# Each returns the new values flat: adamw -> params, exp_avgs, exp_avg_sqs, steps (the step count
# incremented); sgd -> params[, momentum buffers].  The lowering expands them per parameter.
_SCHEMAS = {
    "adamw": "adamw(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] steps, "
             "float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled, bool maximize) "
             "-> Tensor[]",
    "sgd": "sgd(Tensor[] params, Tensor[] grads, Tensor?[] momentum_buffers, float lr, float momentum, "
           "float dampening, float weight_decay, bool nesterov, bool maximize) -> Tensor[]",
}


def _adam_grad(param, grad, weight_decay, decoupled, maximize):
    """Adam's coupled decay (``grad + wd * param`` after ``maximize``) folded into the gradient;
    returns (grad, weight decay and maximize left for ``adamw``)."""
    if weight_decay != 0 and not decoupled:
        grad = (-grad if maximize else grad).add(param, alpha=weight_decay)
        return grad, 0.0, False
    return grad, weight_decay, maximize


def _adamw_impl(params, grads, exp_avgs, exp_avg_sqs, steps, lr, beta1, beta2, eps, weight_decay, decoupled,
                maximize):
    outs = ([], [], [], [])
    for p, g, m, v, t in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
        g, wd, mx = _adam_grad(p, g, weight_decay, decoupled, maximize)
        new = ref_adamw(torch, p, g, m, v, t + 1, lr, beta1, beta2, eps, wd, mx) + (t + 1,)
        for out, x in zip(outs, new):
            out.append(x)
    return [x for out in outs for x in out]


def _sgd_impl(params, grads, momentum_buffers, lr, momentum, dampening, weight_decay, nesterov, maximize):
    new_params, new_buffers = [], []
    for p, g, b in zip(params, grads, momentum_buffers):
        out = ref_sgd(torch, p, g, *(() if b is None else (b,)), lr=lr, momentum=momentum, dampening=dampening,
                       weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)
        new_params.append(out[0])
        new_buffers += list(out[1:])
    return new_params + new_buffers


def _adamw_fake(params, grads, exp_avgs, exp_avg_sqs, steps, *rest):
    return [torch.empty_like(t) for t in (*params, *exp_avgs, *exp_avg_sqs, *steps)]


def _sgd_fake(params, grads, momentum_buffers, lr, momentum, *rest):
    return [torch.empty_like(p) for p in params * (2 if momentum else 1)]     # distinct tensors


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
    """``(group, hyper-parameters, params with a gradient, their leaves)`` of each of ``opt``'s
    parameter groups that has any parameter with a gradient."""
    for group, hp in zip(opt.param_groups, ctx.hyper(opt)):
        ps = [p for p in group["params"] if ctx.leaf(p).grad is not None]
        if ps:
            yield group, hp, ps, [ctx.leaf(p) for p in ps]


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
    return (tuple(t.shape), t.dtype, t.device.type) if isinstance(t, torch.Tensor) else ("value", type(t).__name__)


def _scalar_dtype(is_fused=None):
    from torch.optim import optimizer as base
    fn = getattr(base, "_get_scalar_dtype", None)
    if fn is None:
        return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    return fn(is_fused=is_fused) if is_fused is not None else fn()


def _float(x) -> float:
    return float(x.item()) if isinstance(x, torch.Tensor) else float(x)


# =================================================================== handlers
class TraceContext:
    """What a handler's traced step sees: the traced parameter leaves, the traced state and the
    hyper-parameters (read before tracing: a tensor ``lr`` is a real tensor)."""

    def leaf(self, param) -> torch.Tensor: ...
    def state(self, opt, param) -> dict: ...
    def hyper(self, opt) -> list[dict]: ...


class Handler:
    """One optimizer family: its checks, its state layout, its traced update."""
    classes: tuple = ()
    name = ""

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

    def state_signature(self, opt, group, param) -> tuple:
        """What the captured graph assumes about ``opt.state[param]`` (missing entries that the
        first step creates count as created, so the first and later steps share one graph)."""
        state = opt.state.get(param, {})
        sig = []
        for key, init in self.state_inputs(opt, group, param):
            sig.append((key, tensor_signature(state[key]) if key in state else init.signature(param)))
        return tuple(sig)

    def read_hyper(self, opt, group) -> dict:
        """The group's hyper-parameters as Python numbers."""
        raise NotImplementedError

    def step(self, opt, ctx: TraceContext) -> None:
        raise NotImplementedError


class AdamHandler(Handler):
    classes = (torch.optim.Adam, torch.optim.AdamW)
    name = "adam"

    def check(self, opt, where):
        super().check(opt, where)
        for i, group in enumerate(opt.param_groups):
            if group.get("amsgrad"):
                raise NovaUnsupportedError(f"{where}: {type(opt).__name__}(amsgrad=True) is not supported "
                                           f"(param_groups[{i}])")

    def state_inputs(self, opt, group, param):
        on_device = group.get("capturable") or group.get("fused")
        step = StateInit("step", _scalar_dtype(is_fused=group.get("fused")) if on_device else _scalar_dtype(),
                         None if on_device else "cpu")
        zeros = StateInit("zeros_like")
        return [("step", step), ("exp_avg", zeros), ("exp_avg_sq", zeros)]

    def read_hyper(self, opt, group):
        beta1, beta2 = (_float(b) for b in group["betas"])
        return dict(lr=_float(group["lr"]), eps=_float(group["eps"]), wd=_float(group["weight_decay"]),
                    beta1=beta1, beta2=beta2, maximize=bool(group.get("maximize", False)),
                    decoupled=bool(group.get("decoupled_weight_decay", isinstance(opt, torch.optim.AdamW))))

    def step(self, opt, ctx):
        for group, hp, ps, leaves in live_groups(opt, ctx):
            states = [ctx.state(opt, p) for p in ps]
            new = torch.ops.nova.adamw(
                leaves, [x.grad for x in leaves], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
                [s["step"] for s in states], hp["lr"], hp["beta1"], hp["beta2"], hp["eps"], hp["wd"],
                hp["decoupled"], hp["maximize"])
            n = len(ps)
            torch._foreach_copy_(leaves, new[:n])
            for i, state in enumerate(states):
                state.update(step=new[3 * n + i], exp_avg=new[n + i], exp_avg_sq=new[2 * n + i])


class SGDHandler(Handler):
    classes = (torch.optim.SGD,)
    name = "sgd"

    def state_inputs(self, opt, group, param):
        if group["momentum"] != 0 and opt.state.get(param, {}).get("momentum_buffer") is not None:
            return [("momentum_buffer", None)]
        return []                  # first step: the buffer starts as the gradient (an output only)

    def state_signature(self, opt, group, param):
        return (group["momentum"] != 0,) + super().state_signature(opt, group, param)

    def read_hyper(self, opt, group):
        return dict(lr=_float(group["lr"]), wd=_float(group["weight_decay"]), momentum=_float(group["momentum"]),
                    dampening=_float(group["dampening"]), nesterov=bool(group["nesterov"]),
                    maximize=bool(group.get("maximize", False)))

    def step(self, opt, ctx):
        for group, hp, ps, leaves in live_groups(opt, ctx):
            momentum = hp["momentum"] != 0
            buffers = [ctx.state(opt, p).get("momentum_buffer") for p in ps] if momentum else [None] * len(ps)
            new = torch.ops.nova.sgd(leaves, [x.grad for x in leaves], buffers, hp["lr"], hp["momentum"],
                                     hp["dampening"], hp["wd"], hp["nesterov"], hp["maximize"])
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
    """Every param group's settings except its parameters, hashable (tensors read as floats)."""
    groups = []
    for group in opt.param_groups:
        groups.append(tuple((k, _hashable(v)) for k, v in sorted(group.items()) if k != "params"))
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
