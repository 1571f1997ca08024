"""The executor: a planned graph becomes a ``Program``, one launch per kernel group over
one arena, replayed as one CUDA graph on the GPU.

    from nova.compiler.executor import build, gemm_problems
    program = build(planned, "cuda")          # "cpu" in CI; "meta": a CUDA program that never runs
    outputs = program.run(inputs)             # one tensor per graph input, graph order
    program.stats; print(program.describe())
    gemm_problems(planned)                    # every Nova GEMM a CUDA program launches (nova precompile)
    attention_kernels(planned)                # ... and every Nova attention launch (problem with strides, roles)
    rows_problems(planned)                    # ... every Nova rows problem (norms, softmax, losses, reductions)
    pointwise_problems(planned)               # ... every Nova fused pointwise kernel
    optimizer_rules(planned)                  # ... and every Nova multi-tensor optimizer kernel
    gemm_problem_counts(planned)              # ... and how many times per step

What ``build`` consumes from the planner (``nova.passes``: ``Planned``, ``Group``, ``MemoryPlan``,
``ValuePlan``) is listed in ``nova/compiler/plan_view.py``, the only place that reads it.

Tensors.  Every value gets its tensor once: arena values are views of one
``torch.empty(arena_bytes, dtype=uint8)`` at their planned offset (contiguous, or the plan's
strides: a kernel result stored in its readers' layout, ``nova/passes/storage.py``); a result the
plan places in a concat's buffer is the strided view of that buffer its kernel writes (the concat
then launches nothing); free views alias their input through the view op itself (``view``/``permute``/
``expand``/slicing, so they share the base's storage); ``constant``/``iota`` results are filled
once at build into a separate constants area (they never change, and the arena's bytes are reused);
graph inputs are either *bound* (parameters, optimizer state, gradients, constants and every
donation target: the user's tensor is used in place, by pointer) or *staged* (data: copied into a
static slot each run when the caller's pointer differs); a fused GEMM-epilogue intermediate (which
a CPU program computes unfused) lives in the bytes of its group's result (see ``plan_view``);
values the plan does not place at all get a private scratch buffer.  An output the plan donates
into input i is the input's tensor itself: its producer writes the user's storage and ``run``
returns that very input object.  Every other output is returned as a fresh clone (never an arena
view that the next step overwrites).

Per-call storage (``build(..., per_call=True)``, the torch.compile backend's programs): each ``run``
takes its arena from the device's arena that every per-call program shares (they never run at the
same time), and, for a plan whose outputs have a region of their own
(``memory.Handoff.outputs_apart``), one buffer per output of that region from a pool the program
owns for that output, one the caller has let go of (``nova/compiler/step_storage.py``); each is
returned as itself (no clone: the caller holds it as long as it holds the output; the buffer is taken
again once it has let go; a small one is copied out per run), and an output that views a graph input is returned as that view of the caller's tensor.  ``in_place`` names data inputs read in place, by pointer, like parameters
(no static slot, no copy); a donated input (``Handoff.donated_inputs``) is read in place and its
storage overwritten once it dies (the plan's ``external``, ``donated`` results).  The launches of
such a program are bound to the addresses of that run's buffers and inputs: each *binding*
(tensors, launches, CUDA graph) is kept, by those addresses, for the next run that gets the same
addresses from the allocator (a training loop's steady state), up to ``BINDINGS_KEPT``; another
address binds anew (``stats["rebinds"]``; a steady training loop makes one binding per program).
A binding never keeps a run's buffers or inputs alive
(its tensors alias their bytes without owning them, ``_unowned``): it runs only on a call whose
own buffers and inputs sit at its addresses.  Its CUDA graphs share one memory pool (they never
run at the same time).

Launches.  One per group, in the plan's order: a Nova GEMM group on one Nova GEMM launch of the
plan's problem and epilogue (CUDA; bound tensors that are not that problem, and CPU, run the group
unfused: ``torch.matmul(out=)`` and ATen; ``nova/compiler/gemm_lowering.py``); a Nova rows group (norms, softmax, losses, reductions with
their producers) on its rows kernels (CUDA), its nodes' IR references on CPU
(``nova/compiler/rows_lowering.py``); a Nova embedding group (gather, deterministic scatter-add) on its
embedding kernels (CUDA), its node's ATen kernel on CPU (``nova/compiler/embedding_lowering.py``); a Nova pointwise group on its kernel (CUDA) or its nodes'
IR reference (CPU), and so a concat or a copying view the plan gives a pointwise kernel (the copy
launched over its input's shape, its output viewed so); a Nova optimizer group on one multi-tensor kernel (CUDA: pointers in an
argument table written at bind, ``nova/kernels/optimizer``, a folded gradient scale read by it) or
ATen's foreach kernels (CPU, and CUDA tensors the kernel cannot take, noted); a Nova multi-tensor sum
group on one multi-tensor sum kernel (CUDA) or its nodes one by one (CPU, and tensors it cannot take);
every other op on ATen kernels writing into the output
tensors (``nova/compiler/aten_kernels.py``); free views and constants launch nothing.  What a
group's kernels write and read within their launch only (a Nova GEMM's operand preps and split-K
partials, a rows kernel's partials, the embedding backward's sort buffers) is the group's launch
workspace: the arena bytes the plan placed for it (``MemoryPlan.workspaces``,
``KernelContext.launch_workspace``); a plan that places none (made without
``nova.compiler.outside_arena.account``) gets one buffer every launch shares.

CUDA.  The first ``run`` binds the inputs, resolves every Nova kernel (offline mode: a missing one
raises Nova's one-line ``NotPrecompiledError`` before anything runs), executes the step once on a
side stream (the warm-up Nova GEMMs need before capture; it is this step's real execution) and
captures the launches into one ``torch.cuda.CUDAGraph``; later runs copy the data inputs into
their static slots and replay.  A bound input whose pointer or strides change (a parameter
replaced, not updated in place) rebinds and recaptures (``stats["rebinds"]``).  Steps run under
``torch.no_grad()`` (parameters require grad; nothing here is differentiated).

Checks at build (one-line ``ExecutorError``): every node in at most one group and after the values
it reads; values on shared arena bytes alive at different times in group order (an elementwise
node may overwrite the input it reads last); a donated output written after every read of the old
value.  ``stats["measured_peak_bytes"]`` (CUDA) is ``torch.cuda.max_memory_allocated`` over build
and the first step (warm-up and capture) minus what was allocated before build; build resets the
device's peak counter.  It compares with the plan's arena + ``stats["outside_arena_bytes"]`` (what
the plan lists outside the arena, ``nova/compiler/outside_arena.py``) less
``stats["outside_arena_driver_bytes"]`` (anything allocated by cuMemAlloc, which torch's counter does
not see; none since the GEMM workspaces are launch workspaces).  ``memory_phases`` (CUDA) records
torch's counters and the device's used memory at each stage of the build and the first step.
``release()`` frees the program's device memory until its next run.
"""
from __future__ import annotations

import bisect
import ctypes
import dataclasses
import math
from dataclasses import dataclass, field

import torch

from nova.compiler.aten_kernels import (Kernel, KernelContext, adamw, build_kernel, can_join_batch, nova_attention,
                                        torch_dtype, view_of)
from nova.compiler.gemm_lowering import bind_gemm
from nova.compiler.plan_view import ExecutorError, PlanView, read_plan
from nova.compiler.embedding_lowering import embedding_kernels
from nova.compiler.rows_lowering import rows_kernels
from nova.compiler.step_storage import OutputPools, shared_arena
from nova.ir.ops import opdef
from nova.passes.fusion import update_batch_key
from nova.passes.layout import contiguous_strides
from nova.passes.memory import ALIGNMENT, aligned, outside_peak_bytes, writes_in_place

__all__ = ["build", "gemm_problems", "gemm_problem_counts", "attention_kernels", "rows_problems", "pointwise_problems",
           "optimizer_rules", "precompile_commands", "Program", "Launch", "ExecutorError", "BOUND_ROLES"]

BINDINGS_KEPT = 4                                    # per-call programs: bindings kept by address (LRU)
BOUND_ROLES = ("param", "grad", "opt_state", "const")  # inputs used in place, by pointer
CREATION = ("constant", "iota")


@dataclass
class Launch:
    """One group's work: its kernels in order (empty groups launch nothing and are not listed)."""
    group: int
    kind: str
    nodes: list
    kernels: list
    gemms: list = field(default_factory=list)         # GemmLaunch of the group's matmuls

    def __call__(self) -> None:
        for k in self.kernels:
            k.run()

    @property
    def copies(self) -> int:
        return sum(k.copies for k in self.kernels)


def _dense_permutation(t) -> bool:
    """``t``'s elements fill ``numel`` consecutive elements of its storage in some axis order."""
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride()), key=lambda sz: sz[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _bytes_in_order(t):
    """A dense permutation's elements in storage order (the host copy holds them so: the value copied
    back is stored at the strides of the value offloaded, ``nova/passes/storage.py``)."""
    return t.as_strided((t.numel(),), (1,))


class _AsyncCopy:
    """One copy between device memory and page-locked host memory on a copy stream: ``issue`` starts
    it once the current stream has reached this point, ``wait`` makes the current stream wait for its
    end (the fork and join a CUDA graph captures as edges; the copy itself a driver memcpy,
    ``nova.runtime.driver.copy_async``)."""

    def __init__(self, dst, src, to_host: bool, stream, device, what: str):
        self.dst, self.src, self.to_host, self.stream, self.device = dst, src, to_host, stream, device
        self.nbytes = src.numel() * src.element_size()
        self.what = what
        self.started, self.done = torch.cuda.Event(), torch.cuda.Event()

    def issue(self) -> None:
        from nova.runtime import driver
        self.started.record(torch.cuda.current_stream(self.device))
        self.stream.wait_event(self.started)
        driver.copy_async(self.dst.data_ptr(), self.src.data_ptr(), self.nbytes, self.to_host,
                          self.stream.cuda_stream, self.what)
        self.done.record(self.stream)

    def wait(self) -> None:
        torch.cuda.current_stream(self.device).wait_event(self.done)


def _fmt_bytes(n) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def bytes_view(x: torch.Tensor, byte_offset: int, dtype, shape, strides) -> torch.Tensor:
    """A ``dtype`` tensor of ``shape``/``strides`` at ``byte_offset`` bytes into ``x``'s storage from
    ``x``'s first element (a value the plan placed in a dead donated input's bytes)."""
    start = x.storage_offset() * x.element_size() + byte_offset
    itemsize = dtype.itemsize
    if start % itemsize or (x.is_cuda and (x.data_ptr() + byte_offset) % ALIGNMENT):
        raise ExecutorError(f"a value placed {byte_offset} bytes into a donated input that starts at a byte not "
                            f"aligned to {ALIGNMENT}: the kernels' vector accesses need it")
    return torch.empty(0, dtype=dtype, device=x.device).set_(x.untyped_storage(), start // itemsize, shape, strides)


def in_storage_of(x: torch.Tensor, byte_offset: int, value) -> torch.Tensor:
    """``value``'s tensor (dense, its own type) placed ``byte_offset`` bytes into donated input ``x``."""
    shape = tuple(value.type.shape)
    return bytes_view(x, byte_offset, torch_dtype(value.type.dtype), shape, contiguous_strides(shape))


def _strided_bytes(shape, strides, itemsize: int) -> int:
    """Bytes spanned by a tensor of ``shape`` with element ``strides`` (0 when empty)."""
    if math.prod(shape) == 0:
        return 0
    return (1 + sum((d - 1) * s for d, s in zip(shape, strides))) * itemsize


class _DeviceBytes:
    """``nbytes`` bytes of device memory at ``pointer`` as the CUDA array interface states them
    (``torch.as_tensor`` reads it without copying or owning the memory)."""

    def __init__(self, pointer: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False),
                                         "strides": None, "version": 2}


def _unowned(t: torch.Tensor) -> torch.Tensor:
    """A tensor of ``t``'s shape, strides and dtype over ``t``'s bytes that does not keep them alive.

    A per-call program's binding holds these instead of the run's buffers and the caller's inputs:
    holding those would keep a run's memory alive (the caching allocator could never hand the same
    addresses out again, and the caller's tensors would outlive their use).  The binding's launches
    run only in a call whose own buffers and inputs sit at these addresses (its key).  Meta tensors
    are returned as they are, empty ones as new empty tensors."""
    if t.device.type == "meta":
        return t
    if t.numel() == 0:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    nbytes = _strided_bytes(t.shape, t.stride(), t.element_size())
    if t.device.type == "cuda":
        raw = torch.as_tensor(_DeviceBytes(t.data_ptr(), nbytes), device=t.device)
    else:
        raw = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(t.data_ptr()), dtype=torch.uint8)
    return raw.view(t.dtype).as_strided(t.shape, t.stride())


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


class _GemmPlaceholder:
    """The GEMM backend of a meta program: lowered like Nova's, never called."""

    def __call__(self, *args, **kwargs):
        raise ExecutorError("a meta program only describes; build it on a CUDA device to run it")


class Program:
    """A planned graph bound to a device: arena, constants, static input slots, launches."""

    def __init__(self, planned, device, *, target=None, poison: bool = False, cuda_graph: bool | None = None,
                 gemm=None, per_call: bool = False, in_place=frozenset()):
        self.plan: PlanView = read_plan(planned)
        self._planned = planned                 # what a cache miss looks every kernel of up again (``_every_miss``)
        self.per_call = per_call
        self.in_place = frozenset(in_place) | frozenset(self.plan.donated_inputs)
        self.poison = poison
        self.graph = self.plan.graph
        self.device = _normalize_device(device)
        self.kind = "cpu" if self.device.type == "cpu" else "cuda"       # meta: a CUDA program that only describes
        self.target = target
        if gemm is None and self.device.type == "cuda":
            from nova.runtime.matmul import matmul
            gemm = matmul
        elif gemm is None and self.device.type == "meta":
            gemm = _GemmPlaceholder()
        self._gemm = gemm
        from nova import options
        from nova.runtime.matmul import default_deterministic
        self._deterministic = default_deterministic(options.current())     # stated to every Nova GEMM launch
        self._nova_errors = ()
        if self.device.type == "cuda":
            from nova.runtime.driver import NovaRuntimeError
            self._nova_errors = (NovaRuntimeError,)
        self._use_graph = self.device.type == "cuda" and (cuda_graph is None or cuda_graph)
        self._sizing = None                  # GPUModel the launches' workspaces are sized for (meta: the plan's
        self._gemm_sizing = None             # target; CUDA: the device's, and the GEMMs' nova.matmul resolves)
        if self.device.type == "meta":
            from nova.hwmodel import get_target
            named = target if target is not None else getattr(planned, "target", None)
            self._sizing = get_target(named if named is not None else "h200")
        self._takes_workspace = self.device.type == "meta"     # the GEMM backend takes launch workspaces
        if self.device.type == "cuda":
            from nova.runtime.matmul import matmul
            self._takes_workspace = gemm is matmul
        self.memory_phases: list[dict] = []  # CUDA: torch's counters at each stage of build and first step
        self._phases_done = False
        self._input_index = {spec.value: i for i, spec in enumerate(self.graph.inputs)}
        self._output_inputs = None      # _outputs: per graph output, the input index it returns (made once)
        self._dtypes = [torch_dtype(spec.value.type.dtype) for spec in self.graph.inputs]
        self._fallbacks: list[str] = []
        self._check_groups()
        self._layout()
        read = {v for n in self.graph.nodes for v in n.inputs} | {o.value for o in self.graph.outputs}
        written = {o.updates for o in self.graph.outputs if o.updates is not None} | set(self.donated.values())
        unread = {i for i, spec in enumerate(self.graph.inputs) if spec.value not in read and i not in written}
        # the inputs used by pointer (their addresses in a per-call binding's key) and those copied into
        # static slots at each run; an input nothing reads is neither
        self._by_pointer = [i for i, spec in enumerate(self.graph.inputs)
                            if self.loc[spec.value][0] == "input" and i not in unread]
        self._copied_in = [i for i, spec in enumerate(self.graph.inputs)
                           if self.loc[spec.value][0] != "input" and i not in unread]
        self._check_arena_lifetimes()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._mem_base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._memory_phase("program build: before the arena")
        self.store = self._allocate(self.device, poison)
        self._fill_constants(self.store)
        self._memory_phase("program build: arena, constants, static slots")
        # a dry run on meta tensors: what the launches will be, before any input is seen
        meta_store = self._allocate(torch.device("meta"), False, per_call_areas=True)
        meta_inputs = [torch.empty(spec.value.type.shape, dtype=dt, device="meta")
                       for spec, dt in zip(self.graph.inputs, self._dtypes)]
        self._dry_launches, self._dry_ctx = self._make_launches(self._resolve(meta_store, meta_inputs),
                                                                torch.device("meta"), meta_store["arena"])
        # launch workspaces the plan places nowhere (a plan made without the compiler's account): one
        # buffer they all share, as large as the largest, allocated at bind
        self._unplaced = {g: n for g, (n, _) in self._dry_ctx.needs.items()
                          if self.plan.workspaces.get(g, (0, 0))[1] < n}
        self._shared_workspace = None
        self._tensors = None                 # Value -> tensor, once bound
        self._launches = None
        self._ctx = None
        self._bound = {}                     # input index -> (data_ptr, strides) it was bound with
        self._bound_refs = []
        self._cuda_graph = None
        self._capture_stream = None
        self._key = None                     # per call: the addresses the current binding was made for
        self._bindings = {}                  # per call: key -> binding (``_BINDING``), least recently used first
        self._graph_pool = None
        self._output_pools = None            # per call: the output buffers' pools (``step_storage.OutputPools``)
        self.stats = self._stats(self._dry_launches, self._dry_ctx)

    # ------------------------------------------------------------------ validation of the plan
    def _check_groups(self) -> None:
        """Every node computed by at most one group, after the values it reads; outputs computed."""
        g = self.graph
        available = {spec.value for spec in g.inputs}
        grouped = {}
        for group in self.plan.groups:
            for node in group.nodes:
                if node in grouped:
                    raise ExecutorError(f"{g.name}: node {node.op} is in groups {grouped[node]} and {group.index}")
                grouped[node] = group.index
        free = [n for n in g.nodes if n not in grouped and (n.op in CREATION or self._free_view(n))]

        def mark_free():
            changed = True
            while changed:
                changed = False
                for n in free:
                    if n.outputs[0] not in available and all(v in available for v in n.inputs):
                        available.update(n.outputs)
                        changed = True
        mark_free()
        for group in self.plan.groups:
            for node in group.nodes:
                for v in node.inputs:
                    if v not in available:
                        raise ExecutorError(f"{g.name}: group {group.index} ({group.kind}) runs {node.op}"
                                            f"{' (' + node.origin + ')' if node.origin else ''} before the value "
                                            f"{v.type} it reads is computed (is its producer in no group, or later?)")
                available.update(node.outputs)
            mark_free()
        for o in g.outputs:
            if o.value not in available:
                raise ExecutorError(f"{g.name}: output {o.name!r} is computed by no group")

    def _free_view(self, node) -> bool:
        return opdef(node.op).kind == "view" and self.plan.placement(node.outputs[0]).kind == "alias"

    # ------------------------------------------------------------------ layout (decided once)
    def _layout(self) -> None:
        """Where each value's tensor comes from: ``self.loc[value]`` is one of
        ("input", i) bound user tensor, ("donated", i) written into bound input i, ("in_input", i,
        byte offset) placed in the dead storage of bound donated input i (``memory._place_in_donors``),
        ("alias", node) a view of the node's input, or (area, offset, strides) in one of the
        byte areas "arena", "const", "staged", "scratch"; ("unwritten", None, None): a value inside a
        Nova rows group of a CUDA program that the plan gives no storage (its kernel never writes it)."""
        g, plan = self.graph, self.plan
        self.loc = {}
        self.placed_in = {}                  # placed Value -> the arena value whose bytes hold it
        self.area_bytes = {"arena": plan.arena_bytes, "const": 0, "staged": 0, "scratch": 0, "host": 0}
        producer = {v: n for n in g.nodes for v in n.outputs}
        self.donated = {}                    # output Value -> input index
        self.in_donor = {}                   # Value -> (input index, byte offset): in a dead donated input
        for k, i in sorted(plan.donations.items()):
            o = g.outputs[k]
            node = producer.get(o.value)
            why = ""
            if node is None:
                why = "it is a graph input, not a computed value"
            elif node.op in CREATION or self._free_view(node):
                why = f"it is a {'constant' if node.op in CREATION else 'free view'}"
            elif o.value in self.donated and self.donated[o.value] != i:
                why = "the value is already donated into another input"
            if why:
                self._fallbacks.append(f"donation of output {o.name!r} ignored ({why}): returned as a copy")
            else:
                self.donated[o.value] = i
        for v, p in plan.placements.items():     # results written into a donated input's storage
            if p.kind == "external" and p.donated_to is not None and v not in self.donated and \
                    v.producer is not None:
                if p.offset is None:
                    self.donated[v] = p.donated_to
                else:                            # at an offset of its dead bytes, in its own type
                    self.in_donor[v] = (p.donated_to, p.offset)
        targets = set(self.donated.values()) | {i for i, _ in self.in_donor.values()}
        for i, spec in enumerate(g.inputs):
            p = plan.placement(spec.value)
            if spec.role in BOUND_ROLES or i in targets or i in self.in_place:
                self.loc[spec.value] = ("input", i)
            elif p.kind == "arena":
                self.loc[spec.value] = self._arena_loc(spec.value, p, f"input {spec.name!r}")
            else:
                self.loc[spec.value] = self._take("staged", spec.value)
        in_result = []                       # fused epilogue values: placed once their group's result is
        in_kernel = {n for group in plan.groups if group.pointwise is not None for n in group.nodes}
        rows_nodes = {n for group in plan.groups if group.rows is not None or group.multi_sum is not None
                      or group.optimizer is not None for n in group.nodes}
        for index, node in enumerate(g.nodes):
            for v in node.outputs:
                p = plan.placement(v)
                if node in in_kernel and p.kind == "none" and v not in self.donated and node.op not in CREATION:
                    self.loc[v] = ("kernel",)        # a Nova pointwise kernel's intermediate: registers only
                elif v in self.donated:
                    self.loc[v] = ("donated", self.donated[v])
                elif v in self.in_donor:
                    self.loc[v] = ("in_input",) + self.in_donor[v]
                elif node.op in CREATION:
                    self.loc[v] = self._take("const", v)
                elif p.kind == "alias":
                    if opdef(node.op).kind != "view":
                        raise ExecutorError(f"{g.name}: the plan aliases the result of node {index} {node.op}, "
                                            f"which is not a view op")
                    self.loc[v] = ("alias", node)
                elif p.kind == "arena":
                    self.loc[v] = self._arena_loc(v, p, f"node {index} {node.op}")
                elif p.kind == "host":                   # an offloaded copy: the pinned host area
                    self.loc[v] = self._take("host", v)
                elif p.kind == "placed":                 # its kernel writes it into its base's bytes
                    self.loc[v] = self._arena_loc(v, p, f"node {index} {node.op}")
                    self.placed_in[v] = p.base
                elif v in plan.fused_into:
                    in_result.append(v)
                elif self.kind == "cuda" and node in rows_nodes:
                    self.loc[v] = ("unwritten", None, None)     # a rows / multi-tensor kernel never writes it
                else:
                    self.loc[v] = self._take("scratch", v)
        # per call: the output region's buffers, one allocation each (a buffer starts at each planned
        # offset there; in-place chains, fused and placed values live inside their buffer's bytes)
        self._region = plan.output_region if self.per_call else None
        self._pieces = []
        if self._region is not None:
            start, stop = self._region
            starts = sorted({p.offset for p in plan.placements.values()
                             if p.kind == "arena" and start <= p.offset < stop})
            self._pieces = [(a, b - a) for a, b in zip(starts, starts[1:] + [stop])]
        self._piece_starts = [a for a, _ in self._pieces]
        group_of = {n: group for group in plan.groups for n in group.nodes}
        for v in in_result:
            # a fused GEMM product (or biased product): never written when a Nova kernel runs the
            # whole epilogue; on CPU (torch.matmul, then ATen bias add / activation) and after a
            # shortened Nova epilogue, computed in the group result's bytes and updated in place
            # there (the plan reserves them from the launch's start), or at its bytes in a dead
            # donated input.  Scratch when that result is not such a buffer (donated into an input
            # in place, say) or shares bytes with
            # a value the group reads (a plan that breaks that reservation).
            loc = self.loc[plan.fused_into[v]]
            if loc[0] == "arena" and loc[2] is None and not self._reads_bytes(group_of.get(v.producer), loc, v):
                self.loc[v] = loc
            elif loc[0] == "in_input":            # the donated input is dead before the group writes there
                self.loc[v] = loc
            else:
                self.loc[v] = self._take("scratch", v)

    def _arena_span(self, value):
        """(first byte, one past the last) of the arena bytes ``value`` (or the root it views) may
        touch, or None outside the arena."""
        while self.loc.get(value, ("",))[0] == "alias":
            value = self.loc[value][1].inputs[0]
        loc = self.loc.get(value)
        if loc is None or loc[0] != "arena":
            return None
        _, offset, strides = loc
        t = value.type
        return offset, offset + (t.nbytes if strides is None else _strided_bytes(t.shape, strides, t.itemsize))

    def _reads_bytes(self, group, loc, value) -> bool:
        """Whether ``group`` reads, from outside it, arena bytes that ``value`` placed at ``loc`` covers."""
        if group is None:
            return True
        lo, hi = loc[1], loc[1] + value.type.nbytes
        produced = {w for n in group.nodes for w in n.outputs}
        for n in group.nodes:
            for x in n.inputs:
                span = None if x in produced else self._arena_span(x)
                if span is not None and span[0] < hi and lo < span[1]:
                    return True
        return False

    def _check_arena_lifetimes(self) -> None:
        """Values the plan puts on shared arena bytes must be alive at different times, in the
        order the groups run: [first write, last read (through views too; outputs: the end)].
        An elementwise node may write its result exactly over an input it reads last (in place).
        A group's launch workspace is alive over its nodes and shares its bytes with nothing alive then."""
        g = self.graph
        order = [n for group in self.plan.groups for n in group.nodes]
        position = {n: i for i, n in enumerate(order)}
        self._kernel_group = {n: group for group in self.plan.groups
                              if group.pointwise is not None or group.optimizer is not None for n in group.nodes}
        for n, group in self._kernel_group.items():      # one kernel reads all, then writes: one position
            position[n] = position[group.nodes[0]]
        end = len(order)
        root = {}
        for spec in g.inputs:
            root[spec.value] = spec.value
        for n in g.nodes:
            for v in n.outputs:
                root[v] = root[n.inputs[0]] if self.loc[v][0] == "alias" else self.placed_in.get(v, v)
        self._check_donations(order, position, root)
        arena = {v: loc for v, loc in self.loc.items() if loc[0] == "arena" and v not in self.placed_in}
        live = {v: [-1 if v in self._input_index else position.get(v.producer, end),
                    -1 if v in self._input_index else position.get(v.producer, end)] for v in arena}
        for v, base in self.placed_in.items():          # written by its own producer, before its base's node
            if base in live and v.producer in position:
                live[base][0] = min(live[base][0], position[v.producer])
        for n in order:
            for x in n.inputs:
                r = root.get(x)
                if r in live:
                    live[r][1] = max(live[r][1], position[n])
        for o in g.outputs:
            if root.get(o.value) in live:
                live[root[o.value]][1] = end

        def in_place(a, b):         # b written over a by an elementwise node (or kernel) that reads a last
            n = b.producer
            readers = self._kernel_group[n].nodes if n in self._kernel_group else [n]
            return n is not None and writes_in_place(n) and \
                any(x is a or root.get(x) is a for r in readers for x in r.inputs) and \
                (span(a) == span(b) or span(a)[0] == span(b)[0] and self.plan.fused_into.get(a) is b)

        # a group's launch workspace: live over its nodes' positions, in place with nothing
        for index, (offset, nbytes) in self.plan.workspaces.items():
            nodes = self.plan.groups[index].nodes
            key = ("workspace", index)
            arena[key] = ("arena", offset, None)
            live[key] = [min(position[n] for n in nodes), max(position[n] for n in nodes)]

        def span(v):
            _, offset, strides = arena[v]
            if isinstance(v, tuple):
                return offset, offset + self.plan.workspaces[v[1]][1]
            nbytes = v.type.nbytes if strides is None else _strided_bytes(v.type.shape, strides, v.type.itemsize)
            return offset, offset + nbytes

        def what(v):
            return f"the launch workspace of group {v[1]}" if isinstance(v, tuple) else str(v.type)

        values = sorted((v for v in arena if span(v)[1] > span(v)[0]), key=lambda v: span(v)[0])
        active = []
        for v in values:
            start, stop = span(v)
            active = [u for u in active if span(u)[1] > start]
            for u in active:
                (uw, ur), (vw, vr) = live[u], live[v]
                if ur < vw or vr < uw:
                    continue
                if not isinstance(u, tuple) and not isinstance(v, tuple) and \
                        ((ur == vw and in_place(u, v)) or (vr == uw and in_place(v, u))):
                    continue
                lo, hi = max(start, span(u)[0]), min(stop, span(u)[1])
                raise ExecutorError(f"{g.name}: the plan puts {what(u)} (live over launches {uw}..{ur}) and "
                                    f"{what(v)} (live over {vw}..{vr}) on the same arena bytes [{lo}, {hi}) "
                                    f"at the same time")
            active.append(v)

    def _check_donations(self, order, position, root) -> None:
        """An output donated into input i overwrites the user's tensor when its producer runs:
        nothing may read input i (or a view of it) later, nor at that launch except the producer
        itself reading it directly as an elementwise op or an optimizer update; nor may the old
        value be a graph output.  A result written into a donated input's storage likewise: the
        value held there before it (the input, or an earlier such result) is read no later."""
        g = self.graph
        names = {o.value: o.name for o in g.outputs}
        outputs = set(g.output_values())
        held = {}                                   # input index -> the values written there, in order
        for v, i in self.donated.items():
            held.setdefault(i, []).append(v)
        before = {}                                 # value -> the value whose storage it overwrites
        for i, values in held.items():
            values.sort(key=lambda v: position.get(v.producer, -1))
            for earlier, later in zip([g.inputs[i].value] + values, values):
                before[later] = earlier
        for v, i in self.donated.items():
            base, producer = before[v], v.producer
            p = position.get(producer)
            if p is None:
                continue
            for x in outputs:
                if root.get(x) is base:
                    raise ExecutorError(f"{g.name}: the plan donates {names.get(v, str(v.type))!r} into input "
                                        f"{g.inputs[i].name!r}, whose old value is also a graph output")
            in_place = writes_in_place(producer)
            for n in order:
                for x in n.inputs:
                    if root.get(x) is not base:
                        continue
                    q = position[n]
                    same_kernel = n in self._kernel_group and self._kernel_group.get(producer) is self._kernel_group[n] \
                        and self._kernel_group[n].pointwise is not None        # a multi-tensor update: its own node only
                    if q < p or ((n is producer or same_kernel) and x is base and in_place):
                        continue
                    raise ExecutorError(f"{g.name}: the plan donates {names.get(v, str(v.type))!r} into input "
                                        f"{g.inputs[i].name!r}, written at launch {p} ({producer.op}), but {n.op} "
                                        f"reads {'that input' if base is g.inputs[i].value else 'what it held'} at "
                                        f"launch {q}{' through a view' if x is not base else ''}")
        for v, (i, offset) in self.in_donor.items():  # placed in its dead bytes: the input is read before
            x, p = g.inputs[i].value, position.get(v.producer)
            if offset < 0 or offset + v.type.nbytes > x.type.nbytes:
                raise ExecutorError(f"{g.name}: the plan places {v.type} at byte {offset} of input "
                                    f"{g.inputs[i].name!r} ({x.type}), outside its bytes")
            late = [] if p is None else [n for n in order if position[n] >= p
                                         and any(root.get(u) is x for u in n.inputs)]
            if late:
                raise ExecutorError(f"{g.name}: the plan places {names.get(v, str(v.type))!r} in input "
                                    f"{g.inputs[i].name!r} at launch {p} ({v.producer.op}), but {late[0].op} reads "
                                    f"that input at launch {position[late[0]]}")

    def _take(self, area: str, value):
        offset = self.area_bytes[area]
        self.area_bytes[area] = aligned(offset + value.type.nbytes)
        return (area, offset, None)

    def _arena_loc(self, value, p, what: str):
        need = value.type.nbytes if p.strides is None else \
            _strided_bytes(value.type.shape, p.strides, value.type.itemsize)
        if p.offset < 0 or p.offset + need > self.plan.arena_bytes or (p.nbytes and p.nbytes < need):
            raise ExecutorError(f"{self.graph.name}: {what} ({value.type}) at arena offset {p.offset} needs {need} "
                                f"bytes; the plan reserves {p.nbytes} in an arena of {self.plan.arena_bytes}")
        if p.offset % value.type.itemsize:
            raise ExecutorError(f"{self.graph.name}: {what} ({value.type}) at arena offset {p.offset} is not "
                                f"aligned to its {value.type.itemsize}-byte elements")
        return ("arena", p.offset, p.strides)

    # ------------------------------------------------------------------ storage and tensors
    def _allocate(self, device, poison: bool, per_call_areas: bool = False) -> dict:
        """The program's byte areas on ``device``: constants, static slots, scratch and the arena, but
        for a per-call program, whose arena and output buffers each run allocates (``_step_storage``),
        only with ``per_call_areas``."""
        store = {area: torch.empty(n, dtype=torch.uint8, device=device) for area, n in self.area_bytes.items()
                 if area not in ("host", "arena") or area == "arena" and not self.per_call}
        host = self.area_bytes["host"]       # offloaded copies: host memory, page-locked for the copy engines' DMA
        store["host"] = torch.empty(host, dtype=torch.uint8, device=device if device.type == "meta" else "cpu",
                                    pin_memory=device.type == "cuda" and host > 0)
        if poison:                           # 0xFF bytes: NaN floats, -1 integers (tests: every output written)
            for area in ("arena", "staged", "scratch"):
                if area in store:
                    store[area].fill_(255)
        if self.per_call and per_call_areas:
            store.update(self._step_storage(device, poison))
        return store

    def _step_storage(self, device, poison: bool) -> dict:
        """One run's storage of a per-call program: the arena below the output region, and one
        buffer per output of the region (the caller keeps each as long as it keeps the output).  On a
        real device they come from ``nova.compiler.step_storage`` (the device's shared arena, each
        output's pooled buffer the caller has let go of): the addresses of the run before, in a steady loop."""
        below = self._region[0] if self._region is not None else self.plan.arena_bytes
        if device.type == "meta":
            store = {"arena": torch.empty(below, dtype=torch.uint8, device=device)}
            for k, (_, nbytes) in enumerate(self._pieces):
                store[("output", k)] = torch.empty(nbytes, dtype=torch.uint8, device=device)
            return store
        if self._output_pools is None:
            self._output_pools = OutputPools([n for _, n in self._pieces], device)
        store = {"arena": shared_arena(device).take(self, below)}
        for k, buffer in enumerate(self._output_pools.take()):
            store[("output", k)] = buffer
        if poison:
            for t in store.values():
                t.fill_(255)
        return store

    def _area_view(self, store, loc, value):
        area, offset, strides = loc
        base = store[area]
        if area == "arena" and self._region is not None and offset >= self._region[0]:
            k = bisect.bisect_right(self._piece_starts, offset) - 1          # the output buffer holding it
            base, offset = store[("output", k)], offset - self._piece_starts[k]
        t = value.type
        if strides is None:
            return base[offset:offset + t.nbytes].view(torch_dtype(t.dtype)).view(t.shape)
        span = _strided_bytes(t.shape, strides, t.itemsize)
        return base[offset:offset + span].view(torch_dtype(t.dtype)).as_strided(t.shape, strides)

    def _fill_constants(self, store) -> None:
        for node in self.graph.nodes:
            if node.op in CREATION:
                v = node.outputs[0]
                with torch.device(store["const"].device):
                    value = opdef(node.op).reference(torch, **node.attrs)
                self._area_view(store, self.loc[v], v).copy_(value)

    def _resolve(self, store, inputs) -> dict:
        """Value -> tensor for ``store`` and the bound ``inputs`` (by graph input index)."""
        g = self.graph
        tensors = {}
        for i, spec in enumerate(g.inputs):
            loc = self.loc[spec.value]
            tensors[spec.value] = inputs[i] if loc[0] == "input" else self._area_view(store, loc, spec.value)
        for index, node in enumerate(g.nodes):
            for v in node.outputs:
                loc = self.loc[v]
                if loc[0] == "kernel":
                    continue
                if loc[0] == "donated":
                    tensors[v] = tensors[g.inputs[loc[1]].value]
                elif loc[0] == "in_input":
                    tensors[v] = in_storage_of(tensors[g.inputs[loc[1]].value], loc[2], v)
                elif loc[0] == "alias":
                    base = tensors[node.inputs[0]]
                    try:
                        tensors[v] = view_of(node, base)
                    except RuntimeError as e:
                        raise ExecutorError(f"{g.name}: the plan aliases node {index} {node.op} {dict(node.attrs)} "
                                            f"of a {list(base.shape)} tensor with strides {list(base.stride())}, "
                                            f"which needs a copy ({_first_line(e)}); plan it a slot") from None
                elif loc[0] == "unwritten":
                    tensors[v] = torch.empty(v.type.shape, dtype=torch_dtype(v.type.dtype), device="meta")
                else:
                    tensors[v] = self._area_view(store, loc, v)
        return tensors

    # ------------------------------------------------------------------ launches
    def _make_launches(self, tensors, device, arena) -> tuple[list, KernelContext]:
        """The launches over ``tensors`` on ``device`` (meta: the dry run), each group's launch workspace
        in ``arena`` where the plan placed it (``KernelContext.launch_workspace``)."""
        meta = device.type == "meta"
        if not meta and self._unplaced and self._shared_workspace is None:    # stats: launch_workspaces_outside_arena_bytes
            self._shared_workspace = torch.empty(max(self._unplaced.values()), dtype=torch.uint8, device=device)
        ctx = KernelContext(self.kind, device, arena=arena, placed=dict(self.plan.workspaces),
                            shared=None if meta else self._shared_workspace, target=self._sizing)
        g = self.graph
        self._users, self._outputs_set = g.users(), set(g.output_values())
        launches = []
        for group in self.plan.groups:
            ctx.group = group.index
            nodes = [n for n in group.nodes if n.op not in CREATION and not self._free_view(n)
                     and n not in self.plan.assembled]
            if group.kind == "transfer":               # a copy to or from host memory (``_transfers``)
                launches.append(Launch(group.index, group.kind, list(group.nodes), []))
                continue
            if group.rows is not None:                 # a Nova rows group: its kernels, or its nodes' references on CPU
                kernels = rows_kernels(group, nodes, tensors, ctx, self._note)
                launches.append(Launch(group.index, group.kind, list(group.nodes), kernels))
                continue
            if group.embedding is not None:            # a Nova embedding group: likewise
                kernels = embedding_kernels(group, nodes, tensors, ctx, self._note)
                launches.append(Launch(group.index, group.kind, list(group.nodes), kernels))
                continue
            if group.multi_sum is not None:            # a Nova multi-tensor sum group: likewise
                kernels = self._sum_kernels(group, nodes, tensors, device, ctx)
                launches.append(Launch(group.index, group.kind, list(group.nodes), kernels))
                continue
            kernels, gemms, i = [], [], 0
            if group.pointwise is not None:
                kernels.append(self._pointwise_kernel(group, tensors, device))
                nodes = []
            elif group.optimizer is not None and self.kind == "cuda":      # CPU: ATen's foreach path below
                kernel = self._optimizer_kernel(group, tensors, device, ctx)
                if kernel is not None:
                    kernels.append(kernel)
                    nodes = []
                else:                                  # ATen: the folded products need storage of their own
                    tensors = {**tensors, **self._materialized(nodes, tensors, ctx)}
            while i < len(nodes):
                node = nodes[i]
                if node.op == "matmul":
                    problem = None
                    if self._gemm is not None and group.gemm is not None:
                        problem = dataclasses.replace(group.gemm, deterministic=self._deterministic)
                    launch = bind_gemm(node, nodes[i + 1:], group.gemm_epilogue, problem, tensors.__getitem__)
                    if problem is not None and launch.backend != "nova":
                        self._note(f"group {group.index}: matmul {node.inputs[0].type} x {node.inputs[1].type} "
                                   f"on torch.matmul ({launch.reason})")
                    kernels.append(launch.kernel(self._gemm, self.target, self._gemm_workspace(launch, ctx),
                                                 replayed=self._takes_workspace))   # nova.matmul: its device pick
                    gemms.append(launch)
                    i += 1 + len(launch.epilogue)
                elif group.attention is not None and self.kind == "cuda":      # the plan's Nova attention
                    kernels.append(nova_attention(node, [tensors[v] for v in node.inputs],
                                                  [tensors[v] for v in node.outputs], ctx))
                    i += 1
                elif node.op == "adamw":           # consecutive compatible updates: one foreach batch
                    key, j = update_batch_key(node), i     # the fusion pass's key (its groups are batches)
                    batch_ins, batch_outs = [], []
                    while j < len(nodes) and update_batch_key(nodes[j]) == key:
                        ins, outs = [tensors[v] for v in nodes[j].inputs], [tensors[v] for v in nodes[j].outputs]
                        if batch_ins and not can_join_batch(batch_ins, batch_outs, ins, outs):
                            break
                        batch_ins.append(ins)
                        batch_outs.append(outs)
                        j += 1
                    kernels.append(adamw(nodes[i:j], batch_ins, batch_outs, ctx))
                    i = j
                else:
                    kernels.append(build_kernel(node, [tensors[v] for v in node.inputs],
                                                [tensors[v] for v in node.outputs], ctx))
                    i += 1
            if kernels:
                launches.append(Launch(group.index, group.kind, list(group.nodes), kernels, gemms))
        self._transfers(launches, tensors, device)
        if not meta:
            for group, t in ctx.private:
                self._note(f"group {group}: its launch workspace ({t.numel()} bytes) is not in the plan's arena: "
                           f"a buffer of its own")
        return launches, ctx

    def _transfers(self, launches, tensors, device) -> None:
        """The copies of the offloaded values (``nova/passes/offload.py``).  On CUDA each runs on a
        copy stream of its direction beside the kernels: an offload's copy starts after the launch
        that writes the value and the offload's launch waits for it (the value's bytes are free after
        it); a reload's copy starts at its launch and the next launch that reads the reloaded value
        waits for it.  On CPU (and meta) each copies at its own launch."""
        transfers = [launch for launch in launches if launch.kind == "transfer"]
        if not transfers:
            return
        at = {launch.group: k for k, launch in enumerate(launches)}
        group_of = {n: group.index for group in self.plan.groups for n in group.nodes}
        streams = {}
        for launch in transfers:
            node = launch.nodes[0]
            src, dst = tensors[node.inputs[0]], tensors[node.outputs[0]]
            if device.type != "cuda":
                launch.kernels.append(Kernel(lambda dst=dst, src=src: dst.copy_(src), f"{node.op} (copy)"))
                continue
            direction = "to host" if node.op == "offload" else "to device"
            if direction not in streams:
                streams[direction] = torch.cuda.Stream(device)
            device_side = src if node.op == "offload" else dst
            if not _dense_permutation(device_side):
                raise ExecutorError(f"{self.graph.name}: {node.op} of {device_side.shape} at strides "
                                    f"{device_side.stride()}: the copy engines move dense bytes only")
            copy = _AsyncCopy(_bytes_in_order(dst), _bytes_in_order(src), node.op == "offload", streams[direction],
                              device, f"copying {device_side.shape} {direction} ({node.op})")
            if node.op == "offload":
                writer = at.get(group_of.get(node.inputs[0].producer))
                if writer is None or writer > at[launch.group]:
                    raise ExecutorError(f"{self.graph.name}: the offload of {node.inputs[0].type} (group "
                                        f"{launch.group}) runs before the launch that writes it")
                launches[writer].kernels.append(Kernel(copy.issue, f"offload {node.inputs[0].type}: copy to host"))
                launch.kernels.append(Kernel(copy.wait, "offload: wait for the copy to host"))
            else:
                launch.kernels.append(Kernel(copy.issue, f"reload {node.outputs[0].type}: copy to device"))
                reader = self._first_reader(launches, at[launch.group], node.outputs[0])
                if reader is None:
                    launch.kernels.append(Kernel(copy.wait, "reload: wait for the copy to device"))
                else:
                    launches[reader].kernels.insert(0, Kernel(copy.wait, "reload: wait for the copy to device"))

    def _first_reader(self, launches, after: int, value) -> int | None:
        """The index of the first launch after ``after`` that reads ``value`` or a free view of it."""
        seen, stack = {value}, [value]
        while stack:
            for u in self._users.get(stack.pop(), ()):
                if self._free_view(u) and u.outputs[0] not in seen:
                    seen.add(u.outputs[0])
                    stack.append(u.outputs[0])
        for k in range(after + 1, len(launches)):
            if any(v in seen for n in launches[k].nodes for v in n.inputs):
                return k
        return None

    def _gemm_workspace(self, launch, ctx):
        """The launch workspace of a Nova GEMM launch (its calls run one after the other and share it):
        the largest ``nova.runtime.tma.workspace_layout`` of its problems' schedules on the target the
        launches run on; None without one, or when the GEMM backend takes none (CPU, an emulation)."""
        if launch.backend != "nova" or not self._takes_workspace:
            return None
        from nova.compiler.gemm_lowering import workspace_bytes
        if self._gemm_sizing is None:         # what nova.matmul(target=self.target) configures for
            from nova.runtime import driver
            from nova.runtime.matmul import resolve_target
            self._gemm_sizing = self._sizing or resolve_target(self.target, driver.get_device(self.device.index))
        problems = launch.problems()
        nbytes = max(workspace_bytes(p, self._gemm_sizing) for p in problems)
        return ctx.launch_workspace(nbytes, f"GEMM workspace of {problems[0].describe()}")

    def _pointwise_kernel(self, group, tensors, device) -> Kernel:
        """A Nova pointwise group: its kernel on CUDA (pointers bound now; a meta dry run only records the
        problem), else its nodes evaluated by their IR reference into temporaries, the outputs copied last
        (the kernel's semantics: every input read before any output is written)."""
        from nova.kernels.pointwise.launch import bind, mismatch
        from nova.passes.fusion import boundary
        from nova.passes.pointwise_from_ir import kernel_operands
        problem = group.pointwise
        ins, outs = boundary(group.nodes, self._users, self._outputs_set)
        operands = kernel_operands(group.nodes, ins)                     # literals are in the program
        in_t, out_t = [tensors[v] for v in operands], [tensors[v] for v in outs]
        copy = opdef(group.nodes[0].op).kind == "view"                   # a reshape's copy runs over its input
        launch_out = [o.view(tuple(in_t[0].shape)) for o in out_t] if copy else out_t
        why = ""
        if self.kind == "cuda":
            why = mismatch(problem, in_t, launch_out) if device.type != "meta" else ""
            if not why:
                if device.type == "meta":
                    return Kernel(lambda: None, f"nova pointwise kernel ({problem.describe()})", pointwise=problem)
                launch = bind(problem, in_t, launch_out, self.target)
                return Kernel(launch, f"nova pointwise kernel ({problem.describe()})", pointwise=problem)
            self._note(f"group {group.index}: pointwise kernel not used ({why}): IR reference")
        nodes = list(group.nodes)

        def run():
            env = {v: tensors[v] for v in ins}
            with torch.device(device):
                for node in nodes:
                    res = opdef(node.op).reference(torch, *[env[v] for v in node.inputs], **node.attrs)
                    env.update(zip(node.outputs, res if isinstance(res, (tuple, list)) else (res,)))
            for v, o in zip(outs, out_t):
                o.copy_(env[v])
        return Kernel(run, "IR reference of a Nova pointwise group" + (f" ({why})" if why else "") + " + copy_",
                      len(outs))

    def _optimizer_kernel(self, group, tensors, device, ctx) -> Kernel | None:
        """A Nova optimizer group on CUDA: one multi-tensor launch over every update's tensors (the
        argument table written now into a workspace; a meta dry run only records the rule and
        reserves the table), or None with a note when the tensors are not the kernel's (ATen then)."""
        from nova.kernels.optimizer.launch import bind, mismatch
        from nova.kernels.optimizer.problem import HYPER_POSITION
        from nova.kernels.optimizer.table import WORD_BYTES, table_bytes
        from nova.passes.multi_tensor import UPDATES, update_slots
        problem = group.optimizer
        rule = problem.rule
        rows = [{name: tensors[v] for name, v in row.items()} for row in update_slots(group.nodes, rule)]
        updates = [n for n in group.nodes if n.op in UPDATES]
        hyper = tensors[updates[0].inputs[HYPER_POSITION[rule.op]]]
        what = f"nova multi-tensor kernel ({problem.describe()})"
        if device.type == "meta":
            ctx.workspace((table_bytes(rule, len(rows)) // WORD_BYTES,), torch.int64)
            return Kernel(lambda: None, what, optimizer=rule)
        why = mismatch(rule, rows, hyper)
        if why:
            self._note(f"group {group.index}: multi-tensor kernel not used ({why}): ATen")
            return None
        return Kernel(bind(rule, rows, hyper, self.target, workspace=ctx.workspace), what, optimizer=rule)

    def _materialized(self, nodes, tensors, ctx) -> dict:
        """Storage of their own (program workspaces) for the values of ``nodes`` that a Nova kernel would
        never have written (``unwritten``: meta tensors) when their nodes run one by one instead."""
        if ctx.device.type == "meta":
            return {}
        return {v: ctx.workspace(v.shape, torch_dtype(v.type.dtype)) for n in nodes for v in n.outputs
                if v in tensors and tensors[v].device.type == "meta"}

    def _sum_kernels(self, group, nodes, tensors, device, ctx) -> list:
        """A Nova multi-tensor sum group: its kernel on CUDA (the argument table and workspace written now; a
        meta dry run only records the rule and reserves them), else -- on CPU, or tensors the kernel cannot
        take (noted) -- its nodes one by one."""
        from nova.kernels.optimizer.sum_launch import bind, mismatch
        from nova.kernels.optimizer.sum_problem import WORD_BYTES, table_bytes, workspace_words
        problem = group.multi_sum
        rule = problem.rule
        what = f"nova multi-tensor sum kernel ({problem.describe()})"
        if self.kind == "cuda":
            rows = [{"entry": k} for k in problem.entry_of]
            for (t, name), v in group.bindings.items():
                rows[t][name] = tensors[v]
            if device.type == "meta":
                from nova.kernels.optimizer.sum_derive import configure_sum_rule
                grid = configure_sum_rule(rule, self.target or "h200").grid
                ctx.workspace((table_bytes(rule, len(rows), grid) // WORD_BYTES,), torch.int64)
                ctx.workspace((workspace_words(len(rows), grid)[1],), torch.float32)
                return [Kernel(lambda: None, what, multi_sum=rule)]
            why = mismatch(rule, rows)
            if not why:
                return [Kernel(bind(rule, rows, self.target, workspace=ctx.workspace), what, multi_sum=rule)]
            self._note(f"group {group.index}: multi-tensor sum kernel not used ({why}): its nodes one by one")
            tensors = {**tensors, **self._materialized(nodes, tensors, ctx)}
        return [build_kernel(n, [tensors[v] for v in n.inputs], [tensors[v] for v in n.outputs], ctx) for n in nodes]

    def _note(self, text: str) -> None:
        if text not in self._fallbacks:
            self._fallbacks.append(text)

    # ------------------------------------------------------------------ binding
    def _check_inputs(self, inputs) -> None:
        g = self.graph
        if len(inputs) != len(g.inputs):
            raise ExecutorError(f"{g.name} takes {len(g.inputs)} inputs "
                                f"({', '.join(s.name for s in g.inputs)}), got {len(inputs)}")
        for spec, x, dt in zip(g.inputs, inputs, self._dtypes):
            if not isinstance(x, torch.Tensor) or x.dtype != dt or x.shape != spec.value.type.shape:
                got = f"{x.dtype}{list(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
                raise ExecutorError(f"{g.name}: input {spec.name!r} must be {spec.value.type}, got {got}")

    def _stale(self, inputs) -> bool:
        for i, (ptr, strides) in self._bound.items():
            x = inputs[i]
            if x.data_ptr() != ptr or x.stride() != strides:
                return True
        return False

    def _bind(self, inputs, step=None) -> None:
        """Bind the user's tensors (bound inputs) and build the real launches; a per-call program
        binds ``step`` (this run's arena and output buffers) too, through unowned aliases."""
        g = self.graph
        rebinding = self._tensors is not None
        bound = self._by_pointer
        for i in bound:
            if inputs[i].device != self.device:
                raise ExecutorError(f"{g.name}: input {g.inputs[i].name!r} is on {inputs[i].device}; "
                                    f"this program runs on {self.device} and uses it in place")
        by_index = [None] * len(g.inputs)
        for i in bound:
            by_index[i] = inputs[i]
        store = self.store
        if self.per_call:
            by_index = [None if x is None else _unowned(x) for x in by_index]
            store = {**self.store, **{area: _unowned(t) for area, t in step.items()}}
        tensors = self._resolve(store, by_index)
        self._fallbacks = [f for f in self._fallbacks if not f.startswith("group ")]
        from nova.runtime.cache import NotPrecompiledError
        try:
            launches, ctx = self._make_launches(tensors, self.device, store["arena"])
            if self._nova_errors:
                self._resolve_nova_kernels(launches)  # before any state changes: a miss leaves the program unbound
        except NotPrecompiledError as e:
            raise self._every_miss(e) from None
        self._tensors, self._launches, self._ctx = tensors, launches, ctx
        self._bound = {i: (inputs[i].data_ptr(), inputs[i].stride()) for i in bound}
        self._bound_refs = [] if self.per_call else [inputs[i] for i in bound]
        self._staged = [(i, tensors[g.inputs[i].value]) for i in self._copied_in]
        self._sources = self._output_sources(tensors, store, by_index) if self.per_call else None
        self._cuda_graph = None
        measured = self.stats.get("measured_peak_bytes")
        counters = {k: self.stats.get(k, 0) for k in ("captures", "rebinds", "runs")}
        self.stats = self._stats(launches, ctx)
        self.stats.update(counters, measured_peak_bytes=measured)
        if rebinding:
            self.stats["rebinds"] += 1
        self._memory_phase("first step: inputs bound, launches built (program workspaces)")

    def _binding_key(self, step, inputs) -> tuple:
        """The addresses a per-call binding is made for: this run's buffers, and each input read in
        place (pointer and strides)."""
        return tuple(t.data_ptr() for t in step.values()) + tuple(
            (inputs[i].data_ptr(), tuple(inputs[i].stride())) for i in self._by_pointer)

    _BINDING = ("_tensors", "_launches", "_ctx", "_bound", "_staged", "_sources", "_cuda_graph")

    def _select_binding(self, step, inputs) -> None:
        """Make the binding for this run's addresses the current one: kept, or made now (the oldest
        kept binding dropped beyond ``BINDINGS_KEPT``)."""
        key = self._binding_key(step, inputs)
        if key == self._key:
            return
        if self._key is not None:
            self._bindings[self._key] = tuple(getattr(self, a) for a in self._BINDING)
        if key in self._bindings:
            state = self._bindings.pop(key)
            for a, value in zip(self._BINDING, state):
                setattr(self, a, value)
        else:
            self._key = None
            self._bind(inputs, step)
        self._bindings[key] = tuple(getattr(self, a) for a in self._BINDING)
        self._key = key
        while len(self._bindings) > BINDINGS_KEPT:
            oldest = next(iter(self._bindings))
            if self._use_graph and self._bindings[oldest][-1] is not None:
                torch.cuda.synchronize(self.device)          # its graph may still run on the stream
            del self._bindings[oldest]

    def _output_sources(self, tensors, store, by_index) -> list:
        """How a per-call run makes each output from its own buffers and inputs: ("input", i) the
        caller's tensor itself; ("buffer", k, offset, shape, strides, dtype) a view of this run's
        output buffer k; ("view", i, offset, shape, strides) a view of input i (its elements from
        the input's first); ("clone",) a copy of bytes the program reuses."""
        out = []
        for o in self.graph.outputs:
            loc = self.loc[o.value]
            if loc[0] in ("input", "donated"):
                out.append(("input", loc[1]))
                continue
            if o.value in self._input_index:
                out.append(("input", self._input_index[o.value]))
                continue
            t = tensors[o.value]
            root = self._root_loc(o.value)
            if root[0] == "in_input":            # in a dead donated input's bytes: a view of its storage
                x = by_index[root[1]]
                out.append(("in_storage", root[1], t.data_ptr() - x.data_ptr(), tuple(t.shape), tuple(t.stride()),
                            t.dtype))
                continue
            source = ("clone",)
            for k in range(len(self._pieces)):
                base = store[("output", k)]
                offset = t.data_ptr() - base.data_ptr()
                if 0 <= offset < base.numel() and offset % t.element_size() == 0:
                    source = ("buffer", k, offset // t.element_size(), tuple(t.shape), tuple(t.stride()), t.dtype)
                    break
            else:
                for i, x in enumerate(by_index):
                    if x is None or x.dtype != t.dtype or t.numel() == 0:
                        continue
                    offset = t.data_ptr() - x.data_ptr()
                    span = _strided_bytes(x.shape, x.stride(), x.element_size())
                    if 0 <= offset < span and offset % t.element_size() == 0:
                        source = ("view", i, offset // t.element_size(), tuple(t.shape), tuple(t.stride()))
                        break
            out.append(source)
        return out

    def step_kernels(self):
        """The distinct Nova kernels this program launches, each list in launch order
        (``kernel_lookup.StepKernels``): its GEMMs (``gemm_problems``), attention launches
        (``attention_kernels``: each problem with the strides of the arena views it reads and
        writes), rows problems, fused pointwise kernels, multi-tensor optimizer kernels (and the rule
        of the steps that follow: a step captured before SGD's momentum buffers exist is followed by
        steps that read them, whose program is planned only when they run), embedding problems and
        multi-tensor sums.  ``nova precompile`` builds these from a meta program."""
        from nova.compiler.kernel_lookup import StepKernels
        rules = self.optimizer_rules()
        return StepKernels(self.gemm_problems(), self.attention_kernels(), self.rows_problems(),
                           self.pointwise_problems(), list(dict.fromkeys(rules + [r.later_steps() for r in rules])),
                           self.embedding_problems(), self.sum_rules())

    def _every_miss(self, first):
        """The one error of an offline program whose kernels the cache lacks: every Nova kernel of the
        program (its meta twin's ``step_kernels``) looked up as ``nova precompile`` does
        (``kernel_lookup.kernels_missing``), so each miss is recorded for ``nova precompile misses``,
        and counted in one line (``first``, the miss the launches met, where it is the only one or the
        look-up fails)."""
        from nova.compiler.kernel_lookup import kernels_missing
        from nova.messages import misses_command
        from nova.runtime import driver
        from nova.runtime.cache import KernelCache, NotPrecompiledError
        from nova.runtime.matmul import resolve_target
        cache = KernelCache(first.cache_root)
        try:
            target = resolve_target(self.target, driver.get_device(self.device.index))
            missing = kernels_missing(Program(self._planned, "meta").step_kernels(), target, cache)
        except Exception:         # the look-up is a courtesy: the miss the launches met is the error
            return first
        if len(missing) <= 1:
            return first
        what = missing[0].removeprefix("not precompiled: ")
        return NotPrecompiledError(first.problem, first.target, first.key, first.cache_root, message=(
            f"{len(missing)} kernels of {self.graph.name} are not precompiled for {target.name} in {cache.root} "
            f"(the first: {what}); each is recorded in {cache.misses_dir}: on a machine with MLIR run "
            f"`{misses_command(cache.root)}` and carry the cache directory back"))

    def _resolve_nova_kernels(self, launches) -> None:
        """Load every Nova kernel of ``launches`` now (offline: a missing one raises
        NotPrecompiledError here, before the warm-up has touched any parameter)."""
        from nova.kernels.attention.launch import resolve
        from nova.runtime.matmul import matmul
        for problem, roles in _distinct_attention(launches):
            resolve(problem, self.device.index, None, roles)       # the target nova.attention resolves
        for problem in _distinct_rows(launches):
            from nova.kernels.rows.launch import resolve as resolve_rows
            resolve_rows(problem, self.device.index)                # the target the launches resolve
        for problem in _distinct_embedding(launches):
            from nova.kernels.embedding.launch import resolve as resolve_embedding
            resolve_embedding(problem, self.device.index)
        if self._gemm is not matmul:
            return
        from nova.runtime import driver
        from nova.runtime.matmul import resolve_kernel
        device = driver.get_device(self.device.index)
        for problem in _distinct_problems(launches):
            resolve_kernel(problem, self.target, device)

    # ------------------------------------------------------------------ running
    def run(self, inputs) -> list:
        """Run one step on ``inputs`` (one tensor per graph input); returns the outputs: donated
        ones as the input objects they updated, graph inputs passed through as themselves, every
        other one as a fresh tensor."""
        if self.device.type == "meta":
            raise ExecutorError("a meta program only describes; build it on a CUDA device to run it")
        inputs = list(inputs)
        self._check_inputs(inputs)
        with torch.no_grad():            # parameters require grad; the step writes them in place, out= everywhere
            if self.store is None:       # released: its memory again, then a new binding and capture
                self.store = self._allocate(self.device, False)
                self._fill_constants(self.store)
            step = None
            if self.per_call:
                step = self._step_storage(self.device, self.poison)
                self._select_binding(step, inputs)
            elif self._tensors is None or self._stale(inputs):
                self._bind(inputs)
            for i, slot in self._staged:
                x = inputs[i]
                if x.data_ptr() != slot.data_ptr() or x.device != slot.device:
                    slot.copy_(x)
            if not self._use_graph:
                self._execute()
            elif self._cuda_graph is None:
                self._warm_up_and_capture()
            else:
                self._cuda_graph.replay()
            self.stats["runs"] += 1
            return self._outputs(inputs, step)

    def release(self) -> None:
        """Free the program's device memory now (the arena and its other areas, workspaces, launches,
        the CUDA graph and its pool); the next ``run`` allocates them again, binds and captures (a
        rebind).  Outputs already returned are the caller's (clones or the caller's own tensors)."""
        if self.store is None:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._cuda_graph = self._launches = self._ctx = self._tensors = None
        self._bound, self._bound_refs, self._staged = {}, [], []
        self._key, self._bindings, self._graph_pool = None, {}, None     # per call: every kept binding
        if self.per_call:
            self._output_pools = None
            shared_arena(self.device).give_back(self)
        self.store = self._shared_workspace = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()         # back to the device: the next arena may be larger

    def _execute(self) -> None:
        index = -1
        try:
            for index, launch in enumerate(self._launches):
                launch()
        except ExecutorError:
            raise
        except Exception as e:
            if self._nova_errors and isinstance(e, self._nova_errors):
                raise                                       # Nova's own one-line errors
            launch = self._launches[index]
            origin = next((n.origin for n in launch.nodes if n.origin), "")
            raise ExecutorError(f"{self.graph.name}: launch {index} (group {launch.group}, {launch.kind}: "
                                f"{'+'.join(n.op for n in launch.nodes)}{', ' + origin if origin else ''}) failed: "
                                f"{type(e).__name__}: {_first_line(e)}") from e

    def _warm_up_and_capture(self) -> None:
        """Execute the step once on a side stream (its real execution, and the warm-up Nova GEMMs
        need), then capture the same launches into one CUDA graph on that stream."""
        stream = self._capture_stream or torch.cuda.Stream(self.device)
        self._capture_stream = stream
        current = torch.cuda.current_stream(self.device)
        stream.wait_stream(current)
        with torch.cuda.device(self.device), torch.cuda.stream(stream):
            self._execute()
        current.wait_stream(stream)
        self._memory_phase("first step: executed once (warm-up)")
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.device(self.device), torch.cuda.graph(graph, stream=stream, pool=self._graph_pool):
                self._execute()
        except Exception as e:
            if self._nova_errors and isinstance(e, self._nova_errors):
                raise
            raise ExecutorError(f"{self.graph.name}: capturing the step as a CUDA graph failed ({_first_line(e)}); "
                                f"build(..., cuda_graph=False) runs it without a graph") from e
        self._cuda_graph = graph
        if self.per_call:                    # the bindings' graphs never run at the same time: one pool
            self._graph_pool = graph.pool()
        self.stats["captures"] += 1
        self._memory_phase("first step: captured as a CUDA graph")
        self._phases_done = True
        if self.stats.get("measured_peak_bytes") is None:
            torch.cuda.synchronize(self.device)
            self.stats["measured_peak_bytes"] = torch.cuda.max_memory_allocated(self.device) - self._mem_base

    def _memory_phase(self, phase: str) -> None:
        """CUDA, the first build and step only: torch's allocator counters and the device's used memory
        (``cudaMemGetInfo``: also what torch does not allocate, the CUDA context and ``cuMemAlloc``)
        now, appended to ``memory_phases`` (``nova.bench.train``'s memory diagnostic reads them)."""
        if self.device.type != "cuda" or self._phases_done:
            return
        import time
        free, total = torch.cuda.mem_get_info(self.device)
        self.memory_phases.append({
            "phase": phase, "t": time.perf_counter(),
            "allocated_bytes": torch.cuda.memory_allocated(self.device),
            "reserved_bytes": torch.cuda.memory_reserved(self.device),
            "max_allocated_bytes": torch.cuda.max_memory_allocated(self.device),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(self.device),
            "device_used_bytes": total - free})

    def _outputs(self, inputs, step=None) -> list:
        if self.per_call:
            return self._outputs_per_call(inputs, step)
        if self._output_inputs is None:     # per output: the input it returns, or None (a clone)
            self._output_inputs = [self.loc[o.value][1] if self.loc[o.value][0] in ("input", "donated")
                                   else self._input_index.get(o.value) for o in self.graph.outputs]
        # an input: the very object the user passed (updated in place); else a clone of the program's value
        return [self._tensors[o.value].clone() if i is None else inputs[i]
                for o, i in zip(self.graph.outputs, self._output_inputs)]

    def _outputs_per_call(self, inputs, step) -> list:
        out = []
        copies = {}                          # small output buffers: one copy per run, its outputs views of it
        for o, source in zip(self.graph.outputs, self._sources):
            if source[0] == "input":
                out.append(inputs[source[1]])
            elif source[0] == "buffer":
                _, k, offset, shape, strides, dtype = source
                buffer = step[("output", k)]
                if self._output_pools.small[k]:
                    buffer = copies[k] if k in copies else copies.setdefault(k, buffer.clone())
                out.append(torch.as_strided(buffer.view(dtype), shape, strides, offset).detach())
            elif source[0] == "in_storage":
                _, i, byte_offset, shape, strides, dtype = source
                out.append(bytes_view(inputs[i], byte_offset, dtype, shape, strides).detach())
            elif source[0] == "view":
                _, i, offset, shape, strides = source
                x = inputs[i]
                out.append(torch.as_strided(x, shape, strides, x.storage_offset() + offset).detach())
            else:
                out.append(self._tensors[o.value].clone())
        return out

    def returns_clone(self, output) -> bool:
        """Whether ``run`` returns graph output ``output`` as a fresh clone (else the user's own tensor,
        a view of it, or, per call, an output buffer the run allocated for the caller)."""
        if self.loc[output.value][0] in ("input", "donated") or output.value in self._input_index:
            return False
        if not self.per_call:
            return True
        root = self._root_loc(output.value)
        return not (root[0] in ("input", "in_input") or (root[0] == "arena" and self._region is not None
                                           and root[1] >= self._region[0]))

    def _root_loc(self, value):
        """The location of the storage ``value`` lives in (through views and placed values)."""
        while self.loc[value][0] == "alias":
            value = self.loc[value][1].inputs[0]
        return self.loc[value]

    def workspace_owners(self) -> list:
        """``[(group index, tensor)]``: the static workspaces the launches took (``KernelContext.workspace``)."""
        ctx = self._ctx if self._ctx is not None else self._dry_ctx
        return list(zip(ctx.owners, ctx.workspaces))

    def launch_workspaces(self) -> dict:
        """``{group index: (bytes, what)}``: the launch workspace each group's kernels asked for
        (``KernelContext.launch_workspace``), which the plan places in the arena."""
        ctx = self._ctx if self._ctx is not None else self._dry_ctx
        return dict(ctx.needs)

    # ------------------------------------------------------------------ inspection
    def static_input(self, i: int):
        """The static slot of staged input ``i`` (write a batch there to skip run()'s copy); None for bound inputs."""
        loc = self.loc[self.graph.inputs[i].value]
        return None if loc[0] == "input" else self._area_view(self.store, loc, self.graph.inputs[i].value)

    def value_tensor(self, value):
        """The tensor bound to IR ``value`` (after the first run; before it, or for a per-call program,
        whose buffers live only during a run, a meta tensor of the dry run)."""
        if self._tensors is not None and not self.per_call:
            return self._tensors[value]
        return self.meta_tensors()[value]

    def meta_tensors(self) -> dict:
        """Value -> a meta tensor laid out as the program lays the value out (one dry run: values
        that share storage share a meta storage; graph inputs are contiguous, as their IR types)."""
        meta_inputs = [torch.empty(s.value.type.shape, dtype=dt, device="meta")
                       for s, dt in zip(self.graph.inputs, self._dtypes)]
        return self._resolve(self._allocate(torch.device("meta"), False, per_call_areas=True), meta_inputs)

    def output_buffer_sizes(self) -> list:
        """Per call: the bytes of each output buffer a run allocates (the plan's output region)."""
        return [n for _, n in self._pieces]

    @property
    def launches(self) -> list:
        return self._launches if self._launches is not None else self._dry_launches

    def gemm_problems(self) -> list:
        """The distinct Nova GEMM problems this program launches (``GemmProblem``), in launch order."""
        return _distinct_problems(self.launches)

    def gemm_problem_counts(self) -> dict:
        """``{GemmProblem: Nova launches per step}``, the distinct problems in launch order."""
        return _problem_counts(self.launches)

    def attention_kernels(self) -> list:
        """The distinct Nova attention launches of this program, ``(AttentionProblem, roles)`` in launch
        order; each problem carries its operands' strides as the launches see them (the arena views)."""
        return _distinct_attention(self.launches)

    def rows_problems(self) -> list:
        """The distinct Nova rows problems (``RowsProblem``) this program launches, in launch order."""
        return _distinct_rows(self.launches)

    def embedding_problems(self) -> list:
        """The distinct Nova embedding problems (``EmbeddingProblem``) this program launches, in launch order."""
        return _distinct_embedding(self.launches)

    def pointwise_problems(self) -> list:
        """The distinct Nova pointwise kernels (``PointwiseProblem``) this program launches, in launch order."""
        return _distinct_pointwise(self.launches)

    def optimizer_rules(self) -> list:
        """The distinct Nova multi-tensor kernels (``UpdateRule``) this program launches, in launch order."""
        return list(dict.fromkeys(k.optimizer for launch in self.launches for k in launch.kernels
                                  if k.optimizer is not None))

    def sum_rules(self) -> list:
        """The distinct Nova multi-tensor sum kernels (``SumRule``) this program launches, in launch order."""
        return list(dict.fromkeys(k.multi_sum for launch in self.launches for k in launch.kernels
                                  if k.multi_sum is not None))

    def _stats(self, launches, ctx) -> dict:
        per_kind = {}
        for launch in launches:
            per_kind[launch.kind] = per_kind.get(launch.kind, 0) + 1
        gemms = [gl for launch in launches for gl in launch.gemms]
        outputs = [self.loc[o.value][0] for o in self.graph.outputs]
        return {
            "device": str(self.device),
            "groups": len(self.plan.groups),
            "launches": dict(sorted(per_kind.items())),
            "launches_total": len(launches),
            "free_groups": len(self.plan.groups) - len(launches),
            "kernels": sum(len(launch.kernels) for launch in launches),
            "nova_gemm_launches": sum(gl.backend == "nova" for gl in gemms),
            "torch_gemms": sum(gl.backend == "torch" for gl in gemms),
            "fused_epilogue_nodes": sum(len(gl.epilogue) for gl in gemms),
            "copies": sum(launch.copies for launch in launches),
            "arena_bytes": self.plan.arena_bytes,
            "peak_bytes": self.plan.peak_bytes,
            "outside_arena_bytes": None if self.plan.outside is None else outside_peak_bytes(self.plan.outside),
            "outside_arena_driver_bytes": None if self.plan.outside is None else
            sum(i.nbytes for i in self.plan.outside if i.allocator == "driver"),
            "constants_bytes": self.area_bytes["const"],
            "static_input_bytes": self.area_bytes["staged"],
            "scratch_bytes": self.area_bytes["scratch"],
            "host_bytes": self.area_bytes["host"],
            "workspace_bytes": ctx.workspace_bytes,
            "per_call": self.per_call,
            "step_arena_bytes": (self._region[0] if self._region is not None else self.plan.arena_bytes)
            if self.per_call else 0,
            "output_buffer_bytes": sum(n for _, n in self._pieces),
            "in_place_inputs": sum(self.loc[s.value][0] == "input" and s.role not in BOUND_ROLES
                                   for s in self.graph.inputs),
            "launch_workspace_bytes": sum(n for n, _ in ctx.needs.values()),
            "launch_workspaces_in_arena": sum(g in self.plan.workspaces and self.plan.workspaces[g][1] >= n
                                              for g, (n, _) in ctx.needs.items()),
            "launch_workspaces_outside_arena_bytes": sum(t.numel() for _, t in ctx.private) + (
                0 if ctx.shared is None else ctx.shared.numel()),
            "measured_peak_bytes": None,
            "donated_outputs": sum(k == "donated" for k in outputs),
            "cloned_outputs": sum(self.returns_clone(o) for o in self.graph.outputs),
            "cuda_graph": self._use_graph,
            "captures": 0, "rebinds": 0, "runs": 0,
            "fallbacks": list(self._fallbacks),
        }

    def describe(self) -> str:
        s = self.stats
        kinds = ", ".join(f"{k} {n}" for k, n in s["launches"].items())
        mode = "one CUDA graph" if s["cuda_graph"] else ("eager" if self.device.type != "meta" else "not runnable")
        lines = [
            f"program {self.graph.name} on {self.device}: {s['groups']} groups -> {s['launches_total']} launches "
            f"({kinds}), {s['free_groups']} free (views, constants); {mode}",
            f"memory: arena {_fmt_bytes(s['arena_bytes'])} (plan peak {_fmt_bytes(s['peak_bytes'])}), constants "
            f"{_fmt_bytes(s['constants_bytes'])}, static inputs {_fmt_bytes(s['static_input_bytes'])}, scratch "
            f"{_fmt_bytes(s['scratch_bytes'])}, workspace {_fmt_bytes(s['workspace_bytes'])}, launch workspaces "
            f"{_fmt_bytes(s['launch_workspace_bytes'])} ({s['launch_workspaces_in_arena']} in the arena)"
            + (f"; measured peak {_fmt_bytes(s['measured_peak_bytes'])}"
               if s["measured_peak_bytes"] is not None else ""),
            f"per step: {s['kernels']} kernels ({s['nova_gemm_launches']} Nova GEMM launches, {s['torch_gemms']} "
            f"torch.matmul), {s['copies']} copies; outputs: {s['donated_outputs']} donated, "
            f"{s['cloned_outputs']} cloned",
            f"  {'#':>3}  {'group':>5}  {'kind':<10} {'nodes':<34} kernels",
        ]
        for i, launch in enumerate(self.launches):
            ops = "+".join(n.op for n in launch.nodes)
            whats = "; ".join(k.what for k in launch.kernels)
            lines.append(f"  {i:>3}  {launch.group:>5}  {launch.kind:<10} {ops[:34]:<34} {whats}")
        for f in s["fallbacks"]:
            lines.append(f"  note: {f}")
        return "\n".join(lines)


def _problem_counts(launches) -> dict:
    counts = {}
    for launch in launches:
        for gemm in launch.gemms:
            if gemm.backend == "nova":
                for p in gemm.problems():
                    counts[p] = counts.get(p, 0) + 1
    return counts


def _distinct_problems(launches) -> list:
    return list(_problem_counts(launches))


def _distinct_attention(launches) -> list:
    return list(dict.fromkeys(k.attention for launch in launches for k in launch.kernels if k.attention))


def _distinct_rows(launches) -> list:
    return list(dict.fromkeys(k.rows for launch in launches for k in launch.kernels if k.rows is not None))


def _distinct_embedding(launches) -> list:
    return list(dict.fromkeys(k.embedding for launch in launches for k in launch.kernels if k.embedding is not None))


def _distinct_pointwise(launches) -> list:
    return list(dict.fromkeys(k.pointwise for launch in launches for k in launch.kernels if k.pointwise is not None))


def _normalize_device(device) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def build(planned, device, *, target=None, poison: bool = False, cuda_graph: bool | None = None, gemm=None,
          per_call: bool = False, in_place=frozenset()) -> Program:
    """The ``Program`` of ``planned`` (see ``nova/compiler/plan_view.py``) on ``device``.

    ``target``: Nova's GPU preset for the GEMMs (default: ``NOVA_TARGET`` or the GPU's name).
    ``poison``: fill the arena, static slots and scratch with 0xFF bytes (NaN) at build (tests).
    ``cuda_graph``: on CUDA, False runs the launches eagerly every step (default: one CUDA graph).
    ``gemm``: the GEMM backend, a callable with ``nova.matmul``'s signature (default: ``nova.matmul``
    on CUDA, ``torch.matmul`` on CPU; tests pass an emulation to exercise the Nova lowering on CPU).
    ``device="meta"``: the CUDA program's layout and launch list without a GPU (describe, GEMM problems).
    ``per_call``: the arena and the output region's buffers allocated at each run (the module docstring);
    ``in_place``: indices of data inputs read in place, by pointer, instead of copied into static slots."""
    return Program(planned, device, target=target, poison=poison, cuda_graph=cuda_graph, gemm=gemm,
                   per_call=per_call, in_place=in_place)


def gemm_problems(planned) -> list:
    """Every Nova GEMM (``nova.kernels.gemm.problem.GemmProblem``: M, N, K, dtype, trans_a, trans_b,
    bias, activation, out dtype) a CUDA program of ``planned`` launches, for ``nova precompile``.
    Bound inputs (parameters) are assumed contiguous, as the IR types describe them."""
    return Program(planned, "meta").gemm_problems()


def attention_kernels(planned) -> list:
    """Every Nova attention launch (``(AttentionProblem, roles)``, distinct, launch order) a CUDA program
    of ``planned`` makes, with the strides of its operands' arena views, for ``nova precompile``."""
    return Program(planned, "meta").attention_kernels()


def rows_problems(planned) -> list:
    """Every Nova rows problem (``nova.kernels.rows.RowsProblem``) a CUDA program of ``planned`` launches,
    distinct, in launch order, for ``nova precompile``."""
    return Program(planned, "meta").rows_problems()


def pointwise_problems(planned) -> list:
    """Every Nova pointwise kernel (``PointwiseProblem``, distinct, launch order) a CUDA program of
    ``planned`` launches, for ``nova precompile``."""
    return Program(planned, "meta").pointwise_problems()


def optimizer_rules(planned) -> list:
    """Every Nova multi-tensor optimizer kernel (``UpdateRule``, distinct, launch order) a CUDA program
    of ``planned`` launches, for ``nova precompile``."""
    return Program(planned, "meta").optimizer_rules()


def gemm_problem_counts(planned) -> dict:
    """``gemm_problems(planned)`` with how many times one step launches each (a batched matmul
    looped over its elements counts once per element): ``{GemmProblem: launches}``."""
    return Program(planned, "meta").gemm_problem_counts()


def precompile_commands(problems, target: str) -> list[str]:
    """``nova precompile gemm`` command lines that build ``problems`` for ``target``, one per
    distinct dtype/layout/epilogue (shapes joined)."""
    from nova.messages import precompile_command
    groups: dict[tuple, list[str]] = {}
    for p in problems:
        shape = f"{p.batch}x{p.M}x{p.N}x{p.K}" if p.batch > 1 else f"{p.M}x{p.N}x{p.K}"
        head, tail = precompile_command(p, target).split(f" --shapes {shape}")
        groups.setdefault((head, tail), [])
        if shape not in groups[(head, tail)]:
            groups[(head, tail)].append(shape)
    return [f"{head} --shapes {','.join(shapes)}{tail}" for (head, tail), shapes in groups.items()]
