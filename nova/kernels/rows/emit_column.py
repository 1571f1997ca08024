"""The column kernels (sums over rows: weight, bias and other gradients) and the single-CTA loss kernels.

``column``: CTA (x, s) of ``threads_cols x threads_rows`` threads; thread (tc, tr) owns ``vec``
consecutive columns from ``(x * threads_cols + tc) * vec`` and adds rows ``s * rows_per_split + tr``,
``+ threads_rows``, ... of split ``s``, ``unroll`` rows a loop trip (all their loads issued before the
first add: that many loads in flight), evaluating the prologue per element (its stored values are
written on the way).  The ``threads_rows`` partial sums meet in shared memory and row 0 of the CTA
adds them in order; it writes the result (``splits`` = 1: scaled and rounded to the output type) or
the split's partial (f32) into the workspace.  ``column_final``: threads along the columns and the
partials add each column's partials in a fixed order (``emit_partials.final_sum``).  No atomics: the
same bits every run.

``total`` (cross-entropy forward): one CTA adds the per-row losses and counts the kept targets, rows in a
fixed order, and writes the loss (mean: the sum over the count).  ``total_pre`` (its backward): the
count, and dloss / count (mean; dloss for sum) as the scale the row kernel reads.
"""
from __future__ import annotations

import math

from nova.kernels.rows.abi import KERNEL_NAMES
from nova.kernels.rows.emit import RowsIr, evaluate
from nova.kernels.rows.emit_partials import final_sum, register_cap, thread_rows_sum
from nova.kernels.rows.emit_row import param_types
from nova.kernels.rows.kinds import column_problem


def _block_sum(ir: RowsIr, tid, threads: int, vals: list[str]) -> list[str]:
    """Sums over the CTA (warp shuffles, then one shared-memory slot per warp and value), valid in thread 0."""
    off = 1
    while off < min(threads, 32):
        vals = [ir.fadd(v, ir.shfl_xor(v, off), "wsum") for v in vals]
        off *= 2
    warps, nv = threads // 32, len(vals)
    if warps <= 1:
        return vals
    sm = ir.smem_f32(0, warps * nv)
    smty = f"memref<{warps * nv}xf32, #smem>"
    lane, warp = ir.rem(tid, 32, "lane32"), ir.div(tid, 32, "warp")
    ir.guarded(ir.cmp("eq", lane, 0, "wlead"),
               lambda: [ir.emit(f"memref.store {v}, {sm}[{ir.v(ir.add(ir.mul(warp, nv), i))}] : {smty}")
                        for i, v in enumerate(vals)])
    ir.emit("gpu.barrier")
    acc = [ir.let("wv", f"memref.load {sm}[{ir.v(i)}] : {smty}") for i in range(nv)]
    for w in range(1, warps):
        acc = [ir.fadd(a, ir.let("wv", f"memref.load {sm}[{ir.v(w * nv + i)}] : {smty}"), "bsum")
               for i, a in enumerate(acc)]
    return acc


def build_column(p, s) -> str:
    colp, ct = column_problem(p), s.column
    ir = RowsIr()
    pro = colp.prologue
    vec, tc, tr = ct.vec, ct.threads_cols, ct.threads_rows
    reduced = [name for _, name in pro.reduce]
    stored = [(i, name) for i, name in pro.store]
    scale = 1.0 / colp.rows if colp.attr("op") == "mean" else 1.0
    ir.emit(f"// Nova rows column stage: {colp.describe()}; {tc}x{tr} threads, vec {vec}, {ct.splits} splits of "
            f"{ct.rows_per_split} rows")
    with ir.rows_kernel(KERNEL_NAMES["column"], param_types(p, s, "column"), ct.threads):
        tid = ir.let("tid", "gpu.thread_id x")
        bx, by = ir.let("bx", "gpu.block_id x"), ir.let("by", "gpu.block_id y")
        tcol = ir.rem(tid, tc, "tcol") if tr > 1 else tid
        trow = ir.div(tid, tc, "trow") if tr > 1 else 0
        col = ir.mul(ir.add(ir.mul(bx, tc, "cb"), tcol, "cv"), vec, "col")
        ok_c = True if colp.n % (tc * vec) == 0 else ir.cmp("slt", col, colp.n, "col_ok")
        safe_c = ir.select(ok_c, col, 0, hint="safe_col")
        fixed = {o.name: ir.load(o.name, 0)[0] for o in colp.inputs if o.layout == "scalar"}
        cols = {o.name: ir.load(o.name, safe_c, vec) for o in colp.inputs if o.layout == "col"}
        r0 = ir.mul(by, ct.rows_per_split, "r0")
        iters = math.ceil(ct.rows_per_split / tr)
        unroll = ct.unroll                          # divides iters (derive.column_unroll)
        zero = ir.f(0.0)
        with ir.loop(iters // unroll, [zero] * (len(reduced) * vec)) as (k, acc, state):
            loaded = []                             # every row's loads first: ``unroll`` rows in flight
            for u in range(unroll):
                step = ir.add(ir.mul(k, unroll, "ku"), u, "kstep") if unroll > 1 else k
                local = ir.add(ir.mul(step, tr, "kr"), trow, "rloc")
                r = ir.add(r0, local, "r")
                ok_r = True if ct.splits * ct.rows_per_split == colp.rows else ir.cmp("slt", r, colp.rows, "r_ok")
                if ct.rows_per_split % tr:
                    ok_r = ir.and_(ok_r, ir.cmp("slt", local, ct.rows_per_split, "in_split"))
                sr = ir.select(ok_r, r, 0, hint="sr")
                env = dict(fixed)
                rows = {}
                for o in colp.inputs:
                    if o.layout == "per_row":
                        env[o.name] = ir.load(o.name, sr)[0]
                    elif o.layout == "row":
                        rows[o.name] = ir.load(o.name, ir.add(ir.mul(sr, o.stride, f"{o.name}_r"), safe_c,
                                                              f"{o.name}_off"), vec)
                loaded.append((r, ok_r, env, rows))
            out = list(acc)
            for r, ok_r, env, rows in loaded:
                keep: dict[str, list] = {}
                for j in range(vec):
                    e = {**env, **{n: v[j] for n, v in rows.items()}, **{n: v[j] for n, v in cols.items()}}
                    vals = evaluate(ir, pro, e)
                    for q, (index, _) in enumerate(pro.reduce):
                        out[q * vec + j] = ir.fadd(out[q * vec + j], ir.fsel(ok_r, vals[index], zero), "acc")
                    for index, name in stored:
                        keep.setdefault(name, []).append(vals[index])
                if keep:
                    ir.guarded(ir.and_(ok_r, ok_c), lambda r=r, keep=keep: [
                        ir.store(n, ir.add(ir.mul(r, colp.operand(n).stride, "st_r"), col, "st_off"), vs)
                        for n, vs in keep.items()])
            state["out"] = out
        acc = state["results"]
        row_sum, lead = thread_rows_sum(ir, acc, len(reduced), vec, tc, tr, tcol, trow)

        def write():
            sums = row_sum()
            for q, name in enumerate(reduced):
                vs = sums[q * vec:(q + 1) * vec]
                if ct.splits == 1:
                    ir.store(name, col, [ir.fmul(v, ir.f(scale), "scaled") if scale != 1.0 else v for v in vs])
                else:
                    ir.store("partials", ir.add(ir.mul(ir.add(by, q * ct.splits, "slab"), colp.n, "slab_off"), col,
                                                "p_off"), vs)
        ir.guarded(ir.and_(lead, ok_c), write)
    return ir.text()


def build_column_final(p, s) -> str:
    """``column_final``: each column's split partials added (``emit_partials.final_sum``: threads along
    the columns and the partials, met in shared memory in order), scaled for a mean."""
    colp, ct = column_problem(p), s.column
    ir = RowsIr()
    reduced = [name for _, name in colp.prologue.reduce]
    scale = 1.0 / colp.rows if colp.attr("op") == "mean" else 1.0
    ir.emit(f"// Nova rows column final stage: {colp.describe()}; {ct.splits} partials per column, "
            f"{ct.final_threads_cols}x{ct.final_threads_rows} threads, vec {ct.final_vec}")
    with ir.rows_kernel(KERNEL_NAMES["column_final"], param_types(p, s, "column_final"), ct.final_threads,
                        register_cap(ct.final_threads)):
        final_sum(ir, reduced, ct.splits, colp.n, ct.final_vec, ct.final_threads_cols, ct.final_threads_rows, scale,
                  ct.final_unroll)
    return ir.text()


def build_total(p, s, role: str) -> str:
    """``total``: the loss from the per-row losses; ``total_pre``: the backward's scale."""
    ir = RowsIr()
    threads, rows = s.total_threads, p.rows
    mean = p.attr("reduction", "mean") == "mean"
    ir.emit(f"// Nova rows {role}: {p.describe()}; one CTA of {threads} threads over {rows} rows")
    with ir.rows_kernel(KERNEL_NAMES[role], param_types(p, s, role), threads):
        tid = ir.let("tid", "gpu.thread_id x")
        ty = p.operand("target").dtype
        ignore = ir.const(p.attr("ignore_index", -100), ty)
        zero, one = ir.f(0.0), ir.f(1.0)
        carry = [zero, zero] if role == "total" else [zero]
        with ir.loop(math.ceil(rows / threads), carry, "i") as (k, acc, state):
            r = ir.add(ir.mul(k, threads, "r0"), tid, "r")
            ok = True if rows % threads == 0 else ir.cmp("slt", r, rows, "r_ok")
            sr = ir.select(ok, r, 0, hint="sr")
            t = ir.load_raw("target", sr)
            keep = ir.pure("keep", f"arith.cmpi ne, {t}, {ignore} : {ty}")
            count = ir.fadd(acc[-1], ir.fsel(ir.and_(ok, keep), one, zero), "cnt")
            if role == "total":
                loss = ir.load("rowloss", sr)[0]
                state["out"] = [ir.fadd(acc[0], ir.fsel(ok, loss, zero), "lsum"), count]
            else:
                state["out"] = [count]
        sums = _block_sum(ir, tid, threads, state["results"])

        def finish():
            count = sums[-1]
            if role == "total":
                ir.store("loss", 0, [ir.fdiv(sums[0], count, "mean_loss") if mean else sums[0]])
            else:
                dloss = ir.load("dloss", 0)[0]
                ir.store("scale", 0, [ir.fdiv(dloss, ir.fmax(count, one), "scale") if mean else dloss])
        ir.guarded(ir.cmp("eq", tid, 0, "first"), finish)
    return ir.text()
