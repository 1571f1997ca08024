"""Storage: the layout a strided-writing kernel stores its result in, chosen so that what its
readers see through their views needs no copy.

``layout.py`` makes every non-view node's result a dense row-major root; a view chain over it
that ends in a reshape which is not a view costs one copy, and a ``concat`` of such results one
more pass over them.  A kernel that writes its outputs at any strides can write the layout the
readers want instead: fused attention's ``out``, its backward's ``dq``, ``dk``, ``dv``
(``STRIDED_WRITES``; the Nova kernels address every operand by its ``(sB, sH, sT)``,
``nova/kernels/attention/problem.py``, and the ATen fallback ``copy_``-s into the output), and every
pointwise result (a Nova pointwise kernel writes each output at the strides its ``PointwiseProblem``
states, ``nova/kernels/pointwise/problem.py``; the ATen fallback writes through ``out=``).  Decided
here, once, in order:

-1. **Folded concat.**  A ``concat`` of at most ``MAX_FOLDED_PIECES`` pieces whose result is read
   only by pointwise ops of its shape (RoPE's ``q * cos + cat(-q2, q1) * sin``) is never written:
   the fusion pass folds it into the kernel of its readers, each piece computed there at its own
   coordinates from its inputs read in place through windows
   (``nova/passes/pointwise_from_ir.py``), so the concat costs neither a launch nor a round trip of
   its result.  Its pieces' ``concat_cone`` -- the pointwise nodes that compute a piece and whose
   results nothing else reads -- go with it (``StoragePlan.folded``); rules 0-2 leave it alone.
0. **Copies into a concat.**  ``copy_concat_inputs`` (a rewrite, before the plan): a ``concat`` some
   of whose inputs rule 1 can place and others not (a slice of a value other nodes read, a graph
   input: RoPE's rotate-half ``cat(-x2, x1)``, its backward ``cat(g2, -g1)``) reads each of the
   others through an explicit copy (``cast`` to its own type), a pointwise result rule 1 places too;
   the fusion pass runs such copies in the group of a sibling pointwise writer of the same concat
   and shape, so the concat's copy becomes no launch of its own.  Likewise each occurrence of a
   pointwise result a concat reads more than once (``cat(freqs, freqs)``): its copies run in its own
   kernel, which writes it into every slice.  A concat left with inputs no kernel writes in place
   (a slice of a graph input and a constant fill: the loss's shifted labels) is one Nova pointwise
   kernel of its own (``fusion.py``) rather than one copy kernel per input.
1. **Assembled concat.**  A ``concat`` each of whose inputs is such a result reached through a
   chain of ``permute``/``reshape`` views, every value of the chain read only by the next link
   (the last by the concat only) and none a graph output: each result is stored in the concat's
   own buffer, at the strides that make its chain end exactly on its slice (``invert_chain``: a
   permute's inverse permutes the strides back, a reshape's inverse is the reverse ``view``).  The
   concat's result becomes the root of all of them and the concat launches nothing.  A GEMM's
   result (``matmul``) is such an input too where its slice is row-major and dense (a block of
   rows: the chunked loss's input gradient, ``chunked_loss.py``) and starts on a 16-byte boundary:
   a GEMM writes a row-major result at any address (``gemm_lowering``: ``out`` row-major, 16-byte
   aligned), so the block is its ``out``.
   A value copied back from host memory (``reload``, ``offload.py``) is stored like the value
   copied there: the copies move its bytes in their storage order (a copy to host reads any order).
2. **Storage order.**  Else a result one of whose views is a copy is stored in the order of its
   axes that makes that copy a dense view (the inverse chain from the copy's dense layout; the
   result must stay dense, its axes permuted).  Taken only when every view of the result is then
   a view (no copy left) and every value whose layout changes is read, apart from views, only by
   attention operands that accept it (``ATTENTION_READS``) or by pointwise ops (they read any
   strides in place) and is no graph output (unless ``outputs_as_stored``: the program hands its
   outputs over at the strides it stores them, ``memory.Handoff.outputs_apart``; the torch.compile
   backend's forward then stores attention's output as the trace does, its head merge a view).

Each decision is taken only where the writing kernel accepts the strides (attention:
``problem.strides_reason(...) == ''`` and the result starts on a 16-byte boundary, cp.async;
pointwise: no two elements on one address).  The fusion pass keeps a pointwise node whose result is
decided here out of a GEMM epilogue and out of a reduction's group (those kernels write dense).
``plan_storage`` returns a ``StoragePlan``; ``layout.analyze(graph, storage)`` starts the decided
results' layouts from it, and the planner (fusion, memory), the executor and ``explain`` read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nova.ir.graph import Graph, Node, Value
from nova.ir.ops import kind
from nova.kernels.attention.problem import strides_reason
from nova.kernels.pointwise.problem import overlap_reason
from nova.passes import layout as layout_analysis
from nova.passes.layout import Layout, contiguous_strides, view_layout, view_strides

# op -> the attention operand each result is (by output index): kernels that write any strides
STRIDED_WRITES = {"attention": ("out",), "attention_backward": ("dq", "dk", "dv")}
# op -> the attention operand each input is (by input index; lse is not strided)
ATTENTION_READS = {"attention": ("q", "k", "v"), "attention_backward": ("dout", "q", "k", "v", "out")}
KERNEL_NAMES = {"attention": "the attention kernel", "attention_backward": "the attention backward kernel"}
POINTWISE_WRITER = "the pointwise kernel"
GEMM_WRITER = "the GEMM"
CHAIN_OPS = ("permute", "reshape")          # views with an inverse over any strides
BASE_ALIGNMENT = 16                          # bytes: where an operand of the attention kernels may start
FOLDED_REASON = "folded into the pointwise kernel that reads it: each piece computed in its slice, never written"
MAX_FOLDED_PIECES = 4                        # a folded concat's kernel computes every piece at every element


@dataclass
class StoragePlan:
    """The storage decisions of one graph (module docstring)."""
    layouts: dict[Value, Layout] = field(default_factory=dict)   # node result -> where its kernel writes it
    assembled: dict[Node, str] = field(default_factory=dict)     # concat -> why it launches nothing
    freed: dict[Node, str] = field(default_factory=dict)         # view that copied by default -> why it does not
    folded: dict[Node, list[Node]] = field(default_factory=dict)  # concat folded into its readers -> its cones

    def describe(self) -> dict:
        """Counts and reasons for ``explain``: the copies and concats removed, and why."""
        reasons: dict[str, int] = {}
        folded = {node: FOLDED_REASON for node in self.folded}
        for node, why in list(self.freed.items()) + list(self.assembled.items()) + list(folded.items()):
            key = f"{node.op}: {why}"
            reasons[key] = reasons.get(key, 0) + 1
        return {"results_stored": len(self.layouts), "copies_removed": len(self.freed),
                "concats_assembled": len(self.assembled), "concats_folded": len(self.folded), "reasons": reasons}


def same_place(a: Layout, b: Layout) -> bool:
    """``a`` and ``b`` address the same elements of their roots (strides of extent-1 axes aside)."""
    return a.shape == b.shape and a.offset == b.offset and \
        all(n == 1 or x == y for n, x, y in zip(a.shape, a.strides, b.strides))


def view_chain(x: Value) -> tuple[Value, list[Node]]:
    """``(p, chain)``: the ``permute``/``reshape`` nodes from ``p`` to ``x``, ``p`` the first value up
    the chain that another op produces (or a graph input)."""
    chain = []
    while x.producer is not None and x.producer.op in CHAIN_OPS:
        chain.append(x.producer)
        x = x.producer.inputs[0]
    return x, chain[::-1]


def invert_chain(chain: list[Node], target: Layout) -> Layout | None:
    """The layout of ``chain[0]``'s input that makes the chain's result lie at ``target``, or None.
    ``permute(perm)``: input stride ``perm[i]`` = result stride ``i``; ``reshape``: the input is a
    ``view`` of the result (``layout.view_strides``).  Checked forward (each link a view, the end at
    ``target``)."""
    lay = target
    for node in reversed(chain):
        shape = node.inputs[0].shape
        if node.op == "permute":
            strides = [0] * len(shape)
            for i, axis in enumerate(node.attrs["perm"]):
                strides[axis] = lay.strides[i]
            lay = Layout(target.root, tuple(shape), tuple(strides), lay.offset)
        elif node.op == "reshape":
            strides = view_strides(lay.shape, lay.strides, shape)
            if strides is None:
                return None
            lay = Layout(target.root, tuple(shape), strides, lay.offset)
        else:
            return None
    start, end = lay, lay
    for node in chain:
        end = view_layout(node.op, end, node.attrs, node.outputs[0].shape)
        if end is None:
            return None
    return start if same_place(end, target) else None


def axis_order(layout: Layout) -> tuple[int, ...] | None:
    """The order of ``layout``'s axes, outermost first, in which it is dense (a permutation of a
    row-major buffer, offset 0); None when it is not one."""
    order = sorted(range(len(layout.shape)), key=lambda a: (-layout.strides[a], a))
    step = 1
    for a in reversed(order):
        if layout.shape[a] != 1 and layout.strides[a] != step:
            return None
        step *= layout.shape[a]
    return tuple(order) if layout.offset == 0 else None


def operand_reason(name: str, value: Value, layout: Layout) -> str:
    """Why the attention kernels cannot address ``value`` as operand ``name`` at ``layout``; ''."""
    why = strides_reason(name, value.shape, layout.strides, value.type.itemsize)
    if not why and layout.offset * value.type.itemsize % BASE_ALIGNMENT:
        why = f"{name} would start {layout.offset * value.type.itemsize} bytes into its buffer, not 16-byte aligned"
    return why


def writes_strided(value: Value) -> bool:
    """Whether ``value``'s producer may write it at other strides (module docstring)."""
    node = value.producer
    return node is not None and (node.op in STRIDED_WRITES or kind(node.op) == "pointwise")


def kernel_name(value: Value) -> str:
    """The kernel that writes ``value`` (for the reasons ``explain`` shows)."""
    if value.producer.op == "matmul":
        return GEMM_WRITER
    return KERNEL_NAMES.get(value.producer.op, POINTWISE_WRITER)


def writes_row_block(value: Value, layout: Layout) -> bool:
    """``value`` is a GEMM's result and ``layout`` a dense row-major block of its buffer starting on
    a 16-byte boundary: the GEMM writes it there as its ``out`` (rule 1)."""
    return value.producer is not None and value.producer.op == "matmul" and \
        layout.shape == value.shape and \
        all(n == 1 or s == c for n, s, c in zip(layout.shape, layout.strides, contiguous_strides(value.shape))) and \
        layout.offset * value.type.itemsize % BASE_ALIGNMENT == 0


def writer_reason(value: Value, layout: Layout) -> str:
    """Why ``value``'s producer cannot write it at ``layout``; '' when it can."""
    node = value.producer
    if node is not None and kind(node.op) == "pointwise":
        return overlap_reason(layout.shape, layout.strides)
    if node is None or node.op not in STRIDED_WRITES:
        return "its producer writes only dense results"
    names = STRIDED_WRITES[node.op]
    index = node.outputs.index(value)
    if index >= len(names):
        return f"{node.op} writes its result {index} dense"
    return operand_reason(names[index], value, layout)


def plan_storage(graph: Graph, outputs_as_stored: bool = False) -> StoragePlan:
    """The storage decisions of ``graph`` (module docstring); ``outputs_as_stored``: a graph output
    may be stored at other strides (its caller takes it as stored)."""
    plan = StoragePlan()
    users = graph.users()
    outputs = set(graph.output_values())
    default = layout_analysis.analyze(graph)
    for node in graph.nodes:
        if node.op == "concat" and (cones := fold_cones(node, users, outputs)) is not None:
            plan.folded[node] = cones
        elif node.op == "concat":
            _assemble(node, users, outputs, default, plan)
    for node in graph.nodes:
        for value in node.outputs:
            if writes_strided(value) and not writer_reason(value, default[value]) and value not in plan.layouts:
                _reorder(value, users, set() if outputs_as_stored else outputs, default, plan)
    for node in graph.nodes:                # a copy back from host memory: the bytes of the value offloaded
        if node.op == "reload" and node.inputs[0].producer is not None:
            x = node.inputs[0].producer.inputs[0]
            if x in plan.layouts:
                lay = plan.layouts[x]
                plan.layouts[node.outputs[0]] = Layout(node.outputs[0], lay.shape, lay.strides, lay.offset)
    return plan


def fold_cones(node: Node, users, outputs) -> list[Node] | None:
    """Rule -1 for one concat: the nodes of its pieces' cones (program order not kept) when it folds
    into its readers, else None."""
    out = node.outputs[0]
    readers = users.get(out, [])
    axis = node.attrs["axis"] % len(out.shape)
    pieces = [x for x in node.inputs if x.shape[axis]]
    if out in outputs or not readers or not 2 <= len(pieces) <= MAX_FOLDED_PIECES or \
            any(kind(r.op) != "pointwise" or tuple(r.outputs[0].shape) != tuple(out.shape) for r in readers):
        return None
    cones: list[Node] = []
    for x in dict.fromkeys(pieces):
        cones += [n for n in concat_cone(x, node, users, outputs) if n not in cones]
    return cones


def concat_cone(x: Value, concat: Node, users, outputs) -> list[Node]:
    """The pointwise nodes that compute ``x``, an input of ``concat``, and whose results only they and
    the concat read (none a graph output): what a kernel folding the concat computes in ``x``'s slice."""
    def private(v: Value, members) -> bool:
        p = v.producer
        return p is not None and kind(p.op) == "pointwise" and len(p.outputs) == 1 and v not in outputs \
            and all(u in members or u is concat for u in users.get(v, ()))
    if not private(x, set()):
        return []
    members = {x.producer: None}
    grew = True
    while grew:
        grew = False
        for n in list(members):
            for v in n.inputs:
                if v.producer not in members and private(v, members):
                    members[v.producer] = None
                    grew = True
    return list(members)


def _assemble(node: Node, users, outputs, default, plan: StoragePlan) -> None:
    """Rule 1 for one concat: every input placed in its slice, or nothing decided."""
    out = node.outputs[0]
    axis = node.attrs["axis"] % len(out.shape)
    dense = contiguous_strides(out.shape)
    placed = concat_placements(node, users, outputs)
    if placed is None or None in placed:
        return
    writers = sorted({kernel_name(p) for p, _, _ in placed})
    plan.layouts.update({p: lay for p, _, lay in placed})
    plan.assembled[node] = (f"launches nothing: {' and '.join(writers)} write{'s' if len(writers) == 1 else ''} "
                            f"each input in place into its slice of the result")
    for p, chain, _ in placed:
        for n in chain:
            if layout_analysis.is_copy(n, default):
                plan.freed[n] = f"written in place by {kernel_name(p)} into its slice of a concat's buffer"


def concat_placements(node: Node, users, outputs) -> list | None:
    """Rule 1's placement of each input of a concat: ``(p, chain, layout)`` (the result ``p`` its
    kernel writes at ``layout`` in the concat's buffer, through the view ``chain``), or None for an
    input no kernel can place; None for the whole concat when an input is read twice."""
    out = node.outputs[0]
    axis = node.attrs["axis"] % len(out.shape)
    dense = contiguous_strides(out.shape)
    offset, found, seen = 0, [], set()
    for x in node.inputs:
        p, chain = view_chain(x)
        lay = invert_chain(chain, Layout(out, x.shape, dense, offset))
        offset += x.shape[axis] * dense[axis]
        if p in seen:
            return None
        seen.add(p)
        links = chain + [node]
        writable = lay is not None and ((writes_strided(p) and not writer_reason(p, lay)) or writes_row_block(p, lay))
        if not writable or \
                any(v in outputs or users.get(v, []) != [reader]
                    for v, reader in zip([p] + [n.outputs[0] for n in chain], links)):
            found.append(None)
        else:
            found.append((p, chain, lay))
    return found


def unplaced_reason(node: Node, users, outputs, names) -> str:
    """Why rule 1 leaves a concat to a kernel of its own, for ``explain``: what each input it cannot
    place is (a constant fill, a graph input or a view of one, a view, a result read elsewhere too, ...)."""
    if node.outputs[0] in outputs:
        return "the concat is a graph output"
    placed = concat_placements(node, users, outputs)
    if placed is None:
        return "an input is read twice"
    what = []
    for x, p in zip(node.inputs, placed):
        if p is not None:
            continue
        root, _ = view_chain(x)
        if x.producer is not None and x.producer.op == "constant":
            why = "a constant fill"
        elif root.producer is None:
            why = "a graph input" if root is x else "a view of a graph input"
        elif kind(x.producer.op) == "view" and x.producer.op not in CHAIN_OPS:
            why = f"a {x.producer.op} of another value"
        elif not writes_strided(root):
            why = f"a result of {root.producer.op}, written dense"
        else:
            why = "a result read by other kernels too"
        what.append(f"{names[x]}: {why}")
    return "no kernel writes its inputs in place: " + "; ".join(what) if what else "its inputs are placed"


def copy_concat_inputs(graph: Graph) -> Graph:
    """Rule 0 (module docstring): ``graph`` with an explicit copy in front of each concat input that
    rule 1 cannot place, where another input of the same concat is a pointwise result it places, and
    in front of every occurrence of a pointwise result a concat reads more than once; ``graph`` itself
    when there is none."""
    return _copy_unplaced(_copy_repeated(graph))


def _copy_repeated(graph: Graph) -> Graph:
    """The copies of pointwise results a concat reads more than once (RoPE's ``cat(freqs, freqs)``):
    each copy is a pointwise result read by the concat alone, which rule 1 places; the fusion pass runs
    the copies in their source's kernel, which then writes it once per slice."""
    outputs = set(graph.output_values())
    copied: dict[Node, list[int]] = {}
    for node in graph.nodes:
        if node.op != "concat" or node.outputs[0] in outputs:
            continue
        repeated = [i for i, x in enumerate(node.inputs) if node.inputs.count(x) > 1
                    and x.producer is not None and kind(x.producer.op) == "pointwise"]
        if repeated:
            copied[node] = repeated
    return _with_copies(graph, copied)


def _copy_unplaced(graph: Graph) -> Graph:
    users = graph.users()
    outputs = set(graph.output_values())
    copied: dict[Node, list[int]] = {}
    for node in graph.nodes:
        if node.op != "concat" or node.outputs[0] in outputs:
            continue
        placed = concat_placements(node, users, outputs)
        if placed is None or None not in placed or \
                not any(p is not None and kind(p[0].producer.op) == "pointwise" for p in placed):
            continue
        copied[node] = [i for i, p in enumerate(placed) if p is None]
    return _with_copies(graph, copied)


def _with_copies(graph: Graph, copied: dict) -> Graph:
    """``graph`` with the concat inputs ``copied[node]`` (positions) read through a ``cast`` to their
    own type; ``graph`` itself when there is none."""
    if not copied:
        return graph
    from nova.passes.rewrite import Rewriter
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in copied:
            inputs = [rw.get(v) for v in node.inputs]
            for i in copied[node]:
                (inputs[i],) = rw.emit("cast", [inputs[i]], {"dtype": inputs[i].dtype}, node.origin)
            for old, new in zip(node.outputs, rw.emit(node.op, inputs, node.attrs, node.origin)):
                rw.env[old] = new
        else:
            rw.copy(node)
    return rw.finish()


def _reorder(value: Value, users, outputs, default, plan: StoragePlan) -> None:
    """Rule 2 for one strided result: the first storage order that frees a copy among its views."""
    paths = {value: []}                           # family value -> view nodes from ``value`` to it
    todo = [value]
    while todo:
        v = todo.pop(0)
        for u in users.get(v, ()):
            if kind(u.op) == "view" and u.outputs[0] not in paths:
                paths[u.outputs[0]] = paths[v] + [u]
                todo.append(u.outputs[0])
    copies = [w for w, path in paths.items() if path and layout_analysis.is_copy(path[-1], default)]
    for w in copies:
        lay = invert_chain(paths[w], Layout(value, w.shape, contiguous_strides(w.shape), 0))
        if lay is None or axis_order(lay) is None or writer_reason(value, lay):
            continue
        if _family_accepts(value, lay, users, outputs, default):
            plan.layouts[value] = lay
            order = ", ".join(map(str, axis_order(lay)))
            for path in paths.values():
                for n in path:
                    if layout_analysis.is_copy(n, default):
                        plan.freed[n] = (f"written in place by {kernel_name(value)} in its consumer's "
                                         f"layout (its result stored with axes {order} outermost first)")
            return


def _family_accepts(value: Value, lay: Layout, users, outputs, default) -> bool:
    """Under ``lay`` for ``value``: every view of it is a view, and every value whose layout changes
    is no graph output and is read (views aside) only by attention operands that accept it or by
    pointwise ops."""
    layouts = {value: lay}
    todo = [value]
    while todo:
        v = todo.pop(0)
        changed = not same_place(layouts[v], default[v])
        if changed and v in outputs:
            return False
        for u in users.get(v, ()):
            if kind(u.op) == "view":
                out = view_layout(u.op, layouts[v], u.attrs, u.outputs[0].shape)
                if out is None:
                    return False
                if u.outputs[0] not in layouts:
                    layouts[u.outputs[0]] = out
                    todo.append(u.outputs[0])
            elif changed and kind(u.op) not in ("pointwise", "transfer"):   # a copy to host takes any order
                reads = ATTENTION_READS.get(u.op, ())
                slots = [i for i, x in enumerate(u.inputs) if x is v]
                if any(i >= len(reads) or operand_reason(reads[i], v, layouts[v]) for i in slots):
                    return False
    return True
