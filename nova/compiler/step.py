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
  ``nova.passes.pipeline`` + ``nova.compiler.executor.build`` (the executor's hook, below).
"""
from __future__ import annotations

import functools
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from nova.frontend import Captured, capture, discover, guard_key

BACKENDS = ("auto", "reference", "executor")


@dataclass
class StepStats:
    calls: int = 0
    captures: int = 0
    cache_hits: int = 0
    capture_s: float = 0.0              # the last capture (trace + lowering)
    total_capture_s: float = 0.0
    engine_build_s: float = 0.0         # the last engine build (passes + program)
    last_recapture_reason: str = ""
    history: list = field(default_factory=list)    # (reason, capture seconds) per capture


class ReferenceEngine:
    """Runs the graph with the IR's reference interpreter on CPU tensors."""
    outputs_alias_engine = False

    def __init__(self, graph):
        self.graph = graph

    def __call__(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        from nova.ir import interpreter
        cpu = [t if t.device.type == "cpu" else t.cpu() for t in tensors]
        return interpreter.run(self.graph, cpu)


@dataclass
class Entry:
    captured: Captured
    engine: Callable
    device: torch.device


class CompiledStep:
    """What ``nova.compile`` returns; call it like the function it wraps."""

    def __init__(self, fn, *, models=None, optimizers=None, backend: str = "auto", max_entries: int = 16):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.fn = fn
        self.models = models
        self.optimizers = optimizers
        self.backend = backend
        self.max_entries = max_entries
        self.stats = StepStats()
        self._cache: OrderedDict = OrderedDict()
        self._last_key = None
        self._last: Entry | None = None
        functools.update_wrapper(self, fn, updated=())

    # ------------------------------------------------------------------ the call
    def __call__(self, *args, **kwargs):
        self.stats.calls += 1
        found = discover(self.fn, self.models, self.optimizers)
        key = guard_key(found, args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._compile(found, key, args, kwargs)
        else:
            self.stats.cache_hits += 1
            self._cache.move_to_end(key)
        self._last_key, self._last = key, entry
        flat_args = pytree.tree_flatten((tuple(args), dict(kwargs)))[0]
        bindings = entry.captured.bindings
        inputs, pending = bindings.gather(flat_args)
        with torch.no_grad():               # the step's own autograd is in the graph
            outputs = entry.engine(inputs)
        return bindings.scatter(outputs, flat_args, pending, result_device=entry.device,
                                outputs_alias_engine=getattr(entry.engine, "outputs_alias_engine", True))

    def _compile(self, found, key, args, kwargs) -> Entry:
        reason = key.describe_change(self._last_key)
        t0 = time.perf_counter()
        captured = capture(self.fn, args, kwargs, found=found)
        t1 = time.perf_counter()
        device = _device_of(found, args, kwargs)
        engine = self._build_engine(captured.graph, device)
        t2 = time.perf_counter()
        s = self.stats
        s.captures += 1
        s.capture_s, s.engine_build_s = t1 - t0, t2 - t1
        s.total_capture_s += t1 - t0
        s.last_recapture_reason = reason
        s.history.append((reason, t1 - t0))
        entry = Entry(captured, engine, device)
        self._cache[key] = entry
        while len(self._cache) > self.max_entries:
            self._cache.popitem(last=False)
        return entry

    def _build_engine(self, graph, device: torch.device):
        """The hook where a planned program replaces the reference interpreter.  Contract:
        return a callable taking one tensor per ``graph.inputs`` (the user's own tensors, on
        ``device`` except the CPU ``step`` counts of non-capturable optimizers) and returning one
        tensor per ``graph.outputs``; an output that updates an input may be that very input
        tensor (donation: the write-back then skips the copy).  Set ``outputs_alias_engine =
        False`` on the engine when result tensors are not views of its internal memory (else the
        returned values are cloned)."""
        if self.backend == "reference" or (self.backend == "auto" and device.type != "cuda"):
            return ReferenceEngine(graph)
        from nova.compiler import executor          # filled by the executor (issue 13, compiler part)
        from nova.passes import pipeline
        return executor.build(pipeline(graph, device), device)

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

    def explain(self) -> str:
        """Op counts of the last captured graph (the full explain is the compiler's)."""
        if self._last is None:
            return "nothing captured yet: call the compiled step once"
        g, st = self._last.captured.graph, self._last.captured.stats
        lines = [f"graph {g.name}: {len(g.inputs)} inputs, {len(g.nodes)} nodes, {len(g.outputs)} outputs; "
                 f"captured in {st.total_s:.2f} s ({st.fx_nodes} ATen nodes)"]
        lines += [f"  {op:24s} {n}" for op, n in g.op_counts().items()]
        if st.opaque:
            lines.append("opaque aten ops: " + ", ".join(f"{k} x{v}" for k, v in st.opaque.items()))
        return "\n".join(lines)


def _device_of(found, args, kwargs) -> torch.device:
    """Where eager's results would live: the first tensor argument's device, else the first parameter's."""
    for leaf in pytree.tree_flatten((tuple(args), dict(kwargs)))[0]:
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    for _, model in found.models:
        for p in model.parameters():
            return p.device
    return torch.device("cpu")


def compile(fn=None, *, models=None, optimizers=None, backend: str = "auto") -> Any:
    """Compile a step function (or use as ``@nova.compile`` / ``@nova.compile(backend=...)``)."""
    if fn is None:
        return lambda f: CompiledStep(f, models=models, optimizers=optimizers, backend=backend)
    return CompiledStep(fn, models=models, optimizers=optimizers, backend=backend)
