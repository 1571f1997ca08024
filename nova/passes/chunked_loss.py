"""Chunked loss: the LM head and its cross-entropy run over row chunks, so the ``[N, vocab]``
logits are never written in full, forward or backward.

Matched (after ``cross_entropy.py`` fused log-softmax + NLL and ``rows_casts.py`` placed the casts):

    logits        = matmul(x, w, ...)                     x [N, K], not transposed: row i of logits is row i of x
    loss, lse     = cross_entropy(logits', target)        lse read only by the backward below
    dlogits       = cross_entropy_backward(dloss, logits'', target, lse)   (absent in a forward-only graph)
    grad          = dlogits, or cast(dlogits)             (autocast: the f32 gradient narrowed for the GEMMs)
    r_j           = matmul(...grad...)                    every reader of grad a 2-D matmul (any operand,
                                                          any transpose), its other operand defined before
                                                          the backward

where ``logits'`` and ``logits''`` are ``logits`` or a ``cast`` of it read only by the cross-entropy
ops (autocast's bf16/f16 logits widened to f32: one cast each, or one shared), and nothing else
reads ``logits``, ``lse``, ``dlogits`` or ``grad`` (none of them a graph output); readers of ``loss``
come after the backward.  Rewritten, at the backward's position (the forward's, with no backward),
for each chunk ``k`` of rows ``[r0, r1)``, each cast repeated on the chunk:

    logits_k           = matmul(slice(x, r0:r1), w)
    loss_k, lse_k      = cross_entropy(logits_k', target_k, reduction="sum")
    dlogits_k          = cross_entropy_backward(dloss', logits_k'', target_k, lse_k, reduction="sum")
    r_j pieces         rows of the result (grad as the row operand): concat over k, axis 0
                       columns (grad as the transposed right operand): concat over k, axis 1
                       contracted over rows (the weight gradient): the sum over k of matmul(grad_k, slice(other)),
                       summed in f32 when the result is 16-bit (each piece a GEMM with an f32 result,
                       the sum rounded once to the result's type, as the unchunked GEMM rounds)

Semantics kept exactly (up to summation order): ``reduction="mean"`` divides the sum of the chunk
sums by the count of non-ignored targets (``0/0 = nan`` with none, as torch), and the backward
scales ``dloss`` by ``1 / max(count, 1)`` (torch's zero gradient with none); ``"sum"`` needs neither.
A chunk's logits die at its backward, which writes ``dlogits_k`` over them (the planner's in-place
rule) and dies at its last matmul: the logits' memory is one chunk's.  The row pieces are written
by their GEMMs straight into the concat's buffer (``storage.py``, rule 1): that concat launches
nothing.

Chunk count (``chunk_count``): the smallest ``c`` whose chunk fits in the bytes left beside the
rest of the plan, ``ceil(L / room)``, between 2 and ``max_chunks(N)`` (chunks of at least
``MIN_CHUNK_ROWS`` rows: a chunk's GEMM still fills every SM).  Each chunk beyond the first costs
one more pass over the contracted results (the weight gradient's running sum, ``chunk_cost_us``),
so ``budget.py`` stops at ``cost_chunk_count`` when rematerialization frees bytes more cheaply.  Rows per chunk are
``ceil(N / c)`` rounded up to ``ROW_ALIGNMENT`` when N allows (aligned slices), the last chunk short.
Without a budget, ``memory_policy.py`` prices each count with the step-time model instead.
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
    readers: list[tuple[Node, str]]     # each reader of the gradient and its form: rows, cols, contract
    loss_cast: Node | None = None       # cast(logits) the cross-entropy reads (autocast), else None
    backward_cast: Node | None = None   # cast(logits) the backward reads (possibly loss_cast), else None
    gradient_cast: Node | None = None   # cast(dlogits) the head's GEMMs read (autocast), else None

    @property
    def logits(self) -> Value:
        return self.head.outputs[0]

    @property
    def gradient(self) -> Value | None:
        """What the head's backward GEMMs read: ``dlogits`` or its cast."""
        if self.backward is None:
            return None
        return (self.gradient_cast or self.backward).outputs[0]


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


def _cast_of(v: Value, users, outputs) -> Node | None:
    """The ``cast`` producing ``v`` when its result is no graph output, else None."""
    node = v.producer
    return node if node is not None and node.op == "cast" and v not in outputs else None


def _loss_readers(logits: Value, users, outputs) -> list[tuple[Node, Node | None]] | None:
    """Every reader of ``logits`` as ``(reader, the cast it reads through or None)``; None when a
    cast's result is a graph output."""
    found = []
    for u in dict.fromkeys(users.get(logits, ())):
        if u.op == "cast":
            if u.outputs[0] in outputs:
                return None
            found += [(w, u) for w in dict.fromkeys(users.get(u.outputs[0], ()))]
        else:
            found.append((u, None))
    return found


def find(graph: Graph) -> list[Match]:
    """The LM-head + cross-entropy patterns of ``graph`` that can be chunked (rule in the docstring)."""
    users = graph.users()
    outputs = set(graph.output_values())
    position = {n: i for i, n in enumerate(graph.nodes)}
    matches = []
    for node in graph.nodes:
        if node.op != "cross_entropy":
            continue
        read, target = node.inputs
        lse, loss = node.outputs[1], node.outputs[0]
        loss_cast = _cast_of(read, users, outputs)
        logits = loss_cast.inputs[0] if loss_cast is not None else read
        head = logits.producer
        if head is None or head.op != "matmul" or head.attrs.get("transpose_a") or head.inputs[0].type.rank != 2 \
                or head.inputs[1].type.rank != 2 or logits in outputs or lse in outputs:
            continue
        readers = _loss_readers(logits, users, outputs)
        if readers is None or any(r.op not in ("cross_entropy", "cross_entropy_backward") for r, _ in readers):
            continue
        backs = [(r, c) for r, c in readers if r.op == "cross_entropy_backward"]
        if [r for r, _ in readers if r.op == "cross_entropy"] != [node] or len(backs) > 1:
            continue
        if not backs:
            if users.get(lse):
                continue
            matches.append(Match(head, node, None, [], loss_cast))
            continue
        back, backward_cast = backs[0]
        dloss, b_logits, b_target, b_lse = back.inputs
        dlogits = back.outputs[0]
        if b_logits is not (backward_cast.outputs[0] if backward_cast is not None else logits) \
                or b_target is not target or b_lse is not lse or users.get(lse) != [back] \
                or back.attrs != node.attrs or dlogits in outputs or dloss.shape != ():
            continue
        gradient_cast = None
        dlogit_readers = list(dict.fromkeys(users.get(dlogits, ())))
        if len(dlogit_readers) == 1 and dlogit_readers[0].op == "cast":
            gradient_cast = dlogit_readers[0]
            if gradient_cast.outputs[0] in outputs:
                continue
        gradient = (gradient_cast or back).outputs[0]
        forms = [(u, _form(u, gradient)) for u in users.get(gradient, [])]
        if not forms or any(f is None for _, f in forms):
            continue
        at = position[back]
        others = [v for u, _ in forms for v in u.inputs if v is not gradient]
        if any(v.producer is not None and position[v.producer] > at for v in others):
            continue
        if any(position[u] < at for u in users.get(loss, [])):
            continue
        matches.append(Match(head, node, back, forms, loss_cast, backward_cast, gradient_cast))
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
    summed over the chunks (read twice, written once per extra chunk, in f32) and each result
    concatenated along columns copied once (read and written); row pieces cost nothing (their
    GEMMs write the concat's buffer)."""
    moved = 0
    for node, form in match.readers:
        out = node.outputs[0].type
        if form == "contract":              # the running sum, in f32 (a 16-bit result summed wide)
            moved += 3 * math.prod(out.shape) * max(out.itemsize, 4) * (chunks - 1)
        elif form == "cols":                # rows pieces are written into the concat's buffer: no copy
            moved += 2 * out.nbytes
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
        skip |= {m.head, m.loss} | {n for n in (m.backward, m.loss_cast, m.backward_cast, m.gradient_cast) if n} \
            | {u for u, _ in m.readers}
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
    dtype = m.loss.inputs[0].dtype                # what the cross-entropy reads (f32 under autocast)

    def op(name, *inputs, origin=origin, **a):
        outs = rw.emit(name, inputs, a, origin)
        return outs[0] if len(outs) == 1 else outs

    def cast(cast_node, v):
        return v if cast_node is None else op("cast", v, origin=cast_node.origin, **cast_node.attrs)

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
        loss_in = cast(m.loss_cast, logits_k)
        loss_k, lse_k = op("cross_entropy", loss_in, t_k, **summed)
        total = loss_k if total is None else op("add", total, loss_k)
        if m.backward is None:
            continue
        backward_in = loss_in if m.backward_cast is m.loss_cast else cast(m.backward_cast, logits_k)
        dlogits_k = op("cross_entropy_backward", dloss, backward_in, t_k, lse_k, origin=m.backward.origin, **summed)
        gradient_k = cast(m.gradient_cast, dlogits_k)
        for u, form in m.readers:
            piece = _reader_chunk(op, rw, u, form, m.gradient, gradient_k, r0, r1)
            if form == "contract" and pieces[u]:          # summed as the chunks come: one partial live
                piece = op("add", pieces[u].pop(), piece, origin=u.origin)
            pieces[u].append(piece)
    loss = op("div", total, count) if count is not None else total
    rw.env[m.loss.outputs[0]] = loss
    for u, form in m.readers:
        parts = pieces[u]
        if form == "contract":
            result = parts[0]
            if result.dtype != u.outputs[0].dtype:      # summed in f32: rounded once to the result's type
                result = op("cast", result, origin=u.origin, dtype=u.outputs[0].dtype)
        else:
            result = op("concat", *parts, axis=0 if form == "rows" else 1, origin=u.origin)
        rw.env[u.outputs[0]] = result


WIDE = "f32"
NARROW = ("bf16", "f16")


def _reader_chunk(op, rw, node: Node, form: str, gradient: Value, gradient_k: Value, r0: int, r1: int) -> Value:
    """The chunk's share of ``node`` (a matmul reading ``gradient``); a contracted piece of a 16-bit
    result is computed with an f32 result (``out_dtype``), to be summed wide."""
    a, b = node.inputs
    ta = bool(node.attrs.get("transpose_a"))
    if form == "contract":                  # the other operand's rows (or columns) r0:r1 are contracted too
        attrs = dict(node.attrs)
        if node.outputs[0].dtype in NARROW:
            attrs["out_dtype"] = WIDE
        if a is gradient:                   # gradient^T @ b: b's rows
            other = op("slice", rw.get(b), axis=1 if node.attrs.get("transpose_b") else 0, start=r0, end=r1,
                       origin=node.origin)
            return op("matmul", gradient_k, other, origin=node.origin, **attrs)
        other = op("slice", rw.get(a), axis=0 if ta else 1, start=r0, end=r1, origin=node.origin)
        return op("matmul", other, gradient_k, origin=node.origin, **attrs)
    if a is gradient:
        return op("matmul", gradient_k, rw.get(b), origin=node.origin, **node.attrs)
    return op("matmul", rw.get(a), gradient_k, origin=node.origin, **node.attrs)
