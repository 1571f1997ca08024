"""The device memory a ``torch.compile(model, backend="nova")`` training step holds, predicted from
its plans on the meta device (no GPU): what ``torch.cuda.max_memory_allocated`` should read.

    from nova.integrations.dynamo_precompile import plan_dynamo
    from nova.integrations.dynamo_memory import step_memory
    memory = step_memory(plan_dynamo(model, (idx, targets), get_target("h200")), optimizer_state_bytes=...)
    memory.peak_bytes; print(memory.describe())

Each graph's program is built on the meta device as the backend builds it on the GPU
(``executor.build(..., per_call=True, in_place=...)``; ``per_call=False`` states the executor's
other mode, a program owning its arena and copying its outputs and data inputs) and read:

* **held for the program's life** (allocated at its first run): constants, the static slots of the
  inputs it copies (data inputs, tangents), scratch, the launches' static workspaces (``outside_arena``:
  its ``program`` allocations), the one buffer the launch workspaces the plan did not place in
  the arena share, and, without per-call storage, the arena;
* **the shared arena** (per call): one buffer per device that every per-call program's runs use
  below their output region, as large as the largest program's need, held throughout
  (``nova/compiler/step_storage.py``);
* **per run**: without per-call storage the returned clones; per call the output buffers (the output
  region, one buffer per output, handed to the caller and taken again by the next run once the
  caller has let go: held as long as the caller holds them, as the clones are), plus the largest
  launch's temporaries while it runs;
* GEMM workspaces allocated with ``cuMemAlloc`` are listed apart (``driver_bytes``): torch's counter
  does not see them;
* a backward's **copies at the hand-over** (``copies``, held while it runs): the saved tensors the
  forward's program does not lay out as the trace does (``dynamo_handoff.InputPlan.copied_bytes``,
  found from the forward's program on the meta device: its outputs' strides and storages), which
  the backward's ``gather`` copies into the traced layout.

The step: the forward graphs run in compilation order, then the backward graphs (AOTAutograd
compiles them as the backward reaches them, last forward first).  A forward's outputs are held
until its backward has run (the saved activations; its user outputs, the loss, are a few bytes);
a backward reads them in place and its outputs (the gradients) are held from then on (a gradient
placed in a dead donated saved tensor takes no output buffer: it keeps that saved buffer instead,
which this counts among the forward's outputs until the backward has run).  Parameters
(the forwards' ``param`` inputs), the data inputs and ``optimizer_state_bytes`` (the eager
optimizer's state, which the backend never sees) are held throughout.  ``peak_bytes`` is the most
held at any run.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GraphMemory:
    """What one graph's program allocates (bytes as torch's caching allocator counts them)."""
    name: str
    persistent: int              # for the program's life
    step_arena: int              # per run, freed at its end
    outputs: int                 # per run, handed to the caller (buffers or clones)
    launch: int                  # the largest launch's temporaries
    driver: int                  # cuMemAlloc'd GEMM workspaces (not counted by torch)
    params: int = 0              # parameters the program reads in place (a forward's)
    data: int = 0                # the caller's data inputs (a forward's batch)
    in_place: int = 0            # inputs read in place that are not parameters (a backward's saved tensors)
    copies: int = 0              # a backward: saved tensors copied at the hand-over (not laid out as traced)


@dataclass
class StepMemory:
    """A training step's memory: each graph's, then the held bytes at each run and the peak."""
    graphs: list = field(default_factory=list)
    optimizer_state_bytes: int = 0
    timeline: list = field(default_factory=list)       # (graph name, bytes held while it runs)
    per_call: bool = True

    @property
    def peak_bytes(self) -> int:
        return max((b for _, b in self.timeline), default=0)

    @property
    def peak_at(self) -> str:
        return max(self.timeline, key=lambda t: t[1])[0] if self.timeline else ""

    @property
    def driver_bytes(self) -> int:
        return sum(g.driver for g in self.graphs)

    def describe(self) -> str:
        gib = 2 ** 30
        lines = [f"torch.compile(backend='nova') step, {'per-call storage' if self.per_call else 'programs owning their arenas'}: "
                 f"peak {self.peak_bytes / gib:.2f} GiB while {self.peak_at} runs "
                 f"(+ {self.driver_bytes / gib:.2f} GiB of GEMM workspaces torch does not count)",
                 f"  {'graph':<20} {'life':>8} {'arena':>8} {'outputs':>8} {'launch':>8} {'in place':>9} {'copies':>8} "
                 f"{'held':>8}  GiB"]
        held = dict(self.timeline)
        for g in self.graphs:
            lines.append(f"  {g.name:<20} {g.persistent / gib:>8.2f} {g.step_arena / gib:>8.2f} {g.outputs / gib:>8.2f} "
                         f"{g.launch / gib:>8.2f} {g.in_place / gib:>9.2f} {g.copies / gib:>8.2f} "
                         f"{held.get(g.name, 0) / gib:>8.2f}")
        params = sum(g.params for g in self.graphs)
        lines.append(f"  parameters {params / gib:.2f} GiB, optimizer state {self.optimizer_state_bytes / gib:.2f} GiB")
        return "\n".join(lines)


def meta_program(planned, lowered=None, per_call: bool = True):
    """``planned``'s program on the meta device, as the backend builds it (``lowered``:
    ``dynamo.LoweredGraph``, whose input plan names the inputs read in place)."""
    from nova.compiler.executor import Program
    in_place = lowered.inputs.in_place if (lowered is not None and per_call) else frozenset()
    return Program(planned, "meta", per_call=per_call, in_place=in_place)


def graph_memory(name: str, planned, lowered=None, per_call: bool = True, target=None) -> GraphMemory:
    """``planned``'s program as the backend builds it, read on the meta device."""
    from nova.compiler.executor import BOUND_ROLES
    from nova.compiler.outside_arena import account, block_bytes
    from nova.passes.memory import LaunchWorkspace, OutsideAllocation
    program = meta_program(planned, lowered, per_call)
    in_place = lowered.inputs.in_place if (lowered is not None and per_call) else frozenset()
    found = account(planned, target, per_call=per_call, in_place=in_place)
    items = [i for i in found if isinstance(i, OutsideAllocation)]
    placed = {w.group: w.nbytes for w in planned.memory.workspaces}
    unplaced = [w.nbytes for w in found if isinstance(w, LaunchWorkspace) and placed.get(w.group, 0) < w.nbytes]
    persistent = sum(i.nbytes for i in items if i.lifetime == "program" and i.allocator == "torch") + (
        block_bytes(max(unplaced)) if unplaced else 0)     # the executor's one buffer for workspaces not in the arena
    driver = sum(i.nbytes for i in items if i.allocator == "driver")
    launch = max((i.nbytes for i in items if i.lifetime == "launch"), default=0)
    clones = sum(i.nbytes for i in items if i.lifetime == "step")
    stats = program.stats
    if per_call:
        from nova.compiler.step_storage import SMALL_OUTPUT
        step_arena = block_bytes(stats["step_arena_bytes"])
        outputs = sum(block_bytes(n) for n in program.output_buffer_sizes()) + clones
        persistent += sum(block_bytes(n) for n in program.output_buffer_sizes() if n <= SMALL_OUTPUT)   # copied from
    else:
        persistent += block_bytes(planned.memory.arena_bytes)
        step_arena, outputs = 0, clones
    inputs = planned.graph.inputs
    params = sum(s.value.type.nbytes for s in inputs if s.role in BOUND_ROLES)
    read_in_place = sum(s.value.type.nbytes for i, s in enumerate(inputs)
                        if s.role not in BOUND_ROLES and program.loc[s.value][0] == "input")
    data = sum(s.value.type.nbytes for s in inputs if s.role not in BOUND_ROLES) - read_in_place
    return GraphMemory(name, persistent, step_arena, outputs, launch, driver, params, data, read_in_place)


def handoff_copies(forward, backward) -> int:
    """Bytes ``backward``'s gather copies of what ``forward`` (both ``dynamo_precompile.PlannedGraph``)
    hands it: the forward's results as its program lays them out on the meta device, the saved ones
    AOTAutograd's backward arguments (the forward returns its user outputs, then the saved tensors
    in the order the backward takes them, then the tangents follow)."""
    program = meta_program(forward.planned, forward.lowered)
    tensors = program.meta_tensors()
    graph = program.graph
    results = [tensors[graph.outputs[what].value] if kind == "output" else
               tensors[graph.inputs[what].value] if kind == "input" else None
               for kind, what in forward.lowered.results]
    plan = backward.lowered.inputs
    saved = plan.arguments - len(plan.tangents)
    first = len(results) - saved
    if first < 0:
        return 0
    return plan.copied_bytes(results[first:] + [None] * len(plan.tangents))


def step_memory(plans, optimizer_state_bytes: int = 0, per_call: bool = True, target=None) -> StepMemory:
    """The training step of ``plans`` (``dynamo_precompile.plan_dynamo``'s, graphs in compilation
    order) as the module docstring models it."""
    planned = [g for g in plans.graphs if g.planned is not None]
    graphs = [graph_memory(g.name, g.planned, g.lowered, per_call, target) for g in planned]
    if per_call:
        forwards = [g for g in planned if not g.name.startswith("backward")]
        for g, m in zip(planned, graphs):
            if g.name.startswith("backward") and forwards and g.lowered is not None:
                forward = forwards.pop()
                m.copies = handoff_copies(forward, g) if forward.lowered is not None else 0
    forwards = [m for g, m in zip(planned, graphs) if not g.name.startswith("backward")]
    params = sum(m.params for m in forwards)                   # a parameter two graphs read counts twice: a bound
    data = sum(m.data for m in forwards)
    arena = max((m.step_arena for m in graphs), default=0)        # the shared arena (0 without per-call storage)
    base = params + data + optimizer_state_bytes + sum(m.persistent for m in graphs) + arena
    saved, pending, grads, timeline = 0, [], 0, []
    for g, m in zip(planned, graphs):
        if g.name.startswith("backward"):
            held = base + saved + grads + m.copies + m.outputs + m.launch
            saved -= pending.pop() if pending else 0
            grads += m.outputs
        else:
            held = base + saved + grads + m.outputs + m.launch
            saved += m.outputs
            pending.append(m.outputs)
        timeline.append((g.name, held))
    return StepMemory(graphs, optimizer_state_bytes, timeline, per_call)
