"""``nova.compile`` and ``CompiledStep``: guards -> capture -> (passes ->) engine -> write-back.

    step = nova.compile(train_step)        # or @nova.compile, or nova.compile(fn, models=..., optimizers=...)
    loss = step(idx, targets)              # eager semantics: params, .grad and opt.state as eager leaves them

On each call the guard key (input shapes/dtypes/devices, parameters, optimizer class and
hyper-parameters, state structure, grad policy, grad mode) selects a cached entry; a miss captures
again (``stats.captures``, ``stats.last_recapture_reason``).  An entry holds the IR graph, its
bindings to the user's objects and an *engine*: a callable ``engine(list[Tensor]) -> list[Tensor]``
(one tensor per graph input / output) built by ``CompiledStep._build_engine(graph, device)``:

- ``backend="reference"``: ``nova.ir.interpreter.run`` on CPU tensors (inputs on another device are
  copied to the CPU and results copied back by the write-back).
- ``backend="auto"``: the reference engine on CPU; on CUDA, the planned program of
  ``nova.passes.pipeline`` + ``nova.compiler.executor.build`` (``ProgramEngine``).
- ``backend="executor"``: the planned program on any device (on CPU: ATen kernels, torch GEMMs).

The plan (``pipeline``'s ``Planned``) is cached on disk by the captured graph's structural hash
(``nova.compiler.plan_cache``: ``<NOVA_CACHE_DIR>/plans/``; ``NOVA_PLAN_CACHE=0`` turns it off), so
a second process captures, hashes, loads the plan and builds the program without the passes.
``stats.plan_cache`` says "hit" or "miss", ``stats.pipeline_s`` and ``stats.build_s`` the times.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from nova.frontend import Captured, capture, discover, guard_key
from nova.passes.memory import aligned

BACKENDS = ("auto", "reference", "executor")
WARN_AFTER = 3          # recaptures in a row caused by one Python value before nova.compile warns about it


class NovaRecaptureWarning(UserWarning):
    """A Python value the step reads changes between calls (each change recaptures), the step
    changes a Python value itself (a compiled step does not replay that), or it returns a Python
    value (returned as it was at capture)."""


@dataclass
class StepStats:
    calls: int = 0
    captures: int = 0
    cache_hits: int = 0
    capture_s: float = 0.0              # the last capture (trace + lowering)
    total_capture_s: float = 0.0
    engine_build_s: float = 0.0         # the last engine build (passes + program)
    plan_cache: str = ""                # the last engine build's plan: "hit", "miss", "off" ("" = no plan)
    pipeline_s: float = 0.0             # the last engine build: the passes, or loading their plan from disk
    build_s: float = 0.0                # the last engine build: the executor's program
    last_recapture_reason: str = ""
    history: list = field(default_factory=list)    # (reason, capture seconds) per capture


class ReferenceEngine:
    """Runs the graph with the IR's reference interpreter on CPU tensors (its collectives through
    the process groups of this process, ``nova.compiler.collectives``)."""
    outputs_alias_engine = False

    def __init__(self, graph):
        from nova.compiler.collectives import has_collectives, implementations
        self.graph = graph
        self.implementations = implementations() if has_collectives(graph) else None

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        from nova.ir import interpreter
        cpu = [t if t.device.type == "cpu" else t.cpu() for t in tensors]
        return interpreter.run(self.graph, cpu, implementations=self.implementations)


class ProgramEngine:
    """The executor's program as an engine.

    Inputs on another device than the program (the CPU ``step`` counts of torch's non-capturable
    optimizers) run through device mirrors, packed per (shape, dtype) into one device buffer.  The
    outputs that update such inputs and depend on nothing else (``step + 1``) are also computed on
    the host, by the reference semantics, and written into the user's tensors: no device-to-host
    copy, so no step waits for the GPU.  Outputs whose expressions are the same elementwise
    expression of different inputs (every parameter's ``step + 1``) are evaluated once, over their
    inputs stacked (``_host_groups``): one torch call per op, not one per parameter.  A mirror is
    refreshed (one pinned, asynchronous copy per pack) only when the host values differ from what it
    holds (the user changed the state)."""
    outputs_alias_engine = False

    def __init__(self, program, device: torch.device):
        self.program = program
        self.graph = program.graph
        self.device = device
        self._foreign = None        # input indices on another device
        self._packs = []            # [(input indices, device buffer, host copy of what it holds)]
        self._mirror_of = {}        # input index -> its mirror (a view of a pack's buffer)
        self._mirrored = {}         # id(mirror) -> its input index
        self._host_outputs = {}     # output index -> input index, computed on the host
        self._host_groups = []      # [(output value of the first, [output indices], [[input index per leaf]])]
        self._host_alone = []       # host outputs in no group: evaluated one node at a time

    def _prepare(self, tensors, foreign) -> None:
        self._foreign = foreign
        groups: dict[tuple, list[int]] = {}
        for i in foreign:
            groups.setdefault((tuple(tensors[i].shape), tensors[i].dtype), []).append(i)
        self._packs, self._mirror_of = [], {}
        for (shape, dtype), idx in groups.items():
            # one row per mirror, each starting on an arena slot boundary (memory.aligned: a kernel that
            # writes the step counts with 16-byte vectors, or checks its operands' alignment, sees aligned tensors)
            numel, itemsize = math.prod(shape), torch.empty((), dtype=dtype).element_size()
            row = aligned(max(numel, 1) * itemsize) // itemsize
            raw = torch.empty((len(idx), row), dtype=dtype, device=self.device)
            buffer = raw[:, :numel].unflatten(1, shape) if shape else raw[:, 0]
            self._packs.append([idx, buffer, None])
            self._mirror_of.update({i: raw[j, :numel].view(shape) for j, i in enumerate(idx)})
        self._mirrored = {id(m): i for i, m in self._mirror_of.items()}
        index_of = {spec.value: i for i, spec in enumerate(self.graph.inputs)}
        self._host_outputs = {k: o.updates for k, o in enumerate(self.graph.outputs)
                              if o.updates in self._mirror_of and _reads_only(o.value, index_of, set(foreign))}
        self._host_groups = _elementwise_groups(self.graph, list(self._host_outputs), index_of)
        grouped = {k for _, members, _ in self._host_groups for k in members}
        self._host_alone = [k for k in self._host_outputs if k not in grouped]

    def _host_values(self, tensors) -> dict:
        """The host-computable outputs, evaluated on the host inputs (before any is written): each
        group of outputs with one elementwise expression once, over its leaves' inputs stacked
        (``_elementwise_groups``), the others one node at a time."""
        out = {}
        for first, members, leaf_inputs in self._host_groups:
            stacked = [torch.stack([tensors[i] for i in column]) for column in zip(*leaf_inputs)]
            for k, r in zip(members, _evaluate(first, iter(stacked)).unbind(0)):
                out[k] = r
        if self._host_alone:
            env = {spec.value: tensors[i] for i, spec in enumerate(self.graph.inputs) if i in self._mirror_of}
            for k in self._host_alone:
                out[k] = _evaluate(self.graph.outputs[k].value, None, env)
        return out

    def release(self) -> None:
        """Free the program's device memory until its next call (``Program.release``)."""
        self.program.release()

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        index = self.device.index
        if self.device.type == "cuda" and index is not None:     # an int per tensor, no device object
            foreign = tuple(i for i, t in enumerate(tensors) if t.get_device() != index)
        else:
            foreign = tuple(i for i, t in enumerate(tensors) if t.device != self.device)
        if not foreign:
            return self.program.run(tensors)
        if foreign != self._foreign:
            self._prepare(tensors, foreign)
        for pack in self._packs:
            idx, buffer, held = pack
            host = torch.stack([tensors[i] for i in idx])
            if held is None or not torch.equal(host, held):
                buffer.copy_(host.pin_memory(), non_blocking=True)
                pack[2] = host
        outputs = self.program.run([self._mirror_of.get(i, t) for i, t in enumerate(tensors)])
        # the host values after the launch (the device works meanwhile): the program reads the mirrors,
        # so the host inputs still hold this step's values until written here
        host_values = self._host_values(tensors)
        if self._host_outputs:
            torch._foreach_copy_([tensors[i] for i in self._host_outputs.values()],
                                 [host_values[k] for k in self._host_outputs])
        for k, i in self._host_outputs.items():
            outputs[k] = tensors[i]
        mirrored = self._mirrored
        if any(id(o) in mirrored for o in outputs):          # updated on the device only: copy back (syncs)
            for idx, buffer, _ in self._packs:
                torch._foreach_copy_([tensors[i] for i in idx], list(buffer.cpu().unbind(0)))
            outputs = [tensors[mirrored[id(o)]] if id(o) in mirrored else o for o in outputs]
        for pack in self._packs:                             # what each mirror holds now
            pack[2] = torch.stack([tensors[i] for i in pack[0]])
        return outputs


def _evaluate(v, leaves=None, env=None):
    """``v`` by the IR's reference semantics: its graph inputs taken from ``leaves`` in first-visit
    order (an iterator), or from ``env`` (value -> tensor, also the memo)."""
    from nova.ir.ops import opdef
    if env is not None and v in env:
        return env[v]
    node = v.producer
    if node is None:
        return next(leaves)
    result = opdef(node.op).reference(torch, *[_evaluate(x, leaves, env) for x in node.inputs], **node.attrs)
    results = result if isinstance(result, (tuple, list)) else (result,)
    if env is not None:
        env.update(zip(node.outputs, results))
    return results[node.outputs.index(v)]


def _elementwise_groups(graph, outputs: list, index_of: dict) -> list:
    """The outputs (indices into ``graph.outputs``) that share one expression of elementwise ops,
    constants and graph inputs, differing only in which inputs they read: ``[(the first's value,
    [output indices], [[input index per leaf, first-visit order] per output])]``, for groups of two or
    more.  An expression with another op, a value of another shape, or a node read twice is left out
    (evaluated alone)."""
    from nova.ir.ops import kind

    def shape_of(v, leaves, seen, shape):
        node = v.producer
        if v.type.shape != shape:           # one shape throughout: stacking adds the same leading axis to all
            raise ValueError
        if node is None:
            leaves.append(index_of[v])
            return ("input", v.type)
        if v in seen or kind(node.op) not in ("pointwise", "creation") or len(node.outputs) != 1:
            raise ValueError
        seen.add(v)
        return (node.op, repr(sorted(node.attrs.items())), v.type,
                tuple(shape_of(x, leaves, seen, shape) for x in node.inputs))

    groups: dict = {}
    for k in outputs:
        leaves: list = []
        try:
            value = graph.outputs[k].value
            key = shape_of(value, leaves, set(), value.type.shape)
        except ValueError:
            continue
        groups.setdefault(key, []).append((k, leaves))
    return [(graph.outputs[members[0][0]].value, [k for k, _ in members], [leaves for _, leaves in members])
            for members in groups.values() if len(members) > 1]


def _reads_only(value, index_of: dict, allowed: set) -> bool:
    """``value`` is computed from the graph inputs in ``allowed`` (and constants) alone."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v.producer is None:
            if index_of.get(v) not in allowed:
                return False
        else:
            stack.extend(v.producer.inputs)
    return True


@dataclass
class Entry:
    captured: Captured
    engine: Callable
    device: torch.device


class CompiledStep:
    """What ``nova.compile`` returns; call it like the function it wraps."""

    def __init__(self, fn, *, models=None, optimizers=None, backend: str = "auto", max_entries: int = 16,
                 bucket_bytes: int | None = None, memory_budget=None):
        if not callable(fn):
            raise TypeError(f"nova.compile takes a function (the training step), got {type(fn).__name__} "
                            f"{_short_repr(fn)}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        from nova.passes.budget import parse_size
        self.memory_budget = parse_size(memory_budget) if memory_budget is not None else None
        self.fn = fn
        self.models = models
        self.optimizers = optimizers
        self.backend = backend
        self.max_entries = max_entries
        self.bucket_bytes = bucket_bytes      # gradient all-reduce buckets (None: derived, nova.passes.buckets)
        self.buckets: list = []               # the last engine's buckets
        self.stats = StepStats()
        self._cache: OrderedDict = OrderedDict()
        self._last_key = None
        self._last: Entry | None = None
        self._side_effects: set[str] = set()       # Python values the step changes itself (not guarded)
        self._group_reads: dict = {}               # path -> (optimizer, group index, key, path): guarded
        self._changing: dict[str, int] = {}        # Python value -> consecutive recaptures it caused
        self._warned: set[str] = set()
        functools.update_wrapper(self, fn, updated=())

    # ------------------------------------------------------------------ the call
    def __call__(self, *args, **kwargs):
        self.stats.calls += 1
        found = discover(self.fn, self.models, self.optimizers)
        key = self._key(found, args, kwargs)
        if self._last is not None and key == self._last_key:        # the common case: as last call (no hashing)
            entry = self._last
            self.stats.cache_hits += 1
        else:
            entry = self._cache.get(key)
            if entry is None:
                entry = self._compile(found, key, args, kwargs)
                key = self._last_key
            else:
                self.stats.cache_hits += 1
                self._cache.move_to_end(key)
        self._last_key, self._last = key, entry
        flat_args = pytree.tree_flatten((tuple(args), dict(kwargs)))[0]
        bindings = entry.captured.bindings
        for scheduler in bindings.schedulers.before:     # stepped before its optimizer's update: the update reads it
            scheduler.step()
        inputs, pending = bindings.gather(flat_args)
        with torch.no_grad():               # the step's own autograd is in the graph
            outputs = entry.engine(inputs)
        failed = bindings.failed_check(outputs)
        if failed is not None:              # eager raises before updating: nothing is written back
            raise RuntimeError(failed)
        result = bindings.scatter(outputs, flat_args, pending, result_device=entry.device,
                                  outputs_alias_engine=getattr(entry.engine, "outputs_alias_engine", True))
        for scheduler in bindings.schedulers.after:      # stepped after the update (nova/frontend/schedulers.py)
            scheduler.step()
        return result

    def _key(self, found, args, kwargs):
        """The guard key, without the Python values the step itself changes (its side effects), with
        the optimizer hyper-parameters its own code reads as numbers (they are constants of the trace)."""
        key = guard_key(found, args, kwargs, self.fn)
        if self._side_effects:
            key = dataclasses.replace(key, python_values=tuple(
                (path, v) for path, v in key.python_values if path not in self._side_effects))
        return self._with_group_reads(key)

    def _with_group_reads(self, key):
        if not self._group_reads:
            return key
        from nova.frontend.python_values import plain_value
        read = tuple((path, plain_value(opt.param_groups[gi].get(name)))
                     for opt, gi, name, path in self._group_reads.values() if gi < len(opt.param_groups))
        return dataclasses.replace(key, python_values=key.python_values + read)

    def _compile(self, found, key, args, kwargs) -> Entry:
        reason = key.describe_change(self._last_key)
        self._warn_if_changing_every_call(key)
        t0 = time.perf_counter()
        captured = capture(self.fn, args, kwargs, found=found)
        t1 = time.perf_counter()
        key = self._note_side_effects(found, key, args, kwargs)
        if any(path not in self._group_reads for *_, path in captured.group_reads):
            self._group_reads.update({read[3]: read for read in captured.group_reads})
            key = self._key(found, args, kwargs)
        self._warn_if_returning_python_values(captured)
        device = _device_of(found, args, kwargs)
        if self.memory_budget is not None:    # the budget is the step's: one program holds memory at a time
            self._release_programs(device)
        engine = self._build_engine(captured.graph, device)
        t2 = time.perf_counter()
        s = self.stats
        s.captures += 1
        s.capture_s, s.engine_build_s = t1 - t0, t2 - t1
        s.total_capture_s += t1 - t0
        s.last_recapture_reason = reason
        s.history.append((reason, t1 - t0))
        entry = Entry(captured, engine, device)
        self._last_key = key
        self._cache[key] = entry
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return entry

    def _release_programs(self, device: torch.device) -> None:
        """Free the device memory of the cached entries' programs on ``device`` before another program
        is built (under a memory budget: a recapture, e.g. after the first step created ``.grad``, must
        not hold two arenas); an entry used again allocates its memory again."""
        for entry in self._cache.values():
            release = getattr(entry.engine, "release", None)
            if entry.device == device and release is not None:
                release()

    def _note_side_effects(self, found, key, args, kwargs):
        """Python values the capture itself changed (``self.calls += 1`` in the step): a compiled
        step replays only tensor work, so such a change happens once, at capture.  Warn once, and
        leave them out of the guard (else every call would recapture)."""
        from nova.frontend import python_values
        after = guard_key(found, args, kwargs, self.fn).python_values
        changed = [p for p in python_values.changed_paths(after, key.python_values) if p not in self._side_effects]
        if not changed:
            return key
        self._side_effects.update(changed)
        warnings.warn(f"nova.compile: the step changes the Python value{'s' if len(changed) > 1 else ''} "
                      f"{', '.join(changed[:3])}{' ...' if len(changed) > 3 else ''} itself; a compiled step replays "
                      f"only its tensor work, so this happened once, at capture (keep such state in a tensor, or "
                      f"update it outside the compiled function)", NovaRecaptureWarning, stacklevel=4)
        return dataclasses.replace(key, python_values=tuple(
            (p, v) for p, v in key.python_values if p not in self._side_effects))

    def _warn_if_returning_python_values(self, captured) -> None:
        """The step returns Python numbers or strings (``opt.param_groups[0]["lr"]``,
        ``scheduler.get_last_lr()``): a compiled step returns them as the capture computed them, not as
        each call would; say so once."""
        frozen = [v for kind, v in captured.bindings.result_leaves
                  if kind == "value" and isinstance(v, (int, float, complex, str))]
        if not frozen or "returned values" in self._warned:
            return
        self._warned.add("returned values")
        shown = ", ".join(_short_repr(v, 20) for v in frozen[:3]) + (" ..." if len(frozen) > 3 else "")
        warnings.warn(f"nova.compile: the step returns the Python value{'s' if len(frozen) > 1 else ''} {shown}; a "
                      f"compiled step returns {'them' if len(frozen) > 1 else 'it'} as computed at capture, not at "
                      f"each call (return a tensor, or read such values outside the compiled function, e.g. "
                      f"scheduler.get_last_lr())", NovaRecaptureWarning, stacklevel=4)

    def _warn_if_changing_every_call(self, key) -> None:
        """A guarded Python value that caused the last ``WARN_AFTER`` captures in a row changes on
        (nearly) every call: say so once, naming it and the fix."""
        from nova.frontend import python_values
        if self._last_key is None:
            return
        paths = python_values.changed_paths(key.python_values, self._last_key.python_values)
        if len(key.inputs) == len(self._last_key.inputs):           # a Python number passed as an argument
            paths += [f"argument {i} (a {new[1]})" for i, (new, old) in enumerate(zip(key.inputs, self._last_key.inputs))
                      if new != old and new[0] == old[0] == "value"]
        self._changing = {p: self._changing.get(p, 0) + 1 for p in paths}
        for path, count in self._changing.items():
            if count >= WARN_AFTER and path not in self._warned:
                self._warned.add(path)
                warnings.warn(f"nova.compile: {path} changed on each of the last {count} captures; every change "
                              f"recaptures the step (a captured step bakes Python numbers in as constants). Hold it "
                              f"in a tensor (a module buffer or a 0-d tensor argument) so it becomes a program "
                              f"input", NovaRecaptureWarning, stacklevel=4)

    def _build_engine(self, graph, device: torch.device):
        """The hook where a planned program replaces the reference interpreter.  Contract:
        return a callable taking one tensor per ``graph.inputs`` (the user's own tensors, on
        ``device`` except the CPU ``step`` counts of non-capturable optimizers) and returning one
        tensor per ``graph.outputs``; an output that updates an input may be that very input
        tensor (donation: the write-back then skips the copy).  Set ``outputs_alias_engine =
        False`` on the engine when result tensors are not views of its internal memory (else the
        returned values are cloned).  The step's all-reduces are bucketed first (both engines)."""
        from nova.compiler.collectives import bucketed
        graph, self.buckets, _ = bucketed(graph, _default_target(device), self.bucket_bytes)
        if self.backend == "reference" or (self.backend == "auto" and device.type != "cuda"):
            return ReferenceEngine(graph)
        from nova.compiler import executor
        name = _engine_target_name(device)          # the passes and the workspaces they place are for it
        planned = self._plan(graph, name, device, name)
        t0 = time.perf_counter()
        engine = ProgramEngine(executor.build(planned, device), device)
        self.stats.build_s = time.perf_counter() - t0
        return engine

    def _plan(self, graph, target, device: torch.device, target_name=None):
        """``pipeline(graph, target)``, through the on-disk plan cache; records ``stats.plan_cache``
        and ``stats.pipeline_s``."""
        from nova.compiler import plan_cache
        t0 = time.perf_counter()
        planned, status = plan_cache.plan(graph, target, device.type, target_name=target_name,
                                          memory_budget=self.memory_budget)
        self.stats.pipeline_s = time.perf_counter() - t0
        self.stats.plan_cache = status
        return planned

    # ------------------------------------------------------------------ inspection
    @property
    def graph(self):
        """The IR graph of the last call (None before the first call)."""
        return self._last.captured.graph if self._last else None

    @property
    def captured(self) -> Captured | None:
        return self._last.captured if self._last else None

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def explain(self, target=None, json: bool = False):
        """The whole-program report of the last captured graph (``nova.compiler.explain``): captured
        op counts, kernels by kind, fusion groups and why, each GEMM's schedule, the memory plan and
        the predicted step time, for ``target`` (a preset name or ``GPUModel``; default: the CUDA
        device's preset, ``nova.runtime.matmul.resolve_target``, else ``"h200"``).  Text (rich
        tables rendered to a string), or the JSON-able dict with ``json=True``."""
        if self._last is None:
            return {} if json else "nothing captured yet: call the compiled step once"
        from nova.compiler.explain import explain_planned, render
        captured, device = self._last.captured, self._last.device
        if target is None:
            target = _default_target(device)
        name = getattr(target, "name", target)
        pipeline_s, status = self.stats.pipeline_s, self.stats.plan_cache
        planned = self._plan(captured.graph, name, device, name)
        planned_s, planned_status = self.stats.pipeline_s, self.stats.plan_cache
        self.stats.pipeline_s, self.stats.plan_cache = pipeline_s, status     # stats describe the engine
        tokens = _tokens_per_step(captured.graph)
        report = explain_planned(captured.graph, planned, target, tokens)
        report["times_s"] = {"capture": round(captured.stats.total_s, 3), "passes": round(planned_s, 3)}
        report["plan_cache"] = planned_status
        if json:
            return report
        import io
        from rich.console import Console
        g, st = captured.graph, captured.stats
        lines = [f"graph {g.name}: {len(g.inputs)} inputs, {len(g.nodes)} nodes, {len(g.outputs)} outputs; "
                 f"captured in {st.total_s:.2f} s ({st.fx_nodes} ATen nodes)"]
        lines += [f"  {op:24s} {n}" for op, n in g.op_counts().items()]
        if st.opaque:
            lines.append("opaque aten ops: " + ", ".join(f"{k} x{v}" for k, v in st.opaque.items()))
        buf = io.StringIO()
        render(report, console=Console(file=buf, width=160, force_terminal=False, color_system=None))
        return "\n".join(lines) + "\n\n" + buf.getvalue().rstrip() + f"\n(plan: {planned_status})"


def _short_repr(value, limit: int = 60) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _engine_target_name(device: torch.device):
    """The target name the program's GEMMs are configured for (part of the plan cache key)."""
    if device.type != "cuda":
        return None
    try:
        from nova.runtime.matmul import resolve_target
        return resolve_target().name
    except Exception:
        return None


def _default_target(device: torch.device):
    if device.type == "cuda":
        try:
            from nova.runtime.matmul import resolve_target
            return resolve_target()
        except Exception:
            pass
    return "h200"


def _tokens_per_step(graph) -> int | None:
    """Tokens per step: the elements of the first integer 2-D data input (the token ids), if any."""
    for spec in graph.inputs:
        t = spec.value.type
        if spec.role == "data" and len(t.shape) == 2 and t.dtype.startswith(("i", "s", "u")):
            return t.shape[0] * t.shape[1]
    return None


def _device_of(found, args, kwargs) -> torch.device:
    """Where eager's results would live: the first tensor argument's device, else the first parameter's."""
    for leaf in pytree.tree_flatten((tuple(args), dict(kwargs)))[0]:
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    for _, model in found.models:
        for p in model.parameters():
            return p.device
    return torch.device("cpu")


def compile(fn=None, *, models=None, optimizers=None, backend: str = "auto", bucket_bytes: int | None = None,
            memory_budget=None) -> Any:
    """Compile a step function (or use as ``@nova.compile`` / ``@nova.compile(backend=...)``).
    ``bucket_bytes``: the size of the gradient all-reduce buckets of a data-parallel step (default:
    derived from the target's interconnect, ``nova.hwmodel.interconnect``).  ``memory_budget``
    (``"12GiB"``, ``"11.5GB"``, bytes): the planned program fits it (chunked loss,
    rematerialization) or the first call raises ``MemoryBudgetError`` naming the smallest plan; a
    recapture then frees the device memory of the programs built before it (``Program.release``), so
    one program holds memory at a time."""
    if fn is None:
        return lambda f: CompiledStep(f, models=models, optimizers=optimizers, backend=backend,
                                      bucket_bytes=bucket_bytes, memory_budget=memory_budget)
    return CompiledStep(fn, models=models, optimizers=optimizers, backend=backend, bucket_bytes=bucket_bytes,
                        memory_budget=memory_budget)
