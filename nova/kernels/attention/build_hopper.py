"""The Hopper attention forward: TMA + mbarrier ring + wgmma, warp-specialized.

``(AttentionProblem, AttentionSchedule with tma) -> MLIR text`` for sm_90a, BF16/FP16/TF32.  The backward
kernels (the wgmma dK/dV and dQ of ``build_hopper_bwd.py`` where step 11 picks them, else the
mma.sync ones of ``build.py``; ``bwd_pre`` always mma.sync) read this kernel's outputs: O in the
output dtype and the natural-log LSE ``[B*H*Tq]`` FP32, exactly as the mma.sync forward writes them.

Design (every number comes from ``schedule.fwd``; ``derive.py`` explains them):

* **Grid and roles.**  One CTA per (query tile of ``block_rows`` = 64 x C rows, batch x head), or,
  ``fwd.persistent`` (more such work tiles than SMs), ``grid[0]`` CTAs that each loop over work
  tiles (``fwd.tile_order`` "head": head by head, a head's query tiles side by side longest first,
  CTA bx taking position bx of even rounds of grid tiles and grid - 1 - bx of odd ones, so the K/V
  of the heads in flight stay in L2 and long and short tiles pair up; "query": bx, bx + grid, ...
  in decreasing query-tile order across heads); ``1 + C``
  warpgroups of 128 threads.  Warpgroup 0 is the producer (``setmaxnreg.dec`` to
  ``producer_regs``; one thread issues every TMA load), warpgroups 1..C are consumers
  (``setmaxnreg.inc`` to ``consumer_regs``), each owning 64 query rows.
* **Operands.**  q, k, v are read through 4-D tensor maps ``(D, T, H, B)`` with the operands' own
  strides (a strided view needs no copy), boxes ``[1, 1, rows, 64]`` (128 bytes of the head dim,
  128-byte swizzle; D = 128 is two boxes side by side).  TMA zero-fills rows past T.
* **Q** is loaded once per work tile (barrier ``q_full``; persistent: ``q_empty`` frees its buffer
  after the tile's last S = QK^T, so the next tile's Q loads during this one's last softmax and
  epilogue).  **K and V** stream through a ``stages``-deep ring: ``full[s]`` (arrival + K and V
  transaction bytes), ``empty[s]`` (one arrival per consumer warp after its wgmmas on the slot
  completed); persistent, the ring runs on across tiles (its position carried modulo 2 x stages).
* **S = Q K^T**: ``wgmma.m64n{BC}k16`` with both operands in shared memory, K-major over D
  (descriptor layout 128B swizzle, SBO 1024 B, k-steps of 32 bytes inside a box).
* **Online softmax** on the accumulator fragment: thread (warp w, lane g*4+t) holds rows
  16w + g (+8) x columns 8j + 2t (+1); the row max and sum need two shuffles over the lane quad.
  Base 2 with scale * log2(e) folded into one FMA; masks (causal on diagonal tiles, keys >= Tk on
  the tail tile) replace scores by a finite -1e30 in a uniform branch, so no row ever produces a NaN.
  An additive bias (``problem.bias``, the last parameter) is added before them as the mma.sync kernels
  add it (``build.bias_reader``: the accumulators share their column layout), clamped at its floor; a
  row whose every visible key sits at the floor is written O = 0, LSE = +inf.  A bias broadcast along
  rows or columns (a padding mask) is loaded at the top of each ring step, before its wait and S.
* **O += P V**: P packed to 16 bits in registers *is* the wgmma A fragment (the accumulator layout
  of m64nN equals the register A layout of m64k16 pairwise), so the second wgmma takes A from
  registers (inline PTX, ``wgmma ... {a0..a3}, descB``); V ``[keys, D]`` is MN-major as the B
  operand (K = keys): the transpose bit, LBO = the bytes between the 64-column boxes, SBO 1024 B.
* **TF32** (FP32 storage; the tensor maps are of type TF32, so TMA rounds Q, K and V to nearest as
  they land).  S = Q K^T is m64nBCk8 exactly as above (32-byte k-steps).  O += P V cannot read V
  as it lands: wgmma reads 32-bit B only K-major (no transpose bit), i.e. it needs V^T [D, keys] with
  the keys contiguous.  So warps 1-3 of the producer warpgroup (the *transposers*; warp 0 keeps the
  TMA thread) copy each landed V tile into a V^T buffer of the same ring slot, 128-byte swizzled
  like a K-major tile, and arrive on ``vt_full[s]`` after a ``fence.proxy.async`` (their generic
  stores become visible to wgmma's async-proxy reads).  The copy also *permutes the keys* of every
  8-key group, so that the score accumulators are the register A fragment without a shuffle: the
  TF32 A layout of m64k8 (CUTLASS ``ALayout_64x8``) holds (row g, k t), (g + 8, t), (g, t + 4),
  (g + 8, t + 4), the accumulators hold (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) of each
  8-column group j; so k-step j takes accumulators 4j, 4j + 2, 4j + 1, 4j + 3 and its B row k holds
  key 8j + 2k (k < 4) or 8j + 2(k - 4) + 1 (``vt_position``).  P is rounded to TF32 in registers
  (``(bits + 2^12) & ~(2^13 - 1)``, to nearest, ties away, as cvt.rna) and the second wgmma is
  m64n{D}k8 with A from registers.
* **Epilogue**: O / rowsum stored from registers (pairs, predicated on rows < Tq; strided ``out``
  addressed by its strides), LSE = (m + log2 l) ln 2 by the quad's first lane.
* **Split KV** (``fwd.splits`` > 1, a grid of few query tiles; not persistent, not causal): block z
  walks key tiles [z*per, (z+1)*per) (``build.split_range``) and writes its normalized O in FP32 into
  its slab of ``o_part`` and its LSE into ``lse_part`` (a row whose every key of the split is masked by
  the bias: O = 0, LSE = -inf), exactly as the mma.sync forward's splits; the forward's combine kernel
  (``build_combine``) weighs the splits by their LSE into O and the LSE.
"""
from __future__ import annotations

from nova.codegen.nvgpu import (KMAJOR_LEADING_BYTE_OFFSET, SM90A, SWIZZLE_ATOM_BYTES, SWIZZLE_BYTES,
                                WARPGROUP_THREADS, aligned_dynamic_shared_memory, descriptor,
                                descriptor_high_constant, descriptor_start, fence_mbarrier_init,
                                fence_proxy_async_shared, mbarrier_group_type, mbarrier_try_wait, mbarrier_wait_ticks,
                                setmaxnreg, slot_phase, wgmma_attributes, wgmma_commit_group, wgmma_fence,
                                wgmma_wait_group)
from nova.kernels.attention.build import (LN2, LOG2E, MASKED, AttentionCodegenError, bias_head, bias_reader,
                                          biased_score, element_at, floor_max, global_type, masked_row,
                                          rows_advance, rows_at, slab_rows, slab_type, split_range)
from nova.kernels.attention.mlirtext import SMEM, Text
from nova.kernels.attention.problem import AttentionProblem
from nova.kernels.attention.schedule import AttentionSchedule

KERNEL_NAME = "nova_attn_fwd"
PARAMS = ("tmap_q", "tmap_k", "tmap_v", "out", "lse")
ARCH = SM90A
WG = WARPGROUP_THREADS
SWIZZLE = SWIZZLE_BYTES       # bytes per swizzled row = a TMA box's inner extent
ALIGN = SWIZZLE_ATOM_BYTES    # the 128-byte swizzle atom: every box starts on a 1024-byte boundary
WG_TYPE = {"bf16": "bf16", "fp16": "f16", "tf32": "tf32"}
KSTEP_BYTES = 32              # a wgmma k-step reads 32 bytes of each K-major row: k16 (16-bit), k8 (TF32)
TRANSPOSER_WARPS = 3          # TF32: producer warps 1-3 write V^T (warp 0 holds the TMA thread)
TF32_KEEP_MASK = -(1 << 13)   # 0xFFFFE000 as i32: the bits a TF32 operand keeps
TF32_HALF_ULP = 1 << 12       # half of TF32's last mantissa bit: added before the mask, it rounds to nearest


def _cdiv(a, b):
    return -(-a // b)


def box_cols(p: AttentionProblem) -> int:
    """Head-dim elements per TMA box (one 128-byte swizzled row)."""
    return SWIZZLE // p.elem_bytes


def transpose_loop(units: int, warps: int, in_flight: int) -> tuple[int, int]:
    """(groups, rest): the loops of ``transpose_tile`` over ``units`` work units on ``warps`` warps:
    ``groups`` iterations of ``in_flight`` units each (the units every warp has; none when one is in
    flight), then ``rest`` iterations of one unit (guarded where not every warp has it)."""
    groups = (units // warps) // in_flight if in_flight > 1 else 0
    return groups, _cdiv(units, warps) - groups * in_flight


def transposes_v(p: AttentionProblem) -> bool:
    """TF32: the forward's producer writes V^T beside each landed V (module docstring)."""
    return p.dtype == "tf32"


def ring_tiles(p: AttentionProblem) -> int:
    """[BC, D] tiles per ring slot of the forward: K and V, TF32 also V^T."""
    return 3 if transposes_v(p) else 2


def smem_plan_hopper(p: AttentionProblem, rows: int, cols: int, stages: int) -> dict:
    """Byte offsets (past the 1024-byte aligned base) of Q and of each ring slot's K and V tiles (TF32:
    and V^T, at ``vt`` past the slot's K)."""
    q = rows * p.head_dim * p.elem_bytes
    kv = cols * p.head_dim * p.elem_bytes
    tiles = ring_tiles(p)
    return {"q": 0, "ring": q, "kv": kv, "vt": 2 * kv, "stage": tiles * kv, "total": q + stages * tiles * kv + ALIGN}


def vt_position(key: int) -> int:
    """Where key ``key`` of an 8-key group sits in V^T's K order (TF32): the A fragment's k index
    t holds key 2t, k index t + 4 key 2t + 1 (module docstring), so key o goes to o/2 + 4 (o & 1)."""
    return (key & ~7) + ((key & 7) >> 1) + 4 * (key & 1)


def tma_blocker(p: AttentionProblem) -> str:
    """Why q, k, v cannot be read through this kernel's 4-D tensor maps ('' when they can): TMA needs
    16-byte strides (the problem's own rule) and no zero stride (a broadcast head or batch)."""
    for name in ("q", "k", "v"):
        shape = p.operand_shape(name)
        for dim, n, x in zip("BHT", shape, p.operand_strides(name)):
            if n > 1 and x == 0:
                return f"{name}'s {dim} stride is 0 (broadcast): a tensor map needs a positive stride"
    return ""


def check_kernel_tile(p: AttentionProblem, kt, need: int, fail) -> None:
    """The checks of a warp-specialized Hopper attention tile (the forward's and the backward's):
    64 rows per consumer warpgroup and one producer warpgroup, wgmma N in [16, 256], whole 128-byte
    boxes of D, a ring of >= 2 stages, 128-byte swizzle, at least ``need`` bytes of shared memory,
    and a setmaxnreg split the block's registers at launch can hold; ``fail(message)`` raises."""
    if kt.consumer_warpgroups < 1 or kt.block_rows != 64 * kt.consumer_warpgroups:
        fail(f"block_rows {kt.block_rows} must be 64 x consumer warpgroups ({kt.consumer_warpgroups})")
    if kt.producer_warps != 4 or kt.warps != 4 * kt.consumer_warpgroups:
        fail("one producer warpgroup and 4 warps per consumer warpgroup")
    if kt.block_cols % 16 or not 16 <= kt.block_cols <= 256:
        fail(f"block_cols {kt.block_cols}: wgmma N must be a multiple of 16 in [16, 256]")
    if p.head_dim % box_cols(p):
        fail(f"head_dim {p.head_dim} is not a whole number of 128-byte boxes")
    if kt.stages < 2:
        fail("the ring needs 2 stages")
    if kt.smem_layout != "swizzle128":
        fail(f"smem_layout {kt.smem_layout!r}")
    if kt.smem_bytes < need:
        fail(f"smem_bytes {kt.smem_bytes} < {need}")
    if not kt.producer_regs <= kt.regs_per_thread <= kt.consumer_regs:
        fail(f"entry registers {kt.regs_per_thread} outside [{kt.producer_regs}, {kt.consumer_regs}]")
    held, want = kt.regs_per_thread * kt.threads, 128 * (kt.producer_regs + kt.consumer_warpgroups * kt.consumer_regs)
    if want > held:       # setmaxnreg.inc waits until the block's pool has the registers: it never would
        fail(f"setmaxnreg {kt.producer_regs}/{kt.consumer_regs} needs {want} registers, the block holds {held} "
             f"({kt.threads} x {kt.regs_per_thread}): the consumers' setmaxnreg.inc would wait forever")


def check_supported(p: AttentionProblem, s: AttentionSchedule) -> None:
    kt = s.fwd

    def fail(msg):
        raise AttentionCodegenError(f"cannot generate the Hopper forward for {p.describe()}: {msg}")

    if not s.tma:
        fail("the schedule's forward is not on the TMA/wgmma path (schedule.tma)")
    if p.dtype not in WG_TYPE:
        fail(f"dtype {p.dtype}: the Hopper forward is BF16, FP16 or TF32")
    if p.split_scores:
        fail("3xtf32 scores run on the mma.sync forward")
    if transposes_v(p) and kt.block_cols % 32:
        fail(f"block_cols {kt.block_cols}: the TF32 V^T boxes are 32 keys (128 bytes) wide")
    check_kernel_tile(p, kt, smem_plan_hopper(p, kt.block_rows, kt.block_cols, kt.stages)["total"], fail)
    if kt.splits > 1:
        tiles = _cdiv(p.seq_k, kt.block_cols)
        if kt.persistent or p.causal:
            fail(f"{kt.splits} key splits: a split forward is neither persistent nor causal")
        if kt.grid[2] != kt.splits or (kt.splits - 1) * _cdiv(tiles, kt.splits) >= tiles:
            fail(f"{kt.splits} key splits of {tiles} tiles leave a split empty or disagree with grid {kt.grid}")
    why = tma_blocker(p)
    if why:
        fail(why)


class HopperAttentionKernel:
    """What the Hopper forward (``_HopperFwd``) and the backward's kernels (``build_hopper_bwd``) share:
    the kernel tile's sizes and register types, the TMA box and tensor-map types, a ring slot's
    phase, wgmma descriptors (K-major k-steps) and the register-A ``wgmma`` with FP32 pairs packed
    to 16 bits.  ``kt`` is the schedule's KernelTile of the kernel being built."""

    def __init__(self, p: AttentionProblem, s: AttentionSchedule, kt):
        self.p, self.s = p, s
        self.kt = kt
        self.ir = Text()
        self.T = p.storage
        self.D = p.head_dim
        self.BR, self.BC, self.S = kt.block_rows, kt.block_cols, kt.stages
        self.C = kt.consumer_warpgroups
        self.bcols = box_cols(p)
        self.nbox = self.D // self.bcols
        self.tf32 = p.dtype == "tf32"
        self.kstep = KSTEP_BYTES // p.elem_bytes          # elements per wgmma k-step: 16, TF32 8
        self.ksteps = self.D // self.kstep                  # k-steps of a product over D
        self.c = p.scale * LOG2E
        self.vt = f"memref<{p.batch * p.heads * p.seq_q}xf32>"
        self.mb = mbarrier_group_type
        self.ns, self.no = self.BC // 2, self.D // 2          # accumulators per thread: scores, an output
        self.s_t = "!llvm.struct<(" + ", ".join(["f32"] * self.ns) + ")>"
        self.o_t = "!llvm.struct<(" + ", ".join(["f32"] * self.no) + ")>"

    # ---- the additive bias (``problem.bias``): read as the mma.sync kernels read it (``build.bias_reader``)
    def bias_args(self) -> list[str]:
        """The bias parameter (last), where the problem has one."""
        return [f"%bias: memref<{self.p.bias_extent}xf32>"] if self.p.bias else []

    def bias_loads_early(self, row_stride: int, col_stride: int) -> bool:
        """Whether a step loads its bias before its ring wait and S product (their latency hidden behind
        them): where a thread's distinct elements are at most half its score accumulators -- a bias
        broadcast along the rows or the columns (a padding mask: one value a column).  A bias of its own
        per score (both strides) is loaded after S, as the mma.sync kernels do: held across S, its
        values spilled the backward's kernels (ptxas)."""
        distinct = (2 if row_stride else 1) * (self.BC // 4 if col_stride else 1)
        return distinct <= self.ns // 2

    def step_bias(self, load, row_stride: int, col_stride: int):
        """A ring step's bias as a thunk: ``load()`` (``bias_loads``) issued now where
        ``bias_loads_early`` says (its latency behind the ring wait and S), else when the thunk is called
        (after S)."""
        if self.bias_loads_early(row_stride, col_stride):
            values = load()
            return lambda: values
        return load

    def bias_loads(self, head, rows, cols, zero_past_columns=False) -> list:
        """The bias of each score accumulator (element i: row 16 warp + g + 8h of this warpgroup's 64,
        column 8j + 2t + c of the tile; j = i / 4, h = i / 2 mod 2, c = i mod 2), each distinct element
        loaded once (``build.bias_reader``); ``rows`` counts from the warpgroup's first row."""
        ir = self.ir
        value = bias_reader(ir, self.p, self.t, head, rows, cols, zero_past_columns)
        ir.comment("this step's bias")
        return [value((i // 2) % 2, lambda h=(i // 2) % 2: ir.add(ir.mul(self.warp, 16), ir.add(self.g, 8 * h),
                                                                   "brow_off"), (i // 4, i % 2))
                for i in range(self.ns)]

    def biased(self, s, bias) -> list:
        """The scores plus their ``bias_loads``, clamped at the floor (``build.biased_score``)."""
        self.ir.comment("scores + bias / scale, clamped at the floor")
        return [biased_score(self.ir, self.p, x, b) for x, b in zip(s, bias)]

    def store_pair(self, name: str, gty: str, row, j: int, xs: list, split: bool) -> None:
        """Output ``name``'s columns 8j + 2t and 8j + 2t + 1 of ``row`` (``rows_at`` / ``rows_advance``):
        the FP32 pair ``xs`` in the output dtype, or (``split``) in FP32 into a slab, ``row`` its flat
        row (the partials' layout, ``build.PARTIALS``); ``gty`` the output's memref type."""
        ir, p = self.ir, self.p
        ty = "f32" if split else self.T
        if ty != "f32":
            xs = [ir.let("o_t", f"arith.truncf {x} : f32 to {ty}") for x in xs]
        vec = ir.let("o_v", f"vector.from_elements {xs[0]}, {xs[1]} : vector<2x{ty}>")
        col = ir.add(ir.mul(self.t, 2, "t2"), 8 * j, "st_col")
        dst = ir.add(ir.mul(row[1], self.D, "pt_off"), col, "st") if split else \
            element_at(ir, p, name, row, 0, col, "st")
        align = 2 * (4 if ty == "f32" else p.elem_bytes)
        ir.emit(f"vector.store {vec}, %{name}[{ir.v(dst)}] {{alignment = {align}}} : {gty}, vector<2x{ty}>")

    # ---- the prologue and the consumers' coordinates, as both kernels emit them
    def query_block(self, q0, bh=None):
        """A block of query rows from ``q0`` (the forward's, dQ's): its (b, h) from ``bh`` = b*H + h
        (default block y), its KV head ``hkv``; returns the number of KV tiles it visits (causal: keys
        j <= i < q0 + BR, so tiles wholly after the diagonal are never loaded)."""
        ir, p = self.ir, self.p
        bh = self.by if bh is None else bh
        self.b = ir.div(bh, p.heads, "b")
        self.h = ir.rem(bh, p.heads, "h")
        self.hkv = ir.div(self.h, p.group, "hkv")
        self.bh = bh
        if p.causal:
            last = ir.min(ir.add(q0, self.BR, "q_end"), p.seq_k, "kv_end")
            return ir.div(ir.add(last, self.BC - 1, "kv_end_r"), self.BC, "n_kv")
        return _cdiv(p.seq_k, self.BC)

    def roles(self):
        """The kernel body: the prologue (``setup``), then warpgroup 0 as the producer and the others
        as consumers (each kernel's ``producer`` and ``consumer``)."""
        ir = self.ir
        self.setup()
        ir.if_else(ir.cmp("eq", self.wg, 0, "is_producer"), self.producer, self.consumer)

    def thread_ids(self, tensor_rows: dict):
        """The operands' tensor maps (``%tmap_<name>``, boxes of ``rows`` rows), the thread's id,
        warpgroup and lane, the block's ids."""
        ir = self.ir
        self.tm, self.tm_rows = {}, dict(tensor_rows)
        for n, rows in tensor_rows.items():
            self.tm[n] = ir.let(f"tm_{n}", f"builtin.unrealized_conversion_cast %tmap_{n} : !llvm.ptr to "
                                           f"{self.tm_type(rows)}")
        self.tid = ir.let("tid", "gpu.thread_id x")
        self.wg = ir.div(self.tid, WG, "wg")
        self.lane = ir.rem(self.tid, 32, "lane")
        self.bx = ir.let("bx", "gpu.block_id x")
        self.by = ir.let("by", "gpu.block_id y")

    def load(self, name, bar, off, t0, head, nbar):
        """TMA-load operand ``name``'s tile (its D/64 boxes of ``tm_rows[name]`` rows x 128 bytes) from
        row ``t0`` of head ``head`` (batch ``self.b``) to byte ``off`` of dynamic smem, completing on
        ``bar`` (an mbarrier of a group of ``nbar``)."""
        ir = self.ir
        rows = self.tm_rows[name]
        for i in range(self.nbox):
            view = ir.let(f"box_{name}", f"memref.view {self.dsm}[{ir.v(ir.add(off, i * rows * SWIZZLE))}][] "
                                         f": memref<?xi8, {SMEM}> to {self.box_type(rows)}")
            coords = ", ".join(ir.v(c) for c in (i * self.bcols, t0, head, self.b))
            ir.emit(f"nvgpu.tma.async.load {self.tm[name]}[{coords}], {bar} to {view} : "
                    f"{self.tm_type(rows)}, {self.mb(nbar)} -> {self.box_type(rows)}")

    def aligned_smem(self, what: str):
        """Dynamic shared memory from its first ALIGN-byte boundary (the 128-byte swizzle atom):
        ``base_off`` its byte offset in the ``dsm`` view, ``base_enc`` its address >> 4 (descriptors)."""
        ir = self.ir
        ir.comment(f"---- shared memory: {what}")
        self.dsm, addr, al = aligned_dynamic_shared_memory(ir, ALIGN)
        self.base_off = ir.sub(al, addr, "base_off")
        # masked to the descriptor's 14-bit start field (nvgpu.descriptor_start): without the mask the
        # non-causal D64 dK/dV kernel read out of range (CUDA_ERROR_ILLEGAL_ADDRESS; H200,
        # bench/results/h200-2026-12-01/c/call1)
        self.base_enc = descriptor_start(ir, al, "base_enc")

    def ring_barriers(self, kept: str, full_arrivals: int, what: str, kept_empty: str = "",
                      extra_ring: tuple[str, int] | None = None, lanes_release: bool = False) -> str:
        """The mbarriers: ``kept`` (one, the tiles loaded once), full[S] (``full_arrivals`` arrivals and
        the TMA bytes) and empty[S] (every consumer warp; ``lanes_release``: every consumer thread, see
        ``finish_step``), initialised by thread 0 and fenced before the block's barrier; returns
        ``kept``'s SSA name.  ``kept_empty`` (a persistent kernel, whose
        kept tile is reloaded per work tile): also that barrier, every consumer warp, as ``self.kept_empty``.
        ``extra_ring`` = (name, arrivals): one more group of S barriers, as ``self.<name>``."""
        ir = self.ir
        ir.comment(f"---- mbarriers: {what}")
        kbar = ir.let(kept, f"nvgpu.mbarrier.create -> {self.mb(1)}")
        if kept_empty:
            self.kept_empty = ir.let(kept_empty, f"nvgpu.mbarrier.create -> {self.mb(1)}")
        self.full = ir.let("full", f"nvgpu.mbarrier.create -> {self.mb(self.S)}")
        self.empty = ir.let("empty", f"nvgpu.mbarrier.create -> {self.mb(self.S)}")
        extra = None
        if extra_ring:
            extra = ir.let(extra_ring[0], f"nvgpu.mbarrier.create -> {self.mb(self.S)}")
            setattr(self, extra_ring[0], extra)
        t0 = ir.cmp("eq", self.tid, 0, "is_t0")
        ir.emit(f"nvgpu.mbarrier.init {kbar}[{ir.v(0)}], {ir.v(1)}, predicate = {t0} : {self.mb(1)}")
        if kept_empty:
            ir.emit(f"nvgpu.mbarrier.init {self.kept_empty}[{ir.v(0)}], {ir.v(4 * self.C)}, predicate = {t0} : "
                    f"{self.mb(1)}")
        for i in range(self.S):
            ir.emit(f"nvgpu.mbarrier.init {self.full}[{ir.v(i)}], {ir.v(full_arrivals)}, predicate = {t0} : "
                    f"{self.mb(self.S)}")
            ir.emit(f"nvgpu.mbarrier.init {self.empty}[{ir.v(i)}], {ir.v(4 * self.C * (32 if lanes_release else 1))}, "
                    f"predicate = {t0} : "
                    f"{self.mb(self.S)}")
            if extra:
                ir.emit(f"nvgpu.mbarrier.init {extra}[{ir.v(i)}], {ir.v(extra_ring[1])}, predicate = {t0} : "
                        f"{self.mb(self.S)}")
        with ir.region(f"scf.if {t0} {{"):
            fence_mbarrier_init(ir)
        ir.emit("gpu.barrier")
        return kbar

    def consumer_threads(self) -> str:
        """A consumer thread's coordinates: its warpgroup ``cwg`` among the consumers, ``warp`` in it,
        and the accumulator layout's quad row ``g`` and column ``t``; returns the lane-0 predicate."""
        ir = self.ir
        ctid = ir.sub(self.tid, WG, "ctid")
        self.cwg = ir.div(ctid, WG, "cwg")
        wtid = ir.rem(ctid, WG, "wg_tid")
        self.warp = ir.div(wtid, 32, "wg_warp")
        self.g = ir.div(self.lane, 4, "g")
        self.t = ir.rem(self.lane, 4, "t")
        return ir.cmp("eq", self.lane, 0, "lane0")

    def finish_step(self, lane0, slot, lanes_release: bool = False):
        """The end of a consumer's ring step: commit the register-A products and wait for them, then
        lane 0 of each warp releases ``slot`` (its tiles read) on the empty barrier.  ``lanes_release``
        (the barrier counts every consumer thread): every thread arrives, for kernels whose lanes also
        read the slot with ordinary loads (the dK/dV kernel's LSE/D columns).  A lane-0 arrival releases
        only lane 0's reads, so by the memory model the producer's next write of those columns would race
        the other lanes' reads (compute-sanitizer's racecheck reported it with one consumer warpgroup,
        on the H200; a bar.warp.sync before the arrival compiles to nothing in a converged warp)."""
        ir = self.ir
        wgmma_commit_group(ir)
        wgmma_wait_group(ir, 0)
        arrive = lambda: ir.let("tok", f"nvgpu.mbarrier.arrive {self.empty}[{ir.v(slot)}] : {self.mb(self.S)} -> "
                                       "!nvgpu.mbarrier.token")
        ir.guarded(True if lanes_release else lane0, arrive)

    def descriptor_hi(self, name: str, lbo: int) -> str:
        """Bits 16-63 of a 128B-swizzled wgmma descriptor as an i64 constant named ``name``: LBO ``lbo``
        bytes (``KMAJOR_LEADING_BYTE_OFFSET``: K-major), SBO 1024 bytes (``nvgpu.WgmmaDescriptor``)."""
        return descriptor_high_constant(self.ir, name, lbo)

    def where(self, cond, apply, s: list) -> list:
        """The scores ``apply()`` returns (the masked ones) where ``cond`` holds, ``s`` where it does not:
        inline when ``cond`` is the constant True, else one ``scf.if`` yielding either (the masking
        branch is taken only by the tiles that need it)."""
        ir = self.ir
        if cond is True:
            return apply()
        res = ir.fresh("msk")
        n = len(s)
        tys = ", ".join(["f32"] * n)
        with ir.region(f"{res}:{n} = scf.if {cond} -> ({tys}) {{"):
            ir.emit(f"scf.yield {', '.join(apply())} : {tys}")
            ir.else_()
            ir.emit(f"scf.yield {', '.join(s)} : {tys}")
        return [f"{res}#{i}" for i in range(n)]

    def box_type(self, rows):
        return f"memref<1x1x{rows}x{self.bcols}x{self.T}, {SMEM}>"

    def tm_type(self, rows):
        return (f"!nvgpu.tensormap.descriptor<tensor = {self.box_type(rows)}, swizzle = swizzle_128b, "
                "l2promo = l2promo_256b, oob = zero, interleave = none>")

    def slot_phase(self, it, flip=False):
        return slot_phase(self.ir, it, self.S, flip)

    def desc(self, enc, hi):
        return descriptor(self.ir, enc, hi)

    def kmajor_enc(self, base_enc, rows, kk):
        """Descriptor start (shared address >> 4) of k-step ``kk`` of a K-major [rows, D] tile stored as
        D/64 boxes of [rows, 128 B]: box kk*16 // 64, 32 bytes per k-step inside it."""
        per_box = SWIZZLE // KSTEP_BYTES
        return self.ir.add(base_enc, ((kk // per_box) * rows * SWIZZLE + (kk % per_box) * KSTEP_BYTES) // 16,
                           "enc_k")

    def pack(self, a, b):
        ir, T = self.ir, self.T
        xs = [ir.let("pt", f"arith.truncf {x} : f32 to {T}") for x in (a, b)]
        v = ir.let("pv", f"vector.from_elements {xs[0]}, {xs[1]} : vector<2x{T}>")
        w = ir.let("pw", f"vector.bitcast {v} : vector<2x{T}> to vector<1xi32>")
        return ir.let("pa", f"vector.extract {w}[0] : i32 from vector<1xi32>")

    # ---- TF32: producer warps that transpose streamed tiles (wgmma reads 32-bit B only K-major)
    def transposer_lanes(self, first_warp: int, warps: int) -> dict:
        """The per-thread constants of ``transpose_tile`` for producer warps first_warp ..
        first_warp + warps - 1: the warp's index among them, the lane, and where the lane's row lands
        in a 32-row group of the transposed tile (``vt_position``)."""
        ir = self.ir
        lane = self.lane
        l7 = ir.rem(lane, 8, "l7")
        pos = ir.add(ir.add(ir.sub(lane, l7, "l_grp"), ir.div(l7, 2, "l_half")),
                     ir.mul(ir.rem(lane, 2, "l_odd"), 4, "l_odd4"), "vt_pos")      # vt_position(lane)
        return {"warp": ir.sub(ir.div(self.tid, 32, "p_warp"), first_warp, "x_warp"), "warps": warps, "l7": l7,
                "pos_chunk": ir.div(pos, 4, "pos_chunk"), "pos_word": ir.rem(pos, 4, "pos_word")}

    def transpose_tile(self, lanes: dict, src_off, dst_off, in_flight: int = 1):
        """Copy the landed [rows = BC, D] FP32 tile at byte ``src_off`` of dynamic smem (TMA's layout: D/32
        boxes of [rows, 128 B], 128-byte swizzled) to its transpose at ``dst_off``: rows/32 boxes of
        [D, 32 rows = 128 B], swizzled the same way (chunk c of row r at c ^ (r % 8)), i.e. the K-major
        layout of a wgmma B operand whose K is the tile's rows; within each group of 8 rows the order is
        ``vt_position``'s (the S accumulators are then the register A fragment).  Work unit u = (row
        box, 4 head-dim columns) per warp: lane l reads row 32 kb + l's 16 bytes (one swizzled chunk) and
        stores its 4 values in 4 rows of the transpose; a warp's stores to a row are 32 distinct words
        of one 128-byte row (no bank conflict), its reads 4 wavefronts.  ``in_flight`` (the schedule's
        ``transpose_in_flight``): units whose loads are issued before their stores, so that many
        shared-memory reads are in flight instead of one load-to-store latency per unit (the units every
        warp has, in groups; the rest one at a time, guarded)."""
        ir = self.ir
        rows = self.BC
        row_boxes, chunks = rows // 32, self.D // 4
        units, nw = row_boxes * chunks, lanes["warps"]
        f32v = f"memref<{rows * self.D}xf32, {SMEM}>"
        src_v = ir.let("x_src", f"memref.view {self.dsm}[{ir.v(src_off)}][] : memref<?xi8, {SMEM}> to {f32v}")
        dst_v = ir.let("x_dst", f"memref.view {self.dsm}[{ir.v(dst_off)}][] : memref<?xi8, {SMEM}> to {f32v}")

        def load(u):
            kb, dc = ir.rem(u, row_boxes, "kbox"), ir.div(u, row_boxes, "dchunk")
            row = ir.add(ir.mul(kb, 32, "kb32"), self.lane, "x_row")
            # source: box dc / 8 of [rows, 128 B], row ``row``, chunk (dc % 8) ^ (row % 8)
            src = ir.add(ir.add(ir.mul(ir.div(dc, 8, "vbox"), rows * 32, "vbox_off"), ir.mul(row, 32, "vrow_off")),
                         ir.mul(ir.xor(ir.rem(dc, 8, "vchunk"), lanes["l7"], "vchunk_sw"), 4, "vchunk_off"), "v_src")
            return kb, dc, ir.let("vx", f"vector.load {src_v}[{ir.v(src)}] : {f32v}, vector<4xf32>")

        def store(kb, dc, x):
            for e in range(4):
                d = ir.add(ir.mul(dc, 4, "d4"), e, "vt_row")
                dst = ir.add(ir.add(ir.mul(kb, self.D * 32, "vtbox_off"), ir.mul(d, 32, "vtrow_off")),
                             ir.add(ir.mul(ir.xor(lanes["pos_chunk"], ir.rem(d, 8, "d8"), "vtchunk_sw"), 4, "vtc"),
                                    lanes["pos_word"], "vt_col"), "vt_dst")
                el = ir.let("vx_e", f"vector.extract {x}[{e}] : f32 from vector<4xf32>")
                ir.emit(f"memref.store {el}, {dst_v}[{ir.v(dst)}] : {f32v}")

        groups, rest = transpose_loop(units, nw, in_flight)
        if groups:
            with ir.region(f"scf.for %xg = {ir.v(0)} to {ir.v(groups)} step {ir.v(1)} {{"):
                first = ir.mul("%xg", in_flight * nw, "xg_u")
                held = [load(ir.add(ir.add(first, j * nw, "xg_j"), lanes["warp"], "unit")) for j in range(in_flight)]
                for kb, dc, x in held:
                    store(kb, dc, x)
        rest_from = groups * in_flight
        if rest:
            with ir.region(f"scf.for %xu = {ir.v(rest_from)} to {ir.v(rest_from + rest)} step {ir.v(1)} {{"):
                u = ir.add(ir.mul("%xu", nw, "xu_w"), lanes["warp"], "unit")

                def unit(u=u):
                    store(*load(u))
                ir.guarded(ir.cmp("slt", u, units, "unit_ok") if units % nw else True, unit)

    def publish_transposed(self, group, slot):
        """After a transposer thread's stores: fence them into the async proxy (wgmma's reads) and
        arrive on ``group[slot]`` (one arrival per transposer thread)."""
        ir = self.ir
        fence_proxy_async_shared(ir)
        ir.let("xt_tok", f"nvgpu.mbarrier.arrive {group}[{ir.v(slot)}] : {self.mb(self.S)} -> !nvgpu.mbarrier.token")

    def tf32_bits(self, x):
        """``x`` rounded to TF32 (to nearest, ties away, as cvt.rna) as the i32 a register A fragment
        holds: (bits + 2^12) & ~(2^13 - 1), two integer instructions."""
        ir = self.ir
        bits = ir.let("p_bits", f"arith.bitcast {x} : f32 to i32")
        up = ir.let("p_up", f"arith.addi {bits}, {ir.const(TF32_HALF_ULP, 'i32')} : i32")
        return ir.let("pa", f"arith.andi {up}, {ir.const(TF32_KEEP_MASK, 'i32')} : i32")

    def gemm_rs(self, acc, frags, b_enc, hi):
        """acc[m64 x D] += A[m64 x BC] B[BC x D] over BC: A the register fragments of a scores-shaped
        tile (16-bit: pairs packed, 4 per k-step of 16; TF32: the rounded words, accumulators 0, 2, 1, 3
        of each 8-column group per k-step of 8), B a streamed [BC rows, D] tile at descriptor start
        ``b_enc``: 16-bit MN-major (the transpose bit), TF32 its transpose [D, BC] K-major (rows permuted
        to match).  The forward's O += P V, the backward's dV, dK and dQ."""
        ir = self.ir
        if self.tf32:
            for kk in range(self.BC // 8):
                db = self.desc(self.kmajor_enc(b_enc, self.D, kk), hi)
                acc = self.wgmma_rs(acc, [frags[4 * kk + i] for i in (0, 2, 1, 3)], db)
            return acc
        for kk in range(self.BC // 16):
            db = self.desc(ir.add(b_enc, kk * 16 * SWIZZLE // 16, "b_enc_k"), hi)
            acc = self.wgmma_rs(acc, frags[4 * kk: 4 * kk + 4], db)
        return acc

    def wgmma_rs(self, acc, frag, db):
        """``wgmma.mma_async`` m64n{D}k16 with A from registers (the forward's P, the backward's P^T
        or dS^T packed to 16 bits), B MN-major (transpose bit); TF32: m64n{D}k8, B K-major (TF32 has
        no transpose bit).  Inline PTX (MLIR's NVVM op has only the shared-memory A form);
        accumulators tied in/out."""
        ir, n = self.ir, self.no
        accs = [ir.let("d", f"llvm.extractvalue {acc}[{i}] : {self.o_t}") for i in range(n)]
        one = ir.pure("one_i32", "arith.constant 1 : i32")
        d_list = ", ".join(f"${i}" for i in range(n))
        a_list = ", ".join(f"${n + i}" for i in range(4))
        ty = WG_TYPE[self.p.dtype]
        imm = "1, 1" if self.tf32 else "1, 1, 1"        # scale-a, scale-b (16-bit: and transpose-b)
        ptx = (f"{{\\n.reg .pred p;\\nsetp.ne.b32 p, ${n + 5}, 0;\\n"
               f"wgmma.mma_async.sync.aligned.m64n{self.D}k{self.kstep}.f32.{ty}.{ty} "
               f"{{{d_list}}}, {{{a_list}}}, ${n + 4}, p, {imm};\\n}}")
        cons = ",".join(["=f"] * n + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(n)])
        operands = ", ".join(list(frag) + [db, one] + accs)
        types = ", ".join(["i32"] * 4 + ["i64", "i32"] + ["f32"] * n)
        return ir.let("o_acc", f'llvm.inline_asm has_side_effects asm_dialect = att "{ptx}", "{cons}" '
                               f"{operands} : ({types}) -> {self.o_t}")


class _HopperFwd(HopperAttentionKernel):
    """The forward: ``setup`` (barriers; persistent: this CTA's tile count), then per work tile
    (``tiles``) the producer's TMA loads and the consumers' S, softmax, P V loop and epilogue."""
    def __init__(self, p: AttentionProblem, s: AttentionSchedule):
        super().__init__(p, s, s.fwd)
        self.plan = smem_plan_hopper(p, self.BR, self.BC, self.S)
        self.splits = self.kt.splits       # split KV: this block's key tiles, FP32 slabs out (module docstring)
        self.it_lo = 0                     # the block's first key tile (split KV)

    # ------------------------------------------------------------------------------------------
    def build(self) -> str:
        p, kt, ir = self.p, self.kt, self.ir
        ir.emit(f"// Nova attention fwd (Hopper): {p.describe()}")
        ir.emit(f"// block {self.BR} query rows ({self.C} consumer warpgroups x 64) x {self.BC} keys per tile, "
                f"{self.S}-stage TMA ring of K and V, wgmma m64n{self.BC}k16 (S = Q K^T, smem x smem) and "
                f"m64n{self.D}k16 (O += P V, P from registers), {ARCH}")
        outs = ([f"%o_part: {slab_type(p, 'fwd', self.splits, 'o_part')}",
                 f"%lse_part: {slab_type(p, 'fwd', self.splits, 'lse_part')}"] if self.splits > 1 else
                [f"%out: {global_type(p, 'out')}", f"%lse: {self.vt}"])
        args = ["%tmap_q: !llvm.ptr", "%tmap_k: !llvm.ptr", "%tmap_v: !llvm.ptr"] + outs + self.bias_args()
        with ir.kernel(KERNEL_NAME, args, kt.threads, maxnreg=kt.regs_per_thread):
            self.roles()
        return ir.text()

    def setup(self):
        ir, p = self.ir, self.p
        self.thread_ids({"q": self.BR, "k": self.BC, "v": self.BC})
        self.aligned_smem(f"Q then the ring, from the first {ALIGN}-byte boundary of dynamic smem")
        self.persistent = self.kt.persistent
        self.qbar = self.ring_barriers(
            "q_full", 1, f"q_full, full[{self.S}] (K and V landed), empty[{self.S}] (every consumer warp done)"
            + (", q_empty (every consumer warp's last S = Q K^T of a tile done: Q's buffer free)"
               if self.persistent else "")
            + (f", vt_full[{self.S}] (every transposer thread wrote V^T)" if self.tf32 else ""),
            kept_empty="q_empty" if self.persistent else "",
            extra_ring=("vt_full", TRANSPOSER_WARPS * 32) if self.tf32 else None)
        if self.persistent:
            self.n_qt = _cdiv(p.seq_q, self.BR)
            self.n_bh = p.batch * p.heads
            total = self.n_qt * self.n_bh
            grid = ir.let("grid_x", "gpu.grid_dim x")
            self.grid_x = grid
            if self.kt.tile_order == "head":
                ir.comment(f"persistent: {total} work tiles in head order (o = b*H + h major, query tiles "
                           "decreasing); round r of grid tiles: this CTA takes position bx (r even) or grid-1-bx (r odd)")
                rounds = ir.div(total, grid, "full_rounds")
                last = ir.select(ir.cmp("eq", ir.rem(rounds, 2, "rounds_odd"), 1, "last_odd"),
                                 ir.sub(ir.sub(grid, 1, "grid_m1"), self.bx, "pos_rev"), self.bx, hint="last_pos")
                extra = ir.select(ir.cmp("slt", last, ir.rem(total, grid, "part_round"), "in_part"), 1, 0, hint="extra")
                self.my_tiles = ir.add(rounds, extra, "my_tiles")
            else:
                ir.comment(f"persistent: {total} work tiles (query tile, b*H + h), tile t = bx + i x "
                           f"grid; query tiles in decreasing order (causal: the longest first)")
                left = ir.sub(total, self.bx, "tiles_left")
                self.my_tiles = ir.div(ir.add(left, ir.sub(grid, 1, "grid_m1"), "tiles_left_r"), grid, "my_tiles")
        else:
            self.q0 = ir.mul(self.bx, self.BR, "q0")
            self.n_kv = self.query_block(self.q0)
            if self.splits > 1:
                ir.comment(f"split KV: block z walks key tiles [z*per, (z+1)*per) of {self.n_kv}")
                self.bz = ir.let("bz", "gpu.block_id z")
                self.it_lo, self.n_kv = split_range(ir, self.n_kv, _cdiv(self.n_kv, self.splits), self.bz, "it")

    def key0(self, it):
        """The first key of step ``it`` of this block's walk (split KV: from its first key tile)."""
        ir = self.ir
        return ir.mul(ir.add(it, self.it_lo, "kv_tile") if self.splits > 1 else it, self.BC, "kv0")

    def work_tile(self, i):
        """Persistent: the coordinates of this CTA's work tile ``i``: ``q0``, the query block's (b, h) and
        KV head, ``n_kv``.  Head order: tile o = i x grid + (bx, or grid - 1 - bx in odd rounds i), head
        o / n_qt, query tile n_qt - 1 - o % n_qt.  Query order: t = bx + i x grid, query tile
        n_qt - 1 - t / BH, head t % BH."""
        ir = self.ir
        if self.kt.tile_order == "head":
            odd = ir.cmp("eq", ir.rem(i, 2, "i_odd"), 1, "round_odd")
            pos = ir.select(odd, ir.sub(ir.sub(self.grid_x, 1, "grid_m1"), self.bx, "pos_rev"), self.bx, hint="pos")
            t = ir.add(ir.mul(i, self.grid_x, "t_step"), pos, "tile")
            qt = ir.sub(self.n_qt - 1, ir.rem(t, self.n_qt, "t_q"), "qt")
            bh = ir.div(t, self.n_qt, "t_bh")
        else:
            t = ir.add(self.bx, ir.mul(i, self.grid_x, "t_step"), "tile")
            qt = ir.sub(self.n_qt - 1, ir.div(t, self.n_bh, "t_q"), "qt")
            bh = ir.rem(t, self.n_bh, "t_bh")
        self.q0 = ir.mul(qt, self.BR, "q0")
        self.n_kv = self.query_block(self.q0, bh)

    def tiles(self, iv: str, ring: str, body):
        """``body(ring_base)`` once per work tile: inline (ring base 0) in a one-tile-per-block kernel;
        persistent, inside ``scf.for iv`` over this CTA's tiles carrying the ring's position (the K/V
        ring continues across tiles; carried modulo 2S, all a slot and its parity need)."""
        ir = self.ir
        if not self.persistent:
            body(0)
            return
        res = ir.fresh(f"{ring}_end")
        with ir.region(f"{res} = scf.for %{iv} = {ir.v(0)} to {ir.v(self.my_tiles)} step {ir.v(1)} "
                       f"iter_args(%{ring} = {ir.v(0)}) -> (index) {{"):
            ir.reserve(iv, ring)
            self.work_tile(f"%{iv}")
            body(f"%{ring}")
            nxt = ir.rem(ir.add(f"%{ring}", self.n_kv, "ring_next"), 2 * self.S, "ring_mod")
            ir.emit(f"scf.yield {ir.v(nxt)} : index")

    def tile_parity(self, iv: str, flip: bool):
        """Persistent: the parity of work tile ``iv``'s phase of q_full (q_empty: ``flip``)."""
        ir = self.ir
        bit = ir.let("qpar_i", f"arith.index_cast {iv} : index to i64")
        par = ir.let("qpar", f"arith.trunci {bit} : i64 to i1")
        if flip:
            par = ir.let("qpar_flip", f"arith.xori {par}, {ir.pure('true1', 'arith.constant true')} : i1")
        return par

    # ------------------------------------------------------------------------------------------
    def producer(self):
        ir = self.ir
        ir.comment("---- producer warpgroup: give registers back; thread 0 issues the TMA loads")
        setmaxnreg(ir, self.kt.producer_regs, increase=False)
        ticks = mbarrier_wait_ticks(ir)

        def tile(ring):
            if self.persistent:
                mbarrier_try_wait(ir, self.kept_empty, 0, self.tile_parity('%tp', flip=True), ticks, self.mb(1))
            qb = ir.const(self.nbox * self.BR * SWIZZLE)
            ir.emit(f"nvgpu.mbarrier.arrive.expect_tx {self.qbar}[{ir.v(0)}], {qb} : {self.mb(1)}")
            self.load("q", f"{self.qbar}[{ir.v(0)}]", self.base_off, self.q0, self.h, 1)
            tx = ir.const(2 * self.plan["kv"])
            with ir.region(f"scf.for %itp = {ir.v(0)} to {ir.v(self.n_kv)} step {ir.v(1)} {{"):
                slot, par = self.slot_phase(ir.add(ring, "%itp", "it_ring"), flip=True)
                mbarrier_try_wait(ir, self.empty, slot, par, ticks, self.mb(self.S))
                ir.emit(f"nvgpu.mbarrier.arrive.expect_tx {self.full}[{slot}], {tx} : {self.mb(self.S)}")
                kv0 = self.key0("%itp")
                koff = ir.add(ir.add(self.base_off, self.plan["ring"]), ir.mul(slot, self.plan["stage"]), "k_off")
                self.load("k", f"{self.full}[{slot}]", koff, kv0, self.hkv, self.S)
                self.load("v", f"{self.full}[{slot}]", ir.add(koff, self.plan["kv"], "v_off"), kv0, self.hkv, self.S)

        with ir.region(f"scf.if {ir.cmp('eq', self.tid, 0, 'is_leader')} {{"):
            self.tiles("tp", "ring_p", tile)
        if self.tf32:
            with ir.region(f"scf.if {ir.cmp('sge', self.tid, 32, 'is_transposer')} {{"):
                self.tiles("tx", "ring_x", self.transpose_tiles)

    def transpose_tiles(self, ring):
        """TF32, producer warps 1-3: for each K/V step of the work tile, wait until V landed, write
        V^T into the slot's V^T buffer (``transpose_tile``), fence the async proxy and arrive on
        ``vt_full``."""
        ir = self.ir
        ticks = mbarrier_wait_ticks(ir)
        lanes = self.transposer_lanes(1, TRANSPOSER_WARPS)
        with ir.region(f"scf.for %itx = {ir.v(0)} to {ir.v(self.n_kv)} step {ir.v(1)} {{"):
            slot, par = self.slot_phase(ir.add(ring, "%itx", "it_ring"))
            mbarrier_try_wait(ir, self.full, slot, par, ticks, self.mb(self.S))
            v_off = ir.add(ir.add(self.base_off, self.plan["ring"] + self.plan["kv"]),
                           ir.mul(slot, self.plan["stage"]), "v_off")
            self.transpose_tile(lanes, v_off, ir.add(v_off, self.plan["vt"] - self.plan["kv"], "vt_off"),
                                self.kt.transpose_in_flight)
            self.publish_transposed(self.vt_full, slot)

    # ------------------------------------------------------------------------------------------

    def consumer(self):
        ir, p = self.ir, self.p
        kt = self.kt
        ir.comment(f"---- consumer warpgroups: take registers ({kt.consumer_regs}); S = Q K^T, softmax, O += P V")
        setmaxnreg(ir, kt.consumer_regs, increase=True)
        lane0 = self.consumer_threads()
        ticks = mbarrier_wait_ticks(ir)
        hi_k = self.descriptor_hi("desc_hi_k", KMAJOR_LEADING_BYTE_OFFSET)
        hi_v = (hi_k if self.tf32 else                              # TF32: V^T K-major, like K
                self.descriptor_hi("desc_hi_v", self.BC * SWIZZLE))   # V MN-major: its 64-column boxes
        q_enc = ir.add(ir.add(self.base_enc, ir.div(self.plan["q"], 16)), ir.mul(self.cwg, 64 * SWIZZLE // 16), "q_enc")
        attrs = wgmma_attributes(self.BC, self.kstep, WG_TYPE[p.dtype])
        zero_s = ir.let("zero_s", f"llvm.mlir.zero : {self.s_t}")
        zero_o = ir.let("zero_o", f"llvm.mlir.zero : {self.o_t}")

        def tile(ring):
            # rows of this warpgroup: r0 = q0 + 64 cwg; the thread's rows r0 + 16 warp + g (+ 8)
            self.r0 = ir.add(self.q0, ir.mul(self.cwg, 64), "wg_row0")
            qpar = self.tile_parity("%tc", flip=False) if self.persistent else ir.pure("false1", "arith.constant false")
            mbarrier_try_wait(ir, self.qbar, 0, qpar, ticks, self.mb(1))
            m_init, l_init = ir.f(MASKED), ir.f(0.0)
            res = ir.fresh("loop")
            with ir.region(f"{res}:5 = scf.for %it = {ir.v(0)} to {ir.v(self.n_kv)} step {ir.v(1)} iter_args("
                           f"%m0 = {m_init}, %m1 = {m_init}, %l0 = {l_init}, %l1 = {l_init}, %o_acc = {zero_o}) -> "
                           f"(f32, f32, f32, f32, {self.o_t}) {{"):
                ir.reserve("it", "m0", "m1", "l0", "l1", "o_acc")
                self.kv_step(ring, lane0, ticks, hi_k, hi_v, q_enc, attrs, zero_s)
            self.epilogue([f"{res}#0", f"{res}#1"], [f"{res}#2", f"{res}#3"], f"{res}#4")

        self.tiles("tc", "ring_c", tile)

    def kv_step(self, ring, lane0, ticks, hi_k, hi_v, q_enc, attrs, zero_s):
        """One K/V tile of the consumers' loop (``%it``): S = Q K^T (plus the bias), the online softmax,
        O += P V."""
        ir, p = self.ir, self.p
        if p.bias:
            kv0 = self.key0("%it")
            bias = self.step_bias(lambda: self.bias_loads(bias_head(ir, p, self.b, self.h),
                                                          (self.r0, p.seq_q, self.BR, p.bias[2]),
                                                          (kv0, p.seq_k, self.BC, p.bias[3])), p.bias[2], p.bias[3])
        slot, par = self.slot_phase(ir.add(ring, "%it", "it_ring"))
        mbarrier_try_wait(ir, self.full, slot, par, ticks, self.mb(self.S))
        k_enc = ir.add(ir.add(self.base_enc, self.plan["ring"] // 16), ir.mul(slot, self.plan["stage"] // 16),
                       "k_enc")
        v_enc = ir.add(k_enc, self.plan["vt" if self.tf32 else "kv"] // 16, "v_enc")
        ir.comment("S = Q K^T (wgmma, both operands K-major in shared memory)")
        wgmma_fence(ir)
        acc = zero_s
        for kk in range(self.ksteps):
            da = self.desc(self.kmajor_enc(q_enc, self.BR, kk), hi_k)
            db = self.desc(self.kmajor_enc(k_enc, self.BC, kk), hi_k)
            acc = ir.let("s_acc", f'"nvvm.wgmma.mma_async"({acc}, {da}, {db}) <{{{attrs}}}> : '
                                  f"({self.s_t}, i64, i64) -> {self.s_t}")
        wgmma_commit_group(ir)
        wgmma_wait_group(ir, 0)
        if self.persistent:
            ir.comment("the tile's last S read Q: release Q's buffer to the producer (the next tile's Q)")
            last = ir.cmp("eq", "%it", ir.sub(self.n_kv, 1, "kv_last_it"), "is_last_kv")
            with ir.region(f"scf.if {ir.and_(last, lane0, 'q_release')} {{"):
                ir.let("qtok", f"nvgpu.mbarrier.arrive {self.kept_empty}[{ir.v(0)}] : {self.mb(1)} -> "
                               "!nvgpu.mbarrier.token")
        s = [ir.let("s", f"llvm.extractvalue {acc}[{i}] : {self.s_t}") for i in range(self.ns)]
        if p.bias:
            s = self.biased(s, bias())
        else:
            kv0 = self.key0("%it")
        s = self.masked(kv0, s)
        ir.comment("online softmax (base 2): rows g (h = 0) and g + 8 (h = 1)")
        m_new, l_new, alphas, pe = [], [], [], [None] * self.ns
        for h in (0, 1):
            idx = [4 * j + 2 * h + c for j in range(self.BC // 8) for c in (0, 1)]
            mx = None
            for i in idx:
                mx = s[i] if mx is None else ir.fop("maxnumf", mx, s[i], "mx")
            for off in (1, 2):
                mx = ir.fop("maxnumf", mx, ir.shfl_xor(mx, off), "qm")
            m_old, l_old = (f"%m{h}", f"%l{h}")
            mn = ir.fop("maxnumf", m_old, ir.fop("mulf", mx, ir.f(self.c), "mxc"), "m_new")
            alpha = ir.exp2(ir.fop("subf", m_old, mn, "dm"))
            neg = ir.let("neg_m", f"arith.negf {mn} : f32")
            tot = None
            for i in idx:
                e = ir.exp2(ir.fma(s[i], ir.f(self.c), neg, "sc"))
                pe[i] = e
                tot = e if tot is None else ir.fop("addf", tot, e, "rs")
            l_new.append(ir.fma(l_old, alpha, tot, "l"))
            m_new.append(mn)
            alphas.append(alpha)
        ir.comment("O *= alpha (per row), P to 16 bits: the register A fragments of O += P V")
        o = "%o_acc"
        for i in range(self.no):
            h = (i // 2) % 2
            x = ir.let("o", f"llvm.extractvalue {o}[{i}] : {self.o_t}")
            o = ir.let("o_s", f"llvm.insertvalue {ir.fop('mulf', x, alphas[h], 'o_r')}, {o}[{i}] : {self.o_t}")
        if self.tf32:
            ir.comment("TF32: V^T (keys permuted by the transposers) must be complete in this slot")
            mbarrier_try_wait(ir, self.vt_full, slot, par, ticks, self.mb(self.S))
            frags = [self.tf32_bits(x) for x in pe]
        else:
            frags = [self.pack(pe[2 * i], pe[2 * i + 1]) for i in range(self.ns // 2)]
        wgmma_fence(ir)
        o = self.gemm_rs(o, frags, v_enc, hi_v)
        self.finish_step(lane0, slot)
        ir.emit(f"scf.yield {', '.join(m_new + l_new + [o])} : f32, f32, f32, f32, {self.o_t}")

    # ------------------------------------------------------------------------------------------
    def masked(self, kv0, s):
        """Scores with keys beyond Tk (tail tile) and, causal, keys after the row (tiles crossing this
        warpgroup's diagonal) replaced by MASKED, in a branch taken only where a tile needs it.  Key
        column 8j + c + 2t of row roff + 8h is valid iff 8j + c < L_h - 2t, L_h = min(Tk - kv0,
        r0 + roff + 8h + 1 - kv0): one bound per row, each score compared with a constant."""
        ir, p = self.ir, self.p
        cond = False
        if p.seq_k % self.BC:
            cond = ir.cmp("sgt", ir.add(kv0, self.BC, "kv_end"), p.seq_k, "kv_tail")
        if p.causal:
            cond = ir.or_(cond, ir.cmp("sgt", ir.add(kv0, self.BC - 1, "kv_last"), self.r0, "cross"), "need_mask")
        if cond is False:
            return s

        def apply():
            t2 = ir.mul(self.t, 2, "t2")
            bounds = []
            for h in (0, 1):
                lim = ir.sub(p.seq_k, kv0, "kv_left") if p.seq_k % self.BC else self.BC
                if p.causal:
                    row = ir.add(ir.add(self.r0, ir.mul(self.warp, 16)), ir.add(self.g, 8 * h + 1), "row_end")
                    lim = ir.min(lim, ir.sub(row, kv0, "diag_end"), "col_end")
                bounds.append(ir.sub(lim, t2, "col_bound"))
            out = []
            for i, x in enumerate(s):
                j, h, c = i // 4, (i // 2) % 2, i % 2
                ok = ir.cmp("sgt", bounds[h], 8 * j + c, "col_ok")
                out.append(ir.select(ok, x, ir.f(MASKED), ty="f32", hint="sm"))
            return out
        return self.where(cond, apply, s)

    # ------------------------------------------------------------------------------------------
    def epilogue(self, m_fin, l_fin, o):
        ir, p = self.ir, self.p
        split = self.splits > 1
        ir.comment("---- epilogue: O / l " + ("in FP32 into this split's slab rows (the combine weighs them)"
                                               if split else "in the output dtype") + ", LSE = (m + log2 l) ln 2")
        if p.bias:           # every visible key at the floor: a masked row, O = 0 and LSE = +inf (build.py);
            floor_c = floor_max(ir, p, self.c)        # a split's partial: LSE = -inf, no weight in the combine
            inf = ir.let("inf", f"arith.constant {'0xFF800000' if split else '0x7F800000'} : f32")
        inv, lse = [], []
        for h in (0, 1):
            lt = l_fin[h]
            for off in (1, 2):
                lt = ir.fop("addf", lt, ir.shfl_xor(lt, off), "qs")
            inv.append(ir.fop("divf", ir.f(1.0), lt, "inv_l"))
            lse.append(ir.fop("mulf", ir.fop("addf", m_fin[h], ir.log2(lt), "lse2"), ir.f(LN2), "lse"))
            if p.bias:
                inv[h], lse[h] = masked_row(ir, m_fin[h], floor_c, inv[h], lse[h], inf)
        out, lse_name = ("o_part", "lse_part") if split else ("out", "lse")
        gty = slab_type(p, "fwd", self.splits, out) if split else global_type(p, "out")
        lty = slab_type(p, "fwd", self.splits, lse_name) if split else self.vt
        qbase = ir.add(ir.mul(self.bh, p.seq_q, "qrow_bh"), self.q0, "qbase")       # row of lse
        if split:
            qbase = ir.add(ir.mul(self.bz, slab_rows(p, "fwd"), "slab"), qbase, "part_row")
            at = ("row", qbase)
        else:
            at = rows_at(ir, p, "out", qbase, (self.b, self.h, self.bh, self.q0))
        is_t0 = ir.cmp("eq", self.t, 0, "t_is0")
        for h in (0, 1):
            roff = ir.add(ir.add(ir.mul(self.cwg, 64), ir.mul(self.warp, 16)), ir.add(self.g, 8 * h), "row_off")
            ok = ir.cmp("slt", ir.add(self.q0, roff, "st_row"), p.seq_q, "st_ok") if p.seq_q % self.BR else True
            row = rows_advance(ir, p, "out", at, roff)

            def body(h=h, row=row, roff=roff):
                for j in range(self.D // 8):
                    xs = [ir.let("o", f"llvm.extractvalue {o}[{4 * j + 2 * h + c}] : {self.o_t}") for c in (0, 1)]
                    self.store_pair(out, gty, row, j, [ir.fop('mulf', x, inv[h], 'o_n') for x in xs], split)
                src = ir.add(qbase, roff, "lidx")
                with ir.region(f"scf.if {is_t0} {{"):
                    ir.emit(f"memref.store {lse[h]}, %{lse_name}[{ir.v(src)}] : {lty}")
            ir.guarded(ok, body)


def build_hopper_fwd(p: AttentionProblem, s: AttentionSchedule) -> str:
    check_supported(p, s)
    return _HopperFwd(p, s).build()
