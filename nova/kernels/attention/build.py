"""The attention kernel builder: ``(AttentionProblem, AttentionSchedule, role) -> MLIR text``.

Four FlashAttention-2-style kernels on ``mma.sync`` + ``cp.async`` (sm_80+; also sm_90; where the
schedule puts the forward on TMA + wgmma, ``schedule.tma``, ``build_module`` hands it to ``build_hopper``, and
a Hopper dK/dV or dQ tile, ``KernelTile.hopper``, to ``build_hopper_bwd``):

* ``fwd``      grid (Q tiles, B*H).  The block's Q tile stays in shared memory; K/V tiles stream
               through a ``stages``-deep cp.async ring.  Per KV tile: S = Q K^T (FP32), online
               softmax in base 2 (scale*log2 e folded into one FMA), O += P V with P taken straight
               from the S accumulators (the FA2 register trick; for TF32 the key order inside each
               group of 8 is permuted so the accumulator layout *is* the A-fragment layout, and V's
               rows are read in the same order).  Causal: KV tiles wholly above the diagonal are never
               visited; only tiles that cross the diagonal or the key tail run the masking branch.
               Writes O and the natural-log LSE per row.
* ``bwd_pre``  D = rowsum(dO * O) (FP32), 8 lanes per row.
* ``bwd_dkv``  grid (KV tiles, B*Hkv).  K/V tiles stay; Q, dO, LSE and D tiles stream (over every
               query head of the group for GQA).  S^T = K Q^T and dP^T = V dO^T are computed
               transposed, so P^T and dS^T are already A fragments: dV += P^T dO, dK += dS^T Q, with
               no shared-memory round trip and no cross-warp reduction.
* ``bwd_dq``   grid (Q tiles, B*H).  Q and dO stay; K/V stream.  S, dP recomputed; dQ += dS K.
               (dQ by a separate pass, not atomics: deterministic, no FP32 dQ scratch; see derive.py.)

Splits (``KernelTile.splits`` > 1, a grid that leaves SMs idle): the grid gains a z axis; block z
walks steps [z*per, (z+1)*per) of its streamed loop (``split_range``: ``per`` = ceil(steps / splits),
cut at the block's own count) and writes FP32 partials, one slab per split: split KV (forward and dQ of
a non-causal problem with few query tiles: ``[B*H*Tq, D]`` slabs) -- the forward its normalised O and
natural-log LSE (a split whose every key is masked by the bias: O = 0, LSE = -inf), dQ its scaled sum;
split Q (dK/dV, its group's query heads x query tiles: ``[B*Hkv*Tk, D]`` slabs) -- its scaled dK and dV
sums (an empty split, possible under the causal mask, writes zeros).  The role's combine kernel
(``build_combine``) reduces the slabs into the outputs.

TF32 score precision (``problem.score_precision``): with "3xtf32" the score product (S = Q K^T in
``fwd`` and ``bwd_dq``, S^T = K Q^T in ``bwd_dkv``) reads its operands unrounded (the kept one is not
rounded in shared memory) and splits each fragment element in registers, x = big + small (big = x
rounded to TF32 by integer arithmetic, small = the exact rest: ``tf32_split``), then accumulates small*big +
big*small + big*big: three MMAs per score k-step, no extra shared-memory reads.  With "fp32" every
product does the same (P V, dP, and dV, dK, dQ): the kept tiles stay unrounded, each fragment (the
register-held P and dS too) is split where it is made.

Bias (``problem.bias``, an additive FP32 ``[B|1, H|1, Tq|1, Tk]`` tensor with static strides): the
fwd, dQ and dK/dV kernels read it straight from global memory (L1/L2; no shared-memory stage), one
scalar per score a thread holds, and fold it into the raw score accumulators before the masks:
``s = max(s + bias / scale, BIAS_FLOOR / scale)`` (problem.py: the floor keeps every value finite); a
row whose running maximum ends at the floor (every key it sees masked) writes O = 0 and LSE = +inf, so
the backward's P = exp2(S c - LSE log2 e) is 0 across it: no gradient, with no mask of dO.  An
axis of stride 0 is not loaded per element: a padding mask ``[B, 1, 1, Tk]`` costs each thread one load per
key column it holds and KV tile, shared by its rows.  Indices past the tails are clamped to the last
row/column (the masks discard those scores); in dK/dV a query column past Tq gets bias 0, so its
probability stays exp2(0 - 0) = 1 times a zero dO row, never an overflow times zero.

Tails: rows beyond T are zero-filled by cp.async (``srcElements`` = 0), stores are predicated, and
scores of keys beyond T_k are masked.  No T x T buffer exists anywhere.

Global memory: each ``[B, H, T, D]`` operand is a 1-D memref of its extent, addressed by element offset
``b*sB + h*sH + t*sT + d`` with the problem's static strides (``AttentionProblem.operand_strides``);
where the layout allows it folds to ``bh*sH + t*sT`` or, contiguous, ``row*D``.  lse and delta are
contiguous ``[B*H*Tq]`` FP32 vectors.
"""
from __future__ import annotations

from nova.codegen import check_mma_sync_target
from nova.kernels.attention.mlirtext import SMEM, Text
from nova.kernels.attention.problem import BIAS_FLOOR, BIAS_ROLES, AttentionProblem
from nova.kernels.attention.schedule import AttentionSchedule, KernelTile

KERNEL_NAMES = {"fwd": "nova_attn_fwd", "bwd_pre": "nova_attn_bwd_pre", "bwd_dkv": "nova_attn_bwd_dkv",
                "bwd_dq": "nova_attn_bwd_dq"}
PARAMS = {"fwd": ("q", "k", "v", "out", "lse"),
          "bwd_pre": ("out", "dout", "delta"),
          "bwd_dkv": ("q", "k", "v", "dout", "lse", "delta", "dk", "dv"),
          "bwd_dq": ("q", "k", "v", "dout", "lse", "delta", "dq")}
PARTIALS = {"fwd": {"out": "o_part", "lse": "lse_part"}, "bwd_dq": {"dq": "dq_part"},    # split: outputs -> slabs
            "bwd_dkv": {"dk": "dk_part", "dv": "dv_part"}}
SUPPORTED_ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90")
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
TF32_KEEP_MASK = -(1 << 13)  # 0xFFFFE000 as i32: sign, exponent and the 10 mantissa bits TF32 keeps
TF32_HALF_ULP = 1 << 12      # half of TF32's last mantissa bit, in FP32 bits: added before the mask, it rounds
MASKED = -1.0e30           # finite "minus infinity": exp2 of it is 0 and no inf - inf NaN can appear


def bias_head(ir, p: AttentionProblem, b, h):
    """Element offset of the bias's (b, h) plane (0 on a broadcast axis)."""
    sb, sh = p.bias[:2]
    return ir.add(ir.mul(b, sb, "bb"), ir.mul(h, sh, "bh_"), "bias_bh")


def bias_reader(ir, p: AttentionProblem, t, head, rows, cols, zero_past_columns=False):
    """``value(row key, row offset thunk, (j, c))``: the bias of a score (row: the tile's first row plus
    the offset; column 2t + 8j + c of the tile), each distinct element loaded once.  ``rows``/``cols``:
    (first index of the tile, its extent, the tile's size, the bias stride along it); an index past the
    extent is clamped to the last (its score is masked, or with ``zero_past_columns`` its bias is 0).
    Stride-0 axes are not indexed: one load serves every row (or column) it is broadcast over."""
    (r0, r_n, r_tile, r_st), (c0, c_n, c_tile, c_st) = rows, cols
    col_raw, col_ok, row_off, col_off, loaded = {}, {}, {}, {}, {}

    def column(j, c):
        if (j, c) not in col_raw:
            col_raw[j, c] = ir.add(c0, ir.add(ir.mul(t, 2, "t2"), 8 * j + c, "bcoff"), "bcol")
        return col_raw[j, c]

    def clamped(i, n, tile, hint):
        return ir.min(i, n - 1, hint) if n % tile else i

    def value(rkey, roff, jc):
        rk, ck = (rkey if r_st else None), (jc if c_st else None)
        if (rk, ck) not in loaded:
            off = head
            if rk is not None:
                if rk not in row_off:
                    i = clamped(ir.add(r0, roff(), "brow"), r_n, r_tile, "brow_in")
                    row_off[rk] = ir.mul(i, r_st, "brow_off")
                off = ir.add(off, row_off[rk], "boff")
            if ck is not None:
                if ck not in col_off:
                    col_off[ck] = ir.mul(clamped(column(*jc), c_n, c_tile, "bcol_in"), c_st, "bcol_off")
                off = ir.add(off, col_off[ck], "boff")
            loaded[rk, ck] = ir.let("bias", f"memref.load %bias[{ir.v(off)}] : memref<{p.bias_extent}xf32>")
        x = loaded[rk, ck]
        if zero_past_columns and c_n % c_tile:
            if jc not in col_ok:
                col_ok[jc] = ir.cmp("slt", column(*jc), c_n, "bcol_ok")
            x = ir.select(col_ok[jc], x, ir.f(0.0), ty="f32", hint="bias_in")
        return x
    return value


def biased_score(ir, p: AttentionProblem, x, bias):
    """A raw score (the softmax scales it later) plus its bias, clamped: ``max(s + bias / scale,
    BIAS_FLOOR / scale)``."""
    return ir.fop("maxnumf", ir.fma(bias, ir.f(1.0 / p.scale), x, "sb"), ir.f(BIAS_FLOOR / p.scale), "sbf")


def floor_max(ir, p: AttentionProblem, c):
    """The running max (in the softmax's base-2 units, ``c`` = scale x log2 e) of a row whose every
    visible key sits at the bias floor, computed as the max is made: ``BIAS_FLOOR / scale x c``."""
    return ir.fop("mulf", ir.f(BIAS_FLOOR / p.scale), ir.f(c), "floor_c")


def masked_row(ir, m, floor_c, inv, lse, inf):
    """``(inv, lse)`` of a row with its final max ``m``: where ``m`` is at the floor (``floor_max``: every
    visible key masked by the bias) 0 (O = 0) and ``inf``, else as given (both kernel families)."""
    dead = ir.let("row_masked", f"arith.cmpf ole, {m}, {floor_c} : f32")
    return ir.select(dead, ir.f(0.0), inv, "f32", "inv_l"), ir.select(dead, inf, lse, "f32", "lse")


def add_bias(ir, p: AttentionProblem, t, scores, head, rows, cols, zero_past_columns=False) -> list:
    """The scores with the bias added and clamped (``biased_score``), each element read as it is added
    (``bias_reader``; the mma.sync kernels).  ``scores``: ``(value, row key, row offset thunk, (j, c))``
    each."""
    value = bias_reader(ir, p, t, head, rows, cols, zero_past_columns)
    ir.f(1.0 / p.scale)                  # the constants first (named once, used by every score)
    ir.comment("scores + bias / scale, clamped at the floor")
    ir.f(BIAS_FLOOR / p.scale)
    return [biased_score(ir, p, x, value(rk, roff, jc)) for x, rk, roff, jc in scores]


class AttentionCodegenError(RuntimeError):
    pass


def _cdiv(a, b):
    return -(-a // b)


def split_range(ir, steps, per: int, bz, hint: str):
    """(first step, steps) of split ``bz`` of a streamed loop of ``steps`` steps (an int or, causal, an
    index value) cut into splits of ``per``: [bz*per, min((bz+1)*per, steps)), empty past the end."""
    first = ir.mul(bz, per, f"{hint}_first")
    return first, ir.max(ir.min(ir.sub(steps, first, f"{hint}_left"), per, f"{hint}_per"), 0, f"{hint}_n")


def slab_rows(p: AttentionProblem, role: str) -> int:
    """Rows of one slab of split ``role``: the queries' B*H*Tq (forward, dQ) or the keys' B*Hkv*Tk (dK/dV)."""
    return p.batch * p.kv_heads * p.seq_k if role == "bwd_dkv" else p.batch * p.heads * p.seq_q


def slab_extent(p: AttentionProblem, role: str, splits: int, name: str) -> int:
    """FP32 values of partial buffer ``name`` (``PARTIALS``) of ``role`` split ``splits`` ways: one slab
    of ``slab_rows`` x D a split, or (``lse_part``) one row vector a split."""
    return splits * slab_rows(p, role) * (1 if name == "lse_part" else p.head_dim)


def slab_type(p: AttentionProblem, role: str, splits: int, name: str) -> str:
    return f"memref<{slab_extent(p, role, splits, name)}xf32>"


def params(p: AttentionProblem | None, role: str, splits: int = 1, names: tuple[str, ...] | None = None
           ) -> tuple[str, ...]:
    """A kernel's parameters: ``names`` (default the mma.sync kernel's, ``PARAMS[role]``; split KV: its
    outputs' partial slabs, ``PARTIALS``), then ``bias`` where the problem ``p`` has one."""
    names = PARAMS[role] if names is None else names
    names = names if splits == 1 else tuple(PARTIALS[role].get(n, n) for n in names)
    return names + (("bias",) if p is not None and p.bias and role in BIAS_ROLES else ())


def smem_plan(p: AttentionProblem, kt: KernelTile) -> dict:
    """Byte offsets of the kept tiles, the streamed rings and (dK/dV) the LSE/D rings."""
    if kt.role == "bwd_pre":
        return {"total": 0}
    eb, cols = p.elem_bytes, p.head_dim + kt.smem_pad
    kept = {"fwd": ("q",), "bwd_dq": ("q", "dout"), "bwd_dkv": ("k", "v")}[kt.role]
    streamed = {"fwd": ("k", "v"), "bwd_dq": ("k", "v"), "bwd_dkv": ("q", "dout")}[kt.role]
    off, plan = 0, {}
    for name in kept:
        plan[name] = off
        off += _cdiv(kt.block_rows * cols * eb, 128) * 128
    for name in streamed:
        plan[name] = off
        off += _cdiv(kt.stages * kt.block_cols * cols * eb, 128) * 128
    if kt.role == "bwd_dkv":
        for name in ("lse", "delta"):
            plan[name] = off
            off += _cdiv(kt.stages * kt.block_cols * 4, 128) * 128
    plan["total"] = off
    return plan


def check_supported(p: AttentionProblem, s: AttentionSchedule, role: str) -> None:
    kt = s.kernel(role)

    def fail(msg):
        raise AttentionCodegenError(f"cannot generate {role} for {p.describe()} on {s.arch}: {msg}")

    check_mma_sync_target(s, SUPPORTED_ARCHES, fail)
    if role == "bwd_pre":
        return
    if kt.block_rows % (16 * kt.warps) or kt.block_cols % 16:
        fail(f"tile {kt.block_rows}x{kt.block_cols} does not split into {kt.warps} warps of 16-row MMA tiles")
    if kt.stages < 2:
        fail("the cp.async ring needs at least 2 stages")
    if ((p.head_dim + kt.smem_pad) * p.elem_bytes) % 16:
        fail(f"padded rows must be a multiple of 16 bytes (pad {kt.smem_pad})")
    if p.split_scores and s.tf32_prep == "smem":
        fail("3xtf32 scores need unrounded streamed tiles (tf32_prep 'fragment')")
    if kt.smem_bytes < smem_plan(p, kt)["total"]:
        fail(f"smem_bytes {kt.smem_bytes} < the {smem_plan(p, kt)['total']} bytes the tiles need")
    if kt.splits > 1:
        tiles = _cdiv(p.seq_k, kt.block_cols)
        if role not in PARTIALS or (p.causal and role != "bwd_dkv"):
            fail(f"splits ({kt.splits}) exist for dK/dV and the non-causal forward and dQ kernels only")
        if role != "bwd_dkv" and (kt.grid[2] != kt.splits or (kt.splits - 1) * _cdiv(tiles, kt.splits) >= tiles):
            fail(f"{kt.splits} key splits of {tiles} tiles leave a split empty or disagree with grid {kt.grid}")


def global_type(p: AttentionProblem, name: str) -> str:
    """The kernels' view of a ``[B, H, T, D]`` operand: a 1-D memref over its extent."""
    return f"memref<{p.extent(name)}x{p.storage}>"


def rows_at(ir, p: AttentionProblem, name: str, row, coords=None) -> tuple[str, object]:
    """Where flat row ``row`` = (b*heads + h)*T + t of operand ``name`` is: ``("row", row)`` where the
    operand's rows are one evenly strided stack (the contiguous layout; row r at element r*sT), else
    ``("off", element offset)``: ``bh*sH + t*sT`` where its heads are one stack, else ``b*sB + h*sH + t*sT``.
    ``coords`` = (b, h, bh, t) where the caller has them (else divided out of ``row``)."""
    sb, sh, st = p.operand_strides(name)
    _, nh, nt, _ = p.operand_shape(name)
    if sb == nh * sh and sh == nt * st:
        return "row", row
    if coords is None:
        bh, t = ir.div(row, nt, "g_bhi"), ir.rem(row, nt, "g_ti")
        b, h = ir.div(bh, nh, "g_bi"), ir.rem(bh, nh, "g_hi")
    else:
        b, h, bh, t = coords
    head = ir.mul(bh, sh, "g_bh") if sb == nh * sh else ir.add(ir.mul(b, sb, "g_b"), ir.mul(h, sh, "g_h"), "g_bh")
    return "off", ir.add(head, ir.mul(t, st, "g_t"), "g_off")


def rows_advance(ir, p: AttentionProblem, name: str, at, n):
    """``at`` (``rows_at``) moved ``n`` rows on."""
    kind, x = at
    return kind, ir.add(x, n if kind == "row" else ir.mul(n, p.operand_strides(name)[2], "g_adv"), "g_next")


def element_at(ir, p: AttentionProblem, name: str, at, r, col, hint: str):
    """Element offset of column ``col`` of row ``r`` past ``at``: (row + r)*sT + col, or off + r*sT + col."""
    kind, x = at
    st = p.operand_strides(name)[2]
    if kind == "row":
        return ir.add(ir.mul(ir.add(x, r, f"{hint}_grow"), st, f"{hint}_roff"), col, f"{hint}_src")
    return ir.add(ir.add(x, ir.mul(r, st, f"{hint}_roff"), f"{hint}_grow"), col, f"{hint}_src")


def build_mma_sync(p: AttentionProblem, s: AttentionSchedule, role: str) -> str:
    """The MLIR of an mma.sync-path kernel ``role`` (``nova.kernels.attention.module.build_module`` picks
    the builder of each role)."""
    check_supported(p, s, role)
    if role == "bwd_pre":
        return _build_pre(p, s)
    return _Flash(p, s, role).build()


# ----------------------------------------------------------------------------------------------
class _Flash:
    def __init__(self, p: AttentionProblem, s: AttentionSchedule, role: str):
        self.p, self.s, self.role = p, s, role
        self.kt = kt = s.kernel(role)
        self.ir = Text()
        self.T = p.storage
        self.eb = p.elem_bytes
        self.D = p.head_dim
        self.tf32 = p.dtype == "tf32"
        self.ks = 8 if self.tf32 else 16
        self.round_streamed = self.tf32 and s.tf32_prep == "smem"   # else streamed fragments round on use
        # the score product's operands (A kept, B streamed): split into big + small TF32 parts if asked
        self.score_pair = {"fwd": ("q", "k"), "bwd_dq": ("q", "k"), "bwd_dkv": ("k", "q")}.get(role, ())
        self.split = p.split_scores
        self.split_all = p.split_all          # every product's operands split (precision "fp32")
        self.BR, self.BC, self.S = kt.block_rows, kt.block_cols, kt.stages
        self.cols = self.D + kt.smem_pad
        self.mt = kt.rows_per_warp // 16
        self.threads = kt.threads
        self.plan = smem_plan(p, kt)
        self.c = p.scale * LOG2E               # scores -> base-2 exponent
        self.rows = p.batch * p.heads * p.seq_q
        self.vt = f"memref<{self.rows}xf32>"
        self.splits = kt.splits
        self.partial = {v: k for k, v in PARTIALS[role].items()} if self.splits > 1 else {}  # slab -> output

    # ---- types
    def gtype(self, name):
        if name == "bias":
            return self.bias_type
        if name in self.partial:       # FP32 slabs: [splits, slab rows, D] (LSE: [splits, B*H*Tq])
            return slab_type(self.p, self.role, self.splits, name)
        return global_type(self.p, name)

    @property
    def bias_type(self):
        return f"memref<{self.p.bias_extent}xf32>"

    def kept_type(self):
        return f"memref<{self.BR}x{self.cols}x{self.T}, {SMEM}>"

    def ring_type(self):
        return f"memref<{self.S}x{self.BC}x{self.cols}x{self.T}, {SMEM}>"

    def vring_type(self):
        return f"memref<{self.S}x{self.BC}xf32, {SMEM}>"

    # ------------------------------------------------------------------------------------------
    def build(self) -> str:
        p, kt, ir = self.p, self.kt, self.ir
        args = [f"%{n}: {self.vt if n in ('lse', 'delta') else self.gtype(n)}"
                for n in params(p, self.role, self.splits)]
        ir.emit(f"// Nova attention {self.role}: {p.describe()}")
        ir.emit(f"// block {self.BR} kept rows x {self.BC} streamed rows, {kt.warps} warps x {kt.rows_per_warp} rows, "
                f"{self.S} stages, {self.s.mma}, {self.s.arch}")
        with ir.kernel(KERNEL_NAMES[self.role], args, self.threads, minctasm=kt.blocks_per_sm):
            self.coordinates()
            self.shared_memory()
            getattr(self, "body_" + self.role)()
        return ir.text()

    def coordinates(self):
        ir = self.ir
        self.tid = ir.let("tid", "gpu.thread_id x")
        self.lane = ir.rem(self.tid, 32, "lane")
        warp = ir.div(self.tid, 32, "warp")
        self.g = ir.div(self.lane, 4, "g")
        self.t = ir.rem(self.lane, 4, "t")
        self.wrow = ir.mul(warp, self.kt.rows_per_warp, "warp_row0")
        self.lm_r = ir.rem(self.lane, 8, "lm_r")
        q = ir.div(self.lane, 8, "lm_q")
        self.q_lo = ir.rem(q, 2, "lm_q_lo")
        self.q_hi = ir.div(q, 2, "lm_q_hi")
        self.bx = ir.let("bx", "gpu.block_id x")
        self.by = ir.let("by", "gpu.block_id y")
        self.bz = ir.let("bz", "gpu.block_id z") if self.splits > 1 else 0

    def shared_memory(self):
        ir = self.ir
        dsm = ir.let("dsm", f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>")
        self.sm = {}
        for name, off in self.plan.items():
            if name == "total":
                continue
            if name in ("lse", "delta"):
                ty = self.vring_type()
            elif self.is_kept(name):
                ty = self.kept_type()
            else:
                ty = self.ring_type()
            self.sm[name] = ir.let(f"s_{name}", f"memref.view {dsm}[{ir.v(off)}][] : memref<?xi8, {SMEM}> to {ty}")

    def is_kept(self, name):
        return name in {"fwd": ("q",), "bwd_dq": ("q", "dout"), "bwd_dkv": ("k", "v")}[self.role]

    # ------------------------------------------------------------------------------------------
    # global -> shared
    # ------------------------------------------------------------------------------------------
    def thread_chunks(self, rows, vec):
        """This thread's chunks of ``vec`` elements of a ``rows`` x D tile, as ``(live, row, col)``;
        ``live`` is True where every thread has the chunk.  ``copy_tile`` and ``round_own`` share it."""
        ir = self.ir
        per_row = self.D // vec
        total = rows * per_row
        for i in range(_cdiv(total, self.threads)):
            cid = ir.add(self.tid, i * self.threads, "cp_id")
            live = True if (i + 1) * self.threads <= total else ir.cmp("slt", cid, total, "cp_live")
            r = ir.div(cid, per_row, "cp_r")
            col = ir.mul(ir.rem(cid, per_row, "cp_c"), vec, "cp_col")
            yield live, r, col

    def cp_async(self, name, src, dst, count, ok, hint, flags, types):
        """cp.async ``count`` elements of global ``name`` at element offset ``src`` into ``dst``.  Unless
        ``ok`` is known true, a false ``ok`` reads 0 elements from offset 0: ``dst`` is zero-filled."""
        ir = self.ir
        n = None
        if ok is not True:
            n = ir.select(ok, count, 0, hint=f"{hint}_n")
            src = ir.select(ok, src, 0, hint=f"{hint}_src")
        size = f"{count}" if n is None else f"{count}, {ir.v(n)}"
        ir.let("cp", f"nvgpu.device_async_copy %{name}[{ir.v(src)}], {dst}, {size}{flags} : {types}")

    def rows_at(self, name, b, h, bh, t, row):
        return rows_at(self.ir, self.p, name, row, (b, h, bh, t))

    def copy_tile(self, name, rows, base, tile0, limit, stage=None):
        """cp.async the ``rows`` rows of global ``name`` from ``base`` (``rows_at``) on into its smem tile
        (ring slot ``stage``); rows with tile0+r >= limit are zero-filled."""
        ir = self.ir
        vec = 16 // self.eb
        ragged = limit % rows != 0
        types = f"{self.gtype(name)} to {self.kept_type() if stage is None else self.ring_type()}"
        for live, r, col in self.thread_chunks(rows, vec):
            def one():
                src = element_at(ir, self.p, name, base, r, col, "cp")
                ok = ir.cmp("slt", ir.add(tile0, r, "cp_trow"), limit, "cp_ok") if ragged else True
                dst = f"{self.sm[name]}[{'' if stage is None else ir.v(stage) + ', '}{ir.v(r)}, {ir.v(col)}]"
                self.cp_async(name, src, dst, vec, ok, "cp", " {bypassL1}", types)
            self.ir.guarded(live, one)

    def copy_vec(self, name, base, tile0, limit, stage):
        """cp.async ``block_cols`` FP32 values (LSE or D) into their ring slot, 4 bytes each."""
        ir = self.ir
        n = self.BC
        for i in range(_cdiv(n, self.threads)):
            e = ir.add(self.tid, i * self.threads, "cv_e")
            live = True if (i + 1) * self.threads <= n else ir.cmp("slt", e, n, "cv_live")

            def one():
                ok = ir.cmp("slt", ir.add(tile0, e, "cv_row"), limit, "cv_ok") if limit % n else True
                src = ir.add(base, e, "cv_src")
                dst = f"{self.sm[name]}[{ir.v(stage)}, {ir.v(e)}]"
                self.cp_async(name, src, dst, 1, ok, "cv", "", f"{self.vt} to {self.vring_type()}")
            self.ir.guarded(live, one)

    def round_own(self, name, rows, stage=None):
        """TF32: round (cvt.rna) in place the 16-byte chunks of tile ``name`` that this thread itself
        copied (``copy_tile``'s mapping), right after its cp.async group completed and before the
        barrier that publishes the tile: every element is rounded once per block, not once per warp
        and use, and no extra barrier is needed (a thread's own cp.async writes are visible to it
        after cp.async.wait_group)."""
        ir = self.ir
        ty = self.kept_type() if stage is None else self.ring_type()
        for live, r, col in self.thread_chunks(rows, 4):
            def one():
                idx = f"{'' if stage is None else ir.v(stage) + ', '}{ir.v(r)}, {ir.v(col)}"
                x = ir.let("rw", f"vector.load {self.sm[name]}[{idx}] : {ty}, vector<4xf32>")
                el = [self.tf32r(ir.let("rw_e", f"vector.extract {x}[{e}] : f32 from vector<4xf32>")) for e in range(4)]
                y = ir.let("rw_r", f"vector.from_elements {', '.join(el)} : vector<4xf32>")
                ir.emit(f"vector.store {y}, {self.sm[name]}[{idx}] : {ty}, vector<4xf32>")
            self.ir.guarded(live, one)

    def round_landed(self, it, slot, n_tiles, first=False):
        """TF32: round the tiles of step ``it`` (ring ``slot``; the kept tiles too when ``first``)."""
        if not self.tf32 or (not first and not self.round_streamed):
            return
        kept = {"fwd": ("q",), "bwd_dq": ("q", "dout"), "bwd_dkv": ("k", "v")}[self.role]
        streamed = {"fwd": ("k", "v"), "bwd_dq": ("k", "v"), "bwd_dkv": ("q", "dout")}[self.role]

        def body():
            if first:
                for n in kept:
                    if not self.is_split_operand(n):         # a split operand is split on use, from the raw values
                        self.round_own(n, self.BR)
            if self.round_streamed:
                for n in streamed:
                    self.round_own(n, self.BC, slot)
        self.ir.guarded(self.ir.cmp("slt", it, n_tiles, "rnd_live"), body)

    def commit(self):
        return self.ir.let("grp", '"nvgpu.device_async_create_group"() : () -> !nvgpu.device.async.token')

    def wait(self, grp, n):
        self.ir.emit(f"nvgpu.device_async_wait {grp} {{numGroups = {n} : i32}}")

    # ------------------------------------------------------------------------------------------
    # fragments
    # ------------------------------------------------------------------------------------------
    def tf32r(self, x):
        ir = self.ir
        i = ir.let("tf32_bits", f"nvvm.convert.float.to.tf32 {x} {{rnd = #nvvm.fp_rnd_mode<rna>}}")
        return ir.let("tf32", f"arith.bitcast {i} : i32 to f32")

    def is_split_operand(self, name: str) -> bool:
        """Whether the fragments of a [row][d] tile ``name`` (A of a kept tile, B of a [n][k] ring) are
        split into (big, small) pairs: every operand's for precision "fp32", the score product's for
        "3xtf32" (``score_pair``; no tile read this way is both a score operand and an operand of another
        product)."""
        return self.split_all or (self.split and name in self.score_pair)

    def tf32_split(self, x) -> tuple[str, str]:
        """(big, small) with x = big + small exactly: big = x rounded to nearest TF32 (ties away from
        zero, as cvt.rna) by integer arithmetic, (bits + 2^12) & ~(2^13 - 1); small = x - big (exact:
        at most half a TF32 ulp).  The tensor core reads small's top 10 mantissa bits (it ignores the
        low 13 of a .tf32 register): an error below 2^-21 |x| whose sign is small's, which rounding
        makes as often negative as positive, so the products' errors do not add up along D.  (Big
        truncated instead, small = x - trunc(x) always has x's sign: on 20,000 random D = 64 score
        products (q, k ~ 3 N(0, 1)), emulated on the CPU, 4.6x the rms error; bench/NOTES.md.)
        Three instructions an element (IADD, LOP3, FADD), where cvt.rna costs three alone."""
        ir = self.ir
        bits = ir.let("x_bits", f"arith.bitcast {x} : f32 to i32")
        half = ir.let("x_half_up", f"arith.addi {bits}, {ir.const(TF32_HALF_ULP, 'i32')} : i32")
        hi = ir.let("big_bits", f"arith.andi {half}, {ir.const(TF32_KEEP_MASK, 'i32')} : i32")
        big = ir.let("big", f"arith.bitcast {hi} : i32 to f32")
        return big, ir.fop("subf", x, big, "small")

    def split_fragment(self, values, shape) -> tuple[str, str]:
        """The (big, small) TF32 fragments of raw FP32 fragment ``values``."""
        ir = self.ir
        parts = [self.tf32_split(x) for x in values]
        return tuple(ir.let(hint, f"vector.from_elements {', '.join(p[i] for p in parts)} : {shape}")
                     for i, hint in enumerate(("f_big", "f_small")))

    def tf32s(self, x):
        """A streamed-tile element: rounded here unless the tile was rounded in shared memory."""
        return x if self.round_streamed else self.tf32r(x)

    def load_a(self, name, m0, kk):
        """A fragment (16 x ks) of kept tile ``name`` ([row][d] in smem) at rows m0.., cols kk.."""
        ir, T = self.ir, self.T
        row = ir.add(m0, ir.add(self.lm_r, ir.mul(self.q_lo, 8)), "a_row")
        col = ir.add(ir.mul(self.q_hi, self.ks // 2), kk, "a_col")
        vt = f"vector<4x{4 // self.eb}x{T}>"
        frag = ir.let("a_frag", f"nvgpu.ldmatrix {self.sm[name]}[{ir.v(row)}, {ir.v(col)}] "
                                f"{{numTiles = 4 : i32, transpose = false}} : {self.kept_type()} -> {vt}")
        if not self.tf32:
            return frag
        # TF32: the tile was rounded (cvt.rna) in shared memory when it landed (``round_own``)
        el = [ir.let("a_e", f"vector.extract {frag}[{e}, 0] : f32 from {vt}") for e in range(4)]
        if self.is_split_operand(name):
            return self.split_fragment(el, "vector<4x1xf32>")
        return ir.let("a_tf32", f"vector.from_elements {', '.join(el)} : vector<4x1xf32>")

    def load_b_nk(self, name, stage, n0, kk):
        """B fragments of two 8-wide n tiles from a ring tile stored [n][k] (K for S = Q K^T)."""
        ir, T = self.ir, self.T
        row = ir.add(n0, ir.add(self.lm_r, ir.mul(self.q_hi, 8)), "b_row")
        col = ir.add(ir.mul(self.q_lo, self.ks // 2), kk, "b_col")
        per32 = 4 // self.eb
        vt = f"vector<4x{per32}x{T}>"
        frag = ir.let("b_frag", f"nvgpu.ldmatrix {self.sm[name]}[{ir.v(stage)}, {ir.v(row)}, {ir.v(col)}] "
                                f"{{numTiles = 4 : i32, transpose = false}} : {self.ring_type()} -> {vt}")
        return self.split_b(frag, vt, per32, split=self.is_split_operand(name))

    def split_b(self, frag, vt, per32, split=False):
        """The two 8-wide n tiles' B fragments of an ldmatrix x4 result; ``split``: each as its (big,
        small) TF32 pair (3xtf32 scores)."""
        ir = self.ir
        out = []
        for h in range(2):
            if split:
                el = [ir.let("b_e", f"vector.extract {frag}[{2 * h + e}, 0] : f32 from {vt}") for e in range(2)]
                out.append(self.split_fragment(el, "vector<2x1xf32>"))
            elif self.tf32:
                el = [self.tf32s(ir.let("b_e", f"vector.extract {frag}[{2 * h + e}, 0] : f32 from {vt}")) for e in range(2)]
                out.append(ir.let("b_tf32", f"vector.from_elements {', '.join(el)} : vector<2x1xf32>"))
            else:
                out.append(ir.let("b_half", f"vector.extract_strided_slice {frag} {{offsets = [{2 * h}, 0], "
                                            f"sizes = [2, {per32}], strides = [1, 1]}} : {vt} to vector<2x{per32}x{self.T}>"))
        return out

    def load_b_kn(self, name, stage, n0, kk):
        """B fragments of two 8-wide n tiles (n = head dim) from a ring tile stored [k][n] (V for
        O += P V).  TF32: the k rows of one MMA are (2t, 2t+1) of each 8-group, matching P's permuted
        key order (see ``p_to_a``)."""
        ir, T = self.ir, self.T
        sm, rt = self.sm[name], self.ring_type()
        if not self.tf32:
            row = ir.add(ir.add(self.lm_r, ir.mul(self.q_lo, 8)), kk, "bt_row")
            col = ir.add(n0, ir.mul(self.q_hi, 8), "bt_col")
            vt = f"vector<4x2x{T}>"
            frag = ir.let("bt_frag", f"nvgpu.ldmatrix {sm}[{ir.v(stage)}, {ir.v(row)}, {ir.v(col)}] "
                                     f"{{numTiles = 4 : i32, transpose = true}} : {rt} -> {vt}")
            return self.split_b(frag, vt, 2)
        out = []
        r0 = ir.add(ir.mul(self.t, 2), kk, "bt_r0")
        r1 = ir.add(r0, 1, "bt_r1")
        for j in range(2):
            c = ir.add(ir.add(n0, self.g), 8 * j, "bt_c")
            raw = [ir.let("bt_e", f"memref.load {sm}[{ir.v(stage)}, {ir.v(r)}, {ir.v(c)}] : {rt}") for r in (r0, r1)]
            if self.split_all:
                out.append(self.split_fragment(raw, "vector<2x1xf32>"))
                continue
            el = [self.tf32s(x) for x in raw]
            out.append(ir.let("bt_tf32", f"vector.from_elements {', '.join(el)} : vector<2x1xf32>"))
        return out

    def mma(self, a, b, acc):
        if isinstance(a, tuple):            # 3xtf32: (big, small) pairs, the small products first
            (a_big, a_small), (b_big, b_small) = a, b
            for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big)):
                acc = self.ir.mma_sync(x, y, acc, "tf32", 8)
            return acc
        if self.tf32:
            return self.ir.mma_sync(a, b, acc, "tf32", 8)
        return self.ir.mma_sync(a, b, acc, "f16" if self.T == "f16" else "bf16", 16)

    # ------------------------------------------------------------------------------------------
    # accumulators as scalars: acc[m][j] is a 16x8 tile; element (h, c) is row g+8h, col 2t+c
    # ------------------------------------------------------------------------------------------
    def unpack(self, accs):
        ir = self.ir
        return [[[[ir.let("s", f"vector.extract {a}[{h}, {c}] : f32 from vector<2x2xf32>") for c in (0, 1)]
                  for h in (0, 1)] for a in row] for row in accs]

    def pack(self, el):
        ir = self.ir
        return [[ir.let("v", f"vector.from_elements {e[0][0]}, {e[0][1]}, {e[1][0]}, {e[1][1]} : vector<2x2xf32>")
                 for e in row] for row in el]

    def mma_steps(self, accs, k_extent, n_tiles, a_frag, b_frags):
        """``accs[m][j] += A @ B`` over ``k_extent`` in k-steps: ``a_frag(m, kk)`` is the A fragment of m
        tile ``m``, ``b_frags(n0, kk)`` the B fragments of the n tiles at n0 and n0 + 8."""
        for kk in range(0, k_extent, self.ks):
            a = [a_frag(m, kk) for m in range(self.mt)]
            for j in range(0, n_tiles, 2):
                b = b_frags(8 * j, kk)
                for m in range(self.mt):
                    for jj in range(2):
                        accs[m][j + jj] = self.mma(a[m], b[jj], accs[m][j + jj])
        return accs

    def gemm_nk(self, a_name, b_name, stage):
        """acc[mt][BC/8] = A(kept, rows of this warp) @ B(ring slot, stored [n][k])^T over the head dim."""
        ir = self.ir
        zero = ir.const(0.0, "vector<2x2xf32>")
        nt = self.BC // 8
        accs = [[zero] * nt for _ in range(self.mt)]
        return self.mma_steps(accs, self.D, nt, lambda m, kk: self.load_a(a_name, ir.add(self.wrow, 16 * m), kk),
                              lambda n0, kk: self.load_b_nk(b_name, stage, n0, kk))

    def p_to_a(self, el_m, kk):
        """A fragment (16 x ks) of the k-step at key offset kk from scalar accumulators of one m tile.
        16-bit: n tiles (kk/8, kk/8+1) are exactly the k16 A layout.  TF32: logical k (t, t+4) is
        physical key (2t, 2t+1) of n tile kk/8 (V is read in the same order)."""
        ir = self.ir
        j = kk // 8
        if self.tf32:
            e = el_m[j]
            raw = (e[0][0], e[1][0], e[0][1], e[1][1])
            if self.split_all:
                return self.split_fragment(list(raw), "vector<4x1xf32>")
            vals = [self.tf32r(x) for x in raw]
            return ir.let("pa", f"vector.from_elements {', '.join(vals)} : vector<4x1xf32>")
        e0, e1 = el_m[j], el_m[j + 1]
        xs = [e0[0][0], e0[0][1], e0[1][0], e0[1][1], e1[0][0], e1[0][1], e1[1][0], e1[1][1]]
        ys = [ir.let("pt", f"arith.truncf {x} : f32 to {self.T}") for x in xs]
        return ir.let("pa", f"vector.from_elements {', '.join(ys)} : vector<4x2x{self.T}>")

    def gemm_kn(self, el, b_name, stage, accs):
        """accs[mt][D/8] += P (scalar accumulators, mt x BC) @ B(ring slot, stored [k][n]).  With every
        product split (precision "fp32") the tile's product is summed from zero and added to ``accs`` by
        FP32 adds: the tensor core's accumulation does not round to nearest, and three MMAs a k-step
        into a running sum over the whole sequence leave a relative bias (-1e-5 on dK and dV at T 1024);
        from zero over one tile, then rounded to nearest, it does not."""
        a_frag = lambda m, kk: self.p_to_a(el[m], kk)           # noqa: E731
        b_frags = lambda n0, kk: self.load_b_kn(b_name, stage, n0, kk)      # noqa: E731
        if not self.split_all:
            return self.mma_steps([list(r) for r in accs], self.BC, self.D // 8, a_frag, b_frags)
        ir = self.ir
        zero = ir.const(0.0, "vector<2x2xf32>")
        part = self.mma_steps([[zero] * len(r) for r in accs], self.BC, self.D // 8, a_frag, b_frags)
        return [[ir.let("acc_sum", f"arith.addf {a}, {t} : vector<2x2xf32>") for a, t in zip(ra, rt)]
                for ra, rt in zip(accs, part)]

    # ------------------------------------------------------------------------------------------
    # the streamed loop (shared by all three flash kernels)
    # ------------------------------------------------------------------------------------------
    def pipeline(self, n_tiles, issue, step, carried, types):
        """Prologue (tiles 0..S-2) and ``scf.for`` over tiles with a cp.async ring.  ``issue(it, slot)``
        copies tile ``it``; ``step(it, slot, carried) -> carried`` computes on a landed tile."""
        ir, S = self.ir, self.S
        grp = None
        for st in range(S - 1):
            self.ir.guarded(ir.cmp("slt", st, n_tiles, "pro_live"), lambda st=st: issue(st, st))
            grp = self.commit()
        self.wait(grp, S - 2)
        self.round_landed(0, 0, n_tiles, first=True)
        ir.emit("gpu.barrier")
        names = [ir.fresh("it_arg") for _ in carried]
        stage = ir.fresh("stage")
        it = ir.fresh("it")
        res = ir.fresh("loop")
        iters = ", ".join([f"{stage} = {ir.v(0)}"] + [f"{n} = {v}" for n, v in zip(names, carried)])
        tys = ["index"] + types
        with ir.region(f"{res}:{len(tys)} = scf.for {it} = {ir.v(0)} to {ir.v(n_tiles)} step {ir.v(1)} "
                       f"iter_args({iters}) -> ({', '.join(tys)}) {{"):
            nxt = ir.add(it, S - 1, "next_it")
            wslot = ir.select(ir.cmp("eq", stage, 0, "st0"), S - 1, ir.sub(stage, 1, "st_m1"), hint="wslot")
            self.ir.guarded(ir.cmp("slt", nxt, n_tiles, "pf_live"), lambda: issue(nxt, wslot))
            g = self.commit()
            out = step(it, stage, names)
            self.wait(g, S - 2)
            ns = ir.add(stage, 1, "st_p1")
            ns = ir.select(ir.cmp("eq", ns, S, "st_wrap"), 0, ns, hint="nstage")
            self.round_landed(ir.add(it, 1, "it_p1"), ns, n_tiles)       # tile it+1 has landed
            ir.emit("gpu.barrier")
            ir.emit(f"scf.yield {', '.join([ir.v(ns)] + out)} : {', '.join(tys)}")
        return [f"{res}#{i + 1}" for i in range(len(carried))]

    def masked(self, cond, el, valid):
        """Scores ``el`` with invalid entries replaced by MASKED, computed only where ``cond`` holds
        (a uniform branch: tiles that cross the diagonal or the key tail)."""
        ir = self.ir
        if cond is False:
            return el
        flat = [x for row in el for tile in row for h in tile for x in h]
        if cond is True:
            return self._apply_mask(el, valid)
        res = ir.fresh("msk")
        n = len(flat)
        with ir.region(f"{res}:{n} = scf.if {cond} -> ({', '.join(['f32'] * n)}) {{"):
            m = self._apply_mask(el, valid)
            ir.emit(f"scf.yield {', '.join(x for row in m for tile in row for h in tile for x in h)} : "
                    f"{', '.join(['f32'] * n)}")
            ir.else_()
            ir.emit(f"scf.yield {', '.join(flat)} : {', '.join(['f32'] * n)}")
        it = iter(f"{res}#{i}" for i in range(n))
        return [[[[next(it) for _ in (0, 1)] for _ in (0, 1)] for _ in row] for row in el]

    def _apply_mask(self, el, valid):
        ir = self.ir
        out = []
        for m, row in enumerate(el):
            r = []
            for j, tile in enumerate(row):
                r.append([[ir.select(valid(m, h, j, c), tile[h][c], ir.f(MASKED), ty="f32", hint="sm")
                           for c in (0, 1)] for h in (0, 1)])
            out.append(r)
        return out

    def row_off(self, m, h):
        return ir_add3(self.ir, self.wrow, self.g, 16 * m + 8 * h)

    # ------------------------------------------------------------------------------------------
    # the additive bias (module docstring)
    # ------------------------------------------------------------------------------------------
    def query_rows_bias(self, s, kv0):
        """Forward and dQ: the scores (rows: queries q0 + roff, columns: keys kv0 + coff) plus the bias."""
        p = self.p
        if not p.bias:
            return s
        return self.add_bias(s, bias_head(self.ir, p, self.b, self.h), (self.q0, p.seq_q, self.BR, p.bias[2]),
                             (kv0, p.seq_k, self.BC, p.bias[3]))

    def add_bias(self, s, head, rows, cols, zero_past_columns=False):
        """``s[m][j][h][c]`` (row roff(m, h), column 2t + 8j + c of this tile) through ``add_bias``."""
        flat = [(tile[h][c], (m, h), (lambda m=m, h=h: self.row_off(m, h)), (j, c))
                for m, row in enumerate(s) for j, tile in enumerate(row) for h in (0, 1) for c in (0, 1)]
        out = iter(add_bias(self.ir, self.p, self.t, flat, head, rows, cols, zero_past_columns))
        return [[[[next(out) for c in (0, 1)] for h in (0, 1)] for j in range(len(row))] for row in s]

    # ------------------------------------------------------------------------------------------
    def q_tile_setup(self):
        """Forward and dQ: Q tile of this block, the (b, h) pair and the KV-tile range."""
        ir, p = self.ir, self.p
        self.q0 = ir.mul(self.bx, self.BR, "q0")
        bh = self.by
        b = ir.div(bh, p.heads, "b")
        h = ir.rem(bh, p.heads, "h")
        self.b, self.h = b, h
        hkv = ir.div(h, p.group, "hkv")
        kvh = ir.add(ir.mul(b, p.kv_heads, "bkv"), hkv, "kvh")
        self.qbase = ir.add(ir.mul(bh, p.seq_q, "qrow_bh"), self.q0, "qbase")       # row of lse / delta
        kvrow = ir.mul(kvh, p.seq_k, "kvbase")
        names = params(p, self.role)
        self.at = {n: self.rows_at(n, b, h, bh, self.q0, self.qbase) for n in ("q", "out", "dout", "dq") if n in names}
        self.at.update({n: self.rows_at(n, b, hkv, kvh, 0, kvrow) for n in ("k", "v")})
        nk = _cdiv(p.seq_k, self.BC)
        self.kv_lo = 0
        if p.causal:       # keys j <= i < q0 + BR: tiles wholly above the diagonal are skipped
            last = ir.min(ir.add(self.q0, self.BR, "q_end"), p.seq_k, "kv_end")
            self.n_kv = ir.div(ir.add(last, self.BC - 1, "kv_end_r"), self.BC, "n_kv")
        elif self.splits > 1:          # split z: key tiles [z*per, min((z+1)*per, nk))
            first, self.n_kv = split_range(ir, nk, _cdiv(nk, self.splits), self.bz, "kv")
            self.kv_lo = ir.mul(first, self.BC, "kv_lo")
            self.part_row = ir.add(ir.mul(self.bz, self.rows, "slab"), self.qbase, "part_row")   # slab row of q0
        else:
            self.n_kv = nk

    def kv_start(self, it):
        """The first key of loop step ``it``'s KV tile (a split's tiles start at ``kv_lo``)."""
        kv0 = self.ir.mul(it, self.BC, "kv0")
        return kv0 if self.kv_lo == 0 else self.ir.add(kv0, self.kv_lo, "kv0s")

    def copy_kv_tiles(self, kv0, slot):
        """Forward and dQ: the K and V tiles of keys kv0.. into ring slot ``slot``."""
        ir, p = self.ir, self.p
        for n in ("k", "v"):
            self.copy_tile(n, self.BC, rows_advance(ir, p, n, self.at[n], kv0), kv0, p.seq_k, slot)

    def kv_mask(self, kv0):
        """(branch condition, per-element validity) of the scores of the KV tile at key kv0."""
        ir, p = self.ir, self.p
        cond = False
        if p.seq_k % self.BC:
            cond = ir.cmp("sgt", ir.add(kv0, self.BC, "kv_end"), p.seq_k, "kv_tail")
        lim = ir.sub(p.seq_k, kv0, "kv_left") if p.seq_k % self.BC else None
        diag = None
        if p.causal:
            cond = ir.or_(cond, ir.cmp("sgt", ir.add(kv0, self.BC - 1, "kv_last"), self.q0, "cross"), "need_mask")
            diag = ir.sub(self.q0, kv0, "diag")                        # j <= i  <=>  coff - roff <= q0 - kv0
            tdiff = ir.sub(ir.mul(self.t, 2, "t2"), ir.add(self.wrow, self.g, "wg"), "tdiff")

        def valid(m, h, j, c):
            coff_c = 8 * j + c
            ok = True
            if lim is not None:
                ok = ir.cmp("slt", ir.add(ir.mul(self.t, 2, "t2"), coff_c, "coff"), lim, "kv_in")
            if diag is not None:
                ok = ir.and_(ok, ir.cmp("sle", ir.add(tdiff, coff_c - 16 * m - 8 * h, "cr"), diag, "causal_ok"))
            return ok
        return cond, valid

    def rows_vals(self, name, limit_rows):
        """Per-thread values of an FP32 row vector (LSE or D) for rows g+8h of each m tile (0 beyond T)."""
        ir, p = self.ir, self.p
        out = []
        for m in range(self.mt):
            for h in (0, 1):
                roff = self.row_off(m, h)
                row = ir.add(self.q0, roff, "vrow")
                ok = ir.cmp("slt", row, p.seq_q, "vrow_ok") if p.seq_q % self.BR else True
                src = ir.select(ok, ir.add(self.qbase, roff, "vsrc"), 0, hint="vsrc")
                x = ir.let(f"{name}_r", f"memref.load %{name}[{ir.v(src)}] : {self.vt}")
                out.append(ir.select(ok, x, ir.f(0.0), ty="f32", hint=f"{name}_r"))
        return out

    def store_rows(self, accs, name, base, row0, limit, scale=None):
        """Store accumulators [mt][D/8] (times ``scale``) as rows roff past ``base`` (``rows_at``) of
        ``name`` (pairs per lane), where ``row0`` + roff (the block's query or key) is below ``limit``.
        A split's slab (``PARTIALS``): FP32 rows of D elements from ``base`` = ("row", its slab row)."""
        ir = self.ir
        gty = self.gtype(name)
        slab = name in self.partial
        ty = "f32" if slab else self.T
        for m in range(self.mt):
            for h in (0, 1):
                roff = self.row_off(m, h)
                ok = ir.cmp("slt", ir.add(row0, roff, "st_row"), limit, "st_ok") if limit % self.BR else True
                row = rows_advance(ir, self.p, name, base, roff)

                def body(m=m, h=h, row=row):
                    for j, acc in enumerate(accs[m]):
                        xs = [ir.let("o", f"vector.extract {acc}[{h}, {c}] : f32 from vector<2x2xf32>") for c in (0, 1)]
                        if scale is not None:
                            xs = [ir.fop("mulf", x, scale if isinstance(scale, str) else ir.f(scale), "o_s") for x in xs]
                        if ty != "f32":
                            xs = [ir.let("o_t", f"arith.truncf {x} : f32 to {ty}") for x in xs]
                        vec = ir.let("o_v", f"vector.from_elements {xs[0]}, {xs[1]} : vector<2x{ty}>")
                        col = ir.add(ir.mul(self.t, 2, "t2"), 8 * j, "st_col")
                        dst = ir.add(ir.mul(row[1], self.D, "pt_off"), col, "pt_dst") if slab else \
                            element_at(ir, self.p, name, row, 0, col, "st")
                        ir.emit(f"vector.store {vec}, %{name}[{ir.v(dst)}] {{alignment = {2 * (4 if slab else self.eb)}}} : "
                                f"{gty}, vector<2x{ty}>")
                self.ir.guarded(ok, body)

    def quad_sum(self, x):
        ir = self.ir
        for off in (1, 2):
            x = ir.fop("addf", x, ir.shfl_xor(x, off), "qs")
        return x

    def quad_max(self, x):
        ir = self.ir
        for off in (1, 2):
            x = ir.fop("maxnumf", x, ir.shfl_xor(x, off), "qm")
        return x

    # ------------------------------------------------------------------------------------------
    def body_fwd(self):
        ir, p = self.ir, self.p
        self.q_tile_setup()
        nd = self.D // 8
        zero = ir.const(0.0, "vector<2x2xf32>")

        def issue(it, slot):
            kv0 = self.kv_start(it)
            if it == 0:
                self.copy_tile("q", self.BR, self.at["q"], self.q0, p.seq_q)
            self.copy_kv_tiles(kv0, slot)

        nrow = 2 * self.mt
        carried = [ir.f(MASKED)] * nrow + [ir.f(0.0)] * nrow + [zero] * (self.mt * nd)
        types = ["f32"] * (2 * nrow) + ["vector<2x2xf32>"] * (self.mt * nd)

        def step(it, stage, args):
            m_old, l_old = args[:nrow], args[nrow:2 * nrow]
            o = [args[2 * nrow + m * nd: 2 * nrow + (m + 1) * nd] for m in range(self.mt)]
            ir.comment("S = Q K^T")
            s = self.unpack(self.gemm_nk("q", "k", stage))
            kv0 = self.kv_start(it)
            s = self.query_rows_bias(s, kv0)
            cond, valid = self.kv_mask(kv0)
            s = self.masked(cond, s, valid)
            ir.comment("online softmax (base 2)")
            m_new, l_new, pe = [], [], [[None] * len(s[0]) for _ in range(self.mt)]
            for m in range(self.mt):
                for j in range(len(s[m])):
                    pe[m][j] = [[None, None], [None, None]]
                for h in (0, 1):
                    r = 2 * m + h
                    mx = None
                    for tile in s[m]:
                        for x in tile[h]:
                            mx = x if mx is None else ir.fop("maxnumf", mx, x, "mx")
                    mx = self.quad_max(mx)
                    mn = ir.fop("maxnumf", m_old[r], ir.fop("mulf", mx, ir.f(self.c), "mxc"), "m_new")
                    alpha = ir.exp2(ir.fop("subf", m_old[r], mn, "dm"))
                    neg = ir.let("neg_m", f"arith.negf {mn} : f32")
                    tot = None
                    for j, tile in enumerate(s[m]):
                        for c in (0, 1):
                            e = ir.exp2(ir.fma(tile[h][c], ir.f(self.c), neg, "sc"))
                            pe[m][j][h][c] = e
                            tot = e if tot is None else ir.fop("addf", tot, e, "rs")
                    l_new.append(ir.fma(l_old[r], alpha, tot, "l"))
                    m_new.append(mn)
                    o[m] = [self.scale_row(acc, h, alpha) for acc in o[m]]
            ir.comment("O += P V")
            o = self.gemm_kn(pe, "v", stage, o)
            return m_new + l_new + [x for row in o for x in row]

        out = self.pipeline(self.n_kv, issue, step, carried, types)
        m_fin, l_fin = out[:nrow], out[nrow:2 * nrow]
        o = [out[2 * nrow + m * nd: 2 * nrow + (m + 1) * nd] for m in range(self.mt)]
        ir.comment("epilogue: O / l, LSE = (m + log2 l) ln 2")
        if p.bias:
            ir.comment("a row whose every visible key sits at the floor is masked: O = 0, LSE = +inf "
                       "(a split's partial: LSE = -inf, no weight in the combine)")
            floor_c = floor_max(ir, p, self.c)
            inf = ir.let("inf", f"arith.constant {'0xFF800000' if self.splits > 1 else '0x7F800000'} : f32")
        lse_vals = []
        for m in range(self.mt):
            for h in (0, 1):
                r = 2 * m + h
                lt = self.quad_sum(l_fin[r])
                inv = ir.fop("divf", ir.f(1.0), lt, "inv_l")
                lse = ir.fop("mulf", ir.fop("addf", m_fin[r], ir.log2(lt), "lse2"), ir.f(LN2), "lse")
                if p.bias:
                    inv, lse = masked_row(ir, m_fin[r], floor_c, inv, lse, inf)
                o[m] = [self.scale_row(acc, h, inv) for acc in o[m]]
                lse_vals.append(lse)
        if self.splits > 1:
            self.store_rows(o, "o_part", ("row", self.part_row), self.q0, p.seq_q)
            lse_name, lse_type, lse_row = "lse_part", self.gtype("lse_part"), self.part_row
        else:
            self.store_rows(o, "out", self.at["out"], self.q0, p.seq_q)
            lse_name, lse_type, lse_row = "lse", self.vt, self.qbase
        is_t0 = ir.cmp("eq", self.t, 0, "t_is0")
        for m in range(self.mt):
            for h in (0, 1):
                roff = self.row_off(m, h)
                ok = ir.and_(is_t0, ir.cmp("slt", ir.add(self.q0, roff, "lrow"), p.seq_q, "lrow_ok")
                             if p.seq_q % self.BR else True)
                src = ir.add(lse_row, roff, "lidx")
                self.ir.guarded(ok, lambda src=src, x=lse_vals[2 * m + h]:
                             ir.emit(f"memref.store {x}, %{lse_name}[{ir.v(src)}] : {lse_type}"))

    def scale_row(self, acc, h, factor):
        """acc (16x8 tile) with row half ``h`` multiplied by ``factor``."""
        ir = self.ir
        row = ir.let("ar", f"vector.extract {acc}[{h}] : vector<2xf32> from vector<2x2xf32>")
        fv = ir.let("fb", f"vector.broadcast {factor} : f32 to vector<2xf32>")
        prod = ir.let("ap", f"arith.mulf {row}, {fv} : vector<2xf32>")
        return ir.let("acc_s", f"vector.insert {prod}, {acc}[{h}] : vector<2xf32> into vector<2x2xf32>")

    # ------------------------------------------------------------------------------------------
    def body_bwd_dq(self):
        ir, p = self.ir, self.p
        self.q_tile_setup()
        nd = self.D // 8
        zero = ir.const(0.0, "vector<2x2xf32>")
        nl2 = [ir.fop("mulf", x, ir.f(-LOG2E), "nl2") for x in self.rows_vals("lse", p.seq_q)]
        dlt = self.rows_vals("delta", p.seq_q)

        def issue(it, slot):
            kv0 = self.kv_start(it)
            if it == 0:
                self.copy_tile("q", self.BR, self.at["q"], self.q0, p.seq_q)
                self.copy_tile("dout", self.BR, self.at["dout"], self.q0, p.seq_q)
            self.copy_kv_tiles(kv0, slot)

        def step(it, stage, args):
            acc = [args[m * nd:(m + 1) * nd] for m in range(self.mt)]
            ir.comment("S = Q K^T, dP = dO V^T")
            s = self.unpack(self.gemm_nk("q", "k", stage))
            dp = self.unpack(self.gemm_nk("dout", "v", stage))
            kv0 = self.kv_start(it)
            s = self.query_rows_bias(s, kv0)
            cond, valid = self.kv_mask(kv0)
            s = self.masked(cond, s, valid)
            ds = [[None] * len(s[0]) for _ in range(self.mt)]
            for m in range(self.mt):
                for j in range(len(s[m])):
                    ds[m][j] = [[None, None], [None, None]]
                    for h in (0, 1):
                        r = 2 * m + h
                        for c in (0, 1):
                            pr = ir.exp2(ir.fma(s[m][j][h][c], ir.f(self.c), nl2[r], "sc"))
                            ds[m][j][h][c] = ir.fop("mulf", pr, ir.fop("subf", dp[m][j][h][c], dlt[r], "dpd"), "ds")
            ir.comment("dQ += dS K")
            acc = self.gemm_kn(ds, "k", stage, acc)
            return [x for row in acc for x in row]

        out = self.pipeline(self.n_kv, issue, step, [zero] * (self.mt * nd), ["vector<2x2xf32>"] * (self.mt * nd))
        acc = [out[m * nd:(m + 1) * nd] for m in range(self.mt)]
        if self.splits > 1:
            self.store_rows(acc, "dq_part", ("row", self.part_row), self.q0, p.seq_q, scale=p.scale)
        else:
            self.store_rows(acc, "dq", self.at["dq"], self.q0, p.seq_q, scale=p.scale)

    # ------------------------------------------------------------------------------------------
    def body_bwd_dkv(self):
        ir, p = self.ir, self.p
        nd = self.D // 8
        zero = ir.const(0.0, "vector<2x2xf32>")
        self.k0 = k0 = ir.mul(self.bx, self.BR, "k0")
        bkv = self.by
        b = ir.div(bkv, p.kv_heads, "b")
        hk = ir.rem(bkv, p.kv_heads, "hk")
        kbase = ir.add(ir.mul(bkv, p.seq_k, "krow_bkv"), k0, "kbase")
        kat = {n: self.rows_at(n, b, hk, bkv, k0, kbase) for n in ("k", "v", "dk", "dv")}
        h0 = ir.mul(hk, p.group, "h0")
        head0 = ir.add(ir.mul(b, p.heads, "bh0"), h0, "qbh0")        # first query head (b, h0)
        nq_all = _cdiv(p.seq_q, self.BC)
        if p.causal:      # query tiles wholly above the diagonal (all i < k0) are skipped
            q_lo = ir.div(k0, self.BC, "q_lo")
            nq = ir.max(ir.sub(nq_all, q_lo, "nq_raw"), 0, "nq")
        else:
            q_lo, nq = 0, nq_all
        n_it = ir.mul(nq, p.group, "n_it")
        it_lo = 0
        if self.splits > 1:    # split Q: this block's steps [z*per, (z+1)*per) of the group's query tiles
            it_lo, n_it = split_range(ir, n_it, _cdiv(nq_all * p.group, self.splits), self.bz, "it")
            self.part_row = ir.add(ir.mul(self.bz, slab_rows(p, "bwd_dkv"), "slab"), kbase, "part_row")

        def tile_of(it):
            """(query head, flat query head b*H + h, query tile) of step ``it`` (of the split's steps)."""
            it = ir.add(it, it_lo, "it_all")
            if p.group == 1:
                return h0, head0, ir.add(q_lo, it, "qt")
            hd = ir.div(it, nq, "it_h")
            return ir.add(h0, hd, "qh"), ir.add(head0, hd, "qbh"), ir.add(q_lo, ir.rem(it, nq, "it_q"), "qt")

        def issue(it, slot):
            if it == 0:
                self.copy_tile("k", self.BR, kat["k"], k0, p.seq_k)
                self.copy_tile("v", self.BR, kat["v"], k0, p.seq_k)
            qh, qbh, qt = tile_of(it)
            qs = ir.mul(qt, self.BC, "qs")
            base = ir.add(ir.mul(qbh, p.seq_q, "qrow_bh"), qs, "qrow")
            for n in ("q", "dout"):
                self.copy_tile(n, self.BC, self.rows_at(n, b, qh, qbh, qs, base), qs, p.seq_q, slot)
            self.copy_vec("lse", base, qs, p.seq_q, slot)
            self.copy_vec("delta", base, qs, p.seq_q, slot)

        carried = [zero] * (2 * self.mt * nd)

        def step(it, stage, args):
            dk = [args[m * nd:(m + 1) * nd] for m in range(self.mt)]
            dv = [args[(self.mt + m) * nd:(self.mt + m + 1) * nd] for m in range(self.mt)]
            ir.comment("S^T = K Q^T, dP^T = V dO^T")
            s = self.unpack(self.gemm_nk("k", "q", stage))
            dp = self.unpack(self.gemm_nk("v", "dout", stage))
            qh, _, qt = tile_of(it)
            qs = ir.mul(qt, self.BC, "qs")
            if p.bias:          # rows are keys k0 + roff, columns queries qs + coff
                s = self.add_bias(s, bias_head(self.ir, self.p, b, qh), (k0, p.seq_k, self.BR, p.bias[3]),
                                  (qs, p.seq_q, self.BC, p.bias[2]), zero_past_columns=True)
            if p.causal:        # key j = k0 + roff may not exceed query i = qs + coff
                cond = ir.cmp("slt", qs, ir.add(k0, self.BR, "k_end"), "need_mask")
                diag = ir.sub(qs, k0, "diag")                      # roff - coff <= qs - k0
                tdiff = ir.sub(ir.add(self.wrow, self.g, "wg"), ir.mul(self.t, 2, "t2"), "tdiff")

                def valid(m, h, j, c):
                    return ir.cmp("sle", ir.add(tdiff, 16 * m + 8 * h - 8 * j - c, "cr"), diag, "causal_ok")
                s = self.masked(cond, s, valid)
            ir.comment("P^T = exp2(S^T c - lse log2 e), dS^T = P^T (dP^T - D)")
            pt = [[None] * len(s[0]) for _ in range(self.mt)]
            dst = [[None] * len(s[0]) for _ in range(self.mt)]
            cols = {}
            for j in range(len(s[0])):
                for c in (0, 1):
                    col = ir.add(ir.mul(self.t, 2, "t2"), 8 * j + c, "qcol")
                    lv = ir.let("lse_c", f"memref.load {self.sm['lse']}[{ir.v(stage)}, {ir.v(col)}] : {self.vring_type()}")
                    dv_ = ir.let("d_c", f"memref.load {self.sm['delta']}[{ir.v(stage)}, {ir.v(col)}] : {self.vring_type()}")
                    cols[j, c] = (ir.fop("mulf", lv, ir.f(-LOG2E), "nl2"), dv_)
            for m in range(self.mt):
                for j in range(len(s[m])):
                    pt[m][j] = [[None, None], [None, None]]
                    dst[m][j] = [[None, None], [None, None]]
                    for h in (0, 1):
                        for c in (0, 1):
                            nl2, dd = cols[j, c]
                            e = ir.exp2(ir.fma(s[m][j][h][c], ir.f(self.c), nl2, "sc"))
                            pt[m][j][h][c] = e
                            dst[m][j][h][c] = ir.fop("mulf", e, ir.fop("subf", dp[m][j][h][c], dd, "dpd"), "ds")
            ir.comment("dV += P^T dO, dK += dS^T Q")
            dv = self.gemm_kn(pt, "dout", stage, dv)
            dk = self.gemm_kn(dst, "q", stage, dk)
            return [x for row in dk for x in row] + [x for row in dv for x in row]

        out = self.pipeline(n_it, issue, step, carried, ["vector<2x2xf32>"] * len(carried))
        dk = [out[m * nd:(m + 1) * nd] for m in range(self.mt)]
        dv = [out[(self.mt + m) * nd:(self.mt + m + 1) * nd] for m in range(self.mt)]
        if self.splits > 1:
            self.store_rows(dk, "dk_part", ("row", self.part_row), k0, p.seq_k, scale=p.scale)
            self.store_rows(dv, "dv_part", ("row", self.part_row), k0, p.seq_k)
        else:
            self.store_rows(dk, "dk", kat["dk"], k0, p.seq_k, scale=p.scale)
            self.store_rows(dv, "dv", kat["dv"], k0, p.seq_k)


def ir_add3(ir, a, b, c):
    return ir.add(ir.add(a, b, "rr"), c, "roff")


# ----------------------------------------------------------------------------------------------
def _build_pre(p: AttentionProblem, s: AttentionSchedule) -> str:
    """D[row] = sum_d dO[row, d] * O[row, d] in FP32: 8 lanes per row, 16-byte loads, shuffles."""
    kt = s.bwd_pre
    ir = Text()
    T, eb, D = p.storage, p.elem_bytes, p.head_dim
    rows = p.batch * p.heads * p.seq_q
    gty = {n: global_type(p, n) for n in ("out", "dout")}
    vty = f"memref<{rows}xf32>"
    vec = 16 // eb
    rows_per_block = kt.threads // 8
    ir.emit(f"// Nova attention bwd_pre: D = rowsum(dO * O) for {p.describe()}")
    with ir.kernel(KERNEL_NAMES["bwd_pre"], [f"%out: {gty['out']}", f"%dout: {gty['dout']}", f"%delta: {vty}"],
                   kt.threads, minctasm=kt.blocks_per_sm):
        tid = ir.let("tid", "gpu.thread_id x")
        bx = ir.let("bx", "gpu.block_id x")
        row = ir.add(ir.mul(bx, rows_per_block, "row0"), ir.div(tid, 8, "r_in"), "row")
        l8 = ir.rem(tid, 8, "l8")
        ok = ir.cmp("slt", row, rows, "row_ok") if rows % rows_per_block else True
        srow = ir.select(ok, row, 0, hint="srow")
        start = {n: rows_at(ir, p, n, srow) for n in ("out", "dout")}
        acc = None
        for ch in range(D // (8 * vec)):
            col = ir.add(ir.mul(l8, vec, "c8"), ch * 8 * vec, "col")
            src = {n: element_at(ir, p, n, start[n], 0, col, "r") for n in start}
            a = ir.let("o", f"vector.load %out[{ir.v(src['out'])}] : {gty['out']}, vector<{vec}x{T}>")
            b = ir.let("d", f"vector.load %dout[{ir.v(src['dout'])}] : {gty['dout']}, vector<{vec}x{T}>")
            if T != "f32":
                a = ir.let("of", f"arith.extf {a} : vector<{vec}x{T}> to vector<{vec}xf32>")
                b = ir.let("df", f"arith.extf {b} : vector<{vec}x{T}> to vector<{vec}xf32>")
            prod = ir.let("pr", f"arith.mulf {a}, {b} : vector<{vec}xf32>")
            acc = prod if acc is None else ir.let("acc", f"arith.addf {acc}, {prod} : vector<{vec}xf32>")
        x = ir.let("sum", f"vector.reduction <add>, {acc} : vector<{vec}xf32> into f32")
        for off in (1, 2, 4):
            x = ir.fop("addf", x, ir.shfl_xor(x, off), "red")
        st = ir.and_(ir.cmp("eq", l8, 0, "lead"), ok)
        with ir.region(f"scf.if {st} {{"):
            ir.emit(f"memref.store {x}, %delta[{ir.v(row)}] : {vty}")
    return ir.text()
