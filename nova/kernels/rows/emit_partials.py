"""``partials_final``: the norms' weight/bias gradients from the partial rows their row kernel wrote
(``final_sum``: the same body serves the column stage's ``column_final``).

The workspace holds ``partials[gradient, cta, n]`` (f32).  CTA ``bx`` owns columns
``[bx * threads_cols * vec, +threads_cols * vec)``: thread (c, r) = (tid % threads_cols, tid /
threads_cols) reads ``vec`` columns (one 16-byte load for f32 x 4) of partial rows r, r + threads_rows,
... and adds them in that order; the ``threads_rows`` sums of a column meet in shared memory and row 0
adds them in order, then writes the gradient rounded to its type.  Every column's sum is added in the
same order on every run: no atomics, the same bits.
"""
from __future__ import annotations

import math

from nova.kernels.rows.abi import KERNEL_NAMES, partial_outputs
from nova.kernels.rows.emit import RowsIr
from nova.kernels.rows.emit_row import param_types


def build_partials_final(p, s) -> str:
    pt = s.partials
    ir = RowsIr()
    names = [o.name for o in partial_outputs(p)]
    ir.emit(f"// Nova rows partials final: {p.describe()}; {pt.partials} partial rows of {', '.join(names)}, "
            f"{pt.final_threads_cols}x{pt.final_threads_rows} threads, vec {pt.final_vec}")
    with ir.rows_kernel(KERNEL_NAMES["partials_final"], param_types(p, s, "partials_final"), pt.final_threads,
                        register_cap(pt.final_threads)):
        final_sum(ir, names, pt.partials, p.n, pt.final_vec, pt.final_threads_cols, pt.final_threads_rows,
                  unroll=pt.final_unroll)
    return ir.text()


def register_cap(threads: int) -> int:
    """One CTA of ``threads`` fits the register file (ptxas would aim for two)."""
    return min(255, 65536 // threads // 8 * 8)


def final_sum(ir: RowsIr, names: list, parts: int, n: int, vec: int, tc: int, tr: int, scale: float = 1.0,
              unroll: int = 1) -> None:
    """The body of a kernel adding ``parts`` partial rows (``partials[name, part, n]``, f32) per name of
    ``names``: CTA ``bx`` owns columns ``[bx * tc * vec, +tc * vec)``, thread (c, r) adds partial rows
    r, r + tr, ... of its ``vec`` columns, ``unroll`` of them loaded before they are added (in order);
    the ``tr`` sums of a column meet in shared memory and row 0 adds them in order, scales them by
    ``scale`` and stores them (rounded to each output's type)."""
    tid = ir.let("tid", "gpu.thread_id x")
    bx = ir.let("bx", "gpu.block_id x")
    tcol = ir.rem(tid, tc, "tcol") if tr > 1 else tid
    trow = ir.div(tid, tc, "trow") if tr > 1 else 0
    col = ir.mul(ir.add(ir.mul(bx, tc, "cb"), tcol, "cv"), vec, "col")
    ok_c = True if n % (tc * vec) == 0 else ir.cmp("slt", col, n, "col_ok")
    safe_c = ir.select(ok_c, col, 0, hint="safe_col")
    zero = ir.f(0.0)
    iters = math.ceil(parts / tr)              # unroll divides it (derive.final_sum_tile)
    with ir.loop(iters // unroll, [zero] * (len(names) * vec), "k") as (k, acc, state):
        loaded = []
        for u in range(unroll):
            step = ir.add(ir.mul(k, unroll, "ku"), u, "kstep") if unroll > 1 else k
            r = ir.add(ir.mul(step, tr, "kr"), trow, "r")
            ok_r = True if iters * tr == parts else ir.cmp("slt", r, parts, "r_ok")
            sr = ir.select(ok_r, r, 0, hint="sr")
            loaded.append((ok_r, [ir.load("partials", ir.add(ir.mul(ir.add(sr, q * parts, "slab"), n, "prow"), safe_c,
                                                             "poff"), vec) for q in range(len(names))]))
        out = list(acc)
        for ok_r, got in loaded:
            for q in range(len(names)):
                for j in range(vec):
                    out[q * vec + j] = ir.fadd(out[q * vec + j], ir.fsel(ok_r, got[q][j], zero), "acc")
        state["out"] = out
    sums = state["results"]
    ordered, lead = thread_rows_sum(ir, sums, len(names), vec, tc, tr, tcol, trow)

    def write():
        totals = ordered()
        if scale != 1.0:
            totals = [ir.fmul(v, ir.f(scale), "scaled") for v in totals]
        for q, name in enumerate(names):
            ir.store(name, col, totals[q * vec:(q + 1) * vec])
    ir.guarded(ir.and_(lead, ok_c), write)


def thread_rows_sum(ir: RowsIr, sums: list, count: int, vec: int, tc: int, tr: int, tcol, trow):
    """``(ordered, lead)``: the ``tr`` thread rows' values ``sums`` (``count`` x ``vec`` per thread, for
    ``tc`` threads along the columns) met in shared memory; ``ordered()``, called by the ``lead`` threads
    (thread row 0), adds each column's ``tr`` values in thread-row order (a fixed order: the same bits
    every run).  One thread row: the values themselves, every thread a lead."""
    if tr == 1:
        return (lambda: sums), True
    width = tc * vec
    size = count * tr * width
    sm = ir.smem_f32(0, size)
    smty = f"memref<{size}xf32, #smem>"
    for q in range(count):
        for j in range(vec):
            at = ir.add(ir.add(ir.mul(trow, width, "sr_off"), ir.mul(tcol, vec, "sc_off")), q * tr * width + j)
            ir.emit(f"memref.store {sums[q * vec + j]}, {sm}[{ir.v(at)}] : {smty}")
    ir.emit("gpu.barrier")

    def ordered():
        out = []
        for q in range(count):
            for j in range(vec):
                total = None
                for w in range(tr):
                    at = ir.add(ir.mul(tcol, vec, "sc_off"), q * tr * width + w * width + j)
                    v = ir.let("pv", f"memref.load {sm}[{ir.v(at)}] : {smty}")
                    total = v if total is None else ir.fadd(total, v, "psum")
                out.append(total)
        return out
    return ordered, ir.cmp("eq", trow, 0, "first_row")
