"""Memory planning: where every value of the scheduled graph lives, decided before anything runs.

Rules, over the execution order (the groups' nodes one after another; position = index):

* **Storage roots.**  A graph input is ``external``: the user owns its storage (parameters,
  optimizer state, data), it is never in the arena.  A view is an ``alias`` of the root whose
  storage it reads (shape, strides, offset from ``layout.py``); a reshape that cannot be a view is a
  root (a copy).  The storage pass (``storage.py``) may store a kernel's result at other strides
  (an arena root whose ``view`` gives them) or in a slice of a concat's result (an ``alias`` of
  that result whose producer is not a view: the kernel writes it there).  Values inside a
  Nova-kernel group (a GEMM epilogue's intermediates) are ``fused``: never written.  Every other
  node result gets arena bytes, the intermediates of an ATen-fallback group included (the executor
  runs those nodes one by one; they are ``workspace``).
* **Liveness.**  A root is live from the first position that writes it or a result stored in it
  to the last position that reads it or any of its aliases; to the end when it or an alias is a
  graph output.  A node of a fused group writes at the group's first position and reads at its
  last (one launch).
* **Donation.**  An output with ``updates=i`` is written into input i's storage (it becomes
  ``external``, ``donated``) when input i and its aliases are read nowhere after that write, except
  by the producing node itself reading it element for element (a pointwise op or adamw/sgd reading
  the whole input in its own layout, a Nova pointwise kernel whose every read of it is whole, in
  the output's layout, or a Nova multi-tensor update where only the output's own update reads it:
  ``elementwise_group``), and input i is not itself an output.
* **In place.**  The result of an ATen pointwise node (or an ``ELEMENTWISE_COMPOSITES`` node:
  adamw/sgd, cross_entropy_backward writing dlogits over the logits; or a ``ROW_COMPOSITES`` node
  over the last axis: softmax, log_softmax and their backwards, whose kernels read a whole row
  before writing any element of it and then write each element after reading it; on ATen or alone
  in a Nova kernel's group) takes the arena buffer of an input root that dies at this node, when
  that input has the result's byte size and is read element for element (same shape, dense, whole
  buffer).  The storage of a *donated* input (``Handoff.donated_inputs``: the caller gives it up to
  the step) is taken the same way once it dies there: the result is then written into the input's
  storage (``external``, ``donated``) and needs no arena bytes.  Beyond that, every other dense
  buffer written whole (outputs and temporaries alike; largest first) is placed at a byte of a
  donated input that is dead before the buffer is first written, at the best-fitting gap among the
  buffers placed there before it that it is live with, inside the input's own bytes
  (``_place_in_donors``; ``external``, ``donated``, ``offset``: the byte): the torch.compile
  backend's backward makes its gradients in the saved tensors it has read.  An
  output of a Nova pointwise kernel may take the buffer of any input of the kernel that dies there
  and that every member reads so (``elementwise_group``): each thread reads all its inputs' elements
  before writing the same ones; so may the result of a cross-entropy backward's rows kernel with the
  casts fused around it (bf16 dlogits over the bf16 logits, ``ROWS_ELEMENTWISE``) or with its forward
  (``rows_elementwise``).
* **Offsets.**  Buffers (in-place chains are one buffer) are placed largest first, each at the
  best-fitting gap among the buffers it is live with; offsets and sizes are multiples of 256 bytes.
  With ``Handoff.outputs_apart`` the buffers that hold a graph output are not placed among the
  others: they are packed one after another, in the order they are first written, in the *output
  region* at the top of the arena (``MemoryPlan.output_region``: [start, arena_bytes)), whose bytes
  nothing else shares, so that a program may allocate each of them per step and hand it to its
  caller instead of copying it out (the torch.compile backend, ``nova/integrations/dynamo.py``).

Outputs that are not donated stay in the arena until the end of the step (the executor copies them
out, or hands out views valid until the next run; or, in their output region, hands them over);
an output that is a view stays an alias.

``peak_bytes`` = arena bytes + external bytes + outside-arena bytes (the device memory the step
needs); ``live_peak_bytes`` = the largest live set (a lower bound for any plan).  ``breakdown``
splits ``peak_bytes``: external bytes by role, the arena's live bytes at its busiest position by
category (gradients, activations, workspace, ...), ``arena_slack`` (arena bytes not live there) and
``outside_arena``.  **Outside the arena**: what the program allocates besides the arena and the
user's tensors (its static slots and workspaces, GEMM workspaces, the temporaries of one launch,
returned clones), listed by the compiler (``nova/compiler/outside_arena.py``) and stated on the plan
by ``with_outside`` (``MemoryPlan.outside``: the list; ``outside_bytes``: what it adds at the peak,
every ``program`` and ``step`` allocation plus the largest ``launch`` one).  A plan made without
that list (``outside`` is None: the passes alone) counts none.
**Launch workspaces**: the scratch a group's kernels use only while its launch runs (a Nova GEMM's
operand-prep copies and split-K partials, a rows kernel's partial sums, the embedding backward's sort
buffers), also found by the compiler, are placed *in* the arena by ``place_workspaces``
(``MemoryPlan.workspaces``): each live over its group's positions, best fit among the buffers live
then (the arena grows only where no gap fits), so they share bytes with values dead during their launch.
``validate_memory_plan`` re-derives liveness independently and checks that no two buffers live at
the same time overlap.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nova.ir.graph import Graph, Node, Value
from nova.ir.ops import kind
from nova.passes import layout as layout_analysis
from nova.passes.fusion import Group
from nova.passes.storage import StoragePlan

ALIGNMENT = 256                               # bytes: where every arena slot starts (any kernel's widest access)
OPTIMIZER_UPDATES = ("adamw", "sgd")          # (param, grad, ...) -> updated state, elementwise
# Composites whose kernels read each input element, at most, before writing the result element at
# the same position (and nothing else of the same buffer afterwards): their result may take the
# buffer of an input that dies at them.  cross_entropy_backward reads logits[i, j] (and per-row
# values) and writes dlogits[i, j] (aten_kernels.cross_entropy_backward: sub, elu_backward, then
# scatter_add_ of -scale at the targets, which reads only dlogits).
ELEMENTWISE_COMPOSITES = OPTIMIZER_UPDATES + ("cross_entropy_backward",)
# Row-wise composites over the last axis: every kernel that runs them reads the whole row of each
# input (its reductions: max, sum; one CTA or warp per row, a barrier or shuffle before the writes)
# before writing any element of the row, then writes each element after reading that element
# (Nova's rows kernels, ``nova/kernels/rows/emit_row.py``: the reduction sweeps, then the write
# sweep; ATen's softmax kernels: the row reductions, then the epilogue loop; the CPU executor
# computes them out of place and copies).  Their result may take the buffer of a row input that
# dies at them: log_softmax over the logits, log_softmax_backward over dy or y.
ROW_COMPOSITES = ("softmax", "log_softmax", "softmax_backward", "log_softmax_backward")
# Rows ops whose Nova kernel, with the casts fused around it (``rows_casts.py``), reads each element of
# its row input before writing the same element of its row result (one pass, each thread its own
# elements): the whole group may write its result over that input.
ROWS_ELEMENTWISE = ("cross_entropy_backward",)
INPUT_CATEGORIES = {"param": "parameters", "opt_state": "optimizer_state", "grad": "gradients",
                    "data": "data", "const": "data"}
CATEGORIES = ("parameters", "optimizer_state", "data", "gradients", "activations", "workspace", "arena_slack",
              "outside_arena")
OUTSIDE_LIFETIMES = ("program", "launch", "step")
VALUE_KINDS = ("arena", "external", "alias", "fused", "host")


@dataclass(frozen=True)
class Handoff:
    """How a program's results and inputs cross its boundary (rules in the module docstring).

    ``outputs_apart``: the buffers of the graph outputs form the output region at the top of the
    arena (nothing else shares their bytes), so that a program can allocate them per step and hand
    them to its caller as they are stored (any strides: ``storage.plan_storage``'s
    ``outputs_as_stored``); ``donated_inputs``: indices of inputs whose storage the caller gives up
    to the step (it reads it nowhere afterwards), which a result may take in place once they die."""
    outputs_apart: bool = False
    donated_inputs: frozenset = frozenset()


@dataclass(frozen=True)
class View:
    """How an alias reads its root's storage (in elements)."""
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass
class ValuePlan:
    kind: str                         # one of VALUE_KINDS
    nbytes: int                       # the value's own bytes
    category: str                     # for the breakdown: parameters, gradients, activations, workspace, ...
    offset: int | None = None         # arena: byte offset in the arena
    input_index: int | None = None    # external: the graph input whose storage holds it
    alias_of: Value | None = None     # alias: the root value whose storage it views
    view: View | None = None          # alias: shape, strides, offset over the root's storage; arena: the
                                      # strides its kernel writes it at when not row-major (storage.py)
    live: tuple[int, int] | None = None   # roots with storage: [first, last] positions (end = len(order))
    reuses: Value | None = None       # in place: took this value's arena buffer as it died here
    donated: bool = False             # an updating output (or, Handoff.donated_inputs, a result taking a
                                      # donated input's storage in place) written into its input's storage

    @property
    def in_dead_input(self) -> bool:
        """Placed at byte ``offset`` of a donated input once that input is dead (``_place_in_donors``),
        not written over it in place."""
        return self.kind == "external" and self.donated and self.offset is not None


@dataclass(frozen=True)
class OutsideAllocation:
    """One device allocation of the program outside its arena."""
    what: str                         # "workspace [1024] float32 of group 12", "temporaries of launch 40 (...)"
    nbytes: int                       # as the allocator counts it
    lifetime: str                     # OUTSIDE_LIFETIMES: the program's (built once), one launch's, one step's
    allocator: str = "torch"          # "torch" (PyTorch's caching allocator) | "driver" (cuMemAlloc, which
                                      # torch.cuda.max_memory_allocated does not see)


@dataclass(frozen=True)
class LaunchWorkspace:
    """Device bytes one group's kernels use only while its launch runs (written and read within it),
    which the plan places in the arena (``place_workspaces``)."""
    group: int                        # index of the group (execution order) whose launch uses it
    nbytes: int
    what: str                         # "GEMM workspace of gemm 768x3072x16384 tf32 TN -> f32", ...
    offset: int = -1                  # arena byte offset, once placed
    live: tuple[int, int] = (-1, -1)  # once placed: the positions of the group's first and last node


def outside_peak_bytes(items) -> int:
    """What ``items`` add at the step's peak: every program and step allocation, the largest launch one."""
    return sum(i.nbytes for i in items if i.lifetime != "launch") + \
        max((i.nbytes for i in items if i.lifetime == "launch"), default=0)


@dataclass
class MemoryPlan:
    values: dict[Value, ValuePlan]
    arena_bytes: int
    peak_bytes: int                   # arena + external + outside_bytes
    live_peak_bytes: int              # largest live set (arena at its busiest position + external)
    external_bytes: int
    breakdown: dict[str, int]         # sums to peak_bytes
    donations: list[tuple[int, int]]  # (output index, input index) written in place
    order: list[Node] = field(default_factory=list)
    alignment: int = ALIGNMENT
    storage: StoragePlan | None = None   # the storage decisions the layouts were analyzed under
    outside: list[OutsideAllocation] | None = None   # allocations outside the arena (None: not listed)
    outside_bytes: int = 0            # what they add at the peak (``outside_peak_bytes``), in peak_bytes
    handoff: Handoff = field(default_factory=Handoff)   # the boundary the plan was made for
    output_region: tuple[int, int] | None = None   # Handoff.outputs_apart: [start, arena_bytes) of the outputs' buffers
    workspaces: list[LaunchWorkspace] = field(default_factory=list)   # placed in the arena (place_workspaces)
    host_bytes: int = 0               # host memory of the offloaded copies (``host`` values): not in peak_bytes

    def __getitem__(self, value: Value) -> ValuePlan:
        return self.values[value]

    def root(self, value: Value) -> Value:
        p = self.values[value]
        return p.alias_of if p.kind == "alias" else value

    def inplace(self) -> list[tuple[Value, Value]]:
        """(dying value, value that took its buffer) pairs."""
        return [(p.reuses, v) for v, p in self.values.items() if p.reuses is not None]


def with_outside(plan: MemoryPlan, items: list[OutsideAllocation]) -> MemoryPlan:
    """``plan`` stating ``items`` (``MemoryPlan.outside``): its peak, largest live set and breakdown
    include what they add at the peak.  The one place the outside allocations enter a plan."""
    for i in items:
        if i.lifetime not in OUTSIDE_LIFETIMES or i.nbytes < 0:
            raise ValueError(f"outside allocation {i.what!r}: lifetime {i.lifetime!r}, {i.nbytes} bytes")
    extra = outside_peak_bytes(items) - plan.outside_bytes
    plan.outside, plan.outside_bytes = list(items), plan.outside_bytes + extra
    plan.peak_bytes += extra
    plan.live_peak_bytes += extra
    plan.breakdown["outside_arena"] = plan.outside_bytes
    return plan


def place_workspaces(plan: MemoryPlan, groups: list[Group], workspaces: list[LaunchWorkspace]) -> MemoryPlan:
    """``plan`` with ``workspaces`` placed in its arena (``MemoryPlan.workspaces``; the one place they
    enter a plan).  Each is live over its group's positions [first node, last node]; largest first, it
    takes the best-fitting gap among the arena buffers and workspaces placed before it that are live at
    any of those positions, else the bytes above them (the arena grows).  With an output region
    (``MemoryPlan.output_region``) they are placed below it, among the other buffers, and the region
    moves up by the bytes they add there, so it stays the arena's top, shared with nothing.  The peak,
    the largest live set and the breakdown (category ``workspace``) follow."""
    if plan.workspaces:
        raise ValueError("the plan's launch workspaces are placed already")
    pos = {n: i for i, n in enumerate(plan.order)}
    region_start = plan.output_region[0] if plan.output_region is not None else None
    blocks = [(p.live[0], p.live[1], p.offset, p.offset + aligned(p.nbytes)) for p in plan.values.values()
              if p.kind == "arena" and p.nbytes and (region_start is None or p.offset < region_start)]
    placed: list[LaunchWorkspace] = []
    todo = sorted((w for w in workspaces if w.nbytes), key=lambda w: (-w.nbytes, w.group))
    for w in todo:
        nodes = groups[w.group].nodes
        first, last = pos[nodes[0]], pos[nodes[-1]]
        busy = sorted((start, stop) for f, l, start, stop in blocks if f <= last and l >= first)
        offset, _ = _best_gap(busy, aligned(w.nbytes))
        blocks.append((first, last, offset, offset + aligned(w.nbytes)))
        placed.append(LaunchWorkspace(w.group, w.nbytes, w.what, offset, (first, last)))
    plan.workspaces = sorted(placed, key=lambda w: w.group)
    if region_start is not None:
        _move_output_region(plan, max([region_start] + [w.offset + aligned(w.nbytes) for w in placed]))
    plan.arena_bytes = max([plan.arena_bytes] + [w.offset + aligned(w.nbytes) for w in placed])
    storages, categories, first = _storages_of(plan)
    owned = dict.fromkeys(("parameters", "optimizer_state", "data", "gradients"), 0)
    for p in plan.values.values():              # the graph's inputs
        if p.kind == "external" and not p.donated:
            owned[p.category] += p.nbytes
    breakdown, busiest = _breakdown(plan.order, storages, categories, first, plan.arena_bytes, owned)
    breakdown["outside_arena"] = plan.outside_bytes
    plan.breakdown = breakdown
    plan.peak_bytes = plan.arena_bytes + plan.external_bytes + plan.outside_bytes
    plan.live_peak_bytes = busiest + plan.external_bytes + plan.outside_bytes
    return plan


def _move_output_region(plan: MemoryPlan, start: int) -> None:
    """Move ``plan``'s output region (its buffers, their aliases, the arena's end) up to begin at ``start``."""
    old_start, old_stop = plan.output_region
    shift = start - old_start
    if shift == 0:
        return
    for p in plan.values.values():
        if p.kind in ("arena", "alias") and p.offset is not None and p.offset >= old_start:
            p.offset += shift
    plan.output_region = (start, old_stop + shift)
    plan.arena_bytes += shift


def _best_gap(busy: list[tuple[int, int]], size: int, capacity: int | None = None) -> tuple[int, int | None] | None:
    """``(offset, room)`` of the smallest gap of at least ``size`` bytes between the ``busy`` byte ranges
    (sorted by start; the lowest on a tie).  Without ``capacity``: else the first byte above them all
    (room None); with it, the bytes up to ``capacity`` are one more gap, and None when none fits."""
    cursor, best, best_gap = 0, None, None
    for start, stop in busy + ([(capacity, capacity)] if capacity is not None else []):
        gap = start - cursor
        if gap >= size and (best_gap is None or gap < best_gap):
            best, best_gap = cursor, gap
        cursor = max(cursor, stop)
    if best is None:
        return None if capacity is not None else (cursor, None)
    return best, best_gap


def _storages_of(plan: MemoryPlan) -> tuple[list, dict, dict]:
    """The arena's buffers as ``plan_memory`` made them (an in-place chain is one buffer: its values
    linked by ``reuses``) and one per placed launch workspace; with each holder's category and first
    position, as ``_breakdown`` reads them."""
    storage_of: dict = {}
    storages: list[_Storage] = []
    categories, first = {}, {}
    arena = sorted((v for v, p in plan.values.items() if p.kind == "arena" and p.live is not None),
                   key=lambda v: plan.values[v].live[0])
    for v in arena:
        p = plan.values[v]
        categories[v], first[v] = p.category, p.live[0]
        s = storage_of.get(p.reuses) if p.reuses is not None else None
        if s is None:
            s = _Storage(v, p.live[0], p.live[1])
            storages.append(s)
        else:
            s.holders.append(v)
            s.last = max(s.last, p.live[1])
        storage_of[v] = s
    for w in plan.workspaces:
        s = _Storage.of_bytes(w, w.nbytes, *w.live)
        storages.append(s)
        categories[w], first[w] = "workspace", w.live[0]
    return storages, categories, first


def aligned(n: int, alignment: int = ALIGNMENT) -> int:
    return -(-n // alignment) * alignment


def writes_in_place(node: Node) -> bool:
    """``node``'s kernels may write its result over an input it reads last, element for element:
    a pointwise op, an ``ELEMENTWISE_COMPOSITES`` op, or a ``ROW_COMPOSITES`` op over the last axis."""
    if kind(node.op) == "pointwise" or node.op in ELEMENTWISE_COMPOSITES:
        return True
    if node.op in ROW_COMPOSITES:
        rank = node.outputs[0].type.rank
        return rank > 0 and node.attrs.get("axis", -1) % rank == rank - 1
    return False


def elementwise_reader(node: Node, root: Value, out: Value, layouts) -> bool:
    """``node`` may write ``out`` over ``root``'s storage: it writes in place (``writes_in_place``),
    stores ``out`` densely, and reads ``root`` (in any of its aliases) only element for element in
    ``out``'s own layout.  (A result stored in its reader's layout -- strided, transposed -- puts
    element i where the input's element j != i lies, which another thread may not have read yet.)"""
    if not writes_in_place(node):
        return False
    if root.type.nbytes != out.type.nbytes or not layouts[out].dense:
        return False
    for v in node.inputs:
        lay = layouts[v]
        if lay.root is root and not (lay.whole_root and lay.shape == out.shape):
            return False
    return True


def elementwise_group(group: Group, root: Value, out: Value, layouts) -> bool:
    """One Nova kernel may write ``out`` over ``root``'s storage.  A pointwise kernel (or a
    ``ROWS_ELEMENTWISE`` rows kernel with its casts): each thread reads every input at the flat
    indices it then writes, so this holds when ``out`` is stored densely (not in a strided reader's
    layout) and every member reading ``root`` (in any of its aliases) reads it whole, in ``out``'s
    own layout, element for element (a gather reads its table at computed indices: never).  A multi-tensor optimizer
    update: each thread reads one tensor's inputs at the indices it then writes of that tensor's
    outputs, so only ``out``'s own update may read ``root``, whole, in ``out``'s layout.  A multi-tensor
    map (the parameters' casts): its tensors run in other CTAs at other times, so none writes over any."""
    from nova.kernels.optimizer.sum_problem import MultiTensorSumProblem
    if not group.fused or root.type.nbytes != out.type.nbytes or not layouts[out].dense \
            or isinstance(group.problem, MultiTensorSumProblem):
        return False
    if group.kind == "pointwise" or rows_elementwise(group):
        readers = group.nodes
    elif group.kind == "composite" and group.nodes[-1].op in OPTIMIZER_UPDATES:
        readers = [out.producer]
        if any(layouts[v].root is root for n in group.nodes if n is not out.producer for v in n.inputs):
            return False
    else:
        return False
    for n in readers:
        for v in n.inputs:
            lay = layouts[v]
            if lay.root is root and (n.op == "index_select" or not (lay.whole_root and lay.shape == out.shape)):
                return False          # a gather reads its table anywhere: never written over
    return True


def rows_elementwise(group: Group) -> bool:
    """A rows group whose kernel reads each element of its row input before writing the same element of its
    row result: a ``ROWS_ELEMENTWISE`` op with its casts, or a cross-entropy forward with its backward (the
    lane holding the target's logit writes the loss from its own value)."""
    return group.kind == "composite" and any(n.op in ROWS_ELEMENTWISE for n in group.nodes)


class _Storage:
    def __init__(self, value: Value, first: int, last: int, donated_input: int | None = None):
        self.holders = [value]
        self.nbytes = value.type.nbytes
        self.size = aligned(self.nbytes)
        self.first, self.last = first, last
        self.offset = 0
        self.donated_input = donated_input     # a donated graph input's storage (not arena bytes)
        self.donor: tuple[int, int] | None = None   # (input, byte offset): placed in a dead donated input
        self.placed: list[_Storage] = []       # a donated input's: the buffers placed in its bytes

    @classmethod
    def of_bytes(cls, holder, nbytes: int, first: int, last: int) -> "_Storage":
        s = cls.__new__(cls)
        s.holders, s.nbytes, s.size = [holder], nbytes, aligned(nbytes)
        s.first, s.last, s.offset = first, last, 0
        s.donated_input, s.donor, s.placed = None, None, []
        return s


def plan_memory(graph: Graph, groups: list[Group], layouts=None, storage: StoragePlan | None = None,
                handoff: Handoff | None = None) -> MemoryPlan:
    """The memory plan of ``graph`` run as ``groups`` in this order (rules in the module docstring);
    ``layouts`` as ``layout.analyze(graph, storage)`` gives them; ``handoff`` the program's boundary
    (default: outputs in the arena, no donated input)."""
    handoff = handoff if handoff is not None else Handoff()
    layouts = layouts if layouts is not None else layout_analysis.analyze(graph, storage)
    order = [n for g in groups for n in g.nodes]
    if len(order) != len(graph.nodes) or set(order) != set(graph.nodes):
        raise ValueError("the groups must hold every node of the graph exactly once")
    end = len(order)
    pos = {n: i for i, n in enumerate(order)}
    group_of = {n: g for g in groups for n in g.nodes}
    write_at = {n: pos[group_of[n].nodes[0]] if group_of[n].fused else pos[n] for n in order}
    read_at = {n: pos[group_of[n].nodes[-1]] if group_of[n].fused else pos[n] for n in order}
    users = graph.users()
    out_values = set(graph.output_values())

    all_values = [s.value for s in graph.inputs] + [v for n in graph.nodes for v in n.outputs]
    family: dict[Value, list[Value]] = {}
    for v in all_values:
        family.setdefault(layouts[v].root, []).append(v)

    def read_positions(root: Value) -> list[int]:
        return [read_at[u] for v in family[root] for u in users.get(v, ())
                if kind(u.op) != "view" or layout_analysis.is_copy(u, layouts)]

    first: dict[Value, int] = {}
    last: dict[Value, int] = {}
    for root in family:
        writers = [m.producer for m in family[root] if m is root or kind(m.producer.op) != "view"]
        first[root] = min(write_at[n] for n in writers) if root.producer is not None else -1
        reads = read_positions(root)
        last[root] = end if any(v in out_values for v in family[root]) else max(reads, default=first[root])

    internal = {v for g in groups for v in g.intermediates()} | \
        {v for g in groups for n in g.nodes for v in n.outputs if not users.get(v) and v not in out_values}
    fused = {v for g in groups if g.fused for v in g.intermediates()}
    host = {n.outputs[0] for n in order if n.op == "offload"}
    categories = _categories(graph, family, layouts, internal)

    # ---------------------------------------------------------------- donation
    input_index = {s.value: i for i, s in enumerate(graph.inputs)}
    donated: dict[Value, int] = {}
    donations: list[tuple[int, int]] = []
    for j, o in enumerate(graph.outputs):
        if o.updates is None:
            continue
        v, x = o.value, graph.inputs[o.updates].value
        if v is x:
            donations.append((j, o.updates))
            continue
        if v.producer is None or layouts[v].root is not v or v in donated or v in fused \
                or o.updates in donated.values() or any(a in out_values for a in family[x]):
            continue
        p = v.producer
        reads = read_positions(x)
        if all(r < write_at[p] or (r == write_at[p] and not group_of[p].fused
                                   and elementwise_reader(p, x, v, layouts))
               or (write_at[p] <= r <= read_at[p] and elementwise_group(group_of[p], x, v, layouts))
               for r in reads):
            donated[v] = o.updates
            donations.append((j, o.updates))

    # ---------------------------------------------------------------- in place, then buffers
    storage_of: dict[Value, _Storage] = {}
    storages: list[_Storage] = []
    for i in sorted(handoff.donated_inputs):
        if not 0 <= i < len(graph.inputs):
            raise ValueError(f"donated input {i} of a graph with {len(graph.inputs)} inputs")
        x = graph.inputs[i].value
        if layouts[x].root is x and x not in out_values and not any(a in out_values for a in family[x]):
            storage_of[x] = _Storage(x, -1, last[x], donated_input=i)
    reuses: dict[Value, Value] = {}
    claimed: set = set()
    for index, node in enumerate(order):
        if index == 0 or group_of[node] is not group_of[order[index - 1]]:
            claimed = set()                    # one buffer taken per group launch
        for v in node.outputs:
            if layouts[v].root is not v or v in fused or v in donated or v in host:
                continue
            s = None
            group = group_of[node]
            kernel_wide = group.fused and (group.kind == "pointwise" or       # one Nova pointwise kernel, or
                                           (len(group.nodes) > 1 and rows_elementwise(group)))
            alone = not group.fused or len(group.nodes) == 1                  # one launch of this node only
            if (alone or kernel_wide) and len(node.outputs) == 1:             # a multi-output node (adamw) may
                reads = group.inputs if kernel_wide else node.inputs          # write one result before reading all inputs
                for x in dict.fromkeys(layouts[i].root for i in reads):
                    cand = storage_of.get(x)
                    ok = elementwise_group(group, x, v, layouts) if kernel_wide else \
                        elementwise_reader(node, x, v, layouts)
                    if cand is not None and cand.holders[-1] is x and cand.last == read_at[node] \
                            and id(cand) not in claimed and ok and (cand.donated_input is None or v not in out_values):
                        s = cand
                        reuses[v] = x
                        break
            if s is None:
                s = _Storage(v, first[v], last[v])
                storages.append(s)
            else:
                s.holders.append(v)
                s.last = last[v]
            claimed.add(id(s))
            storage_of[v] = s
    donors = [d for x, d in storage_of.items() if d.donated_input is not None and d.holders[0] is x]
    if donors:                                 # largest first, as the arena's offsets
        written_whole = [s for s in storages if all(       # no kernel writes into it through a view
            m is h or kind(m.producer.op) == "view" for h in s.holders for m in family[h])]
        placed = {id(s) for s in sorted(written_whole, key=lambda s: (-s.size, s.first, s.last))
                  if _place_in_donors(s, donors, layouts)}
        storages = [s for s in storages if id(s) not in placed]
    apart = [s for s in storages if handoff.outputs_apart and any(h in out_values or any(
        a in out_values for a in family[h]) for h in s.holders)]
    arena_bytes = _assign_offsets([s for s in storages if s not in apart])
    output_region = None
    if handoff.outputs_apart:
        start = arena_bytes
        for s in sorted(apart, key=lambda s: (s.first, s.last)):
            s.offset = arena_bytes
            arena_bytes += s.size
        output_region = (start, arena_bytes)

    # ---------------------------------------------------------------- per value
    values: dict[Value, ValuePlan] = {}
    for v in sorted(all_values, key=lambda v: layouts[v].root is not v):      # roots first
        root = layouts[v].root
        cat = categories[root]
        if root is not v:
            lay = layouts[v]
            rp = values[root]
            values[v] = ValuePlan("alias", v.type.nbytes, cat, offset=rp.offset, input_index=rp.input_index,
                                  alias_of=root, view=View(lay.shape, lay.strides, lay.offset))
        elif v in input_index:
            values[v] = ValuePlan("external", v.type.nbytes, cat, input_index=input_index[v], live=(-1, end))
        elif v in donated:
            values[v] = ValuePlan("external", v.type.nbytes, cat, input_index=donated[v],
                                  live=(first[v], last[v]), donated=True)
        elif v in fused:
            values[v] = ValuePlan("fused", v.type.nbytes, "workspace")
        elif v in host:                                      # an offloaded copy: host memory, never the arena
            values[v] = ValuePlan("host", v.type.nbytes, "host", live=(first[v], last[v]))
        elif storage_of[v].donated_input is not None:        # written into a donated input's storage
            values[v] = ValuePlan("external", v.type.nbytes, cat, input_index=storage_of[v].donated_input,
                                  live=(first[v], last[v]), reuses=reuses.get(v), donated=True)
        elif storage_of[v].donor is not None:                # placed in a dead donated input's bytes
            i, at = storage_of[v].donor
            values[v] = ValuePlan("external", v.type.nbytes, cat, offset=at, input_index=i,
                                  live=(first[v], last[v]), reuses=reuses.get(v), donated=True)
        else:
            lay = layouts[v]
            values[v] = ValuePlan("arena", v.type.nbytes, cat, offset=storage_of[v].offset,
                                  live=(first[v], last[v]), reuses=reuses.get(v),
                                  view=None if lay.dense else View(lay.shape, lay.strides, 0))
    values = {v: values[v] for v in all_values}

    external_bytes = sum(s.value.type.nbytes for s in graph.inputs)
    owned = dict.fromkeys(("parameters", "optimizer_state", "data", "gradients"), 0)
    for s in graph.inputs:
        owned[INPUT_CATEGORIES[s.role]] += s.value.type.nbytes
    breakdown, live_peak = _breakdown(order, storages, categories, first, arena_bytes, owned)
    return MemoryPlan(values, arena_bytes, arena_bytes + external_bytes, live_peak + external_bytes,
                      external_bytes, breakdown, donations, order, storage=storage, handoff=handoff,
                      output_region=output_region, host_bytes=sum(v.type.nbytes for v in host))


def _place_in_donors(s: _Storage, donors: list[_Storage], layouts) -> bool:
    """Place buffer ``s`` in the storage of a donated input that is dead before ``s`` is first
    written (after its last read and the last read of any result written over it in place), at the
    best-fitting gap among the buffers placed there before that are live with ``s``; True if placed.
    Only a dense buffer (its kernels write it row-major from an offset), at an aligned offset, wholly
    inside the input's own bytes (``_best_gap``, as the launch workspaces are placed).  Called largest
    buffer first, it is ``_assign_offsets`` over the donated inputs' bytes: the torch.compile backend's
    backward reads the saved tensors AOTAutograd donates once each, early, and makes its gradients
    late, which then need no bytes of their own."""
    if not s.size or not all(layouts[h].dense for h in s.holders):
        return False
    best = None
    for d in donors:
        if d.last >= s.first or d.nbytes < s.nbytes:
            continue
        busy = sorted((o.offset, o.offset + o.size) for o in d.placed if o.first <= s.last and o.last >= s.first)
        fit = _best_gap(busy, s.nbytes, capacity=d.nbytes)
        if fit is not None and (best is None or fit[1] < best[2]):         # the smallest room
            best = (d, *fit)
    if best is None:
        return False
    d, at, _ = best
    s.offset, s.donor = at, (d.donated_input, at)
    d.placed.append(s)
    return True


def _categories(graph: Graph, family, layouts, internal) -> dict[Value, str]:
    """Each root -> its breakdown category."""
    updated = {n.inputs[1] for n in graph.nodes if n.op in OPTIMIZER_UPDATES}
    scaled = {x for g in updated if g.producer is not None and g.producer.op == "mul"   # clipping's grad * coef
              for x in g.producer.inputs if x.type == g.type}
    grads = {o.value for o in graph.outputs if o.role == "grad"} | updated | scaled
    roles = {}
    for o in graph.outputs:
        roles.setdefault(o.value, o.role)
    out = {}
    for s in graph.inputs:
        out[s.value] = INPUT_CATEGORIES[s.role]
    for root, members in family.items():
        if root in out:
            continue
        member_roles = {roles.get(m) for m in members}
        if any(m in grads for m in members):
            out[root] = "gradients"
        elif "param" in member_roles:
            out[root] = "parameters"
        elif "opt_state" in member_roles:
            out[root] = "optimizer_state"
        elif root in internal:
            out[root] = "workspace"
        else:
            out[root] = "activations"
    return out


def _assign_offsets(storages: list[_Storage]) -> int:
    """Greedy by size with best fit: each buffer, largest first, goes to the smallest gap between
    the buffers already placed that are live at the same time (else above them)."""
    import numpy as np

    todo = sorted((s for s in storages if s.size), key=lambda s: (-s.size, s.first, s.last))
    for s in storages:
        s.offset = 0
    firsts = np.empty(len(todo), dtype=np.int64)
    lasts = np.empty(len(todo), dtype=np.int64)
    starts = np.empty(len(todo), dtype=np.int64)
    stops = np.empty(len(todo), dtype=np.int64)
    top = 0
    for n, s in enumerate(todo):
        live = (firsts[:n] <= s.last) & (lasts[:n] >= s.first)
        order = np.argsort(starts[:n][live], kind="stable")
        busy_start, busy_stop = starts[:n][live][order], stops[:n][live][order]
        # cursor before each busy block = the highest stop below it; a gap is what lies between
        cursor = np.concatenate(([0], np.maximum.accumulate(busy_stop)))
        gaps = busy_start - cursor[:-1]
        fits = np.flatnonzero(gaps >= s.size)
        s.offset = int(cursor[-1]) if not fits.size else int(cursor[fits[np.argmin(gaps[fits])]])
        firsts[n], lasts[n], starts[n], stops[n] = s.first, s.last, s.offset, s.offset + s.size
        top = max(top, s.offset + s.size)
    return top


def _breakdown(order, storages, categories, first, arena_bytes, owned: dict) -> tuple[dict[str, int], int]:
    """``(breakdown, busiest)``: the user-owned bytes by category (``owned``), the bytes of the buffers
    live at the arena's busiest position by their holder's category there, the arena's slack."""
    end = len(order)
    delta = [0] * (end + 2)
    for s in storages:
        delta[max(s.first, 0)] += s.size
        delta[s.last + 1] -= s.size
    live, busiest, busiest_at = 0, 0, 0
    for t in range(end + 1):
        live += delta[t]
        if live > busiest:
            busiest, busiest_at = live, t
    breakdown = dict.fromkeys(CATEGORIES, 0)
    for category, nbytes in owned.items():
        breakdown[category] += nbytes
    for s in storages:
        if s.first <= busiest_at <= s.last and s.size:
            holder = [h for h in s.holders if first[h] <= busiest_at][-1]
            breakdown[categories[holder]] += s.size
    breakdown["arena_slack"] = arena_bytes - busiest
    return breakdown, busiest


# ==================================================================== validation
def validate_memory_plan(graph: Graph, groups: list[Group], plan: MemoryPlan) -> None:
    """Raise ``AssertionError`` naming the first problem: a value without a plan, a misaligned or
    out-of-arena buffer, two buffers live at the same time that overlap (other than a declared
    in-place reuse at the node where the old value dies, read element for element), a launch workspace
    on bytes a value or another workspace holds during its group's launch, an alias that
    does not describe its view, a donation whose input is still read afterwards, or a launch that
    writes bytes it also reads through another index map (its threads would race: one writes an
    element another has yet to read; checked on the element addresses themselves).  Liveness is
    re-derived here from the graph, the groups and the plan's storage decisions, not taken from the plan."""
    layouts = layout_analysis.analyze(graph, plan.storage)
    order = [n for g in groups for n in g.nodes]
    end = len(order)
    pos = {n: i for i, n in enumerate(order)}
    group_of = {n: g for g in groups for n in g.nodes}
    span = {n: (pos[group_of[n].nodes[0]], pos[group_of[n].nodes[-1]]) if group_of[n].fused else (pos[n], pos[n])
            for n in order}
    outputs = set(graph.output_values())
    inputs = [s.value for s in graph.inputs]

    def root_of(v):
        return plan[v].alias_of if plan[v].kind == "alias" else v

    need: dict[Value, list[int]] = {}                 # root -> [write, last read or end]
    for v in inputs:
        need[v] = [-1, -1]
    for node in order:
        for v in node.inputs:
            if kind(node.op) == "view" and plan[node.outputs[0]].kind == "alias":
                continue                              # a free view reads nothing
            r = root_of(v)
            need[r][1] = max(need[r][1], span[node][1])
        for v in node.outputs:
            assert v in plan.values, f"value {v} of {node.op} has no plan"
            if plan[v].kind != "alias" or kind(node.op) != "view":      # written: itself, or into its root
                r = root_of(v)
                write = span[node][0]
                need[r] = [min(need[r][0], write), max(need[r][1], write)] if r in need else [write, write]
    for v in outputs:
        need[root_of(v)][1] = end

    for v, p in plan.values.items():
        assert p.kind in VALUE_KINDS, f"unknown kind {p.kind}"
        if p.kind == "alias":
            lay = layouts[v]
            assert lay.root is p.alias_of and p.view == View(lay.shape, lay.strides, lay.offset), \
                f"alias {v} does not describe its view ({lay.describe()})"
        if p.kind == "arena":
            assert p.offset % plan.alignment == 0 and p.offset + p.nbytes <= plan.arena_bytes, \
                f"buffer of {v} at {p.offset}+{p.nbytes} is misaligned or outside the arena ({plan.arena_bytes})"
            lay = layouts[v]
            assert lay.root is v and (p.view is None) == lay.dense and \
                (p.view is None or p.view == View(lay.shape, lay.strides, 0)), \
                f"buffer of {v} does not describe its stored layout ({lay.describe()})"
        if p.kind == "fused":
            assert group_of[v.producer].fused and v not in outputs, f"{v} is fused but is written"
    for i, v in enumerate(inputs):
        assert plan[v].kind == "external" and plan[v].input_index == i, f"input {i} is not external"

    def apart_or_in_place(a, b) -> bool:
        """Buffers ``a`` and ``b`` (at offsets of the same bytes that overlap) never live together,
        or the later took the earlier's buffer in place where it dies, read element for element."""
        (fa, la), (fb, lb) = need[a], need[b]
        if fa > lb or fb > la:
            return True
        earlier, later = (a, b) if fa <= fb else (b, a)
        group = group_of[later.producer]
        return plan[later].reuses is earlier and plan[earlier].offset == plan[later].offset and (
            (need[earlier][1] == need[later][0] and elementwise_reader(later.producer, earlier, later, layouts))
            or (need[earlier][1] == span[later.producer][1] and elementwise_group(group, earlier, later, layouts)))

    arena = [v for v, p in plan.values.items() if p.kind == "arena" and p.nbytes]
    arena.sort(key=lambda v: plan[v].offset)
    for a_i, a in enumerate(arena):
        pa = plan[a]
        for b in arena[a_i + 1:]:
            pb = plan[b]
            if pb.offset >= pa.offset + pa.nbytes:
                break
            assert apart_or_in_place(a, b), \
                f"buffers of {a} {need[a]} and {b} {need[b]} overlap in time and in the arena"

    output_donations = {graph.outputs[j].value for j, _ in plan.donations}
    for i in sorted({p.input_index for v, p in plan.values.items() if p.kind == "external" and p.donated
                     and v not in output_donations}):
        assert i in plan.handoff.donated_inputs, f"a result is written into input {i}, which is not donated"
        x = inputs[i]
        holders = sorted((v for v, p in plan.values.items() if p.kind == "external" and p.donated
                          and p.input_index == i and v not in output_donations), key=lambda v: need[v][0])
        assert x not in outputs, f"input {i} is donated but is a graph output"
        placed = [v for v in holders if plan[v].in_dead_input]           # at bytes of it, once it is dead
        holders = [v for v in holders if not plan[v].in_dead_input]      # over it in place
        dead = max(need[v][1] for v in [x] + holders)
        for a_i, a in enumerate(placed):
            pa = plan[a]
            assert pa.offset % plan.alignment == 0 and pa.offset + pa.nbytes <= x.type.nbytes, \
                f"{a} at byte {pa.offset} of donated input {i} is misaligned or outside its {x.type.nbytes} bytes"
            assert need[a][0] > dead, f"{a} is written into donated input {i} while it is still read"
            for b in placed[a_i + 1:]:
                pb = plan[b]
                assert pb.offset >= pa.offset + pa.nbytes or pa.offset >= pb.offset + pb.nbytes \
                    or apart_or_in_place(a, b), f"{a} and {b} overlap in time and in the bytes of donated input {i}"
        for earlier, later in zip([x] + holders, holders):
            assert need[earlier][1] < need[later][0] or plan[later].reuses is earlier and (
                (need[earlier][1] == need[later][0] and elementwise_reader(later.producer, earlier, later, layouts))
                or (need[earlier][1] == span[later.producer][1]
                    and elementwise_group(group_of[later.producer], earlier, later, layouts))), \
                f"{later} is written into donated input {i} while {earlier} is still read"

    for k, w in enumerate(plan.workspaces):         # live over their group's positions, on bytes nothing else holds then
        first, last = pos[groups[w.group].nodes[0]], pos[groups[w.group].nodes[-1]]
        stop = w.offset + w.nbytes
        assert w.offset % plan.alignment == 0 and stop <= plan.arena_bytes, \
            f"workspace of group {w.group} at {w.offset}+{w.nbytes} is misaligned or outside the arena ({plan.arena_bytes})"
        for v in arena:
            pv = plan[v]
            if pv.offset < stop and w.offset < pv.offset + pv.nbytes:
                assert need[v][1] < first or need[v][0] > last, \
                    f"the workspace of group {w.group} [{first},{last}] and the buffer of {v} {need[v]} overlap"
        for u in plan.workspaces[k + 1:]:
            if u.offset < stop and w.offset < u.offset + u.nbytes:
                u_first, u_last = pos[groups[u.group].nodes[0]], pos[groups[u.group].nodes[-1]]
                assert u_last < first or u_first > last, f"the workspaces of groups {w.group} and {u.group} overlap"
        if plan.output_region is not None:
            assert stop <= plan.output_region[0], \
                f"the workspace of group {w.group} at {w.offset}+{w.nbytes} is in the output region {plan.output_region}"

    for j, i in plan.donations:
        v, x = graph.outputs[j].value, inputs[i]
        assert graph.outputs[j].updates == i, f"output {j} does not update input {i}"
        if v is x:
            continue
        assert plan[v].kind == "external" and plan[v].input_index == i and plan[v].donated
        write = need[v][0]
        if elementwise_group(group_of[v.producer], x, v, layouts) and need[x][1] == span[v.producer][1]:
            continue                                   # one Nova kernel reads it, then writes v
        assert x not in outputs and need[x][1] <= write, f"input {i} is read after output {j} overwrites it"
        if need[x][1] == write:
            assert elementwise_reader(v.producer, x, v, layouts), \
                f"output {j} overwrites input {i} while {v.producer.op} still reads it in another layout"

    for k, g in enumerate(groups):                     # no launch reads, through another index map, what it writes
        if g.kernel == "none":
            continue
        reads = [(x, _elements(plan, x)) for x in g.inputs]
        for out in g.outputs:
            written = _elements(plan, out)
            for x, read in reads:
                if written is None or read is None or written[0] != read[0] or written[1:] == read[1:]:
                    continue                           # apart, or read element for element where it is written
                assert not _overlap(written, read), \
                    f"group {k} ({'+'.join(n.op for n in g.nodes)}) writes {out} over elements of {x} " \
                    f"that it reads elsewhere ({layouts[out].describe()} over {layouts[x].describe()})"


def _elements(plan: MemoryPlan, v: Value):
    """``(storage, first byte, element bytes, shape, strides)`` of where ``v`` lies (storage: "arena" or an
    input's index), or None for a value with no storage of its own (fused).  An axis of extent 1 has no
    stride (0 here): the same elements whatever stride a view reports for it."""
    p = plan[v]
    root, view = (p.alias_of, p.view) if p.kind == "alias" else (v, p.view)
    rp = plan[root]
    if rp.kind not in ("arena", "external"):
        return None
    start = rp.offset or 0                 # an external value placed at a byte of a donated input: that byte
    shape = view.shape if view is not None else tuple(v.shape)
    strides = view.strides if view is not None else layout_analysis.contiguous_strides(tuple(v.shape))
    offset = view.offset if view is not None else 0
    item = v.type.itemsize
    strides = tuple(0 if n == 1 else x for n, x in zip(shape, strides))
    return ("arena" if rp.kind == "arena" else rp.input_index), start + offset * item, item, tuple(shape), strides


def _overlap(a, b) -> bool:
    """Whether two strided element sets (``_elements``) share a byte: byte intervals first, then the exact
    byte addresses (numpy) when the intervals meet."""
    def bounds(w):
        _, first, item, shape, strides = w
        low = first + item * sum(s * (n - 1) for n, s in zip(shape, strides) if s < 0)
        high = first + item * (1 + sum(s * (n - 1) for n, s in zip(shape, strides) if s > 0))
        return low, high
    (a0, a1), (b0, b1) = bounds(a), bounds(b)
    if a1 <= b0 or b1 <= a0:
        return False
    import numpy as np

    def addresses(w):                                  # every byte of every element
        _, first, item, shape, strides = w
        at = np.zeros(1, dtype=np.int64)
        for n, s in zip(shape, strides):
            at = (at[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).reshape(-1)
        return np.unique((first + at * item)[:, None] + np.arange(item, dtype=np.int64)[None, :])
    return bool(np.intersect1d(addresses(a), addresses(b), assume_unique=True).size)
