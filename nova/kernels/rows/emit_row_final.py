"""``row_final``: a split row reduction's result from the parts its row kernel wrote.

The workspace holds ``row_parts[row x splits + part]`` (f32, one slot per CTA of the row kernel).  Warp
``w`` of CTA ``bx`` owns row ``bx x warps + w``: lane ``l`` combines parts ``l, l + 32, ...`` in that
order, the 32 lane values meet in a fixed xor-shuffle tree, and lane 0 writes the row's result (the
mean's ``1 / n`` applied here), rounded to its type.  The parts are combined in the same order on every
run: no atomics, the same bits.
"""
from __future__ import annotations

import math

from nova.kernels.rows.abi import KERNEL_NAMES
from nova.kernels.rows.emit import LOWEST, RowsIr
from nova.kernels.rows.emit_row import param_types


def build_row_final(p, s) -> str:
    t = s.row
    ir = RowsIr()
    (_, out), = p.prologue.reduce
    op = {"sum": "add", "mean": "add", "max": "max", "min": "min"}[p.attr("op")]
    neutral = {"add": 0.0, "max": LOWEST, "min": -LOWEST}[op]
    combine = {"add": ir.fadd, "max": ir.fmax, "min": ir.fmin}[op]
    warps = t.final_threads // 32
    ir.emit(f"// Nova rows row final: {p.describe()}; {t.splits} parts a row, a warp per row, {warps} rows a CTA")
    with ir.rows_kernel(KERNEL_NAMES["row_final"], param_types(p, s, "row_final"), t.final_threads):
        tid = ir.let("tid", "gpu.thread_id x")
        bx = ir.let("bx", "gpu.block_id x")
        lane = ir.rem(tid, 32, "lane") if warps > 1 else tid
        warp = ir.div(tid, 32, "warp") if warps > 1 else 0
        row = ir.add(ir.mul(bx, warps, "row0"), warp, "row")
        row_ok = True if t.final_grid * warps == p.rows else ir.cmp("slt", row, p.rows, "row_ok")
        srow = ir.select(row_ok, row, 0, hint="srow")
        iters = math.ceil(t.splits / 32)
        with ir.loop(iters, [ir.f(neutral)], "k") as (k, (acc,), state):
            part = ir.add(ir.mul(k, 32, "k32"), lane, "part")
            ok = True if iters * 32 == t.splits else ir.cmp("slt", part, t.splits, "part_ok")
            got = ir.load("row_parts", ir.add(ir.mul(srow, t.splits, "slot0"),
                                              ir.select(ok, part, 0, hint="spart"), "slot"))[0]
            state["out"] = [combine(acc, ir.fsel(ok, got, ir.f(neutral)), "acc")]
        (total,) = state["results"]
        offset = 1
        while offset < 32:
            total = combine(total, ir.shfl_xor(total, offset), "red")
            offset *= 2
        if p.attr("op") == "mean":
            total = ir.fmul(total, ir.f(1.0 / p.n), "mean")
        ir.guarded(ir.and_(ir.cmp("eq", lane, 0, "lead"), row_ok), lambda: ir.store(out, row, [total]))
    return ir.text()
