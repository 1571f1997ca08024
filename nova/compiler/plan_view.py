"""The executor's reading of the planner's result (``nova.passes.Planned``), in one place.

    planned.graph            the optimized graph the groups refer to
    planned.groups           in execution order: ``.kind``, ``.nodes``, ``.reason``, ``.kernel``
                             ("nova": a Nova kernel runs the group; a gemm group with "aten" runs on
                             torch.matmul), ``.problem`` (a Nova GEMM group's ``GemmProblem``, with
                             ``.epilogue.bias``; a Nova attention group's ``AttentionProblem``; a Nova
                             pointwise group's ``PointwiseProblem``,
                             a concat's or a copying view's when one pointwise kernel runs it too,
                             a Nova optimizer group's ``MultiTensorProblem``, a Nova rows group's
                             ``RowsProblem``, a Nova embedding group's ``EmbeddingProblem``, each with
                             ``.bindings``; a Nova multi-tensor sum group's ``MultiTensorSumProblem``, its
                             ``.bindings`` keyed ``(tensor, operand name)``)
    planned.memory           ``MemoryPlan``: ``.values`` (Value -> ``ValuePlan``), ``.arena_bytes``,
                             ``.peak_bytes``, ``.donations`` [(output index, input index)], ``.outside``
                             (the allocations listed outside the arena, for the stats), ``.workspaces``
                             (``LaunchWorkspace``: the arena bytes a group's launch uses as its workspace),
                             ``.output_region`` (the outputs' buffers at the arena's top, when apart),
                             ``.handoff.donated_inputs`` (inputs whose storage results may take)
    ValuePlan.kind           "arena" (``.offset``, ``.nbytes``; ``.view``: the strides its kernel writes
                             it at, when not row-major), "alias" (``.alias_of``, ``.view``),
                             "external" (a graph input's storage; ``.donated`` with ``.input_index``
                             for an updating output, or a result taking a donated input's storage,
                             written in place; with ``.offset`` a result placed at that byte of a
                             dead donated input, in its own type), "fused" (never written), "host" (an offloaded
                             copy in host memory: the program's pinned host area)
    planned.storage          ``StoragePlan``: ``.assembled`` (concat nodes whose inputs their kernels
                             wrote in place: they launch nothing); a node result the plan aliases
                             into such a concat's result is read here as "placed": its kernel writes
                             it at those arena bytes and strides

A Nova GEMM group's ``GemmProblem`` and epilogue (the nodes after its matmul; the bias, residual and
pre-activation Values) are the
plan's decision: the executor binds the tensors to that problem (``gemm_lowering.bind_gemm``).  A "fused" value (the product or the biased product inside
a Nova GEMM group) is never written when the Nova kernel runs the whole chain, but a CPU program
computes the group unfused (``torch.matmul``, then the bias add and activation as ATen kernels), and
so does a CUDA program whose bound tensors are not the planned problem: both need the value.
``PlanView.fused_into`` names, for each such value, the group result its elementwise chain ends in
(same type, in the arena): the executor computes the chain in that result's bytes, one step after
the other in place, which the plan already reserves for the whole launch.  Values the plan does not
place at all get a private scratch buffer, counted in ``Program.stats["scratch_bytes"]``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nova.ir.ops import opdef
from nova.kernels.optimizer.sum_problem import MultiTensorSumProblem
from nova.passes.attention import ATTENTION_OPS
from nova.passes.embedding import EMBEDDING_OPS
from nova.passes.fusion import OPTIMIZER_UPDATES


class ExecutorError(RuntimeError):
    """A plan the executor cannot run, or a run it refuses (one line naming what and where)."""


@dataclass
class Placement:
    """Where one value lives, as the executor understands it."""
    kind: str                            # "arena" | "alias" | "placed" | "external" | "host" | "none"
                                         # placed: a node result its kernel writes into ``base``'s bytes
    offset: int | None = None
    nbytes: int = 0
    base: object = None                  # alias: the planned base Value
    strides: tuple[int, ...] | None = None
    donated_to: int | None = None        # the graph input an output is written into (external: at byte
                                         # ``offset`` of it when set, else over it in place)


@dataclass
class GroupView:
    index: int
    kind: str
    nodes: list
    reason: str = ""
    gemm: object = None                  # a Nova GEMM group: its GemmProblem (epilogue included)
    gemm_epilogue: object = None         # and its fusion.Epilogue (the bias, residual and pre-activation Values)
    attention: object = None             # a Nova attention group: its AttentionProblem (operands dense)
    pointwise: object = None             # a Nova pointwise kernel's PointwiseProblem (its nodes: one launch)
    optimizer: object = None             # a Nova multi-tensor update's MultiTensorProblem (its nodes: one launch)
    rows: object = None                  # a Nova rows group: its RowsProblem (nova/passes/rows.py)
    embedding: object = None             # a Nova embedding group: its EmbeddingProblem (nova/passes/embedding.py)
    multi_sum: object = None             # a Nova multi-tensor sum group: its MultiTensorSumProblem (one launch)
    bindings: dict = field(default_factory=dict)     # rows, embedding: operand name -> Value


@dataclass
class PlanView:
    graph: object
    groups: list[GroupView]
    placements: dict                     # Value -> Placement (only values the plan mentions)
    arena_bytes: int
    peak_bytes: int
    donations: dict[int, int] = field(default_factory=dict)    # output index -> input index
    fused_into: dict = field(default_factory=dict)   # fused Value -> the arena group result it is computed in
    assembled: frozenset = frozenset()   # concat nodes that launch nothing (their inputs are written in place)
    outside: list | None = None          # MemoryPlan.outside: the allocations listed outside the arena
    workspaces: dict = field(default_factory=dict)   # group index -> (arena offset, bytes) of its launch workspace
    output_region: tuple | None = None   # MemoryPlan.output_region: [start, arena_bytes) of the outputs' buffers
    donated_inputs: frozenset = frozenset()   # Handoff.donated_inputs: inputs whose storage results may take

    def placement(self, value) -> Placement:
        return self.placements.get(value, Placement("none"))


def _placement(value, value_plan, values, stored) -> Placement:
    vp = value_plan
    if vp is None or vp.kind == "fused":
        return Placement("none")
    if vp.kind == "arena":
        return Placement("arena", vp.offset, vp.nbytes, strides=tuple(vp.view.strides) if vp.view is not None else None)
    if vp.kind == "alias" and value in stored:          # storage.py placed it in a concat's buffer
        base = values.get(vp.alias_of)
        if base is None or base.kind != "arena" or vp.view is None:
            raise ExecutorError(f"the memory plan places the result of {value.producer.op} in {vp.alias_of.type}, "
                                f"which is not an arena buffer")
        return Placement("placed", base.offset + vp.view.offset * value.type.itemsize, 0, base=vp.alias_of,
                         strides=tuple(vp.view.strides))
    if vp.kind == "alias":
        return Placement("alias", nbytes=vp.nbytes, base=vp.alias_of,
                         strides=tuple(vp.view.strides) if vp.view is not None else None)
    if vp.kind == "external":
        return Placement("external", offset=vp.offset if vp.in_dead_input else None, nbytes=vp.nbytes,
                         donated_to=vp.input_index if vp.donated else None)
    if vp.kind == "host":                               # an offloaded copy: the program's host area
        return Placement("host", nbytes=vp.nbytes)
    raise ExecutorError(f"unknown placement kind {vp.kind!r} in the memory plan")


def _donations(memory, graph) -> dict[int, int]:
    """output index -> input index, checked against the outputs' ``updates``."""
    out = dict(memory.donations)
    for k, i in out.items():
        o = graph.outputs[k]
        if o.updates != i or graph.inputs[i].value.type != o.value.type:
            raise ExecutorError(f"memory plan donates output {o.name!r} ({o.value.type}) into input {i}, "
                                f"but it updates input {o.updates}")
    return out


def _fused_into(groups, memory, graph) -> dict:
    """Each fused value -> the value its group's elementwise chain ends in: follow the one reader
    inside the group while it is a pointwise op of one result of the same type or a wider one of as
    many elements (a cast epilogue's f32: the 16-bit value lies in its first bytes, and the ATen
    kernel that widens it computes apart, ``aten_kernels.pointwise``), or a view of the same bytes (a
    GEMM epilogue's reshape), through fused and aliased values, to a value the plan puts in the arena
    (or at a byte of a dead donated input)."""
    users = graph.users()

    def same_bytes(w, v):              # same elements in the same order: v's type, or a reshape of it
        return w.type.dtype == v.type.dtype and w.type.numel == v.type.numel

    def widens(w, v):                  # v's elements widened (a cast epilogue): v fits in w's first bytes
        return w.type.numel == v.type.numel and w.type.itemsize > v.type.itemsize

    def kind_of(v):
        vp = memory.values.get(v)
        return vp.kind if vp is not None else None

    out = {}
    for g in groups:
        if g.kind == "pointwise":          # a Nova pointwise kernel's intermediates live in its registers
            continue
        if g.kind == "reduction" and g.kernel == "nova":
            continue                       # a rows prologue is a DAG (a value read again after a later one is
                                           # written): computed unfused, each value needs its own bytes
        members = set(g.nodes)
        for v in (v for n in g.nodes for v in n.outputs if kind_of(v) == "fused"):
            w = v
            while w is not None and (w is v or kind_of(w) in ("fused", "alias")):
                readers = [u for u in users.get(w, ()) if u in members]
                ok = len(readers) == 1 and len(readers[0].outputs) == 1 and (
                    opdef(readers[0].op).kind == "pointwise" and (same_bytes(readers[0].outputs[0], v)
                                                                   or widens(readers[0].outputs[0], v))
                    or opdef(readers[0].op).kind == "view" and kind_of(readers[0].outputs[0]) == "alias"
                    and same_bytes(readers[0].outputs[0], v))              # a GEMM epilogue's reshape
                w = readers[0].outputs[0] if ok else None
            held = memory.values.get(w) if w is not None else None
            if held is not None and (held.kind == "arena" or held.in_dead_input):
                out[v] = w
    return out


def _nova_view(group) -> dict:
    """A Nova kernel's problem: a GEMM group's with its epilogue's bias, a fused pointwise group's, an
    optimizer group's, or a rows group's with its operand bindings (empty for ATen groups)."""
    from nova.kernels.pointwise.problem import PointwiseProblem
    if group.kernel != "nova" or group.problem is None:
        if group.kind == "gemm" and group.kernel == "nova":
            raise ExecutorError(f"the plan runs {group.nodes[0].op} on a Nova GEMM kernel without its problem")
        return {}
    if group.kind == "gemm":
        return {"gemm": group.problem, "gemm_epilogue": group.epilogue}
    if group.kind == "composite" and group.nodes[0].op in ATTENTION_OPS:
        return {"attention": group.problem}
    if isinstance(group.problem, PointwiseProblem):     # a fused group, or a concat / copy run as one
        return {"pointwise": group.problem}
    if group.kind == "composite" and group.nodes[-1].op in OPTIMIZER_UPDATES:
        return {"optimizer": group.problem}
    if group.kind == "composite" and group.head.op in EMBEDDING_OPS:
        return {"embedding": group.problem, "bindings": dict(getattr(group, "bindings", {}))}
    if isinstance(group.problem, MultiTensorSumProblem):
        return {"multi_sum": group.problem, "bindings": dict(group.bindings)}
    return {"rows": group.problem, "bindings": dict(getattr(group, "bindings", {}))}


def read_plan(planned) -> PlanView:
    """The executor's view of ``planned``."""
    graph, memory = planned.graph, planned.memory
    values = [i.value for i in graph.inputs] + [v for n in graph.nodes for v in n.outputs]
    placements = {}
    for v in values:
        p = _placement(v, memory.values.get(v), memory.values, planned.storage.layouts)
        if p.kind != "none":
            placements[v] = p
    views = [GroupView(index, g.kind, list(g.nodes), g.reason or "", **_nova_view(g)) for index, g in enumerate(planned.groups)]
    handoff = getattr(memory, "handoff", None)
    return PlanView(graph, views, placements, memory.arena_bytes, memory.peak_bytes, _donations(memory, graph),
                    _fused_into(planned.groups, memory, graph), frozenset(planned.storage.assembled),
                    getattr(memory, "outside", None),
                    {w.group: (w.offset, w.nbytes) for w in getattr(memory, "workspaces", ())},
                    getattr(memory, "output_region", None),
                    frozenset(handoff.donated_inputs) if handoff is not None else frozenset())
