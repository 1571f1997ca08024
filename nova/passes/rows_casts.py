"""Casts fused into rows kernels: the casts of a mixed-precision step placed next to the rows ops that
take them (``place_casts``), and what taking one saves (``cast_saving``, the fusion pass's rule).

Under ``torch.autocast`` a step casts around its rows ops: the LM head's bf16 logits to f32 before the
cross-entropy (read by its forward and its backward), the f32 logits' gradient back to bf16 for the
head's GEMMs, each f32 LayerNorm output to bf16 for the next GEMM, each bf16 GEMM gradient to f32
before the LayerNorm backward.  A rows kernel reads every operand in its own storage type and computes
in FP32, and writes each result in its own type (``nova/kernels/rows``), so such a cast is free inside
it: a widening cast (bf16/f16 -> f32, exact) feeding a row input is read as its source, and a cast of
an f32 row result is the kernel writing that result in the cast's type (rounded once, to nearest even,
as the cast rounds).  ``nova/passes/fusion.py`` joins such a cast to the rows op's group when
``cast_saving`` is positive; ``rows_from_ir.fused_casts`` binds the operands.

The capture puts views between them (``cast(reshape(ln_out))``, ``reshape(cast(logits))`` read by
both cross-entropy ops).  ``place_casts`` rewrites, values unchanged (a cast commutes with a reshape):

    epilogue   y -> reshape* -> cast          becomes   y -> cast -> reshape*
               (y a rows op's row result, f32, each value of the chain read only by the next)
    prologue   x -> cast -> reshape* -> r_k   becomes   x -> reshape* -> cast -> r_k, one chain per r_k
               (a widening cast whose every reader, through reshapes, reads it as a row input of a
               rows op r_k: the cast disappears, each rows kernel reads x in its own type)

and leaves every other cast where it is (a cast also read by a GEMM or a pointwise op stays one
kernel).  Source: the rows kernels' loads and stores (``nova/kernels/rows/emit.py``), the bytes of
``RowsProblem.bytes_moved``.
"""
from __future__ import annotations

from nova.ir.graph import Graph, Node, Value
from nova.passes.dce import dce
from nova.passes.rewrite import Rewriter
from nova.passes.rows_from_ir import ROW_INPUTS, ROW_OUTPUTS, over_last_axes, reads_through_cast, writes_through_cast


def cast_saving(casts, unfused, fused) -> int:
    """DRAM bytes one rows kernel of problem ``fused`` saves over the rows kernel of ``unfused`` and the
    ``casts``' own kernels (each reads its input and writes its result once):
    ``unfused.bytes_moved + sum(cast bytes) - fused.bytes_moved``.  A widening cast fused as the
    prologue saves twice its f32 value (written by the cast, read by the rows kernel), a cast fused as
    the epilogue twice the f32 result (written by the rows kernel, read by the cast); one launch each."""
    cast_bytes = sum(c.inputs[0].type.nbytes + c.outputs[0].type.nbytes for c in casts)
    return unfused.bytes_moved + cast_bytes - fused.bytes_moved


# ------------------------------------------------------------------ the rewrite
def _sole_reader(v: Value, users, outputs) -> Node | None:
    readers = list(dict.fromkeys(users.get(v, ())))
    return readers[0] if len(readers) == 1 and v not in outputs else None


def _epilogue_chain(node: Node, users, outputs) -> tuple[list[Node], Node] | None:
    """(reshapes, cast) after ``node``'s row result: the chain to move the cast ahead of, or None."""
    if node.op not in ROW_OUTPUTS or not over_last_axes(node):
        return None
    v, chain = node.outputs[ROW_OUTPUTS[node.op]], []
    if v.dtype != "f32":
        return None
    reader = _sole_reader(v, users, outputs)
    while reader is not None and reader.op == "reshape":
        chain.append(reader)
        reader = _sole_reader(reader.outputs[0], users, outputs)
    if not chain or reader is None or not writes_through_cast(reader):
        return None
    return chain, reader


def _prologue_readers(cast: Node, users, outputs) -> list[tuple[Node, int, list[Node]]] | None:
    """Every reader of ``cast``'s value, each ``(rows op, input position, reshapes on the way)``; None
    when some reader is no rows op's row input (then the cast stays a kernel of its own)."""
    found = []

    def walk(v: Value, path: list[Node]) -> bool:
        if v in outputs:
            return False
        for reader in dict.fromkeys(users.get(v, ())):
            if reader.op == "reshape":
                if not walk(reader.outputs[0], path + [reader]):
                    return False
                continue
            places = [i for i, x in enumerate(reader.inputs) if x is v]
            if not places or not over_last_axes(reader) or any(i not in ROW_INPUTS.get(reader.op, ()) for i in places):
                return False
            found.extend((reader, i, path) for i in places)
        return True
    if not reads_through_cast(cast) or not walk(cast.outputs[0], []):
        return None
    return found


def place_casts(graph: Graph) -> Graph:
    """``graph`` with each cast a rows op can take moved next to it (module docstring); the graph itself
    when there is none."""
    users, outputs = graph.users(), set(graph.output_values())
    epilogues = {}                                  # first reshape of a chain -> (chain, cast)
    prologues: dict[Node, dict[int, tuple[Node, list[Node]]]] = {}      # rows op -> {input: (cast, reshapes)}
    for node in graph.nodes:
        found = _epilogue_chain(node, users, outputs)
        if found is not None:
            epilogues[found[0][0]] = found
        if node.op == "cast":
            readers = _prologue_readers(node, users, outputs)
            if readers and (len(readers) > 1 or readers[0][2]):       # not already next to its one reader
                for reader, i, path in readers:
                    prologues.setdefault(reader, {})[i] = (node, path)
    if not epilogues and not prologues:
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node in epilogues:
            chain, cast = epilogues[node]
            (v,) = rw.emit("cast", [rw.get(chain[0].inputs[0])], cast.attrs, cast.origin)
            for view in chain:
                (v,) = rw.emit("reshape", [v], view.attrs, view.origin)
            rw.env[cast.outputs[0]] = v              # the old chain and cast are dead now
        if node in prologues:
            inputs = [rw.get(x) for x in node.inputs]
            for i, (cast, path) in prologues[node].items():
                v = rw.get(cast.inputs[0])
                for view in path:
                    (v,) = rw.emit("reshape", [v], view.attrs, view.origin)
                (inputs[i],) = rw.emit("cast", [v], cast.attrs, cast.origin)
            for old, new in zip(node.outputs, rw.emit(node.op, inputs, node.attrs, node.origin)):
                rw.env[old] = new
            continue
        if not (node.op == "cast" and node.outputs[0] in rw.env):
            rw.copy(node)
    return dce(rw.finish())
