"""What one multi-tensor optimizer kernel computes, independent of any schedule.

An ``UpdateRule`` is the per-element update: ``torch.optim.AdamW``/``Adam`` (``ref_adamw``) or
``torch.optim.SGD`` (``ref_sgd``, ``nova/ir/ops.py``), its structural switches (decoupled or coupled
weight decay, maximize, momentum, nesterov, a first step without a momentum buffer), the element type
of every tensor it touches and, for Adam, the element type of the step counts.  It is what a kernel
is compiled for (the kernel cache's problem): the tensors, their sizes and every number (learning
rate, betas, eps, weight decay, momentum, dampening, the step counts) reach the kernel at run time
through its argument table and the hyper-parameter vector, so a learning-rate schedule never
recompiles and one kernel serves every model.

With ``grad_scale`` the update reads its gradient times a per-tensor device scalar (gradient
clipping's coefficient, ``torch.nn.utils.clip_grad_norm_``'s ``grad * clip_coef``, folded into the
update by ``nova/passes/multi_tensor.py``): the product rounded to the storage type, as the IR's
``mul`` gives it; with ``grad_out`` the kernel also writes that scaled gradient (a ``.grad`` read
after the step).

A ``MultiTensorProblem`` is one launch: the rule and the element counts of the tensors it updates
(one optimizer group, ``nova.passes.fusion.update_batch_key``), for the prediction and explain.

    MultiTensorProblem.from_nodes(group.nodes)
    MultiTensorProblem(UpdateRule("adamw", "bf16", "f32"), (42_000_000,))
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass

from nova.dtypes import element

OPTIMIZERS = ("adamw", "sgd")
STORAGE_DTYPES = ("f32", "bf16", "f16", "f64")       # parameters, gradients, optimizer state
STEP_DTYPES = ("f32", "f64", "i64", "i32")           # Adam's step counts (torch keeps f32)
# The hyper-parameter vectors' entries, in the IR's order (nova/ir/ops.py ADAMW_HYPER, SGD_HYPER; the
# kernels sit below the IR, tests/test_optimizer_kernel.py checks that they agree)
ADAMW_HYPER = ("lr", "beta1", "beta2", "eps", "weight_decay")
SGD_HYPER = ("lr", "momentum", "dampening", "weight_decay")


class OptimizerProblemError(ValueError):
    """An update no multi-tensor kernel computes (one line naming why)."""


@dataclass(frozen=True)
class UpdateRule:
    op: str                            # "adamw" (Adam and AdamW) | "sgd"
    dtype: str                         # every tensor's element type: parameters, gradients, state
    step_dtype: str = ""               # adamw: the step counts' element type
    decoupled: bool = True             # adamw: AdamW's decay (param *= 1 - lr wd); False: Adam's grad += wd param
    maximize: bool = False
    with_momentum: bool = False        # sgd
    nesterov: bool = False             # sgd with momentum
    first_step: bool = False           # sgd with momentum and no buffer yet: the buffer starts as the gradient
    grad_scale: bool = False           # the gradient read times a per-tensor scalar of ``dtype`` (clipping)
    grad_out: bool = False             # the scaled gradient also written (grad_scale only)

    def __post_init__(self):
        if self.op not in OPTIMIZERS:
            raise OptimizerProblemError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.op!r}")
        if self.dtype not in STORAGE_DTYPES:
            raise OptimizerProblemError(f"dtype must be one of {', '.join(STORAGE_DTYPES)}, got {self.dtype!r}")
        if self.op == "adamw" and self.step_dtype not in STEP_DTYPES:
            raise OptimizerProblemError(f"the step counts must be one of {', '.join(STEP_DTYPES)}, "
                                        f"got {self.step_dtype!r}")
        if self.op == "sgd" and (self.step_dtype or not self.decoupled):
            raise OptimizerProblemError("sgd has no step counts and no decoupled decay")
        if self.op == "adamw" and (self.with_momentum or self.nesterov or self.first_step):
            raise OptimizerProblemError("momentum, nesterov and first_step are sgd's")
        if (self.nesterov or self.first_step) and not self.with_momentum:
            raise OptimizerProblemError("nesterov and first_step need momentum")
        if self.grad_out and not self.grad_scale:
            raise OptimizerProblemError("grad_out writes the scaled gradient: it needs grad_scale")

    @property
    def itemsize(self) -> int:
        return element(self.dtype).bytes

    @property
    def hyper(self) -> tuple[str, ...]:
        """The hyper-parameter vector's entries, in order (f64 on the device)."""
        return ADAMW_HYPER if self.op == "adamw" else SGD_HYPER

    def reads(self) -> tuple[str, ...]:
        """The tensors read element for element."""
        if self.op == "adamw":
            return ("param", "grad", "exp_avg", "exp_avg_sq")
        return ("param", "grad") + (("momentum_buffer",) if self.with_momentum and not self.first_step else ())

    def writes(self) -> tuple[str, ...]:
        """The tensors written element for element (each may be the storage of its read twin)."""
        grad = ("grad",) if self.grad_out else ()
        if self.op == "adamw":
            return ("param", "exp_avg", "exp_avg_sq") + grad
        return ("param",) + (("momentum_buffer",) if self.with_momentum else ()) + grad

    def scalars(self) -> tuple[str, ...]:
        """The per-tensor one-element operands: the step count (adamw), the gradient's scale."""
        return (("step",) if self.op == "adamw" else ()) + (("grad_scale",) if self.grad_scale else ())

    def pointers(self) -> tuple[str, ...]:
        """Every per-tensor pointer of the argument table, in its order: the reads, the step count
        (adamw), the gradient's scale (grad_scale), then the writes (``<name>_out``)."""
        return self.reads() + self.scalars() + tuple(f"{name}_out" for name in self.writes())

    def later_steps(self) -> "UpdateRule":
        """The rule of the steps after this one: an SGD first step (no momentum buffer yet) is followed
        by steps that read the buffer it creates; every other rule stays as it is."""
        return dataclasses.replace(self, first_step=False)

    @property
    def bytes_per_element(self) -> int:
        return (len(self.reads()) + len(self.writes())) * self.itemsize

    def describe(self) -> str:
        if self.op == "adamw":
            name = "adamw" if self.decoupled else "adam"
            flags = ["maximize"] if self.maximize else []
        else:
            name = "sgd"
            flags = [f for f, on in (("momentum", self.with_momentum), ("nesterov", self.nesterov),
                                     ("first step", self.first_step), ("maximize", self.maximize)) if on]
        flags += ["grad x scale"] if self.grad_scale else []
        flags += ["scaled grad written"] if self.grad_out else []
        step = f", {self.step_dtype} steps" if self.step_dtype else ""
        return f"{name} {self.dtype}{step}" + (f" ({', '.join(flags)})" if flags else "")

    def to_dict(self) -> dict:
        d = asdict(self)
        for name in ("grad_scale", "grad_out"):       # a rule without them keeps the key it always had
            if not d[name]:
                del d[name]
        return d


@dataclass(frozen=True)
class MultiTensorProblem:
    rule: UpdateRule
    sizes: tuple[int, ...]             # element counts of the tensors, in launch order

    def __post_init__(self):
        if not self.sizes or any(int(n) < 0 for n in self.sizes):
            raise OptimizerProblemError(f"element counts must be non-negative and at least one, got {list(self.sizes)}")

    @property
    def numel(self) -> int:
        return sum(self.sizes)

    @property
    def tensors(self) -> int:
        return len(self.sizes)

    def bytes_moved(self) -> int:
        """Each tensor's elements read and written once (the argument table and the scalars aside)."""
        return self.numel * self.rule.bytes_per_element

    def describe(self) -> str:
        tensors = f"{self.tensors} tensor{'s' if self.tensors != 1 else ''}"
        return f"multi-tensor {self.rule.describe()} over {tensors} ({_count(self.numel)} elements)"

    def to_dict(self) -> dict:
        return {"rule": self.rule.to_dict(), "tensors": self.tensors, "numel": self.numel, "sizes": list(self.sizes)}

    @classmethod
    def from_nodes(cls, nodes) -> "MultiTensorProblem":
        """The problem of one optimizer group (``adamw``/``sgd`` nodes of one batch key).  Raises
        ``OptimizerProblemError`` naming what no kernel of this family does (mixed element types)."""
        first = nodes[0]
        op = first.op
        if op not in OPTIMIZERS:
            raise OptimizerProblemError(f"{op} is not an optimizer update")
        dtype = first.inputs[0].dtype
        step_dtype = first.inputs[4].dtype if op == "adamw" else ""
        attrs = dict(first.attrs)
        if op == "adamw":
            rule = UpdateRule(op, dtype, step_dtype, decoupled=bool(attrs.get("decoupled", True)),
                              maximize=bool(attrs.get("maximize", False)))
        else:
            momentum = bool(attrs.get("with_momentum", False))
            rule = UpdateRule(op, dtype, with_momentum=momentum, nesterov=bool(attrs.get("nesterov", False)),
                              maximize=bool(attrs.get("maximize", False)), first_step=momentum and len(first.inputs) < 4)
        hyper = first.inputs[5 if op == "adamw" else 2]
        for n in nodes:
            if n.op != op or dict(n.attrs) != attrs or len(n.inputs) != len(first.inputs):
                raise OptimizerProblemError(f"{n.op} {dict(n.attrs)} differs from the group's {op} {attrs}")
            if n.inputs[5 if op == "adamw" else 2] is not hyper:
                raise OptimizerProblemError("the updates read different hyper-parameter vectors")
            tensors = [v for k, v in enumerate(n.inputs) if k not in ((4, 5) if op == "adamw" else (2,))]
            for v in tensors + list(n.outputs):
                if v.dtype != dtype:
                    raise OptimizerProblemError(f"mixed element types ({v.type} in a {dtype} update)")
                if v.shape != n.inputs[0].shape:
                    raise OptimizerProblemError(f"{v.type} beside a {n.inputs[0].type} parameter")
            if op == "adamw" and n.inputs[4].dtype != step_dtype:
                raise OptimizerProblemError(f"mixed step counts ({n.inputs[4].type} and {step_dtype})")
        return cls(rule, tuple(n.inputs[0].type.numel for n in nodes))


def parse_sizes(text: str) -> tuple[int, ...]:
    """``"42000000"`` or ``"50304x768,768,3x768x768"``: element counts, one per tensor (``x`` multiplies)."""
    sizes = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            dims = [int(d) for d in part.lower().split("x")]
        except ValueError:
            raise OptimizerProblemError(f"tensor sizes {text!r}: expected element counts such as 42000000 or "
                                        f"768x768,768") from None
        if not dims or any(d < 1 for d in dims):
            raise OptimizerProblemError(f"tensor sizes {text!r}: every extent must be a positive integer")
        sizes.append(math.prod(dims))
    return tuple(sizes)


def _count(n: int) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


INPUT_POSITIONS = {"adamw": {"param": 0, "grad": 1, "exp_avg": 2, "exp_avg_sq": 3, "step": 4},
                   "sgd": {"param": 0, "grad": 1, "momentum_buffer": 3}}
HYPER_POSITION = {"adamw": 5, "sgd": 2}         # the IR op's hyper-parameter input


def operand_slots(rule: UpdateRule, inputs, outputs) -> dict:
    """``{pointer name: operand}`` of one ``adamw``/``sgd`` node's ``inputs`` and ``outputs`` (IR values
    or tensors, in the op's order) for ``rule.pointers()``."""
    positions = INPUT_POSITIONS[rule.op]
    slots = {name: inputs[positions[name]] for name in rule.reads()}
    if rule.op == "adamw":
        slots["step"] = inputs[positions["step"]]
    slots.update({f"{name}_out": outputs[k] for k, name in enumerate(rule.writes())})
    return slots
