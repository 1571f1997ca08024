"""The combine kernels of split attention kernels: ``(AttentionProblem, AttentionSchedule, role) -> MLIR text``.

A kernel split over its streamed tiles (``KernelTile.splits`` = S > 1, ``build.py``: the forward's or
dQ's keys, dK/dV's query tiles) leaves S FP32 slabs of rows (``[B*H*Tq, D]``, dK/dV ``[B*Hkv*Tk, D]``);
its combine kernel reduces them into the outputs, one row per ``D / 4`` lanes, four columns a lane
(16-byte loads), every split's loads of a row issued together:

* ``fwd_combine``    the forward's slabs hold each split's normalised O_s and natural-log LSE_s:
                     M = max_s LSE_s,  w_s = exp(LSE_s - M),  O = sum_s w_s O_s / sum_s w_s,
                     LSE = M + ln(sum_s w_s)  (FlashDecoding's merge).  With a bias a split whose keys
                     are all masked has LSE_s = -inf (no weight); a row masked in every split gets O = 0,
                     LSE = +inf, as the unsplit kernel writes it.
* ``bwd_dq_combine`` the dQ kernel's slabs hold each split's scaled sum over its keys: dQ = sum_s dQ_s.
* ``bwd_dkv_combine`` the dK/dV kernel's two slab sets, each split's sums over its query tiles:
                     dK = sum_s dK_s, dV = sum_s dV_s.

Each lane reads its row's S LSE values itself (the same addresses across the row's lanes: one L1
transaction), so no shuffle is needed.  The output is written in the problem's dtype and strides
(``build.rows_at``), LSE contiguous.
"""
from __future__ import annotations

from nova.kernels.attention.build import LN2, LOG2E, element_at, global_type, rows_at, slab_rows, slab_type
from nova.kernels.attention.mlirtext import Text
from nova.kernels.attention.problem import AttentionProblem
from nova.kernels.attention.schedule import COMBINES, AttentionSchedule

KERNEL_NAMES = {"fwd_combine": "nova_attn_fwd_combine", "bwd_dq_combine": "nova_attn_bwd_dq_combine",
                "bwd_dkv_combine": "nova_attn_bwd_dkv_combine"}
PARAMS = {"fwd_combine": ("o_part", "lse_part", "out", "lse"), "bwd_dq_combine": ("dq_part", "dq"),
          "bwd_dkv_combine": ("dk_part", "dv_part", "dk", "dv")}
SUMS = {"bwd_dq_combine": (("dq_part", "dq"),), "bwd_dkv_combine": (("dk_part", "dk"), ("dv_part", "dv"))}
THREADS = 128
VEC = 4                     # FP32 columns a lane reads per slab (16 bytes)


def lanes_per_row(head_dim: int) -> int:
    return head_dim // VEC


def rows_per_block(head_dim: int) -> int:
    return THREADS // lanes_per_row(head_dim)


def build_combine(p: AttentionProblem, s: AttentionSchedule, role: str) -> str:
    kt = s.kernel(role)
    splits, D, T = kt.splits, p.head_dim, p.storage
    source = {v: k for k, v in COMBINES.items()}[role]             # the split kernel whose slabs it reads
    rows = slab_rows(p, source)
    vty = f"memref<{rows}xf32>"
    types = {n: slab_type(p, source, splits, n) if n.endswith("_part") else vty if n == "lse" else global_type(p, n)
             for n in PARAMS[role]}
    sty, lty = types[PARAMS[role][0]], types.get("lse_part")
    ir = Text()
    ir.emit(f"// Nova attention {role}: {splits} splits of {p.describe()}")
    lanes, rpb = lanes_per_row(D), rows_per_block(D)
    vec4 = "vector<4xf32>"
    with ir.kernel(KERNEL_NAMES[role], [f"%{n}: {types[n]}" for n in PARAMS[role]], THREADS,
                   minctasm=kt.blocks_per_sm):
        tid = ir.let("tid", "gpu.thread_id x")
        bx = ir.let("bx", "gpu.block_id x")
        row = ir.add(ir.mul(bx, rpb, "row0"), ir.div(tid, lanes, "r_in"), "row")
        lane = ir.rem(tid, lanes, "lane")
        col = ir.mul(lane, VEC, "col")
        ok = ir.cmp("slt", row, rows, "row_ok") if rows % rpb else True
        srow = ir.select(ok, row, 0, hint="srow")

        def slab_columns(slab):
            """This lane's four columns of its row in every split's slab (all loads issued first)."""
            return [ir.let("part", f"vector.load %{slab}[{ir.v(ir.add(ir.mul(ir.add(srow, z * rows, 'slab_row'), D, 'slab_off'), col, 'src'))}] "
                                   f": {sty}, {vec4}") for z in range(splits)]
        lse = None
        if role in SUMS:
            results = []
            for slab, out in SUMS[role]:
                acc, *rest = slab_columns(slab)
                for x in rest:
                    acc = ir.let("acc", f"arith.addf {acc}, {x} : {vec4}")
                results.append((out, acc))
        else:
            o, lse = merge(ir, p, splits, rows, slab_columns("o_part"), srow, lty)
            results = [("out", o)]
        stores = []
        for out, acc in results:
            if T != "f32":
                acc = ir.let("o_t", f"arith.truncf {acc} : {vec4} to vector<4x{T}>")
            stores.append((out, acc, element_at(ir, p, out, rows_at(ir, p, out, srow), 0, col, "dst")))

        def store():
            for out, acc, dst in stores:
                ir.emit(f"vector.store {acc}, %{out}[{ir.v(dst)}] {{alignment = {VEC * p.elem_bytes}}} : "
                        f"{types[out]}, vector<4x{T}>")
            if lse is not None:
                ir.guarded(ir.cmp("eq", lane, 0, "lead"), lambda: ir.emit(f"memref.store {lse}, %lse[{ir.v(row)}] : {vty}"))
        ir.guarded(ok, store)
    return ir.text()


def merge(ir, p: AttentionProblem, splits: int, rows: int, parts: list, srow, lty: str) -> tuple[str, str]:
    """(O, LSE) of a row from its splits' columns ``parts`` and their LSE (FlashDecoding's merge); with a
    bias, a row whose every split is masked (LSE_s = -inf throughout) gets O = 0 and LSE = +inf."""
    vec4 = "vector<4xf32>"
    ir.comment("M = max LSE_s, w_s = exp(LSE_s - M), O = sum w_s O_s / sum w_s, LSE = M + ln sum w_s")
    lses = [ir.let("lse_s", f"memref.load %lse_part[{ir.v(ir.add(srow, z * rows, 'lrow'))}] : {lty}")
            for z in range(splits)]
    m = lses[0]
    for x in lses[1:]:
        m = ir.fop("maximumf", m, x, "m")
    if p.bias:                      # every split masked: M = -inf, no finite weight
        dead = ir.let("row_masked", f"arith.cmpf oeq, {m}, {ir.let('ninf', 'arith.constant 0xFF800000 : f32')} : f32")
        m = ir.select(dead, ir.f(0.0), m, "f32", "m_live")
    neg_m = ir.fop("mulf", m, ir.f(-LOG2E), "neg_m")
    acc, total = None, None
    for x, part in zip(lses, parts):
        w = ir.exp2(ir.fma(x, ir.f(LOG2E), neg_m, "wx"))
        total = w if total is None else ir.fop("addf", total, w, "wsum")
        wv = ir.let("wv", f"vector.broadcast {w} : f32 to {vec4}")
        acc = ir.let("acc", f"arith.mulf {wv}, {part} : {vec4}") if acc is None else \
            ir.let("acc", f"vector.fma {wv}, {part}, {acc} : {vec4}")
    inv = ir.fop("divf", ir.f(1.0), total, "inv_w")
    lse = ir.fop("addf", m, ir.fop("mulf", ir.log2(total), ir.f(LN2), "ln_w"), "lse")
    if p.bias:
        inv = ir.select(dead, ir.f(0.0), inv, "f32", "inv_w")
        lse = ir.select(dead, ir.let("inf", "arith.constant 0x7F800000 : f32"), lse, "f32", "lse")
    return ir.let("o", f"arith.mulf {acc}, {ir.let('invv', f'vector.broadcast {inv} : f32 to {vec4}')} : {vec4}"), lse
