"""Capture: a whole training step (forward, ``loss.backward()``, ``opt.step()``, ``zero_grad``) ->
one value-semantic IR graph, traced on fake tensors (nothing allocated, no GPU, no compute on the
user's tensors), plus the bindings to the user's objects and the guards.

How:

1. Every tensor the step reads becomes a graph input, a fake CPU tensor of its shape and dtype:
   parameters (leaves with the parameter's ``requires_grad``), buffers, existing ``.grad``s (set
   as the leaves' ``.grad`` so ``backward`` accumulates into them like eager), optimizer state
   (missing state as the zeros eager would create), the tensor arguments.
2. The parameters and buffers are swapped into the user's modules (by identity, so tied weights
   stay tied); each optimizer's ``step``/``zero_grad`` is replaced by Nova's (``optim.py``).
3. The user's function runs once under ``make_fx`` with dispatch functionalization: autograd runs
   for real (on fakes), so ``loss.backward()`` traces the backward; in-place updates become
   functional.  The traced function returns the final value of every input (parameters, grads,
   state, buffers, arguments) plus the user's result.
4. ``lower`` turns the FX graph into IR; outputs that equal their input are dropped (nothing
   changed), others become outputs that update their input (``updates=``); unused inputs are
   pruned.  Mutated buffers or arguments are refused (one line).

Unsupported constructs raise ``NovaUnsupportedError`` with one line naming what and where.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from nova.frontend.bindings import Bindings, InputBinding, OutputBinding
from nova.frontend.discover import Discovered, discover
from nova.frontend.errors import NovaUnsupportedError
from nova.frontend.guards import GuardKey, guard_key
from nova.frontend.lower import Unmodeled, lower
from nova.frontend.optim import RecordedGroup, TraceContext, TracedState, handler_for
from nova.frontend.origin import OriginTracker, traceback_location
from nova.frontend.tracing import compiling
from nova.frontend.checks import finite_norm_checks
from nova.frontend.autocast import DeviceAutocast, cuda_autocast_on_host
from nova.frontend.originals import OriginalsResolved
from nova.frontend.failures import is_tracing_limitation, quiet_meta_failures, users_error
from nova.frontend import data_parallel, schedulers
from nova.frontend.schedulers import SchedulerCalls
from nova.frontend.collectives import functional_collectives
from nova.ir import Graph, Value, verify

_ROLES = {"param": "param", "buffer": "const", "grad": "grad", "opt_state": "opt_state", "hyper": "opt_state",
          "data": "data", "const": "const"}


@dataclass
class CaptureStats:
    trace_s: float = 0.0
    lower_s: float = 0.0
    fx_nodes: int = 0
    ir_nodes: int = 0
    opaque: dict = field(default_factory=dict)     # aten target -> count of opaque IR nodes

    @property
    def total_s(self) -> float:
        return self.trace_s + self.lower_s


@dataclass
class Captured:
    graph: Graph
    bindings: Bindings
    guards: GuardKey
    fx: Any                       # the traced torch.fx.GraphModule (for debugging)
    stats: CaptureStats
    group_reads: tuple = ()       # (optimizer, group index, key, path): hyper-parameters the step read as numbers


# ====================================================================== checks
# forward hooks whose whole effect is on the tensors they see, so the trace records it: Hugging Face's
# ``enable_input_require_grads`` (installed by ``gradient_checkpointing_enable``) marks the embeddings'
# output as requiring grad
TRACED_HOOKS = frozenset({"make_inputs_require_grads"})


def _check_supported(found: Discovered) -> None:
    from torch.nn.modules import module as module_mod
    for attr in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks"):
        if getattr(module_mod, attr, None):
            raise NovaUnsupportedError(f"a global module hook is registered ({attr.strip('_')}); Nova cannot "
                                       f"replay hooks")
    from torch.optim import optimizer as optimizer_mod
    if getattr(optimizer_mod, "_global_optimizer_pre_hooks", None) or \
            getattr(optimizer_mod, "_global_optimizer_post_hooks", None):
        raise NovaUnsupportedError("a global optimizer step hook is registered; Nova cannot replay hooks")
    for name, model in found.models:
        for path, m in model.named_modules():
            for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
                hooks = getattr(m, attr, None) or {}
                if any(getattr(h, "__name__", "") not in TRACED_HOOKS for h in hooks.values()):
                    raise NovaUnsupportedError(f"module {_join(name, path)} ({type(m).__name__}) has a "
                                               f"{attr.strip('_').replace('_', ' ')[:-1]}; Nova cannot replay hooks")
        for path, p in model.named_parameters():
            if p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None):
                raise NovaUnsupportedError(f"parameter {_join(name, path)} has a tensor hook; Nova cannot replay hooks")
    for name, opt in found.optimizers:
        handler_for(opt, name)
        if getattr(opt, "_optimizer_step_pre_hooks", None) or getattr(opt, "_optimizer_step_post_hooks", None):
            raise NovaUnsupportedError(f"optimizer {name} has a step hook; Nova cannot replay hooks")


def _check_moment_dtypes(name: str, opt, trace) -> None:
    """Adam's and AdamW's moments must have their parameter's dtype: eager's update (``lerp_`` of the
    moment towards the gradient) refuses a float32 moment of a parameter made float64 after the
    optimizer's first step (``model.double()``); the compiled step refuses it too, in one line,
    instead of updating through a mixed-precision kernel.  Only the parameters the update reads are
    checked (those with a gradient, as eager's update skips the others)."""
    if not isinstance(opt, torch.optim.Adam | torch.optim.AdamW):
        return
    for group in opt.param_groups:
        for p in group["params"]:
            if trace.leaf(p).grad is None:
                continue
            for moment in ("exp_avg", "exp_avg_sq"):
                m = opt.state.get(p, {}).get(moment)
                if isinstance(m, torch.Tensor) and m.dtype != p.dtype:
                    raise NovaUnsupportedError(
                        f"optimizer {name} ({type(opt).__name__}): parameter {trace.param_names.get(id(p), '?')} is "
                        f"{p.dtype} but its {moment} is {m.dtype} (its dtype changed after the optimizer's first "
                        f"step); eager {type(opt).__name__} refuses this update too")


def _join(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if path else prefix


# ====================================================================== the inputs
def _plan_inputs(found: Discovered, flat_args, arg_names) -> list[InputBinding]:
    """Every tensor the step may read, in graph-input order."""
    multi = len(found.models) > 1
    slots: list[InputBinding] = []
    param_names: dict[int, str] = {}
    for mname, model in found.models:
        for path, p in model.named_parameters():
            if id(p) not in param_names:
                param_names[id(p)] = f"{mname}.{path}" if multi else path
                slots.append(InputBinding("param", param_names[id(p)], p))
    seen_buffers = set()
    for mname, model in found.models:
        for path, b in model.named_buffers():
            if id(b) not in seen_buffers:
                seen_buffers.add(id(b))
                slots.append(InputBinding("buffer", f"{mname}.{path}" if multi else path, b))
    for oname, opt in found.optimizers:       # parameters an optimizer holds outside the models found
        for gi, group in enumerate(opt.param_groups):
            for j, p in enumerate(group["params"]):
                if id(p) not in param_names:
                    param_names[id(p)] = f"{oname}.param_groups[{gi}].params[{j}]"
                    slots.append(InputBinding("param", param_names[id(p)], p))
    for s in list(slots):
        if s.kind == "param" and s.tensor.grad is not None:
            slots.append(InputBinding("grad", s.name + ".grad", s.tensor))
    for oname, opt in found.optimizers:
        handler = handler_for(opt, oname)
        for gi, group in enumerate(opt.param_groups):
            slots.append(InputBinding("hyper", f"{oname}.param_groups[{gi}].hyper", optimizer=opt, group_index=gi,
                                      handler=handler))
            for p in group["params"]:
                state = opt.state.get(p, {})
                for key, init in handler.state_inputs(opt, group, p):
                    slots.append(InputBinding("opt_state", f"{oname}.state[{param_names[id(p)]}].{key}", p, opt, key,
                                              init=None if key in state else init))
    for i, leaf in enumerate(flat_args):
        if isinstance(leaf, torch.Tensor):
            if leaf.requires_grad:
                raise NovaUnsupportedError(f"argument {arg_names[i]} requires grad; Nova compiles steps whose "
                                           f"trainable tensors are module parameters (pass it detached)")
            slots.append(InputBinding("data", arg_names[i], arg_index=i))
    return slots


def _example(slot: InputBinding, flat_args) -> torch.Tensor:
    """The real tensor (or what eager would create) a slot stands for, for its fake."""
    if slot.kind in ("param", "buffer"):
        return slot.tensor
    if slot.kind == "grad":
        return slot.tensor.grad
    if slot.kind == "data":
        return flat_args[slot.arg_index]
    if slot.kind == "hyper":
        return slot.fetch(flat_args, [])
    state = slot.optimizer.state.get(slot.tensor, {})
    if slot.key in state:
        value = state[slot.key]
        if not isinstance(value, torch.Tensor):
            raise NovaUnsupportedError(f"{slot.name} is a {type(value).__name__}, not a tensor")
        return value
    return slot.init.create(torch.empty_like(slot.tensor, device="meta"))


def _fake_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu")


def _arg_names(fn, args, kwargs, n: int) -> list[str]:
    """A readable name for each flattened argument leaf: ``idx``, ``batch[0]``, ``targets``."""
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    names = []
    leaves = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0] \
        if hasattr(pytree, "tree_flatten_with_path") else []
    for path, _ in leaves:
        keys = [getattr(k, "idx", getattr(k, "key", None)) for k in path]
        if keys and keys[0] == 0 and len(keys) > 1:
            head = params[keys[1]] if keys[1] < len(params) else f"args[{keys[1]}]"
        elif keys and keys[0] == 1 and len(keys) > 1:
            head = str(keys[1])
        else:
            head = "arg"
        names.append(head + "".join(f"[{k!r}]" for k in keys[2:]))
    return names if len(names) == n else [f"arg{i}" for i in range(n)]


# ====================================================================== swapping and interception
@contextlib.contextmanager
def _swapped_tensors(found: Discovered, replacements: dict[int, torch.Tensor]):
    """Put the traced leaves into the user's modules in place of their parameters and buffers
    (by identity: a tied weight is replaced everywhere it appears); restore them afterwards.  Yields
    a list that names, once the block is left, each one the step assigned anew (``self.queue =
    torch.cat(...)``: a compiled step would make that assignment once, at capture)."""
    saved, reassigned = [], []
    try:
        for name, model in found.models:
            for path, m in model.named_modules():
                for store in (m._parameters, m._buffers):
                    for k, t in list(store.items()):
                        if t is not None and id(t) in replacements:
                            saved.append((store, k, t, _join(name, f"{path}.{k}" if path else k)))
                            store[k] = replacements[id(t)]
        yield reassigned
    finally:
        for store, k, t, where in reversed(saved):
            if store.get(k) is not replacements[id(t)]:
                reassigned.append(where)
            store[k] = t


class _Trace(TraceContext):
    def __init__(self, tracker: OriginTracker, found: Discovered):
        self.tracker = tracker
        self.hypers: dict[tuple[int, int], torch.Tensor] = {}     # (id(opt), group index) -> traced input
        self.opt_names = {id(opt): name for name, opt in found.optimizers}
        self.leaves: dict[int, torch.Tensor] = {}
        self.states: dict[tuple[int, int], dict] = {}     # (id(opt), id(p)) -> key -> traced tensor
        self.state_owner: dict[tuple[int, int], tuple] = {}
        self.stepped: list = []
        self.events: list = []       # ("step", optimizer) | ("schedule", LR scheduler), in call order
        self.group_reads: dict = {}  # (id(opt), group index, key) -> (optimizer, group index, key): read by the step
        self.group_writes: dict = {}  # the same, set by the step

    def note_group(self, opt, group_index: int, kind: str, key) -> None:
        """A parameter group's ``key`` read or written by the step's own code (``RecordedGroup``).  A
        read after the step's own scheduler step is refused: the scheduler runs on the host after the
        program, so the trace would bake the rate from before it."""
        if kind == "read" and key in SCHEDULED and \
                any(k == "schedule" and getattr(s, "optimizer", None) is opt for k, s in self.events):
            raise NovaUnsupportedError(
                f"the step reads {self.opt_names[id(opt)]}.param_groups[{group_index}][{key!r}] after stepping its "
                f"LR scheduler: the scheduler steps on the host after the compiled program, so the step would read "
                f"the rate from before it; read it outside the compiled function")
        (self.group_reads if kind == "read" else self.group_writes)[(id(opt), group_index, key)] = \
            (opt, group_index, key)

    def leaf(self, param):
        return self.leaves[id(param)]

    def hyper(self, opt, group_index):
        return self.hypers[(id(opt), group_index)]

    def state(self, opt, param):
        key = (id(opt), id(param))
        if key not in self.states:
            self.states[key] = {}
            self.state_owner[key] = (opt, param)
        return self.states[key]


SWAPPED = ("step", "zero_grad", "state", "param_groups")     # an optimizer's attributes replaced while tracing
SCHEDULED = ("lr", "betas", "momentum")                       # the group entries LR schedulers change


@contextlib.contextmanager
def _intercepted(found: Discovered, trace: _Trace):
    """Replace each optimizer's ``step`` and ``zero_grad`` by Nova's while tracing, its ``state`` by
    the traced state (``TracedState``) and its parameter groups by copies that note what the step's
    own code reads and writes (``RecordedGroup``)."""
    saved = []

    def make_step(name, opt, handler):
        def step(closure=None):
            if closure is not None:
                raise NovaUnsupportedError(f"{name}.step(closure) is not supported; call the model before step()")
            _check_moment_dtypes(name, opt, trace)
            trace.tracker.set(f"optimizer {name} ({type(opt).__name__})")
            trace.tracker.paused = True
            try:
                with torch.no_grad():
                    handler.step(opt, trace)
            finally:
                trace.tracker.paused = False
                trace.tracker.set("")
            if opt not in trace.stepped:
                trace.stepped.append(opt)
            trace.events.append(("step", opt))
        return step

    def make_zero_grad(opt):
        def zero_grad(set_to_none: bool = True):
            for group in opt.param_groups:
                for p in group["params"]:
                    leaf = trace.leaf(p)
                    if leaf.grad is None:
                        continue
                    if set_to_none:
                        leaf.grad = None
                    else:
                        if leaf.grad.grad_fn is not None:
                            leaf.grad.detach_()
                        else:
                            leaf.grad.requires_grad_(False)
                        leaf.grad.zero_()
        return zero_grad

    try:
        for name, opt in found.optimizers:
            handler = handler_for(opt, name)
            saved.append((opt, {k: opt.__dict__[k] for k in SWAPPED if k in opt.__dict__}))
            opt.step = make_step(name, opt, handler)
            opt.zero_grad = make_zero_grad(opt)
            opt.state = TracedState(opt, trace, opt.state)
            opt.param_groups = [RecordedGroup(group, functools.partial(trace.note_group, opt, gi),
                                              lambda: not trace.tracker.paused)
                                for gi, group in enumerate(opt.param_groups)]
        yield
    finally:
        for opt, attrs in saved:
            for k in SWAPPED:
                if k in attrs:
                    setattr(opt, k, attrs[k])
                else:
                    opt.__dict__.pop(k, None)


@contextlib.contextmanager
def _undiscovered_refused(found: Discovered):
    """An optimizer the step uses but Nova did not find would run for real (on the user's tensors,
    silently updating nothing): while tracing, its step() and zero_grad() raise instead."""
    from torch.optim import optimizer as optimizer_mod

    def refuse(opt, *args, **kwargs):
        raise NovaUnsupportedError(f"the step uses a {type(opt).__name__} optimizer that Nova did not find among the "
                                   f"function's globals and closure; pass nova.compile(..., optimizers=[...])")
    handle = optimizer_mod.register_optimizer_step_pre_hook(refuse)
    base_zero_grad = torch.optim.Optimizer.zero_grad
    torch.optim.Optimizer.zero_grad = refuse
    try:
        yield
    finally:
        handle.remove()
        torch.optim.Optimizer.zero_grad = base_zero_grad


# ====================================================================== capture
def capture(fn, args=(), kwargs=None, *, models=None, optimizers=None, found: Discovered | None = None,
            name: str | None = None, device_type: str | None = None) -> Captured:
    """Trace ``fn(*args, **kwargs)`` (one whole step) into an IR graph with its bindings and guards.
    Nothing runs on the user's tensors and their state is left untouched.  ``device_type``: the
    device the step runs on (default: its first tensor argument's, else first parameter's), whose
    ``torch.autocast`` applies to the CPU fakes (``autocast.py``)."""
    kwargs = dict(kwargs or {})
    found = found or discover(fn, models, optimizers)
    _check_supported(found)
    guards = guard_key(found, args, kwargs, fn)
    flat_args, args_spec = pytree.tree_flatten((tuple(args), kwargs))
    arg_names = _arg_names(fn, args, kwargs, len(flat_args))
    slots = _plan_inputs(found, flat_args, arg_names)
    device_type = device_type or _step_device_type(found, flat_args)

    module_names = {}
    for mname, model in found.models:
        for path, m in model.named_modules():
            module_names.setdefault(id(m), path if len(found.models) == 1 and path else _join(mname, path))
    tracker = OriginTracker(module_names)
    trace = _Trace(tracker, found)
    trace.checks = []                        # value checks kept in the graph (checks.py)
    trace.param_names = {id(s.tensor): s.name for s in slots if s.kind == "param"}    # for error lines
    returned = _Returned()

    def traced(*flat):
        tracker.attach()
        trace.events.clear()
        trace.group_reads.clear()
        trace.group_writes.clear()
        replacements = {}
        args_leaves = list(flat_args)
        for slot, t in zip(slots, flat):
            if slot.kind == "param":
                t.requires_grad_(slot.tensor.requires_grad)
                trace.leaves[id(slot.tensor)] = t
                replacements[id(slot.tensor)] = t
            elif slot.kind == "buffer":
                replacements[id(slot.tensor)] = t
            elif slot.kind == "grad":
                trace.leaves[id(slot.tensor)].grad = t
            elif slot.kind == "opt_state":
                trace.state(slot.optimizer, slot.tensor)[slot.key] = t
            elif slot.kind == "hyper":
                trace.hypers[(id(slot.optimizer), slot.group_index)] = t
            elif slot.kind == "data":
                args_leaves[slot.arg_index] = t
        user_args, user_kwargs = pytree.tree_unflatten(args_leaves, args_spec)
        with _swapped_tensors(found, replacements) as reassigned, _undiscovered_refused(found), _intercepted(found, trace), \
                OriginalsResolved(replacements), finite_norm_checks(trace.checks), DeviceAutocast(device_type), functional_collectives(), \
                data_parallel.traced(found, lambda p: trace.leaves.get(id(p), p)), schedulers.recorded(trace.events), \
                tracker:
            result = fn(*user_args, **user_kwargs)
        if reassigned:
            raise NovaUnsupportedError(
                f"the step assigns a new tensor to {', '.join(dict.fromkeys(reassigned))} (a buffer or parameter "
                f"replaced in forward, e.g. a queue rebuilt with torch.cat); Nova updates parameters, grads and "
                f"optimizer state in place only: update it in place outside the compiled function")
        tracker.set("")
        return _collect(result, slots, flat, trace, returned)

    groups_before = _hyper_parameters(found)
    fake_mode = torch._subclasses.fake_tensor.FakeTensorMode()
    examples = [_example(s, flat_args) for s in slots]
    with fake_mode:
        fakes = [_fake_like(e) for e in examples]

    from torch._subclasses.functional_tensor import FunctionalTensorMode, dispatch_functionalize
    from torch.fx.experimental.proxy_tensor import make_fx
    t0 = time.perf_counter()
    try:
        with compiling(), quiet_meta_failures(), cuda_autocast_on_host(device_type):
            gm = make_fx(dispatch_functionalize(traced, FunctionalTensorMode()), decomposition_table=_decompositions(),
                         tracing_mode="fake")(*fakes)
    except NovaUnsupportedError:
        raise
    except Exception as e:
        if not is_tracing_limitation(e):
            raise users_error(e) from None          # the user's own error, as eager raises it
        raise _explain_failure(e, tracker, _unflattened_arguments(flat_args, arg_names)) from e
    t1 = time.perf_counter()

    _check_mutations(gm, returned)
    _check_escapes(fn, found)
    _check_group_writes(trace, found, groups_before)
    graph_name = name or getattr(fn, "__name__", "step").replace("<", "").replace(">", "")
    lowered = lower(gm, [s.name for s in slots], [_ROLES[s.kind] for s in slots], graph_name)
    for cname, tensor in lowered.constants:
        slots.append(InputBinding("const", f"constant.{cname}", tensor))
    graph, bindings = _assemble(lowered, slots, returned, trace)
    graph, opaque = _without_dead_nodes(graph, lowered.opaque)
    verify(graph)
    t2 = time.perf_counter()
    stats = CaptureStats(trace_s=t1 - t0, lower_s=t2 - t1, fx_nodes=len(gm.graph.nodes), ir_nodes=len(graph.nodes),
                         opaque=opaque)
    group_reads = tuple((opt, gi, key, f"{trace.opt_names[id(opt)]}.param_groups[{gi}][{key!r}]")
                        for opt, gi, key in trace.group_reads.values())
    return Captured(graph, bindings, guards, gm, stats, group_reads)


def _check_escapes(fn, found: Discovered) -> None:
    """One line when the step left a tensor of the trace where its Python reaches it (a global list it
    appends the loss to, ``self.last_loss = loss``, a closure's dict): a compiled step replays only
    tensor work, so the store would happen once, with a placeholder (``escapes.py``)."""
    from nova.frontend.escapes import escaped, forget
    found_escapes = escaped(fn, found)
    if found_escapes:
        forget(found_escapes)                # the user's lists and dicts as they were before the capture
        paths = ", ".join(path for path, _, _ in found_escapes[:3]) + (" ..." if len(found_escapes) > 3 else "")
        raise NovaUnsupportedError(
            f"the step stores a tensor it computes in {paths}: a compiled step replays only its tensor work, so "
            f"that store would happen once, at capture; return the tensor from the step and store it outside")


def _hyper_parameters(found: Discovered) -> list:
    """Each optimizer's parameter groups without their parameters, as plain dicts."""
    return [[{k: v for k, v in group.items() if k != "params"} for group in opt.param_groups]
            for _, opt in found.optimizers]


def _check_group_writes(trace: _Trace, found: Discovered, before: list) -> None:
    """One line when the step sets an optimizer's hyper-parameter itself (``pg["lr"] *= 0.5``): a
    compiled step replays only its tensor work, so the change would happen once, at capture.  The
    user's parameter groups are left as they were before the capture."""
    written = [(trace.opt_names[id(opt)], gi, key) for opt, gi, key in trace.group_writes.values()]
    for (name, opt), groups in zip(found.optimizers, before):
        for gi, (group, old) in enumerate(zip(opt.param_groups, groups)):
            changed = [k for k in old if group.get(k) is not old[k] and group.get(k) != old[k]]
            for k in changed:                      # set through a reference to the group the step holds
                group[k] = old[k]
                written.append((name, gi, k))
    if written:
        name, gi, key = written[0]
        raise NovaUnsupportedError(
            f"the step sets {name}.param_groups[{gi}][{key!r}] itself: a compiled step replays only its tensor work, "
            f"so that change would happen once, at capture; set it outside the compiled function, or step an LR "
            f"scheduler inside it")


def _step_device_type(found: Discovered, flat_args) -> str:
    """The device type the step runs on: its first tensor argument's, else its first parameter's.
    A step on the meta device is one planned for a GPU target on a host (``explain train``,
    ``nova precompile``): it runs on "cuda", whose autocast applies."""
    def runs_on(device_type: str) -> str:
        return "cuda" if device_type == "meta" else device_type
    for leaf in flat_args:
        if isinstance(leaf, torch.Tensor):
            return runs_on(leaf.device.type)
    for _, model in found.models:
        for p in model.parameters():
            return runs_on(p.device.type)
    return "cpu"


def _without_dead_nodes(graph: Graph, opaque: dict) -> tuple[Graph, dict]:
    """The graph without nodes no output needs (a library's mask built and then folded away, an
    eager-only check), and the opaque counts of what remains."""
    from nova.passes.dce import dce, live_nodes
    if len(live_nodes(graph)) == len(graph.nodes):
        return graph, opaque
    graph = dce(graph)
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if node.op == "aten":
            counts[node.attrs["target"]] = counts.get(node.attrs["target"], 0) + 1
    return graph, dict(sorted(counts.items()))


def _decompositions() -> dict:
    """ATen decompositions applied while tracing: only ops whose decomposition is exact and whose
    parts the lowering covers (RMSNorm's fused kernels, where a torch version emits them)."""
    from torch._decomp import decomposition_table
    aten = torch.ops.aten
    wanted = [getattr(aten, n, None) for n in ("_fused_rms_norm", "_fused_rms_norm_backward")]
    table = {}
    for packet in wanted:
        if packet is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if op in decomposition_table:
                table[op] = decomposition_table[op]
    return table


@dataclass
class _Returned:
    """What the traced function returned, in order: ``kinds[i]`` says what output i is."""
    kinds: list = field(default_factory=list)          # ("result", leaf index) | ("param"|"grad"|"buffer"|"data", slot)
    #                                                    | ("opt_state", (optimizer, parameter, key))
    result_spec: Any = None
    result_leaves: list = field(default_factory=list)
    grads_to_none: list = field(default_factory=list)  # parameters whose .grad the step leaves None
    stepped: list = field(default_factory=list)
    schedulers: SchedulerCalls = field(default_factory=SchedulerCalls)


def _collect(result, slots, flat, trace: _Trace, returned: _Returned) -> list:
    """The traced function's outputs: the result's tensors, then the final value of every input
    (parameters, grads, optimizer state, buffers, arguments), described in ``returned``."""
    leaves, returned.result_spec = pytree.tree_flatten(result)
    outs = []
    inputs_by_id = {id(t): s for s, t in zip(slots, flat) if s.kind in ("param", "buffer", "data")}
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and id(leaf) in inputs_by_id:
            returned.result_leaves.append(("input", inputs_by_id[id(leaf)]))   # the user's own tensor
        elif isinstance(leaf, torch.Tensor):
            index = len(returned.result_leaves)
            returned.result_leaves.append(("output", index))
            outs.append(leaf)
            returned.kinds.append(("result", index))
        else:
            returned.result_leaves.append(("value", leaf))
    for slot, t in zip(slots, flat):
        if slot.kind == "param":
            outs.append(t)
            returned.kinds.append(("param", slot))
            if t.grad is None:
                returned.grads_to_none.append(slot.tensor)
            else:
                outs.append(t.grad)
                returned.kinds.append(("grad", slot))
        elif slot.kind in ("buffer", "data"):
            outs.append(t)
            returned.kinds.append((slot.kind, slot))
    for key, state in trace.states.items():
        opt, p = trace.state_owner[key]
        for k, v in state.items():
            outs.append(v)
            returned.kinds.append(("opt_state", (opt, p, k)))
    returned.stepped = list(trace.stepped)
    returned.schedulers = schedulers.ordered(trace.events)
    for check in trace.checks:
        outs.append(check.ok)
        returned.kinds.append(("check", check.message))
    return outs


def _check_mutations(gm, returned: _Returned) -> None:
    """Buffers and arguments must come out of the step as they went in (their FX output is their
    own placeholder); parameters, grads and optimizer state may change."""
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    for arg, (kind, what) in zip(out_node.args[0], returned.kinds):
        if kind in ("buffer", "data") and not (isinstance(arg, torch.fx.Node) and arg.op == "placeholder"):
            origin = arg.meta.get("nova_origin", "") if isinstance(arg, torch.fx.Node) else ""
            what_kind = "buffer" if kind == "buffer" else "argument"
            hint = " (e.g. BatchNorm running statistics in training mode)" if kind == "buffer" else \
                " (an in-place op on the batch: write `x = x * 2`, not `x.mul_(2)`)"
            raise NovaUnsupportedError(f"the step mutates its {what_kind} {what.name!r} in place"
                                       f"{' at ' + origin if origin else ''}{hint}; Nova updates parameters, grads "
                                       f"and optimizer state only")


def _assemble(lowered, slots: list[InputBinding], returned: _Returned, trace: _Trace):
    """Graph outputs and bindings from what the traced function returned: values equal to their
    input are dropped (nothing changed), the others update their input; unused inputs are pruned."""
    g = lowered.graph
    input_value = [i.value for i in g.inputs]
    slot_of = {(s.kind, id(s.optimizer), id(s.tensor), s.key): i for i, s in enumerate(slots)}
    outputs = []                   # (value, name, role, index of the input it updates or None, OutputBinding)
    checks = []                    # the boolean values of the value checks (checks.py)
    for value, (kind, what) in zip(lowered.outputs, returned.kinds):
        if not isinstance(value, Value):
            what_text = value.what if isinstance(value, Unmodeled) else repr(value)
            if isinstance(value, Unmodeled):
                value.refuse(f"the step returns or keeps {what_text}, which Nova does not model")
            raise NovaUnsupportedError(f"the step returns or keeps {what_text}, which Nova does not model")
        if kind == "check":
            outputs.append((value, f"check[{len(checks)}]", "result", None, OutputBinding("check", what)))
            checks.append(value)
            continue
        if kind == "result":
            name = "result" if len(returned.result_leaves) == 1 else f"result[{what}]"
            outputs.append((value, name, "result", None, OutputBinding("result", name, result_index=what)))
            continue
        if kind in ("buffer", "data"):
            continue                                   # unchanged (checked on the FX graph)
        if kind == "opt_state":
            opt, p, key = what
            i = slot_of.get(("opt_state", id(opt), id(p), key))
            name = f"{trace.opt_names[id(opt)]}.state[{slots[slot_of[('param', id(None), id(p), '')]].name}].{key}"
            binding = OutputBinding("opt_state", name, p, opt, key)
        else:                                          # param, grad
            i = slot_of.get((kind, id(None), id(what.tensor), ""))
            name = what.name if kind == "param" else what.name + ".grad"
            binding = OutputBinding(kind, name, what.tensor)
        if i is not None and value is input_value[i]:
            continue                                   # nothing changed
        outputs.append((value, name, kind, i, binding))

    if checks:                                         # updates only where every check holds
        ok = checks[0]
        for c in checks[1:]:
            ok = g.op("logical_and", ok, c, origin="checks")
        outputs = [(v if i is None or role == "result" else g.op("where", ok, v, input_value[i], origin="checks"),
                    name, role, i, b) for v, name, role, i, b in outputs]

    # prune the inputs nothing reads; an input that an output updates stays (the planner may write
    # the new value into its storage)
    used = {v for node in g.nodes for v in node.inputs} | {o[0] for o in outputs} \
        | {input_value[o[3]] for o in outputs if o[3] is not None}
    keep = [i for i, v in enumerate(input_value) if v in used]
    new_index = {old: new for new, old in enumerate(keep)}
    g.inputs = [g.inputs[i] for i in keep]
    for value, name, role, updates, _ in outputs:
        g.output(value, name, role, None if updates is None else new_index[updates])
    bindings = Bindings(inputs=[slots[i] for i in keep], outputs=[o[4] for o in outputs],
                        result_spec=returned.result_spec, result_leaves=returned.result_leaves,
                        grads_to_none=returned.grads_to_none, stepped=returned.stepped,
                        schedulers=returned.schedulers)
    return g, bindings


def _unflattened_arguments(flat_args, arg_names) -> list[str]:
    """The arguments that hold tensors torch's pytree does not reach (a dataclass, a plain object):
    their tensors are not inputs of the capture."""
    found = []
    for name, leaf in zip(arg_names, flat_args):
        fields = vars(leaf) if hasattr(leaf, "__dict__") and not isinstance(leaf, (torch.Tensor, torch.nn.Module)) else {}
        if any(isinstance(v, torch.Tensor) for v in fields.values()):
            found.append(f"{name} ({type(leaf).__name__})")
    return found


def _explain_failure(e: Exception, tracker: OriginTracker, unflattened=()) -> NovaUnsupportedError:
    """One line for an exception raised while tracing the user's step (``unflattened``: arguments whose
    tensors the capture does not see, ``_unflattened_arguments``)."""
    where = tracker.current or traceback_location(e.__traceback__)
    at = f" at {where}" if where else ""
    kind = type(e).__name__
    text = str(e).strip().splitlines()[0] if str(e).strip() else kind
    if kind in ("DataDependentOutputException", "DynamicOutputShapeException", "GuardOnDataDependentSymNode",
                "DataDependentOutputError"):
        return NovaUnsupportedError(f"data-dependent Python control flow or host read ({text}: .item(), bool(tensor), "
                                    f"if/while on a tensor value, or a data-dependent shape){at}")
    if "tensor subclass" in text or "data pointer" in text:
        return NovaUnsupportedError(f"reading a tensor's memory on the host is not supported while capturing "
                                    f"({text.rstrip('.')}){at}")
    if ("FakeTensor" in text or "convert all Tensors" in text) and unflattened:
        return NovaUnsupportedError(f"the step reads tensors inside {', '.join(unflattened)}, an argument torch's pytree "
                                    f"does not flatten: pass a dict, tuple or namedtuple, or register the class "
                                    f"(torch.utils._pytree.register_dataclass){at}")
    if "FakeTensor" in text or "convert all Tensors" in text:
        return NovaUnsupportedError(f"the step uses a tensor that is neither a parameter or buffer of the modules "
                                    f"found, nor an argument (a module attribute or a global? make it a buffer, pass "
                                    f"it as an argument, or name its module in models=){at}")
    return NovaUnsupportedError(f"capturing the step failed{at}: {kind}: {text}")
