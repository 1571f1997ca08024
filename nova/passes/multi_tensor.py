"""Fusion around the multi-tensor kernels (``nova/kernels/optimizer``), on the fusion pass's groups:

* **Horizontal: many full sums, one launch.**  Gradient clipping (``clip_grad_norm_``, ``_foreach_norm``)
  sums the squares of every gradient: one ``row_reduce 1xN`` rows group per parameter, each a single
  row, each its own launch.  Every Nova rows group that sums one whole tensor to one value (``sum``
  over all its axes, contiguous 16-byte aligned operands and at most one stored intermediate, its
  producers as the prologue: the square, a tied weight's gradient sum, a 16-bit gradient's cast) joins
  one *multi-tensor sum* group, its ``MultiTensorSumProblem`` the tensors' entries and sizes: one launch
  walks all of them, deterministic (fixed-order partials, no float atomics).  The unary scalar ops a sum
  alone feeds (the norm's ``sqrt``) follow it into the group as its epilogue, so the norms land where
  their readers want them (the slots of the stacked norms) without a pointwise launch.  Sums join while
  the group can run after the last of them and before the first outside reader of any of their
  results (the group runs at its last member's position); otherwise a new group starts.  One sum alone
  stays a rows group (its configurator splits a long row over CTAs).

* **Vertical: the clipping coefficient into the update.**  The clipped gradient ``grad * coef`` (a
  one-element factor of the gradient's own type) read only by its ``adamw``/``sgd`` update joins the
  Nova optimizer group: the kernel reads the unscaled gradient and the factor through its argument
  table and multiplies (``UpdateRule.grad_scale``), so the per-parameter pointwise multiplies
  disappear.  Taken for a whole group or not at all (one kernel rule): every update's gradient such a
  product, each read by nothing else, or each also a graph output (``.grad`` read after the step: the
  kernel writes the scaled gradient too, ``grad_out``), never a mix.

* **Horizontal: the parameters' casts, one launch.**  Under autocast the forward casts each FP32
  parameter (a graph input) to the 16-bit type of its GEMM: one lone ``cast`` group a parameter, each
  its own launch.  Every such Nova pointwise group (one ``cast`` between float types of a whole graph
  input, both dense and 16-byte aligned) joins one *multi-tensor map* group -- the multi-tensor sum
  kernel with store-only entries (``SumEntry.reduces`` False: the cast as the prologue, its result
  stored) -- that runs where the first of them ran: a parameter is there from the start of the step,
  and each cast's readers come after its own position, so after the first's.  The casts' results then
  live from that position on (the forward's weights, most of them kept for the backward anyway).  Only
  a parameter's first cast joins: a later cast of it is the memory policy's recomputation in the
  backward (the forward's copy freed in between), which stays where the policy put it.  Likewise the
  backward's casts of gradients that only optimizer updates read (the bias gradients, summed in bf16,
  widened for their FP32 parameters) become one map where the last of them ran, when every update
  reading them runs after it (the bf16 sums, a few KiB, live until then).

``fuse_multi_tensor`` runs last in ``nova.passes.fusion.fuse`` and returns the groups in a topological
order; each decision is stated in the group's reason (``explain`` shows it).
"""
from __future__ import annotations

import dataclasses
import math

from nova.ir.graph import Node, Value
from nova.kernels.optimizer.problem import INPUT_POSITIONS, MultiTensorProblem, OptimizerProblemError, operand_slots
from nova.kernels.optimizer.sum_problem import EPILOGUE_OPS, FLOAT_DTYPES, MultiTensorSumProblem, SumEntry, SumRule
from nova.kernels.rows.problem import RowsProblem
from nova.kernels.rows.prologue import Prologue
from nova.passes.storage import POINTWISE_WRITER

UPDATES = ("adamw", "sgd")
ALIGN = 16                                  # bytes: the multi-tensor kernels' vector accesses
SUM_WRITER = "the multi-tensor sum kernel"


def fuse_multi_tensor(groups: list, graph, layouts, storage, refinish, boundary) -> list:
    """``groups`` (the fusion pass's, in a topological order) with the multi-tensor fusions applied;
    ``refinish(kind, nodes)`` builds the group of what is left of a group that lost nodes, ``boundary(nodes,
    users, outputs)`` the values a group reads from outside and writes (the fusion pass's)."""
    users = graph.users()
    outputs = set(graph.output_values())
    groups = sum_tensors(groups, users, outputs, storage, refinish, boundary)
    groups = cast_parameters(groups, users, outputs, layouts, boundary)
    groups = cast_gradients(groups, users, outputs, layouts, boundary)
    return fold_gradient_scales(groups, users, outputs, layouts, refinish, boundary)


# ---------------------------------------------------------------------------- horizontal: the sums
@dataclasses.dataclass
class _Member:
    index: int                              # the rows group's position
    group: object
    entry: SumEntry
    chain: list                             # the epilogue's nodes (unary ops the sum alone feeds)
    values: dict                            # operand name -> Value (in0.., st0, out: the chain's last value)
    readers: list                           # the nodes outside that read its results


def _candidate(index: int, group, users, outputs) -> _Member | None:
    """The group as one tensor of a multi-tensor sum, or None."""
    p = group.problem
    if group.kind != "reduction" or group.kernel != "nova" or not isinstance(p, RowsProblem):
        return None
    if p.kind != "row_reduce" or p.rows != 1 or p.attr("op") != "sum" or p.prologue is None:
        return None
    if any(o.layout != "row" or o.align % ALIGN for o in p.inputs) or not p.inputs:
        return None
    stored = [o for o in p.outputs if o.name != "out"]
    if [o.name for o in stored] not in ([], ["st0"]) or any(o.align % ALIGN for o in stored):
        return None
    out = p.operand("out")
    total = group.bindings["out"]
    if out is None or math.prod(total.shape) != 1:
        return None
    chain, v = [], total
    while v not in outputs:
        readers = users.get(v, [])
        if len(readers) != 1:
            break
        u = readers[0]
        if u.op not in EPILOGUE_OPS or len(u.inputs) != 1 or u.outputs[0].dtype not in FLOAT_DTYPES:
            break
        chain.append(u)
        v = u.outputs[0]
    entry = SumEntry(tuple(o.dtype for o in p.inputs), p.prologue, stored[0].dtype if stored else "", out.dtype,
                     tuple((u.op, u.outputs[0].dtype) for u in chain))
    values = {o.name: group.bindings[o.name] for o in p.inputs + tuple(stored)}
    values["out"] = v
    results = [values[o.name] for o in stored] + [v]
    inside = set(group.nodes) | set(chain)
    readers = [u for r in results for u in users.get(r, ()) if u not in inside]
    return _Member(index, group, entry, chain, values, readers)


def sum_tensors(groups: list, users, outputs, storage, refinish, boundary) -> list:
    """The horizontal fusion of full sums (module docstring)."""
    group_of = {n: i for i, g in enumerate(groups) for n in g.nodes}
    batches, current = [], []
    for i, g in enumerate(groups):
        member = _candidate(i, g, users, outputs)
        if member is None:
            continue
        if current and any(group_of.get(u, len(groups)) <= i for m in current for u in m.readers):
            batches.append(current)         # an earlier sum is read before this one: the group closes
            current = []
        current.append(member)
    batches.append(current)
    batches = [b for b in batches if len(b) > 1]
    if not batches:
        return groups
    merged, dropped, lost, credited = {}, set(), {}, set()
    for batch in batches:
        last = batch[-1].index
        merged[last] = _sum_group(batch, users, outputs, boundary)
        dropped.update(m.index for m in batch[:-1])
        for m in batch:
            for u in m.chain:
                lost.setdefault(group_of[u], set()).add(u)
        credited.update(_credit_storage(batch, storage))
    out = []
    for i, g in enumerate(groups):
        if g.nodes and g.nodes[0] in credited:
            g = dataclasses.replace(g, reason=g.reason.replace(POINTWISE_WRITER, SUM_WRITER))
        if i in merged:
            out.append(merged[i])
        elif i in dropped:
            continue
        elif i in lost:
            rest = [n for n in g.nodes if n not in lost[i]]
            if rest:
                out.append(refinish(g.kind, rest))
        else:
            out.append(g)
    return out


def _sum_group(batch: list[_Member], users, outputs, boundary):
    entries = list(dict.fromkeys(m.entry for m in batch))
    rule = SumRule(tuple(entries))
    sizes = tuple(m.group.problem.n for m in batch)
    problem = MultiTensorSumProblem(rule, sizes, tuple(entries.index(m.entry) for m in batch))
    nodes = [n for m in batch for n in m.group.nodes] + [u for m in batch for u in m.chain]
    ins, outs = boundary(nodes, users, outputs)
    bindings = {(t, name): v for t, m in enumerate(batch) for name, v in m.values.items()}
    chained = sum(1 for m in batch if m.chain)
    ops = sorted({u.op for m in batch for u in m.chain})
    prologues = sorted({op for m in batch for op, _ in m.group.problem.prologue.ops})
    reason = (f"{len(batch)} sums over whole tensors ({'+'.join(prologues)} per element) fused horizontally: one "
              f"Nova multi-tensor launch instead of {len(batch)} one-row rows kernels, deterministic (fixed-order "
              f"partials, no float atomics)"
              + (f"; {chained} scalar epilogue{'s' if chained != 1 else ''} ({', '.join(ops)}) applied by its last "
                 f"CTA, no pointwise launch" if chained else "")
              + f"; {problem.describe()}")
    return dataclasses.replace(batch[-1].group, kind="reduction", nodes=nodes, reason=reason, kernel="nova",
                               inputs=ins, outputs=outs, epilogue=None, problem=problem, bindings=bindings)


def _credit_storage(batch: list[_Member], storage) -> set:
    """The concats whose inputs the moved epilogues write in place, their reasons naming the kernel that
    now writes them."""
    moved = {u.outputs[0] for m in batch for u in m.chain}
    credited = set()
    for node, why in list(storage.assembled.items()):
        roots = [_root(v) for v in node.inputs]
        if roots and all(r in moved for r in roots):
            storage.assembled[node] = why.replace(POINTWISE_WRITER, SUM_WRITER)
            credited.add(node)
    return credited


def _root(v: Value) -> Value:
    from nova.ir.ops import kind
    while v.producer is not None and kind(v.producer.op) == "view":
        v = v.producer.inputs[0]
    return v


# ---------------------------------------------------------------------------- horizontal: casts
def _lone_cast(group, layouts) -> bool:
    """The group is one Nova cast between float types of a whole value, both ends dense and aligned (the
    source may be a view: a reshape of a sum), the result a buffer of its own."""
    if group.kind != "pointwise" or group.kernel != "nova" or [n.op for n in group.nodes] != ["cast"]:
        return False
    (x,), (y,) = group.nodes[0].inputs, group.nodes[0].outputs
    if x.dtype not in FLOAT_DTYPES or y.dtype not in FLOAT_DTYPES or not x.shape or layouts[y].root is not y:
        return False
    return all(layouts[v].dense and layouts[v].offset * v.type.itemsize % ALIGN == 0 for v in (x, y))


def _cast_entry(cast: Node) -> SumEntry:
    """A store-only entry: ``st0 = cast(in0)``."""
    x, y = cast.inputs[0], cast.outputs[0]
    return SumEntry((x.dtype,), Prologue(((f"cast_{y.dtype}", ("in0",)),), (), ((0, "st0"),)), stored=y.dtype)


def _cast_map(groups: list, members: list[int], at: int, what: str, users, outputs, boundary) -> list:
    """``groups`` with the lone casts of ``members`` (group indices) as one multi-tensor map group at
    ``members[at]``'s position; ``what`` says what they are and why that position."""
    casts = [groups[i].nodes[0] for i in members]
    entries = list(dict.fromkeys(_cast_entry(c) for c in casts))
    problem = MultiTensorSumProblem(SumRule(tuple(entries)), tuple(math.prod(c.inputs[0].shape) for c in casts),
                                    tuple(entries.index(_cast_entry(c)) for c in casts))
    ins, outs = boundary(casts, users, outputs)
    bindings = {(t, name): v for t, c in enumerate(casts) for name, v in (("in0", c.inputs[0]), ("st0", c.outputs[0]))}
    kinds = ", ".join(sorted({f"{c.inputs[0].dtype} -> {c.outputs[0].dtype}" for c in casts}))
    reason = (f"{len(casts)} casts of {what.format(kinds=kinds)} fused horizontally: one Nova multi-tensor launch "
              f"instead of {len(casts)} pointwise kernels; {problem.describe()}")
    merged = dataclasses.replace(groups[members[at]], nodes=casts, reason=reason, inputs=ins, outputs=outs,
                                 epilogue=None, problem=problem, bindings=bindings)
    place, dropped = members[at], set(members) - {members[at]}
    return [merged if i == place else g for i, g in enumerate(groups) if i not in dropped]


def cast_parameters(groups: list, users, outputs, layouts, boundary) -> list:
    """The horizontal fusion of the parameters' casts (module docstring)."""
    first = {}                                  # a parameter -> the group of its first cast
    for i, g in enumerate(groups):
        for n in g.nodes:
            if n.op == "cast" and n.inputs[0].producer is None:
                first.setdefault(n.inputs[0], i)
    members = [i for i, g in enumerate(groups) if _lone_cast(g, layouts) and g.nodes[0].inputs[0].producer is None
               and first[g.nodes[0].inputs[0]] == i]
    if len(members) < 2:
        return groups
    return _cast_map(groups, members, 0, "whole parameters ({kinds}), where the first cast ran (the parameters are "
                     "the step's inputs; each cast's readers come after it)", users, outputs, boundary)


def cast_gradients(groups: list, users, outputs, layouts, boundary) -> list:
    """The horizontal fusion of the gradients' casts that only optimizer updates read (module docstring)."""
    members = [i for i, g in enumerate(groups) if _lone_cast(g, layouts) and g.nodes[0].inputs[0].producer is not None
               and g.nodes[0].outputs[0] not in outputs
               and users.get(g.nodes[0].outputs[0]) and all(u.op in UPDATES for u in users[g.nodes[0].outputs[0]])]
    if len(members) < 2:
        return groups
    position = {n: i for i, g in enumerate(groups) for n in g.nodes}
    if any(position[u] <= members[-1] for i in members for u in users[groups[i].nodes[0].outputs[0]]):
        return groups                           # an update runs before the last gradient's cast: leave them
    return _cast_map(groups, members, -1, "gradients ({kinds}) that only optimizer updates read, where the last "
                     "cast ran (every gradient is there; the updates come after it)", users, outputs, boundary)


# ---------------------------------------------------------------------------- vertical: grad x coef
def scaled_gradient(update: Node, users, outputs) -> tuple[Node, Value, Value] | None:
    """``(mul node, unscaled gradient, factor)`` when ``update`` reads ``grad * factor`` (a one-element
    factor, every type the gradient's) that nothing else reads; else None."""
    grad = update.inputs[INPUT_POSITIONS[update.op]["grad"]]
    mul = grad.producer
    if mul is None or mul.op != "mul" or [u for u in users.get(grad, ()) if u is not update]:
        return None
    a, b = mul.inputs
    for g, c in ((a, b), (b, a)):
        if g.type == grad.type and math.prod(c.shape) == 1 and c.dtype == grad.dtype and g is not c:
            return mul, g, c
    return None


def fold_gradient_scales(groups: list, users, outputs, layouts, refinish, boundary) -> list:
    """The vertical fusion of gradient scales into Nova optimizer groups (module docstring)."""
    position = {n: i for i, g in enumerate(groups) for n in g.nodes}
    replaced, lost = {}, {}
    for i, g in enumerate(groups):
        if g.kind != "composite" or g.kernel != "nova" or not isinstance(g.problem, MultiTensorProblem) \
                or g.nodes[0].op not in UPDATES:
            continue
        found = [scaled_gradient(n, users, outputs) for n in g.nodes]
        if not found or any(f is None for f in found):
            continue
        muls = [f[0] for f in found]
        read_after = [m.outputs[0] in outputs for m in muls]
        if any(read_after) and not all(read_after):
            continue
        if any(groups[position[m]].kind != "pointwise" for m in muls):
            continue
        if any(not layouts[f[1]].dense or layouts[f[1]].offset * f[1].type.itemsize % ALIGN for f in found):
            continue
        try:
            rule = MultiTensorProblem.from_nodes(g.nodes).rule
        except OptimizerProblemError:
            continue
        rule = dataclasses.replace(rule, grad_scale=True, grad_out=all(read_after))
        nodes = muls + list(g.nodes)
        ins, outs = boundary(nodes, users, outputs)
        written = " and writes the scaled gradients (read after the step)" if rule.grad_out else ""
        reason = (g.reason + f"; {len(muls)} gradient scales (grad x a one-element factor: gradient clipping's "
                  f"coefficient) folded into the update: the kernel reads each gradient and the factor and "
                  f"multiplies{written}, no pointwise launch ({len(muls)} fewer)")
        replaced[i] = dataclasses.replace(g, nodes=nodes, inputs=ins, outputs=outs, reason=reason,
                                          problem=dataclasses.replace(g.problem, rule=rule))
        for m in muls:
            lost.setdefault(position[m], set()).add(m)
    if not replaced:
        return groups
    out = []
    for i, g in enumerate(groups):
        if i in lost:                       # a product's own group, or the rest of a group that held it
            rest = [n for n in g.nodes if n not in lost[i]]
            if rest:
                out.append(refinish(g.kind, rest))
        else:
            out.append(replaced.get(i, g))
    return out


def update_slots(nodes, rule) -> list[dict]:
    """``{pointer name: Value}`` of each update of an optimizer group's ``nodes`` for ``rule.pointers()``:
    with ``grad_scale`` the gradient is the folded product's unscaled operand, ``grad_scale`` its factor
    and ``grad_out`` the product itself."""
    rows = []
    for n in nodes:
        if n.op not in UPDATES:
            continue
        plain = dataclasses.replace(rule, grad_scale=False, grad_out=False)
        row = operand_slots(plain, n.inputs, n.outputs)
        if rule.grad_scale:
            grad = row["grad"]
            mul = grad.producer
            a, b = mul.inputs
            g, c = (a, b) if a.type == grad.type and math.prod(b.shape) == 1 and a is not b else (b, a)
            row.update(grad=g, grad_scale=c)
            if rule.grad_out:
                row["grad_out"] = grad
        rows.append(row)
    return rows
