"""The Hopper attention backward: dK/dV and dQ on TMA + mbarrier ring + wgmma, warp-specialized.

``(AttentionProblem, AttentionSchedule, role) -> MLIR text`` for sm_90a, BF16/FP16/TF32, roles ``bwd_dkv``
and ``bwd_dq`` (``bwd_pre``, D = rowsum(dO * O), stays the mma.sync builder's: it is a DRAM pass).
Both kernels read the forward's natural-log LSE and ``bwd_pre``'s D ``[B*H*Tq]`` FP32 exactly as the
mma.sync backward does, and write dQ, dK, dV in the input dtype at the operands' strides.

The two kernels are one pattern (every number from ``schedule.bwd_dkv`` / ``schedule.bwd_dq``;
``derive.py`` step 11 explains them): a CTA keeps two tiles of ``block_rows`` = 64 x C rows (one
TMA load, barrier ``kept_full``) and streams two tiles of ``block_cols`` rows through a
``stages``-deep full/empty mbarrier ring; 1 + C warpgroups, warpgroup 0 the producer (``setmaxnreg.dec``),
consumers of 64 kept rows each (``setmaxnreg.inc``).  Per streamed tile a consumer computes

* ``bwd_dkv`` (kept K, V of a key block; streamed Q, dO of each query tile of every query head of
  the GQA group): S^T = K Q^T and dP^T = V dO^T (wgmma m64n{BC}k16, both operands K-major in shared
  memory), P^T = exp2(S^T c - LSE log2 e), dS^T = P^T (dP^T - D), then dV += P^T dO and
  dK += dS^T Q with A = P^T / dS^T packed to 16 bits *in registers* (the m64nN accumulator layout is
  the m64k16 register A layout pairwise) and B = dO / Q ``[queries, D]`` MN-major (the descriptor's
  transpose bit, as the forward's V).  LSE and D of the tile's query columns: warp 1 of the producer
  warpgroup loads them (0 beyond Tq) into the ring slot, pre-multiplied (-LSE log2 e), and its 32 lanes
  arrive on the slot's ``full`` barrier beside the TMA transaction.  dK x scale and dV stored at the end.
* ``bwd_dq`` (kept Q, dO of a query block; streamed K, V): S = Q K^T, dP = dO V^T, the same P and dS
  with LSE and D of the thread's two rows (registers, loaded once), dQ += dS K (B = K MN-major).
  dQ x scale stored at the end.  No atomics: deterministic, S and dP are recomputed (7 matmuls per
  score in all, like the mma.sync backward).

TF32 (the forward's scheme, ``build_hopper.py``): wgmma reads 32-bit B only K-major, so the B operands
of the register-A products are transposed in shared memory as they land: idle producer warps
(``TRANSPOSER_WARPS``: 1-3 in dQ, 2-3 in dK/dV, where warp 1 writes LSE/D) copy K (dQ), Q and dO
(dK/dV) of each ring slot into [D, rows] tiles with each 8-row group permuted (``vt_position``) and
arrive on ``xt_full[s]``; P^T / dS^T are rounded to TF32 in registers and taken in the accumulator
order 0, 2, 1, 3 per k-step of 8.  S and dP are k8 products over D.

Masks as the forward: the bias added to the recomputed scores (dK/dV: of the step's query head, rows
keys and columns queries, a query column past Tq with bias 0; a bias per score runs on the mma.sync
backward: ``derive.BIAS_PER_SCORE_BLOCKER``), then causal (key > query) and, in dQ, keys >= Tk replaced
by a finite -1e30 in a branch taken only by tiles that need it, so P is exactly 0 there and no NaN
appears.  Rows beyond T are zero-filled by TMA (LSE and D read as 0): their P is finite and their
dO / Q rows are 0, so they add nothing (the mma.sync backward's argument); outputs beyond T are not
stored.
"""
from __future__ import annotations

from nova.codegen.nvgpu import (KMAJOR_LEADING_BYTE_OFFSET, mbarrier_try_wait, mbarrier_wait_ticks, setmaxnreg,
                                wgmma_attributes, wgmma_commit_group, wgmma_fence, wgmma_wait_group)
from nova.kernels.attention.build import (LOG2E, MASKED, PARTIALS, AttentionCodegenError, bias_head,
                                          global_type, rows_advance, rows_at, slab_rows, slab_type, split_range)
from nova.kernels.attention.build_hopper import ALIGN, ARCH, SWIZZLE, WG_TYPE, \
    HopperAttentionKernel, check_kernel_tile, tma_blocker
from nova.kernels.attention.mlirtext import SMEM
from nova.kernels.attention.problem import AttentionProblem
from nova.kernels.attention.schedule import AttentionSchedule

KERNEL_NAMES = {"bwd_dkv": "nova_attn_bwd_dkv", "bwd_dq": "nova_attn_bwd_dq"}
PARAMS = {"bwd_dkv": ("tmap_q", "tmap_k", "tmap_v", "tmap_dout", "lse", "delta", "dk", "dv"),
          "bwd_dq": ("tmap_q", "tmap_k", "tmap_v", "tmap_dout", "lse", "delta", "dq")}
# (kept tiles, streamed tiles) per role: the first of each pair makes the scores, the second dP
KEPT = {"bwd_dkv": ("k", "v"), "bwd_dq": ("q", "dout")}
STREAMED = {"bwd_dkv": ("q", "dout"), "bwd_dq": ("k", "v")}
VEC_LANES = 32                 # producer warp 1 loads the dK/dV kernel's LSE and D columns
TRANSPOSED = {"bwd_dkv": (0, 1), "bwd_dq": (0,)}   # TF32: the streamed tiles a register-A product reads as B
TRANSPOSER_WARPS = {"bwd_dkv": (2, 2), "bwd_dq": (1, 3)}   # TF32: (first producer warp, count) transposing

# ---- debug builds (``watchdog_ms``, bench/probes/attention_bwd_hang.py): every mbarrier wait bounded in time
# (%globaltimer); a thread whose wait runs out records where it waited into the int32 buffer passed as the
# extra last parameter ``watchdog`` (the first such thread wins an atomic CAS on word 0), counts itself in
# word TIMED_OUT and exits.  Words HEARTBEATS.. count the warps (or threads) that got past each point, so a
# hang outside an mbarrier wait (setmaxnreg) shows too when the buffer is host-mapped memory read while the
# kernel still runs.  Every access is system-scope (the buffer may be pinned host memory).
WATCHDOG_WORDS = 32
WATCHDOG_FIELDS = ("state", "bx", "by", "tid", "role", "barrier", "slot", "parity", "iteration", "tries", "n_it")
WATCHDOG_TIMED_OUT = 12        # threads whose wait ran out (each one exits)
WATCHDOG_HEARTBEATS = {16: "producer warps past setmaxnreg.dec", 17: "consumer warps past setmaxnreg.inc",
                       18: "consumer warps past kept_full", 19: "consumer warps done with the loop",
                       20: "producer TMA threads done issuing", 21: "producer warp-1 warps done (dK/dV)"}
WATCHDOG_ROLES = ("producer TMA thread", "producer warp 1 (LSE/D)", "consumer", "producer transposer (TF32)")
WATCHDOG_BARRIERS = ("kept_full", "full", "empty", "xt_full")


def tensor_map_rows(s: AttentionSchedule, role: str, name: str) -> int:
    """Box rows of operand ``name``'s tensor map in kernel ``role`` (kept tiles: block_rows)."""
    kt = s.kernel(role)
    return kt.block_rows if name in KEPT[role] else kt.block_cols


def ring_tiles_bwd(p: AttentionProblem, role: str) -> int:
    """[cols, D] tiles per ring slot of backward kernel ``role``: the two streamed tiles, TF32 also
    their transposes ``TRANSPOSED[role]``."""
    return 2 + (len(TRANSPOSED[role]) if p.dtype == "tf32" else 0)


def smem_plan_hopper_bwd(p: AttentionProblem, role: str, rows: int, cols: int, stages: int) -> dict:
    """Byte offsets past the 1024-byte aligned base: the two kept tiles, the ring (each slot the two
    streamed tiles, TF32: then their transposes ``TRANSPOSED``, from ``xt``) and, for dK/dV, the LSE and
    D columns of each slot (FP32)."""
    kept = rows * p.head_dim * p.elem_bytes
    tile = cols * p.head_dim * p.elem_bytes
    tiles = ring_tiles_bwd(p, role)
    ring = 2 * kept
    vec = ring + stages * tiles * tile
    vec_bytes = 2 * stages * cols * 4 if role == "bwd_dkv" else 0
    return {"kept0": 0, "kept1": kept, "ring": ring, "tile": tile, "xt": 2 * tile, "stage": tiles * tile, "vec": vec,
            "vec_bytes": vec_bytes, "total": vec + vec_bytes + ALIGN}


def tma_blocker_bwd(p: AttentionProblem) -> str:
    """Why q, k, v or dout cannot be read through the backward's 4-D tensor maps ('' when they can): the
    forward's rule (``build_hopper.tma_blocker``: no zero stride) for dout too."""
    why = tma_blocker(p)
    if why:
        return why
    for dim, n, x in zip("BHT", p.operand_shape("dout"), p.operand_strides("dout")):
        if n > 1 and x == 0:
            return f"dout's {dim} stride is 0 (broadcast): a tensor map needs a positive stride"
    return ""


def check_supported(p: AttentionProblem, s: AttentionSchedule, role: str) -> None:
    kt = s.kernel(role)

    def fail(msg):
        raise AttentionCodegenError(f"cannot generate the Hopper {role} for {p.describe()}: {msg}")

    if role not in KERNEL_NAMES:
        fail("only bwd_dkv and bwd_dq have a Hopper kernel")
    if not kt.hopper:
        fail("the schedule's kernel is not on the TMA/wgmma path")
    if p.dtype not in WG_TYPE:
        fail(f"dtype {p.dtype}: the Hopper backward is BF16, FP16 or TF32")
    if p.split_scores:
        fail("3xtf32 scores run on the mma.sync backward")
    if p.dtype == "tf32" and kt.block_cols % 32:
        fail(f"block_cols {kt.block_cols}: the TF32 transposed tiles are 32 rows (128 bytes) wide")
    if role == "bwd_dkv" and kt.block_cols % VEC_LANES:
        fail(f"block_cols {kt.block_cols}: a multiple of {VEC_LANES} (LSE/D columns per producer lane)")
    check_kernel_tile(p, kt, smem_plan_hopper_bwd(p, role, kt.block_rows, kt.block_cols, kt.stages)["total"], fail)
    why = tma_blocker_bwd(p)
    if why:
        fail(why)


class _HopperBwd(HopperAttentionKernel):
    def __init__(self, p: AttentionProblem, s: AttentionSchedule, role: str, watchdog_ms: int | None = None):
        super().__init__(p, s, s.kernel(role))
        self.role = role
        self.watchdog_ms = watchdog_ms
        self.dkv = role == "bwd_dkv"
        self.plan = smem_plan_hopper_bwd(p, role, self.BR, self.BC, self.S)
        self.kept, self.streamed = KEPT[role], STREAMED[role]
        self.outs = ("dk", "dv") if self.dkv else ("dq",)
        self.splits = self.kt.splits       # split Q (dK/dV): this block's share of the steps, FP32 slabs out
        if self.splits > 1:
            self.outs = tuple(PARTIALS[role][n] for n in self.outs)

    def out_type(self, name):
        if self.splits > 1:
            return slab_type(self.p, self.role, self.splits, name)
        return global_type(self.p, name)

    # ---- types
    def rows_of(self, name):
        return self.BR if name in self.kept else self.BC

    def vec_type(self):
        return f"memref<{self.S}x{self.BC}xf32, {SMEM}>"

    # ------------------------------------------------------------------------------------------
    def build(self) -> str:
        p, kt, ir = self.p, self.kt, self.ir
        what = ("dK/dV: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO, dK += dS^T Q" if self.dkv else
                "dQ: S = Q K^T, dP = dO V^T, dQ += dS K")
        ir.emit(f"// Nova attention {self.role} (Hopper): {p.describe()}")
        ir.emit(f"// {what}; kept {self.BR} rows ({self.C} consumer warpgroups x 64), {self.BC} streamed rows per "
                f"tile, {self.S}-stage TMA ring, wgmma m64n{self.BC}k16 (smem x smem) and m64n{self.D}k16 "
                f"(A from registers, B MN-major), {ARCH}")
        args = ["%tmap_q: !llvm.ptr", "%tmap_k: !llvm.ptr", "%tmap_v: !llvm.ptr", "%tmap_dout: !llvm.ptr",
                f"%lse: {self.vt}", f"%delta: {self.vt}"] + [f"%{n}: {self.out_type(n)}" for n in self.outs]
        args += self.bias_args()
        if self.watchdog_ms:
            args.append(f"%watchdog: memref<{WATCHDOG_WORDS}xi32>")
        with ir.kernel(KERNEL_NAMES[self.role], args, kt.threads, maxnreg=kt.regs_per_thread):
            self.roles()
        return ir.text()

    def setup(self):
        ir = self.ir
        self.thread_ids({n: self.rows_of(n) for n in ("q", "k", "v", "dout")})
        if self.watchdog_ms:
            wa = ir.let("wd_base", f"memref.extract_aligned_pointer_as_index %watchdog : memref<{WATCHDOG_WORDS}xi32> "
                                   "-> index")
            self.wd_ptr = ir.let("wd_ptr", f"arith.index_cast {wa} : index to i64")
        self.aligned_smem(f"the kept tiles, the ring (and LSE/D columns), from the first {ALIGN}-byte "
                          "boundary of dynamic smem")
        if self.dkv:
            vb = ir.add(self.base_off, self.plan["vec"], "vec_off")
            self.nl2_sm = ir.let("nl2_sm", f"memref.view {self.dsm}[{ir.v(vb)}][] : memref<?xi8, {SMEM}> to "
                                           f"{self.vec_type()}")
            vd = ir.add(vb, self.S * self.BC * 4, "dlt_off")
            self.dlt_sm = ir.let("dlt_sm", f"memref.view {self.dsm}[{ir.v(vd)}][] : memref<?xi8, {SMEM}> to "
                                           f"{self.vec_type()}")
        xwarps = TRANSPOSER_WARPS[self.role][1]
        self.kbar = self.ring_barriers(
            "kept_full", 1 + (VEC_LANES if self.dkv else 0),
            f"kept_full, full[{self.S}] (streamed tiles landed: the TMA leader"
            f"{' + 32 lanes of LSE/D' if self.dkv else ''}), empty[{self.S}] (every consumer "
            f"{'thread: each read LSE/D' if self.dkv else 'warp'} done)"
            + (f", xt_full[{self.S}] (every transposer thread wrote its transposes)" if self.tf32 else ""),
            extra_ring=("xt_full", 32 * xwarps) if self.tf32 else None, lanes_release=self.dkv)
        self.k0 = ir.mul(self.bx, self.BR, "row0")      # first kept row: a key (dK/dV) or a query (dQ)
        if self.dkv:
            self.setup_dkv()
        else:
            self.setup_dq()

    def setup_dkv(self):
        ir, p = self.ir, self.p
        bkv = self.by
        self.b = ir.div(bkv, p.kv_heads, "b")
        self.hk = ir.rem(bkv, p.kv_heads, "hk")
        self.bkv = bkv
        self.h0 = ir.mul(self.hk, p.group, "h0")
        self.head0 = ir.add(ir.mul(self.b, p.heads, "bh0"), self.h0, "qbh0")     # first query head (b, h0)
        nq_all = -(-p.seq_q // self.BC)
        if p.causal:          # query tiles wholly before the block's first key (all i < k0) are skipped
            self.q_lo = ir.div(self.k0, self.BC, "q_lo")
            self.nq = ir.max(ir.sub(nq_all, self.q_lo, "nq_raw"), 0, "nq")
        else:
            self.q_lo, self.nq = 0, nq_all
        self.n_it = ir.mul(self.nq, p.group, "n_it")
        self.split_steps(nq_all * p.group)

    def split_steps(self, longest: int) -> None:
        """Split Q (dK/dV) or KV (dQ): this block's steps [z*per, (z+1)*per) of its walk (``per`` from the
        ``longest`` walk of any block, ``build.split_range``).  Unsplit: every step."""
        self.it_lo = 0
        if self.splits > 1:
            ir = self.ir
            bz = ir.let("bz", "gpu.block_id z")
            self.it_lo, self.n_it = split_range(ir, self.n_it, -(-longest // self.splits), bz, "it")

    def stream_tile(self, it):
        """The streamed tile of step ``it`` of this block's steps: a query tile (dK/dV) or a key tile (dQ)."""
        return self.tile_of(it)[2] if self.dkv else self.ir.add(it, self.it_lo, "kv_tile")

    def tile_of(self, it):
        """dK/dV: (query head, flat query head b*H + h, query tile) of step ``it`` (of the split's steps)."""
        ir, p = self.ir, self.p
        it = ir.add(it, self.it_lo, "it_all")
        if p.group == 1:
            return self.h0, self.head0, ir.add(self.q_lo, it, "qt")
        hd = ir.div(it, self.nq, "it_h")
        return ir.add(self.h0, hd, "qh"), ir.add(self.head0, hd, "qbh"), ir.add(self.q_lo, ir.rem(it, self.nq, "it_q"),
                                                                             "qt")

    def setup_dq(self):
        ir, p = self.ir, self.p
        self.n_it = self.query_block(self.k0)
        self.split_steps(-(-p.seq_k // self.BC))

    # ------------------------------------------------------------------------------------------
    def wait(self, group, nbar, slot, par, ticks, *, role, barrier, it):
        """Wait for phase parity ``par`` of barrier ``group[slot]``; in a watchdog build the wait is bounded:
        after ``watchdog_ms`` this thread records (block, thread, role, barrier, slot, parity, iteration,
        tries, trip count) unless another thread did first, and exits."""
        ir = self.ir
        if not self.watchdog_ms:
            mbarrier_try_wait(ir, group, slot, par, ticks, self.mb(nbar))
            return
        ir.comment(f"watchdog: bounded wait on {WATCHDOG_BARRIERS[barrier]} ({WATCHDOG_ROLES[role]})")
        addr = ir.let("wd_addr", f"nvgpu.mbarrier.get {group}[{ir.v(slot)}] : {self.mb(nbar)} -> i32")
        par32 = ir.let("wd_par", f"arith.extui {par} : i1 to i32")
        now = 'llvm.inline_asm has_side_effects asm_dialect = att "mov.u64 $0, %globaltimer;", "=l"  : () -> i64'
        t0 = ir.let("wd_t0", now)
        budget = ir.let("wd_budget", f"arith.constant {int(self.watchdog_ms) * 1000000} : i64")
        zero = ir.let("wd_zero", "arith.constant 0 : i32")
        one = ir.let("wd_one", "arith.constant 1 : i32")
        res, n, n1, ok1 = ir.fresh("wd_res"), ir.fresh("wd_n"), ir.fresh("wd_n1"), ir.fresh("wd_okb")
        ir.emit(f"{res}:2 = scf.while ({n} = {zero}) : (i32) -> (i32, i32) {{")
        with ir.scope():
            ok = ir.let("wd_ok", 'llvm.inline_asm has_side_effects asm_dialect = att "{\\n.reg .pred p;\\n'
                                 'mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\\nselp.b32 $0, 1, 0, p;\\n}", '
                                 f'"=r,r,r" {addr}, {par32} : (i32, i32) -> i32')
            el = ir.let("wd_el", f"arith.subi {ir.let('wd_t', now)}, {t0} : i64")
            over = ir.let("wd_over", f"arith.cmpi ugt, {el}, {budget} : i64")
            done = ir.let("wd_done", f"arith.cmpi ne, {ok}, {zero} : i32")
            stop = ir.let("wd_stop", f"arith.ori {done}, {over} : i1")
            go = ir.let("wd_go", f"arith.xori {stop}, {ir.let('wd_true', 'arith.constant true')} : i1")
            nn = ir.let("wd_nn", f"arith.addi {n}, {one} : i32")
            ir.emit(f"scf.condition({go}) {nn}, {ok} : i32, i32")
        ir.emit("} do {")
        ir.emit(f"^bb0({n1}: i32, {ok1}: i32):")
        with ir.scope():
            ir.emit(f"scf.yield {n1} : i32")
        ir.emit("}")
        fail = ir.let("wd_fail", f"arith.cmpi eq, {res}#1, {zero} : i32")
        with ir.region(f"scf.if {fail} {{"):
            i32 = lambda x: ir.let("wd_f", f"arith.index_cast {ir.v(x)} : index to i32")
            fields = [i32(self.bx), i32(self.by), i32(self.tid), i32(role), i32(barrier), i32(slot), par32, i32(it)
                      if it != -1 else ir.let("wd_m1", "arith.constant -1 : i32"), f"{res}#0", i32(self.n_it)]
            body = ["{", ".reg .b32 old;", ".reg .pred won;", "atom.relaxed.sys.cas.b32 old, [$0], 0, 1;",
                    "setp.eq.b32 won, old, 0;"]
            body += [f"@won st.relaxed.sys.b32 [$0+{4 * (i + 1)}], ${i + 1};" for i in range(len(fields))]
            body += ["fence.sc.sys;", "@won st.relaxed.sys.b32 [$0], 2;",
                     f"red.relaxed.sys.add.u32 [$0+{4 * WATCHDOG_TIMED_OUT}], 1;", "fence.sc.sys;", "exit;", "}"]
            cons = ",".join(["l"] + ["r"] * len(fields))
            ir.emit('llvm.inline_asm has_side_effects asm_dialect = att "' + "\\n".join(body) + f'", "{cons}" '
                    f"{self.wd_ptr}, {', '.join(fields)} : (i64, {', '.join(['i32'] * len(fields))}) -> ()")

    def heartbeat(self, word, pred):
        """Watchdog builds: where ``pred`` holds, add 1 to word ``word`` of the watchdog buffer."""
        if not self.watchdog_ms:
            return
        ir = self.ir

        def body():
            off = ir.let("wd_off", f"arith.constant {4 * word} : i64")
            at = ir.let("wd_hb", f"arith.addi {self.wd_ptr}, {off} : i64")
            ir.emit('llvm.inline_asm has_side_effects asm_dialect = att "red.relaxed.sys.add.u32 [$0], 1;", "l" '
                    f"{at} : (i64) -> ()")
        ir.guarded(pred, body)

    def producer(self):
        ir = self.ir
        ir.comment("---- producer warpgroup: give registers back; thread 0 issues the TMA loads"
                   + ("; warp 1 writes each slot's LSE/D columns" if self.dkv else ""))
        setmaxnreg(ir, self.kt.producer_regs, increase=False)
        if self.watchdog_ms:
            self.heartbeat(16, ir.cmp("eq", self.lane, 0, "plane0"))
        ticks = mbarrier_wait_ticks(ir)
        kept_head = self.hk if self.dkv else self.h
        with ir.region(f"scf.if {ir.cmp('eq', self.tid, 0, 'is_leader')} {{"):
            kb = ir.const(2 * self.nbox * self.BR * SWIZZLE)
            ir.emit(f"nvgpu.mbarrier.arrive.expect_tx {self.kbar}[{ir.v(0)}], {kb} : {self.mb(1)}")
            for i, name in enumerate(self.kept):
                self.load(name, f"{self.kbar}[{ir.v(0)}]", ir.add(self.base_off, self.plan[f"kept{i}"]), self.k0,
                          kept_head, 1)
            tx = ir.const(2 * self.plan["tile"])
            with ir.region(f"scf.for %itp = {ir.v(0)} to {ir.v(self.n_it)} step {ir.v(1)} {{"):
                slot, par = self.slot_phase("%itp", flip=True)
                self.wait(self.empty, self.S, slot, par, ticks, role=0, barrier=2, it="%itp")
                ir.emit(f"nvgpu.mbarrier.arrive.expect_tx {self.full}[{slot}], {tx} : {self.mb(self.S)}")
                off = ir.add(ir.add(self.base_off, self.plan["ring"]), ir.mul(slot, self.plan["stage"]), "s_off")
                if self.dkv:
                    qh, _, qt = self.tile_of("%itp")
                    t0, head = ir.mul(qt, self.BC, "qs"), qh
                else:
                    t0, head = ir.mul(self.stream_tile("%itp"), self.BC, "kv0"), self.hkv
                for i, name in enumerate(self.streamed):
                    self.load(name, f"{self.full}[{slot}]", ir.add(off, i * self.plan["tile"]), t0, head, self.S)
            self.heartbeat(20, True)
        if self.dkv:
            self.producer_vectors(ticks)
        if self.tf32:
            self.producer_transposes(ticks)

    def producer_transposes(self, ticks):
        """TF32: producer warps TRANSPOSER_WARPS[role], per ring slot once it landed: the transposes of the
        streamed tiles the register-A products read as B (``transpose_tile``), then ``xt_full[slot]``."""
        ir = self.ir
        first, count = TRANSPOSER_WARPS[self.role]
        pwarp = ir.div(self.tid, 32, "pwarp")
        mine = ir.and_(ir.cmp("sge", pwarp, first, "x_lo"), ir.cmp("slt", pwarp, first + count, "x_hi"), "is_transposer")
        with ir.region(f"scf.if {mine} {{"):
            lanes = self.transposer_lanes(first, count)
            with ir.region(f"scf.for %itx = {ir.v(0)} to {ir.v(self.n_it)} step {ir.v(1)} {{"):
                slot, par = self.slot_phase("%itx")
                self.wait(self.full, self.S, slot, par, ticks, role=3, barrier=1, it="%itx")
                off = ir.add(ir.add(self.base_off, self.plan["ring"]), ir.mul(slot, self.plan["stage"]), "s_off")
                for j, i in enumerate(TRANSPOSED[self.role]):
                    self.transpose_tile(lanes, ir.add(off, i * self.plan["tile"], "xt_src"),
                                        ir.add(off, self.plan["xt"] + j * self.plan["tile"], "xt_dst"),
                                        self.kt.transpose_in_flight)
                self.publish_transposed(self.xt_full, slot)

    def producer_vectors(self, ticks):
        """Warp 1 of the producer warpgroup: per ring slot, -LSE log2 e and D of the tile's query
        columns (0 beyond Tq) into shared memory, then each lane arrives on the slot's full barrier."""
        ir, p = self.ir, self.p
        warp1 = ir.cmp("eq", ir.div(self.tid, 32, "pwarp"), 1, "is_vec_warp")
        with ir.region(f"scf.if {warp1} {{"):
            with ir.region(f"scf.for %itv = {ir.v(0)} to {ir.v(self.n_it)} step {ir.v(1)} {{"):
                slot, par = self.slot_phase("%itv", flip=True)
                self.wait(self.empty, self.S, slot, par, ticks, role=1, barrier=2, it="%itv")
                _, qbh, qt = self.tile_of("%itv")
                qs = ir.mul(qt, self.BC, "qs")
                base = ir.add(ir.mul(qbh, p.seq_q, "qrow_bh"), qs, "qrow")
                for i in range(self.BC // VEC_LANES):
                    col = ir.add(self.lane, i * VEC_LANES, "vcol")
                    ok = ir.cmp("slt", ir.add(qs, col, "vrow"), p.seq_q, "vrow_ok") if p.seq_q % self.BC else True
                    src = ir.select(ok, ir.add(base, col, "vsrc"), 0, hint="vsrc")
                    lv = ir.let("lse_v", f"memref.load %lse[{ir.v(src)}] : {self.vt}")
                    dv = ir.let("dlt_v", f"memref.load %delta[{ir.v(src)}] : {self.vt}")
                    nl2 = ir.fop("mulf", lv, ir.f(-LOG2E), "nl2_v")
                    if ok is not True:
                        nl2 = ir.select(ok, nl2, ir.f(0.0), ty="f32", hint="nl2_v")
                        dv = ir.select(ok, dv, ir.f(0.0), ty="f32", hint="dlt_v")
                    ir.emit(f"memref.store {nl2}, {self.nl2_sm}[{ir.v(slot)}, {ir.v(col)}] : {self.vec_type()}")
                    ir.emit(f"memref.store {dv}, {self.dlt_sm}[{ir.v(slot)}, {ir.v(col)}] : {self.vec_type()}")
                ir.let("vtok", f"nvgpu.mbarrier.arrive {self.full}[{ir.v(slot)}] : {self.mb(self.S)} -> "
                               "!nvgpu.mbarrier.token")
            self.heartbeat(21, ir.cmp("eq", self.lane, 0, "vlane0"))

    # ------------------------------------------------------------------------------------------

    def i64(self, v: int) -> str:
        return self.ir.pure(f"k{v}_i64", f"arith.constant {v} : i64")

    def opaque(self, x):
        """``x`` (i64) through an inline-asm move with side effects: descriptors derived from it are computed
        where they are used, not hoisted out of the loop (the kept tile's D/8 loop-invariant descriptors
        would otherwise hold 2 registers each for the kernel's life)."""
        return self.ir.let("desc_base", f'llvm.inline_asm has_side_effects asm_dialect = att "mov.b64 $0, $1;", '
                                        f'"=l,l" {x} : (i64) -> i64')

    def wgmma_ss(self, a_enc, b_enc, hi):
        """acc[m64 x BC] = A (64 kept rows) B^T (BC streamed rows), both K-major over D.  The first k-step
        has scale-d 0 (D = A B) on an undefined accumulator: starting from a zero struct, LLVM wrote the
        zeros with ``mov``s after the ``wgmma.fence`` and, for the second product (dP after S), while
        the first was in flight, so ptxas injected a ``warpgroup.arrive`` and a ``warpgroup.wait``
        (C7519/C7517) that drained S before dP could start."""
        ir = self.ir
        acc = self.undef_s
        a0 = self.opaque(self.desc(a_enc, hi))
        b0 = self.desc(b_enc, hi)
        for kk in range(self.ksteps):
            da = ir.let("desc", f"arith.addi {a0}, {self.i64(self.kmajor_enc(0, self.BR, kk))} : i64")
            db = ir.let("desc", f"arith.addi {b0}, {self.i64(self.kmajor_enc(0, self.BC, kk))} : i64")
            attrs = self.attrs_first if kk == 0 else self.attrs
            acc = ir.let("s_acc", f'"nvvm.wgmma.mma_async"({acc}, {da}, {db}) <{{{attrs}}}> : '
                                  f"({self.s_t}, i64, i64) -> {self.s_t}")
        return acc

    def consumer(self):
        ir, p, kt = self.ir, self.p, self.kt
        ir.comment(f"---- consumer warpgroups: take registers ({kt.consumer_regs})")
        setmaxnreg(ir, kt.consumer_regs, increase=True)
        if self.watchdog_ms:
            self.heartbeat(17, ir.cmp("eq", self.lane, 0, "clane0"))
        lane0 = self.consumer_threads()
        ticks = mbarrier_wait_ticks(ir)
        hi_k = self.descriptor_hi("desc_hi_k", KMAJOR_LEADING_BYTE_OFFSET)
        hi_mn = (hi_k if self.tf32 else                              # TF32: the transposes, K-major
                 self.descriptor_hi("desc_hi_mn", self.BC * SWIZZLE))   # streamed tiles MN-major
        self.r0 = ir.add(self.k0, ir.mul(self.cwg, 64), "wg_row0")
        wg_off = ir.mul(self.cwg, 64 * SWIZZLE // 16)
        a_enc = [ir.add(ir.add(self.base_enc, self.plan[f"kept{i}"] // 16), wg_off, f"a{i}_enc") for i in (0, 1)]
        ty = WG_TYPE[p.dtype]
        self.attrs = wgmma_attributes(self.BC, self.kstep, ty)
        self.attrs_first = wgmma_attributes(self.BC, self.kstep, ty, scale_d="zero")     # D = A B
        self.undef_s = ir.let("undef_s", f"llvm.mlir.undef : {self.s_t}")
        zero_o = ir.let("zero_o", f"llvm.mlir.zero : {self.o_t}")
        if not self.dkv:        # dQ: LSE and D of the thread's rows g (h = 0) and g + 8 (h = 1), once
            self.row_nl2, self.row_dlt = self.row_vectors()
        self.wait(self.kbar, 1, 0, ir.pure('false1', 'arith.constant false'), ticks, role=2, barrier=0, it=-1)
        self.heartbeat(18, lane0)
        nacc = len(self.outs)
        res = ir.fresh("loop")
        iters = ", ".join(f"%acc{i} = {zero_o}" for i in range(nacc))
        with ir.region(f"{res}:{nacc} = scf.for %it = {ir.v(0)} to {ir.v(self.n_it)} step {ir.v(1)} iter_args("
                       f"{iters}) -> ({', '.join([self.o_t] * nacc)}) {{"):
            ir.reserve("it", *(f"acc{i}" for i in range(nacc)))
            if p.bias:
                c0 = ir.mul(self.stream_tile("%it"), self.BC, "col0")   # first streamed row
                bias = self.step_bias(lambda: self.bias_of_step(c0),
                                      *((p.bias[3], p.bias[2]) if self.dkv else p.bias[2:]))
            slot, par = self.slot_phase("%it")
            self.wait(self.full, self.S, slot, par, ticks, role=2, barrier=1, it="%it")
            b_enc0 = ir.add(ir.add(self.base_enc, self.plan["ring"] // 16), ir.mul(slot, self.plan["stage"] // 16),
                            "b0_enc")
            b_enc1 = ir.add(b_enc0, self.plan["tile"] // 16, "b1_enc")
            names = ("S^T = K Q^T, dP^T = V dO^T" if self.dkv else "S = Q K^T, dP = dO V^T")
            ir.comment(f"{names} (wgmma, both operands K-major in shared memory)")
            wgmma_fence(ir)
            s_acc = self.wgmma_ss(a_enc[0], b_enc0, hi_k)
            dp_acc = self.wgmma_ss(a_enc[1], b_enc1, hi_k)
            wgmma_commit_group(ir)
            wgmma_wait_group(ir, 0)
            s = [ir.let("s", f"llvm.extractvalue {s_acc}[{i}] : {self.s_t}") for i in range(self.ns)]
            dp = [ir.let("dp", f"llvm.extractvalue {dp_acc}[{i}] : {self.s_t}") for i in range(self.ns)]
            if p.bias:
                s = self.biased(s, bias())
            else:
                c0 = ir.mul(self.stream_tile("%it"), self.BC, "col0")   # first streamed row
            s = self.masked(c0, s)
            ir.comment("P = exp2(S c - LSE log2 e), dS = P (dP - D)")
            pe, ds = [], []          # the register A fragments: 16-bit pairs packed, TF32 words rounded
            for i in range(0, self.ns, 2):
                pair_p, pair_ds = [], []
                for i2 in (i, i + 1):
                    j, h, c = i2 // 4, (i2 // 2) % 2, i2 % 2
                    nl2, dlt = self.col_vectors(slot, j, c) if self.dkv else (self.row_nl2[h], self.row_dlt[h])
                    e = ir.exp2(ir.fma(s[i2], ir.f(self.c), nl2, "sc"))
                    pair_p.append(e)
                    pair_ds.append(ir.fop("mulf", e, ir.fop("subf", dp[i2], dlt, "dpd"), "ds"))
                if self.tf32:
                    if self.dkv:
                        pe += [self.tf32_bits(x) for x in pair_p]
                    ds += [self.tf32_bits(x) for x in pair_ds]
                    continue
                if self.dkv:
                    pe.append(self.pack(*pair_p))
                ds.append(self.pack(*pair_ds))
            acc = [f"%acc{i}" for i in range(nacc)]
            if self.tf32:        # B = the transposes the producer wrote into this slot
                self.wait(self.xt_full, self.S, slot, par, ticks, role=2, barrier=3, it="%it")
                xt0 = ir.add(b_enc0, self.plan["xt"] // 16, "xt0_enc")
                b_rs = [xt0, ir.add(xt0, self.plan["tile"] // 16, "xt1_enc")]
            else:
                b_rs = [b_enc0, b_enc1]
            wgmma_fence(ir)
            if self.dkv:
                ir.comment("dV += P^T dO, dK += dS^T Q (A from registers; B MN-major, TF32 the transposes K-major)")
                acc[1] = self.gemm_rs(acc[1], pe, b_rs[1], hi_mn)
                acc[0] = self.gemm_rs(acc[0], ds, b_rs[0], hi_mn)
            else:
                ir.comment("dQ += dS K (A from registers; B MN-major, TF32 the transpose K-major)")
                acc[0] = self.gemm_rs(acc[0], ds, b_rs[0], hi_mn)
            self.finish_step(lane0, slot, lanes_release=self.dkv)
            ir.emit(f"scf.yield {', '.join(acc)} : {', '.join([self.o_t] * nacc)}")
        self.heartbeat(19, lane0)
        self.epilogue([f"{res}#{i}" for i in range(nacc)])

    def bias_of_step(self, c0):
        """The bias of the step's scores (``bias_loads``), as the forward added it: dQ's rows are queries
        and its columns keys; dK/dV's rows are keys and its columns the queries of the step's query
        head, a column past Tq with bias 0 (its probability stays finite times a zero dO row)."""
        ir, p = self.ir, self.p
        if self.dkv:
            qh = self.tile_of("%it")[0]
            return self.bias_loads(bias_head(ir, p, self.b, qh), (self.r0, p.seq_k, self.BR, p.bias[3]),
                                   (c0, p.seq_q, self.BC, p.bias[2]), zero_past_columns=True)
        return self.bias_loads(bias_head(ir, p, self.b, self.h), (self.r0, p.seq_q, self.BR, p.bias[2]),
                               (c0, p.seq_k, self.BC, p.bias[3]))

    def col_vectors(self, slot, j, c):
        """dK/dV: -LSE log2 e and D of query column 8j + 2t + c of the slot (loaded once per pair of c)."""
        ir = self.ir
        key = (slot, j)
        if getattr(self, "_cols_key", None) != key[0]:
            self._cols_key, self._cols = key[0], {}
        if j not in self._cols:
            col = ir.add(ir.mul(self.t, 2, "t2"), 8 * j, "qcol")
            vals = []
            for sm, hint in ((self.nl2_sm, "nl2"), (self.dlt_sm, "dlt")):
                v = ir.let(f"{hint}_c2", f"vector.load {sm}[{ir.v(slot)}, {ir.v(col)}] : {self.vec_type()}, vector<2xf32>")
                vals.append([ir.let(f"{hint}_c", f"vector.extract {v}[{k}] : f32 from vector<2xf32>") for k in (0, 1)])
            self._cols[j] = vals
        nl2, dlt = self._cols[j]
        return nl2[c], dlt[c]

    def row_vectors(self):
        """dQ: -LSE log2 e and D of the thread's rows (0 beyond Tq)."""
        ir, p = self.ir, self.p
        nl2, dlt = [], []
        qbase = ir.add(ir.mul(self.bh, p.seq_q, "qrow_bh"), self.r0, "qbase_wg")
        for h in (0, 1):
            roff = ir.add(ir.mul(self.warp, 16), ir.add(self.g, 8 * h), "vrow_off")
            ok = ir.cmp("slt", ir.add(self.r0, roff, "vrow"), p.seq_q, "vrow_ok") if p.seq_q % self.BR else True
            src = ir.select(ok, ir.add(qbase, roff, "vsrc"), 0, hint="vsrc")
            lv = ir.let("lse_r", f"memref.load %lse[{ir.v(src)}] : {self.vt}")
            dv = ir.let("dlt_r", f"memref.load %delta[{ir.v(src)}] : {self.vt}")
            x = ir.fop("mulf", lv, ir.f(-LOG2E), "nl2_r")
            nl2.append(ir.select(ok, x, ir.f(0.0), ty="f32", hint="nl2_r"))
            dlt.append(ir.select(ok, dv, ir.f(0.0), ty="f32", hint="dlt_r"))
        return nl2, dlt

    # ------------------------------------------------------------------------------------------
    def masked(self, c0, s):
        """Scores with masked pairs replaced by MASKED, in a branch taken only where a tile needs it.
        Accumulator element (row 16 warp + g + 8h of this warpgroup's 64, column 8j + 2t + c of the tile).
        dQ (rows queries, columns keys from c0): key < Tk and, causal, key <= query: column 8j + c <
        L_h - 2t, L_h = min(Tk - c0, r0 + roff_h + 1 - c0).  dK/dV (rows keys, columns queries from c0),
        causal only: query >= key: 8j + c > r0 + roff_h - c0 - 1 - 2t."""
        ir, p = self.ir, self.p
        cond = False
        if not self.dkv and p.seq_k % self.BC:
            cond = ir.cmp("sgt", ir.add(c0, self.BC, "kv_end"), p.seq_k, "kv_tail")
        if p.causal:
            if self.dkv:     # the warpgroup's last key r0 + 63 after the tile's first query c0
                cross = ir.cmp("sgt", ir.add(self.r0, 63, "key_last"), c0, "cross")
            else:            # the tile's last key after the warpgroup's first query r0
                cross = ir.cmp("sgt", ir.add(c0, self.BC - 1, "kv_last"), self.r0, "cross")
            cond = ir.or_(cond, cross, "need_mask")
        if cond is False:
            return s

        def apply():
            t2 = ir.mul(self.t, 2, "t2")
            bounds = []
            for h in (0, 1):
                row = ir.add(ir.add(self.r0, ir.mul(self.warp, 16)), ir.add(self.g, 8 * h), "mrow")
                if self.dkv:     # valid iff 8j + c > row - c0 - 1 - 2t
                    bounds.append(ir.sub(ir.sub(ir.sub(row, c0, "kq"), 1, "kq1"), t2, "col_lo"))
                    continue
                lim = ir.sub(p.seq_k, c0, "kv_left") if p.seq_k % self.BC else self.BC
                if p.causal:
                    lim = ir.min(lim, ir.sub(ir.add(row, 1, "row_end"), c0, "diag_end"), "col_end")
                bounds.append(ir.sub(lim, t2, "col_bound"))
            out = []
            for i, x in enumerate(s):
                j, h, c = i // 4, (i // 2) % 2, i % 2
                if self.dkv:
                    ok = ir.cmp("slt", bounds[h], 8 * j + c, "col_ok")
                else:
                    ok = ir.cmp("sgt", bounds[h], 8 * j + c, "col_ok")
                out.append(ir.select(ok, x, ir.f(MASKED), ty="f32", hint="sm"))
            return out
        return self.where(cond, apply, s)

    # ------------------------------------------------------------------------------------------
    def epilogue(self, accs):
        ir, p = self.ir, self.p
        ir.comment("---- epilogue: " + ("dK x scale and dV" if self.dkv else "dQ x scale") + " in the input dtype")
        if self.dkv:
            limit = p.seq_k
            first = ir.add(ir.mul(self.bkv, p.seq_k, "krow_bkv"), self.k0, "kbase")
            coords = (self.b, self.hk, self.bkv, self.k0)
        else:
            limit = p.seq_q
            first = ir.add(ir.mul(self.bh, p.seq_q, "qrow_bh"), self.k0, "qbase")
            coords = (self.b, self.h, self.bh, self.k0)
        if self.splits > 1:
            # the slab row from the block index here, not held in a register through the main loop
            ir.comment("split: FP32 partials into this split's slab rows (the combine sums them)")
            bz = ir.let("bz_out", "gpu.block_id z")
            part_row = ir.add(ir.mul(bz, slab_rows(p, self.role), "slab"), first, "part_row")
        for name, acc, scale in zip(self.outs, accs, (p.scale, None)):
            gty = self.out_type(name)
            at = ("row", part_row) if self.splits > 1 else rows_at(ir, p, name, first, coords)
            for h in (0, 1):
                roff = ir.add(ir.add(ir.mul(self.cwg, 64), ir.mul(self.warp, 16)), ir.add(self.g, 8 * h), "row_off")
                ok = ir.cmp("slt", ir.add(self.k0, roff, "st_row"), limit, "st_ok") if limit % self.BR else True
                row = rows_advance(ir, p, name, at, roff)

                def body(h=h, row=row, name=name, acc=acc, scale=scale, gty=gty):
                    for j in range(self.D // 8):
                        xs = [ir.let("o", f"llvm.extractvalue {acc}[{4 * j + 2 * h + c}] : {self.o_t}") for c in (0, 1)]
                        if scale is not None:
                            xs = [ir.fop("mulf", x, ir.f(scale), "o_s") for x in xs]
                        self.store_pair(name, gty, row, j, xs, self.splits > 1)
                ir.guarded(ok, body)


def build_hopper_bwd(p: AttentionProblem, s: AttentionSchedule, role: str, watchdog_ms: int | None = None,
                     check: bool = True) -> str:
    """The kernel's MLIR; ``watchdog_ms``: the debug build (bounded mbarrier waits, an extra ``watchdog``
    parameter, see WATCHDOG_FIELDS); ``check=False`` skips ``check_supported`` (probes only: a schedule
    the checks refuse, e.g. setmaxnreg targets it refuses, to reproduce what they do)."""
    if check:
        check_supported(p, s, role)
    return _HopperBwd(p, s, role, watchdog_ms).build()
