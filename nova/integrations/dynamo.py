"""``torch.compile(model, backend="nova")``: Nova as a TorchDynamo backend.

    model = torch.compile(model, backend="nova")            # inference and training
    torch.compile(model, backend="nova", options={"engine": "executor"})

Dynamo captures the user's Python into FX graphs; AOTAutograd (``aot_autograd`` with Nova's
frontend decompositions) turns each into a functional ATen forward graph and, for training, a
backward graph (the default partition: the forward saves what the backward reads).  Each graph is
lowered by Nova's frontend (``nova.frontend.lower``: the same table ``nova.compile`` uses), then run:

* CPU: the IR reference interpreter (``nova.ir.interpreter``; ``options={"engine": "executor"}``
  runs the planned program, ``nova.passes.pipeline`` + ``nova.compiler.executor.build(.., "cpu")``);
* CUDA: the planned program on the device (Nova's GEMM and attention kernels, ATen for the rest,
  one CUDA graph).

Fallbacks never fail the user's program.  A graph Nova cannot take (an op without a lowering that
cannot be an opaque node, a random op, dynamic shapes, a result the IR does not model, a failure
while planning or on the first run) runs as torch would: the FX graph itself, op by op on ATen
(no Inductor); a graph whose run failed drops its program first (its arena and staged inputs are
freed, not held beside torch's own memory).  Each graph's outcome is one line on the ``nova`` logger: WARNING for a graph that
fell back (with the reason), INFO for one Nova runs (with the ATen ops it runs as opaque nodes).
The optimizer stays eager (it is outside the compiled module).

For a GPU machine without MLIR, ``precompile(model, example_inputs, target="h200")`` (or ``nova
precompile dynamo --step MODULE:FACTORY``) compiles on a host every kernel the CUDA run will launch
(``nova.integrations.dynamo_precompile``): the CUDA engine plans each graph with ``plan_for_gpu``,
the precompile with the same function.

Graph inputs' roles: the forward's parameters and buffers (AOTAutograd's static inputs) are
``param`` (the executor reads them in place, by pointer); every other input is ``data``.
Results are returned with the strides torch's fake tensors promised (the backward graph was traced
against them): a result of other strides is copied into that layout.

Memory (``nova/integrations/dynamo_handoff.py``): each saved activation is held once.  The CUDA
programs allocate their arena per run from torch's caching allocator (the forward's and the
backward's temporaries reuse the same bytes through it) and their outputs per run, handed to
AOTAutograd without a copy (the plan puts them in an output region of their own,
``memory.Handoff.outputs_apart``); the backward reads the saved tensors in place, one input per
storage, and writes its results into the ones AOTAutograd donates once they are dead.  A second
forward before a backward, a forward without one, or two models: each run writes buffers of its
own, so nothing a caller still holds is overwritten (``executor.build(..., per_call=True)``).
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
from dataclasses import dataclass

import torch

log = logging.getLogger("nova")

ENGINES = ("auto", "reference", "executor")
_GRAPH_IDS = itertools.count()


class NovaBackendError(ValueError):
    """A bad option given to the backend (``torch.compile(..., options=...)``)."""


@dataclass(frozen=True)
class BackendOptions:
    """``torch.compile(model, backend="nova", options={...})``.

    engine: "auto" (CPU: the reference interpreter; CUDA: the executor), "reference" (the
    interpreter on any device: CUDA tensors are copied to the CPU and back) or "executor" (the
    planned program on the inputs' device)."""
    engine: str = "auto"

    @classmethod
    def from_dict(cls, options: dict | None) -> "BackendOptions":
        options = dict(options or {})
        unknown = sorted(set(options) - {"engine"})
        if unknown:
            raise NovaBackendError(f"unknown option {unknown[0]!r} for backend 'nova'; options: engine")
        engine = options.get("engine", "auto")
        if engine not in ENGINES:
            raise NovaBackendError(f"option engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        return cls(engine=engine)


def nova_backend(gm: torch.fx.GraphModule, example_inputs, *, options: dict | None = None, mode=None):
    """The TorchDynamo backend (``backend="nova"``, registered under the ``torch_dynamo_backends``
    entry point): AOTAutograd with Nova compiling the forward, backward and inference graphs."""
    from functorch.compile import default_partition
    from torch._dynamo.backends.common import aot_autograd
    settings = BackendOptions.from_dict(options)
    compiler = functools.partial(compile_graph, settings=settings)
    backend = aot_autograd(fw_compiler=functools.partial(compiler, part="forward"),
                           bw_compiler=functools.partial(compiler, part="backward"),
                           inference_compiler=functools.partial(compiler, part="inference"),
                           decompositions=decompositions(), partition_fn=default_partition,
                           keep_inference_input_mutations=False)
    return backend(gm, example_inputs)


def decompositions() -> dict:
    """The ATen decompositions Nova's frontend applies while tracing (RMSNorm's fused kernels)."""
    from nova.frontend.capture import _decompositions
    return _decompositions()


# ====================================================================== one graph
class Unsupported(Exception):
    """Why Nova does not take a graph (one line); the graph then runs as torch would."""


@dataclass
class CompiledGraph:
    """A boxed callable (a list of inputs in, a list of results out) running one lowered graph.
    ``results[i]`` is ``("output", k)`` (graph output k), ``("input", i)`` (an input passed through),
    ``("none", None)``, ``("value", x)`` (a Python constant) or ``("placeholder", (shape, dtype, device))``
    (an attention kernel's seed, offset or debug mask without dropout, handed to a backward that
    never reads it: a zero tensor of the promised shape and dtype).  ``inputs``: how the program's
    inputs come from the arguments (``dynamo_handoff.InputPlan``); ``copies``: the results copied
    because their storage would be shared where the trace's is not (``dynamo_handoff.output_copies``)."""
    name: str
    graph: object
    engine: object
    results: list
    strides: list                       # the strides torch promised for each tensor result (None: any)
    fallback: object                    # the FX graph module (run if the engine fails)
    engine_name: str = "reference"      # "reference" or "executor"
    device: object = None
    opaque: dict = None                 # ATen op -> count of opaque IR nodes (run as themselves)
    failed: bool = False
    inputs: object = None               # dynamo_handoff.InputPlan
    copies: frozenset = frozenset()
    calls: int = 0
    constants: list = ()                # the constant tensors the graph holds (a mask's pattern): its last inputs

    def __post_init__(self):
        # AOTAutograd's calling convention (one list of inputs), on the instance: torch's wrappers
        # copy the instance's __dict__, not its class attributes
        self._boxed_call = True

    def __call__(self, args: list):
        arguments = list(args)
        args.clear()                    # AOTAutograd's saved tensors: only ``arguments`` holds them now
        if self.failed:
            return _run_fx(self.fallback, arguments)
        # the first run may fail (kernels, capture) and fall back: it reads copies of donated inputs
        inputs = self.inputs.gather(arguments, donate=self.calls > 0) if self.inputs is not None else arguments
        if self.constants:
            inputs = list(inputs) + list(self.constants)
        self.calls += 1
        try:
            outputs = self.engine(inputs)
        except Exception as e:   # never fail the user's program: run this graph as torch would from now on
            self.failed = True
            if isinstance(self.engine, _Program):      # its memory freed before torch runs the graph
                self.engine.release()
            log.warning("nova: %s fell back to torch after a failed run: %s: %s", self.name, type(e).__name__,
                        first_line(e))
            return _run_fx(self.fallback, arguments)
        del arguments
        results = []
        for index, ((kind, what), stride) in enumerate(zip(self.results, self.strides)):
            value = outputs[what] if kind == "output" else inputs[what] if kind == "input" else \
                None if kind == "none" else _placeholder(*what) if kind == "placeholder" else what
            if index in self.copies:
                value = value.clone()
            if kind == "output" and stride is not None and value.stride() != stride:
                value = torch.empty_strided(value.shape, stride, dtype=value.dtype, device=value.device).copy_(value)
            results.append(value)
        return results


def compile_graph(gm: torch.fx.GraphModule, example_inputs, *, part: str, settings: BackendOptions):
    """AOTAutograd's compiler hook: a boxed callable running ``gm`` on Nova, or ``gm`` itself
    (boxed) when Nova does not take it (logged, never raised)."""
    name = f"{part} graph {next(_GRAPH_IDS)}"
    fx_ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    try:
        compiled = _compile(gm, example_inputs, part, name, settings)
    except Exception as e:      # Unsupported, or a Nova error while lowering or planning: run it as torch would
        reason = fallback_reason(e)
        log.warning("nova: %s (%d ATen ops) runs on torch (eager ATen): %s", name, fx_ops, reason)
        return _boxed(gm)
    opaque = compiled.opaque
    where = "the reference interpreter" if compiled.engine_name == "reference" else \
        f"Nova's executor on {compiled.device}"
    log.info("nova: %s (%d ATen ops -> %d IR nodes) runs on %s%s", name, fx_ops, len(compiled.graph.nodes), where,
             "; ops run as opaque ATen nodes: " + ", ".join(f"{k} x{v}" for k, v in opaque.items()) if opaque else "")
    return compiled


@dataclass
class LoweredGraph:
    """One AOTAutograd graph lowered to Nova's IR: the graph (its outputs the tensor results), how
    each of the FX graph's results is made (``CompiledGraph.results``), the strides torch promised
    for each, the ATen ops kept as opaque nodes, how its inputs come from the arguments
    (``dynamo_handoff.InputPlan``), the plan's boundary (``memory.Handoff``: outputs apart, the
    donated inputs) and the fake tensors of the FX results (for ``dynamo_handoff.output_copies``)."""
    graph: object
    results: list
    strides: list
    opaque: dict
    inputs: object = None
    handoff: object = None
    vals: list = None
    constants: list = None      # the tensors of the graph's constant inputs (after the arguments' inputs)


def lower_graph(gm: torch.fx.GraphModule, part: str, name: str) -> LoweredGraph:
    """``gm`` (AOTAutograd's ``part`` graph: forward, backward or inference) lowered by Nova's
    frontend, or ``Unsupported`` naming why Nova does not take it."""
    from nova.frontend.lower import Unmodeled, lower
    from nova.ir import Value, verify
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in placeholders:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise Unsupported(f"input {node.name} is a {type(val).__name__}, not a tensor (dynamic shapes: "
                              f"torch.compile(..., dynamic=False) keeps shapes static)")
        if any(not isinstance(d, int) for d in val.shape):
            raise Unsupported(f"input {node.name} has a dynamic shape {tuple(val.shape)} (torch.compile(..., "
                              f"dynamic=False) keeps shapes static)")
    from nova.integrations.dynamo_handoff import plan_inputs
    from nova.passes.memory import Handoff
    static = _static_inputs() if part != "backward" else set()
    donated = _donated_inputs() if part == "backward" else set()
    inputs = plan_inputs(gm, part, static, donated)
    lowered = lower(inputs.module, inputs.names, inputs.roles, name.replace(" ", "_"))
    graph = lowered.graph
    input_index = {spec.value: i for i, spec in enumerate(graph.inputs)}
    output_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in output_node.args[0]]
    results, strides, output_of = [], [], {}
    for value, val in zip(lowered.outputs, vals):
        stride = None
        if value is None:
            results.append(("none", None))
        elif isinstance(value, Unmodeled) and value.bookkeeping and isinstance(val, torch.Tensor):
            results.append(("placeholder", (tuple(val.shape), val.dtype, val.device)))
        elif isinstance(value, Unmodeled) and value.bookkeeping and isinstance(val, (bool, int, float)):
            results.append(("value", val))
        elif isinstance(value, Unmodeled):
            raise Unsupported(f"the graph returns {value.what}, which Nova does not model")
        elif isinstance(value, Value) and value in input_index:
            results.append(("input", input_index[value]))
        elif isinstance(value, Value):
            if value not in output_of:
                output_of[value] = len(graph.outputs)
                graph.output(value, f"result[{len(graph.outputs)}]")
            results.append(("output", output_of[value]))
            if isinstance(val, torch.Tensor) and _dense(val):
                stride = tuple(val.stride())
        elif isinstance(value, (bool, int, float)):
            results.append(("value", value))
        else:
            raise Unsupported(f"the graph returns a {type(value).__name__}, which Nova does not model")
        strides.append(stride)
    verify(graph)
    return LoweredGraph(graph, results, strides, lowered.opaque, inputs,
                        Handoff(outputs_apart=True, donated_inputs=inputs.donated), vals,
                        [tensor for _, tensor in lowered.constants])


def plan_for_gpu(graph, target, handoff=None, in_place=frozenset()):
    """The plan the CUDA path runs for a lowered graph on ``target`` (a ``GPUModel``): the whole
    pipeline (``nova.passes.pipeline``, its storage, strides and dtype decisions), no memory budget,
    for the program boundary ``handoff`` (``LoweredGraph.handoff``), with the allocations of its
    per-call program reading ``in_place`` in place (``nova.compiler.outside_arena.account``) stated and
    its launch workspaces placed in the arena.  The one statement of that plan: the backend's CUDA
    engine runs it and ``nova.integrations.dynamo_precompile`` compiles its kernels ahead of time."""
    import functools
    from nova.compiler.outside_arena import account
    from nova.passes import pipeline
    return pipeline(graph, target, handoff=handoff,
                    outside_arena=functools.partial(account, per_call=True, in_place=frozenset(in_place)))


def fallback_reason(e: BaseException) -> str:
    """The one line saying why a graph runs on torch (``Unsupported`` or a Nova error: its message;
    anything else: its type too)."""
    from nova.frontend.errors import NovaUnsupportedError
    return first_line(e) if isinstance(e, (Unsupported, NovaUnsupportedError)) else f"{type(e).__name__}: {first_line(e)}"


def _compile(gm, example_inputs, part: str, name: str, settings: BackendOptions) -> CompiledGraph:
    """Lower and plan ``gm`` outside AOTAutograd's fake-tensor mode, which is on while its compiler
    hooks run: the lowering evaluates constants (a mask's pattern, a scalar) and the passes probe
    small tensors for real, and under the fake mode each of those raised (every Hugging Face model's
    graphs and every boolean SDPA mask fell back to torch with a misleading fake-tensor error)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return _compile_real(gm, example_inputs, part, name, settings)


def _compile_real(gm, example_inputs, part: str, name: str, settings: BackendOptions) -> CompiledGraph:
    lowered = lower_graph(gm, part, name)
    device = _device(example_inputs)
    engine, engine_name = _engine(lowered, device, settings)
    copies, inputs = frozenset(), lowered.inputs
    if isinstance(engine, _Program):
        from nova.integrations.dynamo_handoff import output_copies
        copies = output_copies(lowered.vals, result_storages(lowered, engine.planned), lowered.inputs)
    else:                               # the interpreter overwrites no input: nothing to give it
        inputs = dataclasses.replace(inputs, donated=frozenset())
    return CompiledGraph(name, lowered.graph, engine, lowered.results, lowered.strides, gm, engine_name, device,
                         lowered.opaque, inputs=inputs, copies=copies,
                         constants=[c.to(device) for c in lowered.constants or ()])


def result_storages(lowered: LoweredGraph, planned) -> list:
    """For each FX result, the storage the executor returns it in: ``("input", k)`` (IR input k's,
    through a view or a donated input's storage taken in place), ``("buffer", value)`` (the buffer of
    the plan's root ``value``: in the output region, or at its own bytes of a dead donated input, which
    the caller gave up and nothing else returns), None (no tensor of the program)."""
    memory, outputs = planned.memory, planned.graph.outputs
    out = []
    for kind, what in lowered.results:
        if kind == "input":
            out.append(("input", what))
        elif kind == "output":
            root = memory.root(outputs[what].value)
            vp = memory[root]
            in_input = vp.kind == "external" and not vp.in_dead_input      # the input itself, or over it in place
            out.append(("input", vp.input_index) if in_input else ("buffer", root))
        else:
            out.append(None)
    return out


def _engine(lowered: LoweredGraph, device: torch.device, settings: BackendOptions):
    """(callable list[Tensor] -> list[Tensor], its name) for ``lowered`` on ``device``."""
    graph = lowered.graph
    if settings.engine == "reference" or (settings.engine == "auto" and device.type != "cuda"):
        from nova.compiler.step import ReferenceEngine
        reference = ReferenceEngine(graph)
        if device.type == "cpu":
            return reference, "reference"
        return (lambda tensors: [t.to(device) for t in reference(tensors)]), "reference"
    from nova.compiler import executor
    if device.type == "cuda":
        from nova.runtime.matmul import resolve_target
        planned = plan_for_gpu(graph, resolve_target(), lowered.handoff, lowered.inputs.in_place)
    else:
        from nova.passes import pipeline
        planned = pipeline(graph, None, handoff=lowered.handoff)
    return _Program(executor, planned, device, lowered.inputs.in_place), "executor"


class _Program:
    """The executor's program of a planned graph, built on the first run: the compiler hook runs
    under AOTAutograd's fake-tensor mode, where no real tensor (the arena) can be allocated.  Per
    call storage (``executor.build(..., per_call=True)``): arena and outputs allocated per run,
    ``in_place`` inputs (the backward's saved tensors) read where they are."""

    REBINDS_NOTED = 16                   # bindings made beyond which the log says so (once)

    def __init__(self, executor, planned, device: torch.device, in_place=frozenset()):
        self.executor, self.planned, self.device, self.program = executor, planned, device, None
        self.in_place = frozenset(in_place)
        self.noted = False

    def __call__(self, tensors: list) -> list:
        if self.program is None:
            self.program = self.executor.build(self.planned, self.device, per_call=True, in_place=self.in_place)
        outputs = self.program.run(tensors)
        stats = self.program.stats
        if not self.noted and self.device.type == "cuda" and stats["rebinds"] >= self.REBINDS_NOTED \
                and 2 * stats["rebinds"] > stats["runs"]:
            self.noted = True
            log.warning("nova: %s: %d of %d runs bound new buffer addresses (a new CUDA graph each): the "
                        "caller keeps a large output of every run, or an input larger than 1 MiB read in place "
                        "sits somewhere new each run", self.planned.graph.name, stats["rebinds"], stats["runs"])
        return outputs

    def release(self) -> None:
        """Drop the program (its arena, staged inputs and workspaces) once the graph runs on torch.
        Its ``CompiledGraph``'s engine attribute is not the only reference: torch's wrappers copy
        the compiled callable's ``__dict__``."""
        self.program = None


def _static_inputs() -> set[int]:
    """AOTAutograd's static inputs of the graph being compiled (parameters and buffers), by index."""
    return _fw_metadata_indices("static_input_indices")


def _donated_inputs() -> set[int]:
    """AOTAutograd's donated buffers of the backward being compiled (``bw_donated_idxs``: saved
    tensors nothing else aliases; single-use, ``retain_graph`` is refused once there are any)."""
    return _fw_metadata_indices("bw_donated_idxs")


def _fw_metadata_indices(name: str) -> set[int]:
    """The input indices AOTAutograd's metadata of the graph being compiled lists under ``name``
    (empty outside a compilation, or in a torch without it)."""
    try:
        from torch._guards import TracingContext
        context = TracingContext.try_get()
        metadata = getattr(context, "fw_metadata", None) if context is not None else None
        return set(getattr(metadata, name, None) or ())
    except Exception:
        return set()


def _placeholder(shape, dtype, device) -> torch.Tensor:
    """A zero tensor standing for a kernel's bookkeeping result; a fake tensor's ``meta`` device
    (the meta kernels of CUDA attention state their seeds there) becomes the CPU, where the CUDA
    kernels keep their seeds when there is no dropout."""
    return torch.zeros(shape, dtype=dtype, device="cpu" if device.type == "meta" else device)


def _device(example_inputs) -> torch.device:
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def _dense(t: torch.Tensor) -> bool:
    """``t``'s strides describe a non-overlapping, dense layout (a permutation of contiguous)."""
    try:
        return bool(torch._prims_common.is_non_overlapping_and_dense(t))
    except Exception:
        return False


def _boxed(gm):
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(gm)


def _run_fx(gm, inputs: list):
    out = gm(*inputs)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
