"""Fusion: partition the nodes into kernel groups, in program order.

Rules, applied to each node in program order (a node joins a group, or starts one):

* ``matmul`` starts a ``gemm`` group.  It runs on a Nova GEMM kernel (``kernel="nova"``) when it is
  one ``GemmProblem``: both operands f32 (TF32), bf16 or f16, a 2-D ``b``, an ``a`` that is 2-D or
  batched without transpose (its batch axes fold into M), both operands dense; or truly batched
  (``batched_gemm``): each operand's matrices row-major (the transpose flags read them swapped),
  its batch axes (broadcast ones stride 0) one stride apart in the flat batch order; else ATen.
* Epilogue: a pointwise consumer of a Nova GEMM joins its group when the GEMM kernel computes it
  (``act(acc + bias) + R``, ``nova/kernels/gemm/problem.py``): first an ``add`` of a dense [N] bias
  of the kernel's bias type, then one activation (relu, gelu_tanh, gelu_erf, silu), then an ``add`` of a
  residual R (a dense value of the result's type and shape, read where C is written), each only
  when the value it consumes has no other reader -- except the activation's input: when others
  read it too (a training step keeps the pre-activation for the activation's backward) the kernel
  writes it as a second output (``preactivation``) beside the activation, if that value is stored
  densely -- unless pointwise ops alone read the activation (SwiGLU's ``silu(gate) * up``): their
  kernel computes it from the pre-activation it can read instead, so the GEMM writes one matrix,
  not two.  Each saves a kernel and at least one round trip of the result through memory: the add
  kernel reads the GEMM's result and R and writes their sum (three matrices) where the epilogue
  reads R (one); the activation kernel reads P and writes C where the epilogue writes both from
  registers.  The configurator then keeps the register epilogue (no TMA store, no stream-K: they
  store C alone), and the prediction counts the extra matrix.  A ``cast`` to f32 of a 16-bit
  GEMM's result (a 16-bit weight gradient widened for its f32 parameter) joins when nothing else
  reads the 16-bit value and only optimizer updates or GEMMs read the f32 one (a pointwise or rows
  kernel widens it in its own prologue, reading 2 bytes an element, not 4): the kernel writes f32
  rounded through the 16-bit type (``round_through``, the cast's bits); so does an ``add`` of an f32
  residual to it (autocast's ``R + y``, which widens y first), and a residual added after the cast
  is then f32.
  The GELU's backward of the product, ``gelu_tanh_backward(dy @ W2, pre)`` (an MLP's dgrad GEMM; the
  pre-activation a dense value computed before the GEMM), joins an empty epilogue where the model says
  it pays (``activation_grad_pays``): the kernel reads ``pre`` as R and writes ``(acc) * gelu'(R)``
  (``activation_grad``), so ``dh`` is never written and read back, against the epilogue's arithmetic;
  else it stays a pointwise node, which the bias gradient's column sum then computes in its prologue.
* Pointwise ops (and ``constant``/``iota`` fills) join the pointwise groups of their producers when
  those produce the same iteration shape, or are scalar chains read by this node alone (inlined):
  one kernel, inputs read once, intermediates never written.  A value also read outside the group
  is a group output (written once, noted in the reason).  A pointwise node does not join a group
  opened before a GEMM whose result it reads when the group would then keep an input live across
  that GEMM that nothing later reads (a weight gradient summed chunk by chunk would hold every
  chunk's partial; SwiGLU's ``silu(gate)``, whose gate the backward reads, joins ``* up``).
* Horizontal: a pointwise node over one element that joins no producer's group joins the latest
  still-open group over one element (the optimizer's step counters, 100 independent ``+ 1``: one
  launch, not 100).  It reads nothing from that group, so the group stays acyclic (below).
* Shared input: a pointwise node that joins no producer's group joins the latest open pointwise
  group of its own iteration shape that reads one of its inputs of that size (SwiGLU's backward: the
  gradients of the gate and of the up projection both read the output's gradient and the gate), when
  no Nova GEMM whose result the node reads was opened after that group: the kernel reads the shared
  input once and launches once (``_shared_input``).
* Folded concat: a ``concat`` the storage pass folds (``storage.py``, rule -1: read only by pointwise
  ops of its shape) joins one pointwise group with the nodes of its pieces' cones, which join
  nothing else and nothing joins before the concat does; its readers then join as pointwise
  consumers do.  The kernel computes each piece in its slice, its inputs read in place through
  windows (``pointwise_from_ir.operand_uses``): RoPE's rotate-half costs no launch and no round trip.
* Concat writers: a pointwise node whose result the storage pass places in a concat's buffer and
  that joins no producer's group joins the open pointwise group of its shape that writes another
  input of that concat (RoPE's rotate-half: the negated half and the copied half, one launch).  Such
  a node (any whose result the storage pass stores strided) never joins a GEMM epilogue, and no
  reduction joins its group: those kernels write dense results.
* A reduction joins the pointwise group producing its input (same shape) when the rows kernels'
  prologue computes every op of it (``rows_from_ir.is_prologue_op``): the ``reduction`` group reads
  the input once and never writes the fused producers' values unless others need them.  Otherwise
  the two stay apart, each on its own Nova kernel (one write and read of the input more, not the
  whole group on ATen).
  Nothing joins a group after its reduction.
* Casts into rows kernels (``nova/passes/rows_casts.py``): a widening cast (to f32) whose value only
  a rows composite (layer_norm, rms_norm, softmax, cross_entropy, their backwards) reads as a row
  input joins that composite's group, and a cast of a composite's f32 row result that is the
  result's only reader joins it too, when the rows kernel of the group with the cast moves fewer
  bytes than the one without it plus the cast's own kernel (``rows_casts.cast_saving``; the reason
  says what was read or written in place of the cast and what that saves).  The kernel reads the
  cast's source in its own type and writes the result in the cast's type; no cast kernel remains.
* A norm's backward adds the residual: an ``add`` of the dx of an open LayerNorm or RMSNorm backward
  group (dx read by that add alone) and another value of dx's type computed before the norm's
  backward (the residual stream's gradient of a pre-norm block) joins that group: the rows kernel
  reads the value and writes dx + value as it writes dx (``rows_from_ir.residual_add``).  The add
  kernel read dx and the value and wrote the sum; two matrix transfers and a launch fewer.  A cast of
  the dx such a kernel writes to 16 bits, read beside the FP32 dx (autocast: the FP32 residual
  stream's gradient and the bf16 input of the next GEMMs), joins it too: the kernel writes dx twice,
  the second time rounded as the cast rounds (``rows_from_ir.dx_cast_of``); one read of dx and a
  launch fewer.  A ``sum`` over every row axis of the dx such a kernel writes (of its 16-bit cast where
  it writes one: the values the IR sums; the bias gradient of the linear layer before the norm) joins
  it too, summed in the kernel's pass as the weight gradient is: one read of dx and a
  launch fewer (``rows_from_ir.dx_column_sum``) -- when the rows configurator keeps every column sum in
  that pass for the target (with one more sum a thread, a column stage would re-read dy and x).
* A ``cross_entropy_backward`` joins the group of the ``cross_entropy`` whose row statistics (lse) it
  reads, when that group is still open (nothing has read the loss yet: the chunked loss runs each
  chunk's forward where its backward is, after the loss's gradient), the lse has no other reader and
  one rows kernel computes both (``rows_from_ir``: ``cross_entropy_forward_backward``, the same logits
  and targets): the logits are read once for the loss and dlogits, and the lse is never written.
* Composites (attention, layer_norm, softmax, losses, cross_entropy, optimizer updates) and
  data-movement ops (concat, gathers, scatter_add) are groups of their own; so is each opaque
  ``aten`` op.  An ``index_select``/``scatter_add`` on axis 0 (the embedding lookup and its backward)
  runs on Nova's embedding kernels where they compute it (``nova/passes/embedding.py``), else ATen;
  the ``add`` of a value of the scatter-add result's type to it (a tied embedding's gradient: the LM
  head's weight gradient plus the lookup's), its only reader, joins the scatter-add's group as the
  kernel's base, added to each row's sum as it is written (one read and write of the table's gradient
  and a launch fewer) -- unless the value is a cast only that add reads (the add kernel reads its 16
  bits; a base would have to be written in 32);
  an ``attention``/``attention_backward`` on Nova's fused attention kernels where they cover it
  (``nova/passes/attention.py``: its ``AttentionProblem`` on the group), else ATen.
  An ``index_select`` of a one-axis table (``pointwise_from_ir.is_table_gather``: the padding mask's
  vmapped lookup) is element by element over its index, so it joins pointwise groups as a pointwise
  op does (a ``gather`` in the kernel), but never the group that computes its table.
* A ``concat`` whose inputs the storage pass did not place in its buffer runs as one Nova pointwise
  kernel over its result (each input read in place over its slice, constant fills as literals:
  ``pointwise_from_ir.concat_problem``), its reason naming what kept each input from being placed; a
  view that copies runs as one Nova pointwise copy kernel (its input read in place, written in its
  own buffer: ``copy_problem``).
* A group of fills alone (``constant``/``iota``, no inputs: a constant of the step) launches nothing
  (``kernel="none"``): the executor fills its values once when it builds the program.
* A pointwise group runs as one Nova pointwise kernel (``kernel="nova"``, its ``PointwiseProblem``
  on the group: operands read in place with the layout analysis's strides) when that family
  computes it (``nova/kernels/pointwise``); else ATen, with the reason.
* An optimizer group runs as one Nova multi-tensor kernel (``kernel="nova"``, its
  ``MultiTensorProblem`` on the group, ``nova/kernels/optimizer``) when its tensors share one element
  type and every one is dense and 16-byte aligned; else ATen's foreach kernels, with the reason.
* Multi-tensor (``nova/passes/multi_tensor.py``, last): the Nova rows groups that each sum one whole
  tensor (gradient clipping's sums of squares) become one multi-tensor sum group, the unary scalar ops
  a sum alone feeds (the norm's sqrt) its epilogue (horizontal); a gradient scaled by a one-element
  factor (clipping's coefficient) and read only by its update is folded into the Nova optimizer group
  (vertical).  Both run on the multi-tensor kernels, so ``NOVA_POINTWISE`` without ``optimizer`` keeps
  them apart.
* ``kernels`` (``KernelSwitch``, from ``NOVA_POINTWISE`` and ``NOVA_ATTENTION``) may keep either kind,
  and attention, on ATen.
* Views are ``view`` groups that launch nothing (``kernel="none"``) unless the layout analysis says
  the result is not a strided view of its input, then one copy (a Nova pointwise kernel, above).  A
  ``concat`` whose inputs the storage pass placed in its buffer (``storage.py``) launches nothing either.

Acyclicity: a node only joins *open* groups, those none of whose values a node outside them has
read yet.  An open group has no successors, so adding a node (which has no successors either)
cannot close a cycle, and ordering groups by their last node is a topological order.

``kernel`` says what runs a group today: ``nova`` (a Nova kernel, intermediates never written),
``aten`` (ATen fallback; the executor runs the group's nodes one by one) or ``none`` (a free view).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from nova.dtypes import MODE_OF_STORAGE
from nova.kernels.gemm.problem import ACTIVATIONS, OUT_DTYPES, GemmProblem
from nova.ir.graph import Graph, Node, Value
from nova.ir.ops import kind
from nova.ir.printer import value_names
from nova.kernels.switch import KernelSwitch
from nova.passes import layout as layout_analysis
from nova.passes.attention import ATTENTION_OPS, select_attention
from nova.passes.embedding import EMBEDDING_OPS, base_add, embedding_reason, select_embedding
from nova.passes.pointwise_from_ir import is_table_gather
from nova.passes.rows import rows_reason, select_rows
from nova.passes.rows_casts import cast_saving
from nova.passes.rows_from_ir import NORM_RESIDUAL, REDUCE_OPS, ROW_INPUTS, ROW_OUTPUTS, from_group, \
    is_prologue_op, reads_through_cast, writes_through_cast
from nova.passes.storage import StoragePlan, unplaced_reason

GROUP_KINDS = ("gemm", "pointwise", "reduction", "composite", "view", "collective", "transfer", "opaque")
KERNELS = ("nova", "aten", "copy", "none")   # copy: the copy engines (a transfer group)
_ACTIVATION_OPS = {"relu": "relu", "gelu_tanh": "gelu", "gelu_erf": "gelu_erf", "silu": "silu"}  # IR op -> GEMM
                                                                                                # epilogue activation
EPILOGUE_ACTIVATIONS = {op: act for op, act in _ACTIVATION_OPS.items() if act in ACTIVATIONS}
ACTIVATION_GRADS = {"gelu_tanh_backward": "gelu"}   # IR op (dy, x) -> the GEMM activation whose derivative it applies


@dataclass
class Epilogue:
    """What a Nova GEMM applies before writing C: ``act(acc + bias) + residual``, and the value it
    also writes as ``P = acc + bias`` (``preactivation``), when other kernels read it."""
    bias: Value | None = None
    activation: str = "none"          # one of nova.kernels.gemm.problem.ACTIVATIONS
    residual: Value | None = None     # R, added after the activation
    preactivation: Value | None = None   # the activation's input, written as the kernel's second output
    round_through: str | None = None  # a cast to f32 of the 16-bit result: C written in f32, rounded first
    activation_grad: bool = False     # C = (acc + bias) * act'(residual): the activation's backward

    def describe(self) -> str:
        if self.activation_grad:
            return "+".join((["bias"] if self.bias is not None else []) + [f"d{self.activation}(pre-activation)"])
        parts = (["bias"] if self.bias is not None else []) + ([self.activation] if self.activation != "none" else []) \
            + (["preact"] if self.preactivation is not None else []) \
            + ([f"cast({self.round_through}->f32)"] if self.round_through else []) \
            + (["residual"] if self.residual is not None else [])
        return "+".join(parts) or "none"


@dataclass
class Group:
    """One kernel launch (or none, for a free view): ``nodes`` in program order."""
    kind: str                                     # one of GROUP_KINDS
    nodes: list[Node]
    reason: str                                   # one line: why these nodes are together
    kernel: str = "aten"                          # one of KERNELS: what runs it today
    inputs: list[Value] = field(default_factory=list)    # read from outside the group (first-read order)
    outputs: list[Value] = field(default_factory=list)   # written to memory: read outside or graph outputs
    epilogue: Epilogue | None = None              # gemm: what the kernel applies to the product
    problem: object = None                        # nova kernel: its problem (GemmProblem; RowsProblem,
                                                  # nova/passes/rows.py; PointwiseProblem; MultiTensorProblem)
    bindings: dict = field(default_factory=dict)  # nova rows: operand name -> the Value it is

    @property
    def fused(self) -> bool:
        """One kernel whose intermediates are never written (the memory plan gives them no buffer)."""
        return self.kernel == "nova"

    @property
    def gemm_node(self) -> Node | None:
        return self.nodes[0] if self.kind == "gemm" else None

    @property
    def head(self) -> Node:
        """The node that names the group: a composite group's op, not the pointwise nodes fused around
        it (casts, the adds of a norm backward's dy)."""
        if self.kind == "composite":
            return next((n for n in self.nodes if kind(n.op) != "pointwise"), self.nodes[0])
        return self.nodes[0]

    def intermediates(self) -> list[Value]:
        """Results of the group's nodes that are not group outputs."""
        outs = set(self.outputs)
        return [v for n in self.nodes for v in n.outputs if v not in outs]


# ------------------------------------------------------------------ building groups
class _Open:
    """A group under construction."""

    def __init__(self, kind_: str, node: Node, kernel: str = "aten", shape=None):
        self.kind = kind_
        self.nodes = [node]
        self.kernel = kernel
        self.open = True
        self.shape = shape
        self.tail = node.outputs[0]
        self.epilogue = Epilogue() if kind_ == "gemm" else None
        self.problem = None
        self.why_not_nova = ""
        self.folding = False              # holds a folded concat's cones, the concat not yet placed
        self.casts: list[str] = []        # a rows group: what each fused cast is read or written as
        self.cast_bytes = 0               # and the bytes they save together (rows_casts.cast_saving)
        self.rows_notes: list = []        # a norm backward's group: (what it took and saves, the value named)


def fuse(graph: Graph, layouts=None, kernels: KernelSwitch = KernelSwitch(),
         storage: StoragePlan | None = None, target=None) -> list[Group]:
    """Partition ``graph``'s nodes into groups (rules in the module docstring), in a topological
    order of the groups; ``kernels`` says which memory-bound groups may run on Nova kernels;
    ``storage`` the storage decisions ``layouts`` were analyzed under (None: none); ``target`` the GPU
    the rows configurator is asked about where a rule depends on the schedule (None: the H200)."""
    fuser = _Fuser(graph, layouts, kernels, storage, target)
    groups = fuser.run()
    if not kernels.optimizer:
        return groups
    from nova.passes.multi_tensor import fuse_multi_tensor
    return fuse_multi_tensor(groups, graph, fuser.layouts, fuser.storage, fuser.refinish, boundary)


class _Fuser:
    """Places the nodes one at a time in a topological order that, among the ready nodes, takes
    first one that can join an open group (else the first in program order): a value's pointwise
    and reduction readers get to fuse before another reader closes its group.  Scalar pointwise work
    that could join comes after the other nodes that could and after the ready fills (which close
    nothing): the chunked loss's total, read from the last chunk's loss, would otherwise close that
    chunk's cross-entropy group before its backward (waiting for its constant gradient) joins it."""

    def __init__(self, graph: Graph, layouts=None, kernels: KernelSwitch = KernelSwitch(),
                 storage: StoragePlan | None = None, target=None):
        self.graph = graph
        self.target = target if target is not None else "h200"
        self.kernels = kernels
        self.storage = storage if storage is not None else StoragePlan()
        self.layouts = layouts if layouts is not None else layout_analysis.analyze(graph, storage)
        self.users = graph.users()
        self.outputs = set(graph.output_values())
        self.group_of: dict[Node, _Open] = {}
        self.updates: dict[tuple, _Open] = {}     # optimizer-update groups by batch key
        self.opened: dict[int, int] = {}          # id(group) -> how many groups were opened before it
        self._scalars: _Open | None = None        # the latest pointwise group over one element
        self._savings: dict[tuple, int] = {}      # rows_casts.cast_saving of a group with casts, by its nodes
        self._problems: dict[tuple, object] = {}  # from_group's rows problem (or None) of a node list
        self.placed: dict[Node, int] = {}         # node -> its place in the placement order
        self._readers_of_root: dict | None = None  # value -> the nodes reading it or any view of it
        self._roles: dict = {}                    # rows problem -> its kernels' roles on the target
        self.cone_of = {n: c for c, cones in self.storage.folded.items() for n in cones}  # node -> folded concat
        self.folding: dict[Node, _Open] = {}      # folded concat -> the group of its cones, until it is placed

    def run(self) -> list[Group]:
        graph = self.graph
        index = {node: i for i, node in enumerate(graph.nodes)}
        waiting = {node: len({v.producer for v in node.inputs if v.producer is not None}) for node in graph.nodes}
        readers: dict[Node, list[Node]] = {}
        for node in graph.nodes:
            for p in dict.fromkeys(v.producer for v in node.inputs if v.producer is not None):
                readers.setdefault(p, []).append(node)
        ready = [n for n in graph.nodes if waiting[n] == 0]
        placed: list[Node] = []
        while ready:
            pick = scalar = None
            for n in ready:                        # the first joinable node, scalar ones last
                if (scalar is None or not _is_scalar(n)) and self._joinable(n):
                    if not _is_scalar(n):
                        pick = n
                        break
                    scalar = n
            pick = pick or next((n for n in ready if kind(n.op) == "creation" and not n.inputs), None) or \
                scalar or ready[0]
            ready.remove(pick)
            self._place(pick)
            placed.append(pick)
            for r in readers.get(pick, ()):
                waiting[r] -= 1
                if waiting[r] == 0:
                    ready.insert(_bisect(ready, r, index), r)
        self._split_trailing_views(placed)
        position = {node: i for i, node in enumerate(placed)}
        built = list({id(g): g for g in (self.group_of[n] for n in placed)}.values())
        built.sort(key=lambda g: max(position[n] for n in g.nodes))     # topological (see module docstring)
        names = value_names(graph)
        return [_finish(g, position, self.users, self.outputs, self.layouts, names, self.kernels, self.storage)
                for g in built]

    def refinish(self, kind_: str, nodes: list[Node]) -> Group:
        """The group of what is left of a group of ``kind_`` that lost some nodes to another (program order)."""
        index = {node: i for i, node in enumerate(self.graph.nodes)}
        nodes = sorted(nodes, key=index.__getitem__)
        g = _Open(kind_, nodes[0], shape=nodes[-1].outputs[0].shape)
        g.nodes = list(nodes)
        return _finish(g, index, self.users, self.outputs, self.layouts, value_names(self.graph), self.kernels,
                       self.storage)

    # -------------------------------------------------------------- one node
    def _producers(self, node: Node) -> list[_Open]:
        groups = []
        for v in node.inputs:
            g = self.group_of.get(v.producer) if v.producer is not None else None
            if g is not None and g not in groups:
                groups.append(g)
        return groups

    def _candidates(self, node: Node, producers) -> list[_Open]:
        shape = node.outputs[0].shape
        if is_table_gather(node):                    # the table is read whole from memory: never computed here
            table = self.group_of.get(node.inputs[0].producer)
            producers = [p for p in producers if p is not table]
        gemms = [self.opened[id(p)] for p in producers if p.kind == "gemm"]
        found = [p for p in producers if p.kind == "pointwise" and p.open and not p.folding
                 and (p.shape == shape or _inlinable(p, node, self.users, self.outputs))
                 and not (any(opened > self.opened[id(p)] for opened in gemms) and self._extends_live(p, node))]
        found.sort(key=lambda p: p.shape != shape)          # a same-shape group is the base
        return found

    def _extends_live(self, p: _Open, node: Node) -> bool:
        """Joining ``node`` would keep an input of ``p`` live longer: one whose storage (any view of it)
        nothing placed after ``node`` reads and that is no graph output."""
        if self._readers_of_root is None:
            self._readers_of_root = {}
            for n in self.graph.nodes:
                for v in n.inputs:
                    self._readers_of_root.setdefault(self.layouts[v].root, set()).add(n)
        members = set(p.nodes) | {node}
        for n in p.nodes:
            for v in n.inputs:
                root = self.layouts[v].root
                if v.producer in members or v in self.outputs or root in self.outputs:
                    continue
                if not any(u not in self.placed and u not in members for u in self._readers_of_root.get(root, ())):
                    return True
        return False

    def _reduction_base(self, node: Node) -> _Open | None:
        x = node.inputs[0]
        p = self.group_of.get(x.producer) if x.producer is not None else None
        if p is not None and p.kind == "pointwise" and p.open and not p.folding and p.shape == x.shape \
                and all(is_prologue_op(n) for n in p.nodes if kind(n.op) == "pointwise" or is_table_gather(n)) \
                and not any(self._stored(n) for n in p.nodes):
            return p
        return None

    def _stored(self, node: Node) -> bool:
        """A result of ``node`` is written where the storage pass decided (not dense)."""
        return any(v in self.storage.layouts for v in node.outputs)

    def _sibling(self, node: Node) -> _Open | None:
        """The open pointwise group of ``node``'s shape that writes another input of the concat whose
        buffer the storage pass places ``node``'s result in (rule in the module docstring), or None."""
        lay = self.storage.layouts.get(node.outputs[0]) if kind(node.op) == "pointwise" else None
        if lay is None or lay.root is node.outputs[0]:
            return None
        for n, g in self.group_of.items():
            placed = [self.storage.layouts[v].root for v in n.outputs if v in self.storage.layouts]
            if lay.root in placed and g.kind == "pointwise" and g.open and g.shape == node.outputs[0].shape:
                return g
        return None

    def _shared_input(self, node: Node, producers) -> _Open | None:
        """The latest open pointwise group of ``node``'s iteration shape that reads an input of ``node``
        as large as that shape, from outside itself (rule in the module docstring), or None."""
        shape = node.outputs[0].shape
        if kind(node.op) != "pointwise" or self._stored(node) or _is_scalar(node):
            return None
        size = math.prod(shape)
        shared = {v for v in node.inputs if math.prod(v.shape) == size}
        gemms = [self.opened[id(p)] for p in producers if p.kind == "gemm"]
        best = None
        for v in shared:
            for reader in self.users.get(v, ()):
                g = self.group_of.get(reader)
                if g is None or g.kind != "pointwise" or not g.open or g.folding or g.shape != shape \
                        or g is self._scalars or any(self._stored(n) for n in g.nodes) or v.producer in g.nodes \
                        or any(opened > self.opened[id(g)] for opened in gemms):
                    continue
                if best is None or self.opened[id(g)] > self.opened[id(best)]:
                    best = g
        return best

    def _joinable(self, node: Node) -> bool:
        k = kind(node.op)
        if k == "reduce":
            return self._reduction_base(node) is not None or self._norm_column_sum(node) is not None
        if node.op == "cross_entropy_backward":
            return self._loss_forward(node) is not None
        if k == "view":
            return self._gemm_view(node) is not None
        if k != "pointwise" and not is_table_gather(node):
            return False
        producers = self._producers(node)
        if self._horizontal(node) or self._sibling(node) is not None or self._rows_epilogue(node) is not None \
                or self._norm_residual(node) is not None or self._norm_dx_cast(node) is not None \
                or self._embedding_base(node) is not None:
            return True
        return bool(self._candidates(node, producers)) or (not self._stored(node) and _epilogue(
            node, producers, self.users, self.outputs, self.layouts, self.placed, self.target,
            dry_run=True) is not None)

    # -------------------------------------------------------------- casts into rows kernels
    def _rows_problem(self, nodes: list[Node]):
        """``from_group``'s rows problem of ``nodes`` as one group (None: no rows kernel computes them),
        asked once per node list (a node's joinability, then its placement, ask the same)."""
        key = tuple(nodes)
        if key not in self._problems:
            self._problems[key] = from_group(nodes, *boundary(nodes, self.users, self.outputs), self.layouts)[0]
        return self._problems[key]

    def _cast_saving(self, nodes: list[Node], casts: list[Node]) -> int:
        """Bytes the rows kernel of ``nodes`` saves over the one without ``casts`` and their kernels
        (``rows_casts.cast_saving``); 0 when either group is no rows problem."""
        key = (tuple(nodes), tuple(casts))
        if key not in self._savings:
            problems = [self._rows_problem(ns) for ns in ([n for n in nodes if n not in casts], nodes)]
            self._savings[key] = 0 if None in problems else cast_saving(casts, *problems)
        return self._savings[key]

    def _lone_widening_cast(self, v: Value, reader: Node) -> Node | None:
        """The cast producing ``v`` when a rows kernel may read through it (``reads_through_cast``), it is
        alone in an open pointwise group (not the horizontal one of one-element nodes) and only
        ``reader`` reads ``v``; else None."""
        c = v.producer
        cg = self.group_of.get(c) if c is not None else None
        if cg is None or cg.kind != "pointwise" or not cg.open or cg.nodes != [c] or cg is self._scalars \
                or not reads_through_cast(c) or v in self.outputs or set(self.users.get(v, ())) != {reader}:
            return None
        return c

    def _take_casts(self, g: _Open, casts: list[Node]) -> None:
        """Move each cast's group into ``g``, noted as read in place (the caller places the nodes and
        counts the bytes)."""
        for c in casts:
            self.group_of[c].nodes = []
            self.group_of[c] = g
            g.casts.append(f"reads {c.inputs[0].type} in place of its cast to {c.outputs[0].dtype}")

    def _open_composite_of(self, x: Value, reader: Node) -> _Open | None:
        """The open composite group whose node produces ``x``, when ``reader`` alone reads ``x`` and it is
        no graph output (what a rule joining ``reader`` to that group first asks), else None."""
        g = self.group_of.get(x.producer) if x.producer is not None else None
        if g is None or g.kind != "composite" or not g.open or x in self.outputs \
                or set(self.users.get(x, ())) != {reader}:
            return None
        return g

    def _rows_epilogue(self, node: Node) -> tuple[_Open, int, str] | None:
        """The open rows composite group whose f32 row result only the cast ``node`` reads, when taking
        the cast saves bytes: (group, the bytes saved, what the kernel writes), else None."""
        if node.op != "cast" or not writes_through_cast(node) or self._stored(node):
            return None
        x = node.inputs[0]
        p = x.producer
        g = self._open_composite_of(x, node)
        if g is None or p.op not in ROW_OUTPUTS or x is not p.outputs[ROW_OUTPUTS[p.op]]:
            return None
        saved = self._cast_saving(g.nodes + [node], [node])
        if saved <= 0:
            return None
        return g, saved, f"writes {node.outputs[0].type} in place of the cast of its {x.dtype} result"

    def _norm_residual(self, node: Node) -> tuple[_Open, Value] | None:
        """The open norm-backward group whose dx only the add ``node`` reads and the value the add adds to it,
        when one rows kernel computes both (rule in the module docstring), else None."""
        if node.op != "add" or self._stored(node):
            return None
        for i, x in enumerate(node.inputs):
            p = x.producer
            g = self._open_composite_of(x, node)
            if g is None or p.op not in NORM_RESIDUAL or x is not p.outputs[0]:
                continue
            r = node.inputs[1 - i]
            if r is x or r.type != x.type or (r.producer is not None and
                                              self.placed.get(r.producer, len(self.placed)) > self.placed[p]):
                continue
            if self._rows_problem(g.nodes + [node]) is not None:
                return g, r
        return None

    def _norm_writing(self, x: Value) -> _Open | None:
        """The open norm-backward group whose kernel writes ``x`` as dx (the norm's dx, the residual
        add's result, or the 16-bit cast of either), with no reduction taken yet; else None."""
        g = self.group_of.get(x.producer) if x.producer is not None else None
        if g is None or g.kind != "composite" or not g.open or any(n.op in REDUCE_OPS for n in g.nodes):
            return None
        at = next((i for i, n in enumerate(g.nodes) if n.op in NORM_RESIDUAL), None)
        if at is None:
            return None
        written = [n.outputs[0] for n in g.nodes[at:] if n is g.nodes[at] or n.op in ("add", "cast")]
        return g if x in written else None

    def _embedding_base(self, node: Node) -> _Open | None:
        """The open embedding-backward group whose scatter-add result the add ``node`` alone reads and adds a
        base of its type to (a tied embedding's gradient: the LM head's weight gradient plus the
        lookup's), else None."""
        if node.op != "add" or self._stored(node):
            return None
        for x in node.inputs:
            p = x.producer
            g = self._open_composite_of(x, node)
            if g is None or g.nodes != [p] or p.op != "scatter_add":
                continue
            base = base_add(p, node)
            c = base.producer if base is not None else None
            if base is not None and not (c is not None and c.op == "cast" and set(self.users.get(base, ())) == {node}):
                return g                       # (a cast only the add reads stays with it: 16 bits read, not 32 written)
        return None

    def _norm_dx_cast(self, node: Node) -> _Open | None:
        """The open norm-backward group whose written dx the cast ``node`` rounds to 16 bits, when one rows
        kernel writes both (rule in the module docstring), else None."""
        if node.op != "cast" or not writes_through_cast(node) or self._stored(node):
            return None
        g = self._norm_writing(node.inputs[0])
        return g if g is not None and self._rows_problem(g.nodes + [node]) is not None else None

    def _norm_column_sum(self, node: Node) -> _Open | None:
        """The open norm-backward group whose written dx ``node`` sums over every row axis, when one rows
        kernel computes both (rule in the module docstring), else None."""
        if node.op != "sum":
            return None
        g = self._norm_writing(node.inputs[0])
        if g is None:
            return None
        problem = self._rows_problem(g.nodes + [node])
        if problem is None:
            return None
        if problem not in self._roles:
            from nova.kernels.rows.derive import configure_rows
            self._roles[problem] = configure_rows(problem, self.target).schedule.roles
        return g if "column" not in self._roles[problem] else None

    def _dy_sum(self, node: Node) -> list[Node] | None:
        """The nodes of the open pointwise group that computes the norm backward ``node``'s dy, when they
        are only casts and adds, only ``node`` reads dy and one rows kernel computes both (module
        docstring), else None."""
        dy = node.inputs[0]
        p = dy.producer
        pg = self.group_of.get(p) if p is not None and node.op in NORM_RESIDUAL else None
        if pg is None or pg.kind != "pointwise" or not pg.open or pg is self._scalars or p.op != "add" \
                or any(n.op not in ("cast", "add") for n in pg.nodes) or dy in self.outputs \
                or set(self.users.get(dy, ())) != {node}:
            return None
        return list(pg.nodes) if self._rows_problem(pg.nodes + [node]) is not None else None

    def _rows_prologues(self, node: Node, g: _Open) -> None:
        """Take into ``g`` (the new group of the rows composite ``node``) the pointwise group that adds its
        dy from parts (``_dy_sum``) and the widening casts of its row inputs that only it reads, each alone
        in an open group, when that saves bytes."""
        parts = self._dy_sum(node)
        alone = self._rows_problem([node]) if parts is not None else None
        if alone is not None:
            reads, _ = boundary(parts, self.users, self.outputs)
            kernel = sum(v.type.nbytes for v in reads) + node.inputs[0].type.nbytes   # the add kernel's traffic
            saved = alone.bytes_moved + kernel - self._rows_problem(parts + [node]).bytes_moved
            if saved > 0:
                self.group_of[parts[0]].nodes = []
                for n in parts:
                    self.group_of[n] = g
                g.nodes[:0] = parts
                g.rows_notes.append((f"; adds its dy ({{}}) from {len(reads)} parts as it reads them "
                                     f"({', '.join(str(v.type) for v in reads)}): one pointwise kernel fewer, "
                                     f"saves {format_bytes(saved)}", node.inputs[0]))
        casts = []
        for i in ROW_INPUTS.get(node.op, ()):
            c = self._lone_widening_cast(node.inputs[i], node)
            if c is not None and c not in casts:
                casts.append(c)
        saved = self._cast_saving(casts + g.nodes, casts) if casts else 0
        if saved <= 0:
            return
        g.cast_bytes += saved
        self._take_casts(g, casts)
        g.nodes[:0] = casts

    def _loss_forward(self, node: Node) -> tuple[_Open, list[Node]] | None:
        """The open group of the cross-entropy forward whose loss the backward ``node`` differentiates and
        the widening cast of the backward's logits it takes along (autocast: each reads its own cast of the
        same 16-bit logits), when one rows kernel computes both (rule in the module docstring), else None."""
        lse = node.inputs[3]
        forward = lse.producer
        g = self.group_of.get(forward) if forward is not None else None
        if g is None or g.kind != "composite" or not g.open or forward.op != "cross_entropy" \
                or lse in self.outputs or set(self.users.get(lse, ())) != {node}:
            return None
        cast = self._lone_widening_cast(node.inputs[1], node)
        casts = [cast] if cast is not None else []
        if self._rows_problem(g.nodes + casts + [node]) is None:
            return None
        return g, casts

    def _gemm_view(self, node: Node) -> _Open | None:
        """The open Nova GEMM group whose result ``node`` reads alone when ``node`` is a reshape that
        is a view of it (dense to dense): it joins the group, so that an epilogue op written after
        the reshape (a linear layer on [B, T, C] flattens its rows for the matmul and unflattens the
        result) still fuses; a view nothing fused after is split off again (``_split_trailing_views``)."""
        if node.op != "reshape" or layout_analysis.is_copy(node, self.layouts):
            return None
        (x,) = node.inputs
        g = self.group_of.get(x.producer) if x.producer is not None else None
        if g is None or g.kind != "gemm" or g.kernel != "nova" or not g.open or g.tail is not x \
                or x in self.outputs or len(self.users.get(x, ())) != 1:
            return None
        return g if self.layouts[x].dense and self.layouts[node.outputs[0]].dense else None

    def _split_trailing_views(self, placed: list[Node]) -> None:
        """A GEMM group's views that no epilogue op followed leave it again, each a view group of
        its own (the group's result is then the value before them, which the kernel writes)."""
        for g in {id(self.group_of[n]): self.group_of[n] for n in placed}.values():
            while g.kind == "gemm" and len(g.nodes) > 1 and kind(g.nodes[-1].op) == "view":
                view = g.nodes.pop()
                self.group_of[view] = _Open("view", view, kernel="none")
                g.tail = view.inputs[0]

    def _horizontal(self, node: Node) -> bool:
        """``node`` joins the open pointwise group over one element (rule in the module docstring)."""
        g = self._scalars
        return g is not None and g.open and g.kind == "pointwise" and bool(g.nodes) and _is_scalar(node)

    def _place(self, node: Node) -> None:
        self.placed[node] = len(self.placed)
        k = kind(node.op)
        producers = self._producers(node)
        g = None
        if k == "matmul":
            g = _Open("gemm", node)
            g.problem, g.why_not_nova = classify_gemm(node, self.layouts)
            g.kernel = "nova" if g.problem is not None else "aten"
        elif node in self.cone_of:
            concat = self.cone_of[node]                # computes a piece of a folded concat
            g = self.folding.get(concat)
            if g is None:
                g = self.folding[concat] = _Open("pointwise", node, shape=concat.outputs[0].shape)
                g.folding = True
            else:
                g.nodes.append(node)
        elif node in self.storage.folded:
            g = self.folding.pop(node, None)
            if g is None:
                g = _Open("pointwise", node, shape=node.outputs[0].shape)
            else:
                g.nodes.append(node)
                g.folding = False
        elif k in ("pointwise", "creation") or is_table_gather(node):
            g = None if self._stored(node) else _epilogue(node, producers, self.users, self.outputs, self.layouts,
                                                          self.placed, self.target)
            sibling = self._sibling(node)
            rows = self._rows_epilogue(node) if g is None else None
            residual = self._norm_residual(node) if g is None and rows is None else None
            rounded = self._norm_dx_cast(node) if g is None and rows is None and residual is None else None
            based = self._embedding_base(node) if g is None and rows is None and residual is None \
                and rounded is None else None
            if based is not None:
                g = based                              # the scatter-add's kernel adds the base as it writes
                g.nodes.append(node)
            elif rounded is not None:
                g = rounded                            # the norm's backward also writes dx in 16 bits
                g.nodes.append(node)
                g.rows_notes.append((f"; writes {{}} (dx rounded to {node.attrs['dtype']}) as it writes dx: one cast "
                                     f"kernel fewer, saves {format_bytes(node.inputs[0].type.nbytes)}",
                                     node.outputs[0]))
            elif residual is not None:
                g, r = residual                        # the norm's backward writes dx + r
                g.nodes.append(node)
                g.rows_notes.append((f"; adds {{}} to dx as it writes it: one add kernel fewer, saves "
                                     f"{format_bytes(2 * r.type.nbytes)}", r))
            elif rows is not None:
                g, saved, note = rows
                g.nodes.append(node)
                g.casts.append(note)
                g.cast_bytes += saved
            elif g is not None:
                g.nodes.append(node)
            else:
                candidates = self._candidates(node, producers)
                if candidates:
                    g = candidates[0]
                    for other in candidates[1:]:
                        for n in other.nodes:
                            self.group_of[n] = g
                        g.nodes.extend(other.nodes)
                        other.nodes = []
                    g.nodes.append(node)
                    g.shape = node.outputs[0].shape
                elif sibling is not None:
                    g = sibling                        # another writer of the same concat's buffer
                    g.nodes.append(node)
                elif (shared := self._shared_input(node, producers)) is not None:
                    g = shared                         # reads an input of that group: read once
                    g.nodes.append(node)
                elif self._horizontal(node):
                    g = self._scalars                  # horizontal: independent scalar work, one launch
                    g.nodes.append(node)
                else:
                    g = _Open("pointwise", node, shape=node.outputs[0].shape)
                    if _is_scalar(node):
                        self._scalars = g
        elif k == "reduce" and (norm := self._norm_column_sum(node)) is not None:
            g = norm                                   # summed in the norm backward's pass over dx
            g.nodes.append(node)
            x = node.inputs[0]
            g.rows_notes.append((f"; sums {{}} over its rows as it writes it: one column-sum kernel fewer, saves "
                                 f"{format_bytes(x.type.nbytes)}", x))
        elif k == "reduce":
            g = self._reduction_base(node)
            if g is not None:
                g.nodes.append(node)
                g.kind = "reduction"
            else:
                g = _Open("reduction", node, shape=node.inputs[0].shape)
        elif k == "view" and (g := self._gemm_view(node)) is not None:
            g.nodes.append(node)                       # the epilogue may go on through it (else split off)
            g.tail = node.outputs[0]
        elif k == "view":
            copy = layout_analysis.is_copy(node, self.layouts)
            g = _Open("view", node, kernel="aten" if copy else "none")
        elif node.op in OPTIMIZER_UPDATES:
            key = update_batch_key(node)
            g = self.updates.get(key)
            if g is not None and any(self.users.get(v) for n in g.nodes for v in n.outputs):
                g = None               # the batch's results are read again (a second update in the step): a new one
            if g is None:
                g = self.updates[key] = _Open("composite", node)
            else:
                g.nodes.append(node)
        elif node in self.storage.assembled:
            g = _Open("composite", node, kernel="none")
        elif node.op == "cross_entropy_backward" and (pair := self._loss_forward(node)) is not None:
            g, casts = pair                            # the loss and its gradient: one pass over the logits
            self._take_casts(g, casts)                 # its read of the f32 logits is the forward's one read
            g.cast_bytes += sum(c.inputs[0].type.nbytes + 2 * c.outputs[0].type.nbytes for c in casts)
            g.nodes.extend(casts + [node])
        elif k in ("composite", "memory"):
            g = _Open("composite", node)
            self._rows_prologues(node, g)
        elif k == "collective":
            g = _Open("collective", node)
        elif k == "transfer":
            g = _Open("transfer", node, kernel="copy")
        else:
            g = _Open("opaque", node)
        self.group_of[node] = g
        self.opened.setdefault(id(g), len(self.opened))
        for p in producers:
            if p is not g and p.nodes:           # read from outside now (merged-away groups are empty)
                p.open = False


OPTIMIZER_UPDATES = ("adamw", "sgd")


HYPER_INPUT = {"adamw": 5, "sgd": 2}           # where an optimizer update reads its hyper-parameter vector


def update_batch_key(node: Node) -> tuple:
    """Optimizer updates with equal keys form one group, run as one multi-tensor kernel: the same
    op, attributes, element type and arity, reading the same hyper-parameter vector (one parameter
    group's).  Their results are read only as graph outputs, so the group may run once the last
    gradient exists; a step that updates twice (its second forward reads the first update's
    results) starts a new batch for the second."""
    hyper = node.inputs[HYPER_INPUT[node.op]]
    return (node.op, tuple(sorted(node.attrs.items())), node.inputs[0].type.dtype, len(node.inputs), hyper)


def _bisect(ready: list, node, index) -> int:
    lo, hi = 0, len(ready)
    while lo < hi:
        mid = (lo + hi) // 2
        if index[ready[mid]] < index[node]:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _is_scalar(node: Node) -> bool:
    """A pointwise node over one element (a step counter, a loss scale): launch-bound on its own."""
    return kind(node.op) == "pointwise" and math.prod(node.outputs[0].shape) == 1


def _inlinable(p: _Open, node: Node, users, outputs) -> bool:
    """A scalar pointwise group read only by ``node``: recomputed per element inside node's group."""
    if p.shape is None or math.prod(p.shape) != 1:
        return False
    members = set(p.nodes)
    for n in p.nodes:
        for v in n.outputs:
            if v in outputs or any(u is not node and u not in members for u in users.get(v, ())):
                return False
    return True


def classify_gemm(node: Node, layouts) -> tuple[GemmProblem | None, str]:
    """``(the GemmProblem of matmul node, "")`` when one Nova GEMM launch computes it (rules in the
    module docstring), else ``(None, why not)``.  ``layouts``: the layout analysis of its graph.  The
    plan's decision: the executor binds its operands to this problem and launches it."""
    a, b = node.inputs
    ta, tb = bool(node.attrs.get("transpose_a")), bool(node.attrs.get("transpose_b"))
    out = node.outputs[0]
    if a.dtype != b.dtype or a.dtype not in MODE_OF_STORAGE:
        return None, f"operands {a.type} and {b.type}: Nova GEMM takes two f32, bf16 or f16 operands"
    if out.dtype not in OUT_DTYPES:
        return None, f"result type {out.type}"
    if b.type.rank != 2 or (a.type.rank > 2 and ta):
        return batched_gemm(node, layouts)
    if not (layouts[a].dense and layouts[b].dense):
        return None, "an operand is not dense in memory"
    if any(layouts[x].offset * x.type.itemsize % 16 for x in (a, b)):
        return None, "an operand starts off a 16-byte boundary"
    m = math.prod(a.shape[:-1]) if not ta else a.shape[-1]
    k = a.shape[-2] if ta else a.shape[-1]
    n = b.shape[-2] if tb else b.shape[-1]
    if min(m, n, k) < 1:
        return None, "an empty dimension"
    return GemmProblem(M=m, N=n, K=k, dtype=MODE_OF_STORAGE[a.dtype], trans_a=ta, trans_b=tb,
                       out_dtype=out.dtype), ""


def batched_gemm(node: Node, layouts) -> tuple[GemmProblem | None, str]:
    """Classify a truly batched matmul (a batched ``b``, or a batched transposed ``a``): one batched
    Nova GEMM when each operand's matrices are row-major and its batch axes, broadcast to the
    result's, merge into one stride (``layout.merged_batch_stride``), the operands start on 16-byte
    boundaries and no dimension is empty; else ATen with the reason.  ``GemmProblem`` normalises
    the batch as ``nova.matmul`` does: packed A and C against one B is one flat GEMM."""
    a, b = node.inputs
    ta, tb = bool(node.attrs.get("transpose_a")), bool(node.attrs.get("transpose_b"))
    out = node.outputs[0]
    batch = out.shape[:-2]
    strides = {}
    for name, x in (("a", a), ("b", b)):
        lay = layouts[x]
        rows, cols = lay.shape[-2:]
        if not ((cols == 1 or lay.strides[-1] == 1) and (rows == 1 or lay.strides[-2] == cols)):
            return None, f"the matrices of {name} ({lay.describe()}) are not row-major"
        pad = len(batch) - (len(lay.shape) - 2)              # broadcast: missing axes, extent-1 axes stride 0
        axes = [0] * pad + [0 if n == 1 else st for n, st in zip(lay.shape[:-2], lay.strides[:-2])]
        strides[name] = layout_analysis.merged_batch_stride(batch, axes)
        if strides[name] is None:
            return None, f"the batch axes of {name} ({lay.describe()}) are not one stride apart"
        if lay.offset * x.type.itemsize % 16:
            return None, "an operand starts off a 16-byte boundary"
    m, k = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
    n = b.shape[-2] if tb else b.shape[-1]
    count = math.prod(batch)
    if min(m, n, k, count) < 1:
        return None, "an empty dimension"
    return GemmProblem(m, n, k, MODE_OF_STORAGE[a.dtype], ta, tb, out_dtype=out.dtype, batch=count,
                       batch_stride_a=strides["a"], batch_stride_b=strides["b"], batch_stride_c=m * n), ""


def _epilogue(node: Node, producers, users, outputs, layouts, placed: dict, target,
              dry_run: bool = False) -> _Open | None:
    """The Nova GEMM group ``node`` extends as its epilogue (recorded unless ``dry_run``), or None.
    ``placed``: the placement order so far; a residual must have been computed before the GEMM's
    matmul was placed (else the GEMM would wait for it, its operands live the while: two chunks'
    weight gradients summed would hold the first chunk's operands across the second's GEMM)."""
    for g in producers:
        if g.kind != "gemm" or g.kernel != "nova" or not g.open or g.tail not in node.inputs:
            continue
        tail = g.tail
        epi, problem = g.epilogue, g.problem
        widens = _widens(node, tail, problem)
        if node.outputs[0].type != tail.type and not widens:
            return None
        shared = tail in outputs or len(users.get(tail, ())) != 1      # the kernel would have to write it too
        others = [v for v in node.inputs if v is not tail]
        other = others[0] if len(others) == 1 else None           # a where's condition and other branch: None
        if node.op == "add" and epi.bias is None and epi.activation == "none" and epi.residual is None \
                and not shared and other is not None and other.shape == (problem.N,):
            if other.dtype != problem.bias_dtype or not layouts[other].dense:
                return None
            if not dry_run:
                epi.bias = other
        elif node.op in EPILOGUE_ACTIVATIONS and epi.activation == "none" and epi.residual is None:
            if shared and (not layouts[tail].dense or _pointwise_readers_only(node.outputs[0], users, outputs)):
                return None
            if not dry_run:
                epi.activation = EPILOGUE_ACTIVATIONS[node.op]
                epi.preactivation = tail if shared else None
        elif node.op in ACTIVATION_GRADS and node.inputs[0] is tail and node.inputs[1] is not tail \
                and epi.activation == "none" and epi.residual is None and epi.round_through is None and not shared \
                and node.inputs[1].type == tail.type and _dense_before(node.inputs[1], layouts, placed, g) \
                and activation_grad_pays(problem, node, users, target):
            if not dry_run:                  # dh = dy @ W2, then the activation's backward at the saved input
                epi.activation, epi.residual, epi.activation_grad = ACTIVATION_GRADS[node.op], node.inputs[1], True
        elif node.op == "cast" and widens and epi.residual is None and epi.preactivation is None and not shared \
                and _widened_for_unfusable(node.outputs[0], users):
            if not dry_run:
                epi.round_through = problem.storage
        elif node.op == "add" and epi.residual is None and not shared and other is not None \
                and other.type == node.outputs[0].type and other.shape == tail.shape \
                and _dense_before(other, layouts, placed, g) \
                and not (widens and epi.preactivation is not None):
            if not dry_run:
                epi.residual = other
                if widens:                   # f32 R + the 16-bit result: the add widens it first
                    epi.round_through = problem.storage
        else:
            continue                     # another GEMM producer may take it (p1 + p2: the later GEMM)
        if dry_run:
            return g
        g.problem = dataclasses.replace(problem, bias=epi.bias is not None, activation=epi.activation,
                                        residual=epi.residual is not None,
                                        preactivation=epi.preactivation is not None,
                                        out_dtype="f32" if epi.round_through else problem.out_dtype,
                                        round_through=epi.round_through, activation_grad=epi.activation_grad)
        g.tail = node.outputs[0]
        return g
    return None


def activation_grad_pays(problem: GemmProblem, node: Node, users, target) -> bool:
    """Whether the activation's backward ``node`` (``gelu_tanh_backward(acc, pre)``, acc the result of the
    GEMM ``problem``) costs less in the GEMM's epilogue than outside it, by the models:

        in the epilogue: t(GEMM with gelu'(R)) - t(GEMM), calibrated (R's loads, the arithmetic: ``arith``)
        outside:         m x |dy| / (DRAM bandwidth x eta_dram) (+ a launch when m = 3)

    m = 2 when a column sum reads the result (the bias gradient: its prologue reads acc and pre instead
    of dy and writes dy, two matrices more), else 3 (a pointwise kernel reads acc and pre, writes dy).
    The epilogue stays unless it is slower by more than a launch (t_launch_us): below that the plan's
    shape is not worth changing (a small MLP's backward).
    TF32 on the H200: 57 us in the epilogue against 64 (measured 43 against ~62); bf16: 60 against 32
    (measured ~66 against ~31: the epilogue's arithmetic is the same per element, the bytes half;
    bench/NOTES.md, 2026-12-06)."""
    from nova.configurator import configure
    from nova.hwmodel import get_target
    from nova.hwmodel.calibration import memory_constants
    gpu = get_target(target)
    fused = dataclasses.replace(problem, activation=ACTIVATION_GRADS[node.op], residual=True, activation_grad=True)
    out = node.outputs[0]
    column_sum = any(u.op == "sum" and tuple(u.attrs.get("axes", ())) == tuple(range(out.type.rank - 1))
                     for u in users.get(out, ()))
    constants = memory_constants(gpu, streaming=True)
    outside = ((2 if column_sum else 3) * out.type.nbytes / (gpu.dram_bw * constants["eta_dram"]) * 1e6
               + (0.0 if column_sum else constants["t_launch_us"]))
    return configure(fused, gpu).time_us - configure(problem, gpu).time_us <= outside + constants["t_launch_us"]


def _dense_before(other: Value, layouts, placed: dict, g) -> bool:
    """``other`` can be the kernel's R: dense, and computed before the GEMM's matmul was placed
    (``_epilogue``'s docstring)."""
    return layouts[other].dense and \
        (other.producer is None or placed.get(other.producer, len(placed)) < placed[g.nodes[0]])


def _widens(node: Node, tail: Value, problem: GemmProblem) -> bool:
    """``node`` (a ``cast``, or an ``add`` of an f32 value) gives f32 from ``tail``, a 16-bit GEMM's
    result in its inputs' type, element for element: the kernel can write f32 rounded through the
    16-bit type (``GemmProblem.round_through``), the bits the widening gives."""
    return node.op in ("cast", "add") and problem.dtype in ("bf16", "fp16") and problem.round_through is None \
        and problem.out_dtype == problem.storage == tail.dtype and node.outputs[0].dtype == "f32" \
        and node.outputs[0].shape == tail.shape


def _widened_for_unfusable(v: Value, users) -> bool:
    """Only kernels that cannot take the 16-bit value and widen it themselves read the cast ``v``: the
    optimizer's updates and GEMMs (a pointwise or rows kernel would read the 16-bit value in its own
    prologue: 2 bytes an element instead of the f32's 4, written and read again)."""
    return all(u.op in OPTIMIZER_UPDATES or u.op == "matmul" for u in users.get(v, ()))


def _pointwise_readers_only(v: Value, users, outputs) -> bool:
    """Pointwise ops over ``v``'s shape are all that read ``v`` (no graph output): a kernel of theirs can
    compute ``v`` from what ``v`` is computed from."""
    readers = users.get(v, ())
    return v not in outputs and bool(readers) and \
        all(kind(u.op) == "pointwise" and u.outputs[0].shape == v.shape for u in readers)


# ------------------------------------------------------------------ boundaries and reasons
def boundary(nodes, users, outputs) -> tuple[list[Value], list[Value]]:
    """(values the nodes read from outside, values they produce that are read outside or are graph
    outputs), each in first-occurrence order."""
    members = set(nodes)
    produced = {v for n in nodes for v in n.outputs}
    ins, outs = [], []
    for n in nodes:
        for v in n.inputs:
            if v not in produced and v not in ins:
                ins.append(v)
    for n in nodes:
        for v in n.outputs:
            if v in outputs or any(u not in members for u in users.get(v, ())):
                outs.append(v)
    return ins, outs


def _finish(g: _Open, position, users, outputs, layouts, names, kernels: KernelSwitch,
            storage: StoragePlan) -> Group:
    """The group of ``g``, its nodes in placement order (``position``): a topological order in which
    a reduction comes after every node of its group (program order need not: a pointwise node
    placed early, because it could join, may come later in the program than the reduction)."""
    nodes = sorted(g.nodes, key=position.__getitem__)
    ins, outs = boundary(nodes, users, outputs)
    pre = g.epilogue.preactivation if g.kind == "gemm" and g.epilogue is not None else None
    if pre is not None and layouts[pre].root is not pre and layouts[pre].root not in outs:
        outs.insert(0, layouts[pre].root)      # P read through a view: the kernel writes the root it views
    group = Group(g.kind, nodes, "", g.kernel, ins, outs,
                  g.epilogue if g.kind == "gemm" else None, g.problem)
    first = nodes[0]
    if first in storage.assembled or first in storage.freed:
        why = storage.assembled.get(first) or storage.freed[first]
        group.reason = f"{first.op} of {', '.join(names[x] for x in first.inputs)}: {why}"
    elif g.kind == "pointwise" and any(kind(n.op) == "pointwise" or is_table_gather(n) for n in nodes):
        if kernels.pointwise:
            _classify_pointwise(group, g, layouts, storage)
        else:
            g.why_not_nova = f"NOVA_POINTWISE={kernels.pointwise_key()}"
        group.reason = _reason(group, g, layouts, names)
    elif g.kind == "composite" and nodes[0].op in OPTIMIZER_UPDATES:
        if kernels.optimizer:
            _classify_optimizer(group, g, layouts)
        else:
            g.why_not_nova = f"NOVA_POINTWISE={kernels.pointwise_key()}"
        group.reason = _reason(group, g, layouts, names)
    elif g.kind == "composite" and first.op in ATTENTION_OPS:
        why_not = select_attention(group, kernels.attention)
        group.reason = f"{first.op} on {first.outputs[0].type}: " + (
            f"Nova's fused attention kernels ({group.problem.describe()})" if not why_not else f"ATen ({why_not})")
    elif g.kind == "composite" and group.head.op in EMBEDDING_OPS:
        why_not = select_embedding(group, layouts)
        group.reason = embedding_reason(group, _reason(group, g, layouts, names), why_not)
    elif g.kind == "pointwise" and _step_constant(nodes):
        group.kernel = "none"
        group.reason = (f"{nodes[0].op} fill of {nodes[-1].outputs[0].type}: a constant of the step, filled once "
                        "when the program is built; launches nothing")
    elif g.kind == "composite" and first.op == "concat" or g.kind == "view" and g.kernel == "aten":
        if kernels.pointwise:
            _classify_glue(group, g, layouts)
        else:
            g.why_not_nova = f"NOVA_POINTWISE={kernels.pointwise_key()}"
        group.reason = _reason(group, g, layouts, names)
        if first.op == "concat":
            group.reason += f" ({unplaced_reason(first, users, outputs, names)})"
    else:
        why_not_rows = select_rows(group, layouts)
        group.reason = rows_reason(group, _reason(group, g, layouts, names), why_not_rows)
        if g.casts and group.kernel == "nova":
            group.reason += _casts_reason(g)
        if group.kernel == "nova":
            group.reason += "".join(text.format(names[v]) for text, v in g.rows_notes)
    folded = [n for n in nodes if n in storage.folded]
    if folded:
        group.reason += "; " + " and ".join(f"concat {names[n.outputs[0]]}" for n in folded) + \
            " folded: each piece computed in its slice from its inputs read in place, never written"
    stored = [names[v] for n in nodes for v in n.outputs if v in storage.layouts]
    if stored:
        group.reason += f"; writes {', '.join(stored)} in the layout its readers need (no copy)"
    return group


def _casts_reason(g: _Open) -> str:
    """What the casts fused into a rows group save: their launches and ``rows_casts.cast_saving``'s bytes."""
    return (f"; {' and '.join(dict.fromkeys(g.casts))}: {_count(len(g.casts), 'cast kernel')} fewer, "
            f"saves {format_bytes(g.cast_bytes)}")


def _step_constant(nodes) -> bool:
    """Creation nodes only (``constant``/``iota`` fills, whose inputs are none): a constant of the step."""
    return all(kind(n.op) == "creation" and not n.inputs for n in nodes)


def _classify_optimizer(group: Group, g: _Open, layouts) -> None:
    """An optimizer group runs as one Nova multi-tensor kernel (``nova/kernels/optimizer``) when every
    update has the same rule and element type and each tensor it reads or writes element for element
    is dense and 16-byte aligned (the kernel's vector accesses): its ``MultiTensorProblem`` is stored
    on the group; else it stays on ATen with the reason."""
    from nova.kernels.optimizer.problem import MultiTensorProblem, OptimizerProblemError, operand_slots
    try:
        problem = MultiTensorProblem.from_nodes(group.nodes)
    except OptimizerProblemError as e:
        g.why_not_nova = str(e)
        return
    written = set(group.outputs)
    for n in group.nodes:
        if any(v not in written for v in n.outputs):
            g.why_not_nova = f"a result of {n.op} is never read (the kernel writes every one)"
            return
        for name, v in operand_slots(problem.rule, n.inputs, n.outputs).items():
            lay = layouts[v]
            if name != "step" and (not lay.dense or lay.offset * v.type.itemsize % 16):
                g.why_not_nova = f"the {name} {v.type} is not dense and 16-byte aligned ({lay.describe()})"
                return
    group.kernel = "nova"
    group.problem = problem


def _classify_glue(group: Group, g: _Open, layouts) -> None:
    """A concat the storage pass did not assemble, or a view that copies, runs as one Nova pointwise
    kernel: the concat's inputs each read over its slice of the result (``concat_problem``), the view's
    input read in place and written contiguous (``copy_problem``); its ``PointwiseProblem`` is stored
    on the group, else it stays on ATen with the reason."""
    from nova.passes.pointwise_from_ir import concat_problem, copy_problem
    node = group.nodes[0]
    _take_pointwise_problem(group, g, lambda: concat_problem(node, lambda v: layouts[v].strides,
                                                             lambda v: layouts[v].offset)
                            if node.op == "concat" else copy_problem(node, layouts[node.inputs[0]]))


def _classify_pointwise(group: Group, g: _Open, layouts, storage: StoragePlan) -> None:
    """A pointwise group runs as one Nova pointwise kernel (``nova/kernels/pointwise``) when the family
    computes it: its ``PointwiseProblem`` (inputs with the strides and offsets the layout analysis
    gives them, outputs where the storage pass writes them) is stored on the group; else it stays on
    ATen with the reason."""
    from nova.passes.pointwise_from_ir import pointwise_problem
    _take_pointwise_problem(group, g, lambda: pointwise_problem(
        group.nodes, group.inputs, group.outputs, lambda v: layouts[v].strides, lambda v: layouts[v].offset,
        lambda v: (layouts[v].strides, layouts[v].offset) if v in storage.layouts else None,
        lambda v: layouts[v].root))


def _take_pointwise_problem(group: Group, g: _Open, make_problem) -> None:
    """The group runs on a Nova pointwise kernel with ``make_problem()``'s problem when the family
    states and computes it; else it stays on ATen with the reason (``g.why_not_nova``)."""
    from nova.kernels.pointwise.emit import unsupported
    from nova.kernels.pointwise.problem import PointwiseProblemError
    try:
        problem = make_problem()
    except PointwiseProblemError as e:
        g.why_not_nova = str(e)
        return
    why = unsupported(problem)
    if why:
        g.why_not_nova = f"no Nova pointwise kernel computes {why}"
        return
    group.kernel = "nova"
    group.problem = problem


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 100 else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n} GiB"


def _reason(group: Group, g: _Open, layouts, names) -> str:
    first = group.head
    if group.kind == "gemm":
        a, b = first.inputs
        if group.kernel == "nova":
            text = f"{group.problem.describe()} on a Nova GEMM kernel"
            fused = ["bias add" if n.op == "add" else n.op for n in group.nodes[1:]]
            if fused:
                text += f"; {' and '.join(fused)} fused into the GEMM epilogue"
            return text
        return f"matmul {a.type} x {b.type}: ATen ({g.why_not_nova})"
    if group.kind == "view":
        x, out = first.inputs[0], first.outputs[0]
        if group.kernel == "nova":
            return (f"{first.op} of {names[x]} ({layouts[x].describe()}) is not a strided view: one Nova "
                    f"pointwise kernel copies it into its own buffer")
        if group.kernel == "aten":
            return (f"{first.op} of {names[x]} ({layouts[x].describe()}) is not a strided view: "
                    f"one copy into its own buffer" + (f"; ATen ({g.why_not_nova})" if g.why_not_nova else ""))
        return f"{first.op} of {names[x]}: a strided view of {names[layouts[out].root]}, launches nothing"
    if group.kind == "composite" and first.op in OPTIMIZER_UPDATES:
        elements = sum(n.outputs[0].type.numel for n in group.nodes)
        on = "one Nova multi-tensor kernel" if group.kernel == "nova" else \
            f"ATen's foreach kernels ({g.why_not_nova})" if g.why_not_nova else "ATen's foreach kernels"
        return (f"{len(group.nodes)} {first.op} update{'s' if len(group.nodes) > 1 else ''} with the same "
                f"hyper-parameters over {_elements(elements)} parameters: {on}")
    if group.kind == "composite":
        if first.op == "concat":
            on = "one Nova pointwise kernel reads each input over its slice of the result" \
                if group.kernel == "nova" else f"ATen ({g.why_not_nova})" if g.why_not_nova else "ATen"
            return f"concat on {first.outputs[0].type}: {on}"
        bound = group.bindings                     # a rows group's operands: its fused casts' sources and values
        if first.op == "cross_entropy" and any(n.op == "cross_entropy_backward" for n in group.nodes):
            logits = bound.get("logits", first.inputs[0])
            return (f"cross_entropy of {logits.type} logits with its backward: the loss and dlogits in one pass "
                    f"over the logits (the loss's gradient is known before the forward runs), no log-probabilities "
                    f"or row statistics written; saves a read of the logits ({format_bytes(logits.type.nbytes)}) and "
                    f"a launch; dlogits may take the logits' buffer")
        if first.op == "cross_entropy":
            return (f"cross_entropy of {bound.get('logits', first.inputs[0]).type} logits: log-sum-exp per row and "
                    f"the target logits, no log-probabilities written")
        if first.op == "cross_entropy_backward":
            return (f"cross_entropy_backward -> {bound.get('dlogits', first.outputs[0]).type}: (softmax - onehot) * "
                    f"dloss / count from the logits and lse, elementwise (may take the logits' buffer)")
        what = "data movement" if kind(first.op) == "memory" else "a composite op"
        return f"{first.op} on {first.outputs[0].type}: {what} with its own kernel"
    if group.kind == "collective":
        return (f"{first.op} ({first.attrs.get('reduce_op', '')}) of {first.inputs[0].type} over the "
                f"{first.attrs['world_size']} ranks of process group {first.attrs['group']!r}: one collective")
    if group.kind == "transfer":
        x = first.inputs[0]
        return (f"{x.type} copied to host memory by a copy engine while the forward runs, its device bytes free "
                f"after this point (docs/memory.md#host-offload)" if first.op == "offload" else
                f"{x.type} copied back from host memory by a copy engine while the step runs, before its first "
                f"reader (docs/memory.md#host-offload)")
    if group.kind == "opaque":
        return f"aten op {first.attrs.get('target')}: not modeled by the IR, runs as itself"
    extra = ""
    leaving = [v for v in group.outputs if v.producer is not group.nodes[-1]]
    if leaving:
        extra = f"; {_count(len(leaving), 'intermediate value')} also read outside, written once"
    if group.kind == "reduction":
        red = group.nodes[-1]
        x = red.inputs[0]
        text = f"{red.op} over axes {tuple(red.attrs['axes'])} of {x.type}"
        if len(group.nodes) > 1:
            saved_trips, saved_bytes = _savings(group)
            text += (f" with {_count(len(group.nodes) - 1, 'pointwise producer')} fused: the input is read once; "
                     f"saves {_count(saved_trips, 'round trip')} ({format_bytes(saved_bytes)})")
        return text + extra
    # pointwise
    on = "; one Nova pointwise kernel" if group.kernel == "nova" else \
        (f"; ATen ({g.why_not_nova})" if g.why_not_nova else "")
    if len(group.nodes) == 1:
        out = first.outputs[0]
        if kind(first.op) == "creation":
            return f"{first.op} fill of {out.type}, materialized: its readers are other kernels"
        return f"{first.op} on {out.type}: no fusible neighbour" + on
    saved_trips, saved_bytes = _savings(group)
    shape_type = group.nodes[-1].outputs[0].type
    return (f"{len(group.nodes)} pointwise ops on {shape_type}: one pass over memory saves "
            f"{_count(saved_trips, 'round trip')} ({format_bytes(saved_bytes)})" + extra + on)


def _elements(n: int) -> str:
    """``29.1K``, ``42.0M``: a parameter count."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _savings(group: Group) -> tuple[int, int]:
    """Tensor transfers (and bytes) of running each node alone minus running the group once."""
    unfused = [v for n in group.nodes for v in n.inputs if not _is_fill(v)] + \
              [v for n in group.nodes for v in n.outputs if not _is_fill(v)]
    fused = [v for v in group.inputs if not _is_fill(v)] + [v for v in group.outputs if not _is_fill(v)]
    return len(unfused) - len(fused), sum(v.type.nbytes for v in unfused) - sum(v.type.nbytes for v in fused)


def _is_fill(v: Value) -> bool:
    return v.producer is not None and kind(v.producer.op) == "creation"
