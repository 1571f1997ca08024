"""Chunked loss: the LM head and its cross-entropy run over row chunks, so the ``[N, vocab]``
logits are never written in full, forward or backward.

Matched (after ``cross_entropy.py`` fused log-softmax + NLL):

    logits        = matmul(x, w, ...)                     x [N, K], not transposed: row i of logits is row i of x
    loss, lse     = cross_entropy(logits, target)         lse read only by the backward below
    dlogits       = cross_entropy_backward(dloss, logits, target, lse)     (absent in a forward-only graph)
    r_j           = matmul(...dlogits...)                 every reader of dlogits a 2-D matmul (any operand,
                                                          any transpose), its other operand defined before
                                                          the backward

and nothing else reads ``logits``, ``lse`` or ``dlogits`` (none of them a graph output); readers of
``loss`` come after the backward.  Rewritten, at the backward's position (the forward's, with no
backward), for each chunk ``k`` of rows ``[r0, r1)``:

    logits_k           = matmul(slice(x, r0:r1), w)
    loss_k, lse_k      = cross_entropy(logits_k, target_k, reduction="sum")
    dlogits_k          = cross_entropy_backward(dloss', logits_k, target_k, lse_k, reduction="sum")
    r_j pieces         rows of the result (dlogits as the row operand): concat over k, axis 0
                       columns (dlogits as the transposed right operand): concat over k, axis 1
                       contracted over rows (the weight gradient): the sum over k of matmul(dlogits_k, slice(other))

Semantics kept exactly (up to summation order): ``reduction="mean"`` divides the sum of the chunk
sums by the count of non-ignored targets (``0/0 = nan`` with none, as torch), and the backward
scales ``dloss`` by ``1 / max(count, 1)`` (torch's zero gradient with none); ``"sum"`` needs neither.
A chunk's logits die at its backward, which writes ``dlogits_k`` over them (the planner's in-place
rule) and dies at its last matmul: the logits' memory is one chunk's.

Chunk count (``chunk_count``): the smallest ``c`` whose chunk fits in the bytes left beside the
rest of the plan, ``ceil(L / room)``, between 2 and ``max_chunks(N)`` (chunks of at least
``MIN_CHUNK_ROWS`` rows: a chunk's GEMM still fills every SM).  Each chunk beyond the first costs
one more pass over the contracted results (the weight gradient's running sum, ``chunk_cost_us``),
so ``budget.py`` stops at ``cost_chunk_count`` when rematerialization frees bytes more cheaply.  Rows per chunk are
``ceil(N / c)`` rounded up to ``ROW_ALIGNMENT`` when N allows (aligned slices), the last chunk short.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from nova.ir.graph import Graph, Node, Value
from nova.passes.dce import dce
from nova.passes.rewrite import Rewriter

MIN_CHUNK_ROWS = 512        # a chunk's head GEMM: >= 4 row tiles of 128 x vocab/256 column tiles, every SM busy
ROW_ALIGNMENT = 64          # chunk boundaries on multiples of 64 rows when the rows allow it


@dataclass
class Match:
    head: Node                      # logits = matmul(x, w)
    loss: Node                      # cross_entropy
    backward: Node | None           # cross_entropy_backward
    readers: list[tuple[Node, str]]     # each reader of dlogits and its form: rows, cols, contract

    @property
    def logits(self) -> Value:
        return self.head.outputs[0]


def _form(node: Node, dlogits: Value) -> str | None:
    """How ``node`` (a matmul) reads ``dlogits``: ``rows`` (its result's rows are dlogits' rows),
    ``cols`` (its result's columns are), ``contract`` (summed over dlogits' rows), or None."""
    if node.op != "matmul" or any(v.type.rank != 2 for v in node.inputs) or node.inputs[0] is node.inputs[1]:
        return None
    ta, tb = bool(node.attrs.get("transpose_a")), bool(node.attrs.get("transpose_b"))
    if node.inputs[0] is dlogits:
        return "contract" if ta else "rows"
    if node.inputs[1] is dlogits:
        return "cols" if tb else "contract"
    return None


def find(graph: Graph) -> list[Match]:
    """The LM-head + cross-entropy patterns of ``graph`` that can be chunked (rule in the docstring)."""
    users = graph.users()
    outputs = set(graph.output_values())
    position = {n: i for i, n in enumerate(graph.nodes)}
    matches = []
    for node in graph.nodes:
        if node.op != "cross_entropy":
            continue
        logits, target = node.inputs
        lse, loss = node.outputs[1], node.outputs[0]
        head = logits.producer
        if head is None or head.op != "matmul" or head.attrs.get("transpose_a") or head.inputs[0].type.rank != 2 \
                or head.inputs[1].type.rank != 2 or logits in outputs or lse in outputs:
            continue
        readers = users.get(logits, [])
        backs = [u for u in readers if u.op == "cross_entropy_backward"]
        if len(readers) != 1 + len(backs) or len(backs) > 1:
            continue
        if not backs:
            if users.get(lse):
                continue
            matches.append(Match(head, node, None, []))
            continue
        back = backs[0]
        dloss, b_logits, b_target, b_lse = back.inputs
        dlogits = back.outputs[0]
        if b_logits is not logits or b_target is not target or b_lse is not lse or users.get(lse) != [back] \
                or back.attrs != node.attrs or dlogits in outputs or dloss.shape != ():
            continue
        forms = [(u, _form(u, dlogits)) for u in users.get(dlogits, [])]
        if not forms or any(f is None for _, f in forms):
            continue
        at = position[back]
        others = [v for u, _ in forms for v in u.inputs if v is not dlogits]
        if any(v.producer is not None and position[v.producer] > at for v in others):
            continue
        if any(position[u] < at for u in users.get(loss, [])):
            continue
        matches.append(Match(head, node, back, forms))
    return matches


def max_chunks(rows: int) -> int:
    return max(1, rows // MIN_CHUNK_ROWS)


def chunk_count(logits_bytes: int, rows: int, room: int) -> int:
    """The smallest chunk count whose logits chunk fits in ``room`` bytes (see the docstring)."""
    largest = max(2, max_chunks(rows)) if rows >= 2 else 1
    if room <= 0:
        return largest
    return min(largest, max(2, math.ceil(logits_bytes / room)))


def step_us(match: Match, gpu) -> float:
    """The predicted cost of one more chunk (``chunk_cost_us(c + 1) - chunk_cost_us(c)``)."""
    return chunk_cost_us(match, 2, gpu) - chunk_cost_us(match, 1, gpu)


def cost_chunk_count(logits_bytes: int, rows: int, one_more_us: float, rate: float) -> int:
    """The largest chunk count at which one more chunk still frees more bytes per microsecond of its
    extra work than ``rate`` (the best rematerialization's bytes per microsecond), at least 2: the
    chunks beyond it cost more per byte than recomputing an activation."""
    count, largest = 2, max(2, max_chunks(rows))
    while count < largest and one_more_us > 0 and \
            (logits_bytes / count - logits_bytes / (count + 1)) / one_more_us >= rate:
        count += 1
    return count


def chunk_bounds(rows: int, chunks: int) -> list[tuple[int, int]]:
    """``chunks`` row ranges covering ``rows`` (see the docstring)."""
    chunks = max(1, min(chunks, rows))
    size = math.ceil(rows / chunks)
    if size >= ROW_ALIGNMENT and rows >= ROW_ALIGNMENT * chunks:
        size = math.ceil(size / ROW_ALIGNMENT) * ROW_ALIGNMENT
    return [(r, min(r + size, rows)) for r in range(0, rows, size)]


def chunk_cost_us(match: Match, chunks: int, gpu) -> float:
    """The chunked loss's extra DRAM traffic at the target's bandwidth: each contracted result
    summed over the chunks (read twice, written once per extra chunk) and each concatenated result
    copied once (read and written)."""
    moved = 0
    for node, form in match.readers:
        out = node.outputs[0].type.nbytes
        moved += 3 * out * (chunks - 1) if form == "contract" else 2 * out
    return moved / gpu.dram_bw * 1e6


def chunk_loss(graph: Graph, chunks: int) -> Graph:
    """A new graph with every matched pattern run over ``chunks`` row chunks (``graph`` unchanged)."""
    matches = find(graph)
    if not matches or chunks < 2:
        return graph
    at_node = {}
    skip = set()
    for m in matches:
        at_node[m.backward or m.loss] = m
        skip |= {m.head, m.loss} | ({m.backward} if m.backward else set()) | {u for u, _ in m.readers}
    rw = Rewriter(graph)
    for node in graph.nodes:
        m = at_node.get(node)
        if m is not None:
            _emit(rw, m, chunks)
        elif node not in skip:
            rw.copy(node)
    return dce(rw.finish())


def _emit(rw: Rewriter, m: Match, chunks: int) -> None:
    x, w = (rw.get(v) for v in m.head.inputs)
    logits_old, (target_old) = m.logits, m.loss.inputs[1]
    target = rw.get(target_old)
    attrs = dict(m.loss.attrs)
    reduction = attrs.get("reduction", "mean")
    ignore_index = int(attrs.get("ignore_index", -100))
    summed = {**attrs, "reduction": "sum"}
    origin = m.backward.origin if m.backward is not None else m.loss.origin   # the loop runs in the backward
    dtype = logits_old.dtype

    def op(name, *inputs, origin=origin, **a):
        outs = rw.emit(name, inputs, a, origin)
        return outs[0] if len(outs) == 1 else outs

    count = None
    if reduction == "mean":
        ignored = op("constant", value=ignore_index, dtype=target.dtype)
        kept = op("cast", op("ne", target, ignored), dtype=dtype)
        count = op("sum", kept, axes=(0,))
    dloss = None
    if m.backward is not None:
        dloss = rw.get(m.backward.inputs[0])
        if count is not None:
            one = op("constant", value=1.0, dtype=count.dtype)
            dloss = op("div", dloss, op("maximum", count, one), origin=m.backward.origin)
    pieces: dict[Node, list[Value]] = {u: [] for u, _ in m.readers}
    total = None
    for r0, r1 in chunk_bounds(logits_old.shape[0], chunks):
        x_k = op("slice", x, axis=0, start=r0, end=r1, origin=m.head.origin)
        t_k = op("slice", target, axis=0, start=r0, end=r1)
        logits_k = op("matmul", x_k, w, origin=m.head.origin, **m.head.attrs)
        loss_k, lse_k = op("cross_entropy", logits_k, t_k, **summed)
        total = loss_k if total is None else op("add", total, loss_k)
        if m.backward is None:
            continue
        dlogits_k = op("cross_entropy_backward", dloss, logits_k, t_k, lse_k, origin=m.backward.origin, **summed)
        for u, form in m.readers:
            piece = _reader_chunk(op, rw, u, form, m.backward.outputs[0], dlogits_k, r0, r1)
            if form == "contract" and pieces[u]:          # summed as the chunks come: one partial live
                piece = op("add", pieces[u].pop(), piece, origin=u.origin)
            pieces[u].append(piece)
    loss = op("div", total, count) if count is not None else total
    rw.env[m.loss.outputs[0]] = loss
    for u, form in m.readers:
        parts = pieces[u]
        if form == "contract":
            result = parts[0]
        else:
            result = op("concat", *parts, axis=0 if form == "rows" else 1, origin=u.origin)
        rw.env[u.outputs[0]] = result


def _reader_chunk(op, rw, node: Node, form: str, dlogits: Value, dlogits_k: Value, r0: int, r1: int) -> Value:
    """The chunk's share of ``node`` (a matmul reading ``dlogits``)."""
    a, b = node.inputs
    ta = bool(node.attrs.get("transpose_a"))
    if form == "contract":                  # the other operand's rows (or columns) r0:r1 are contracted too
        if a is dlogits:                    # dlogits^T @ b: b's rows
            other = op("slice", rw.get(b), axis=1 if node.attrs.get("transpose_b") else 0, start=r0, end=r1,
                       origin=node.origin)
            return op("matmul", dlogits_k, other, origin=node.origin, **node.attrs)
        other = op("slice", rw.get(a), axis=0 if ta else 1, start=r0, end=r1, origin=node.origin)
        return op("matmul", other, dlogits_k, origin=node.origin, **node.attrs)
    if a is dlogits:
        return op("matmul", dlogits_k, rw.get(b), origin=node.origin, **node.attrs)
    return op("matmul", rw.get(a), dlogits_k, origin=node.origin, **node.attrs)
