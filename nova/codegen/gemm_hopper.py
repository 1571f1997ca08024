"""Hopper GEMM kernel builder (issue 4): TMA + mbarrier ring + ``wgmma``, warp-specialized, persistent.

``(GemmProblem, Schedule with mma.family == "wgmma") -> MLIR text`` for sm_90a.

Design (each point is a decision; the configurator's ``hopper.py`` explains the numbers):

* **Roles.**  ``1 + consumer_warpgroups`` warpgroups of 128 threads.  Warpgroup 0 is the producer:
  it gives registers back (``setmaxnreg.dec 40``) and one thread issues the TMA loads; the
  consumer warpgroups take them (``setmaxnreg.inc``) and each computes a 64 x block_n slab of the
  block tile with ``wgmma.mma_async.m64nNk{8,16}`` (both operands from shared memory).
* **Ring.**  ``stages`` slots of (A tile block_m x BK, B tile block_n x BK), BK = 128 bytes of K,
  each a TMA box stored with the 128-byte swizzle that the wgmma descriptors (layout type 1,
  SBO 1024 B) read.  ``full[s]`` (count 1 + transaction bytes) says a slot landed; ``empty[s]``
  (one arrival per consumer warp) says every consumer's wgmma on it completed.  Consumers keep one
  wgmma group in flight (``wait_group 1``) and release the previous slot.
* **Persistent grid.**  ``min(tiles, SMs)`` CTAs walk the output tiles ``tile = blockIdx.x + i *
  gridDim.x`` in group-M order; the ring's phase runs on across tiles, so the producer prefetches
  the next tile's K panels while the consumers run the epilogue of the current one.
* **Operands.**  wgmma reads TF32 only K-major from shared memory, and TMA cannot transpose, so
  both operands are fed K-major: A as ``[M, K]`` and B as ``Bt = [N, K]``.  When the problem's
  layout is not that (row-major B, transposed A) or K rows are not 16-byte aligned (TMA stride rule),
  a small *operand-prep* kernel writes a K-major, K-padded copy into a workspace first.
* **TF32 rounding.**  ``problem.tf32_rounding == "rna"`` (default): the tensor maps of FP32
  operands use ``CU_TENSOR_MAP_DATA_TYPE_TFLOAT32``, and the TMA unit rounds each element to
  nearest TF32 while it copies (measured on the H200: relative error 2.940e-4 on raw FP32 data, the
  same as ``cvt.rna`` and cuBLAS; with a FLOAT32 map 7.78e-4), at no cost in speed (393 vs 384
  TFLOP/s at 4096^3).  So rounding costs nothing in the kernel: no shared-memory pass, no registers.
  "truncate" (``tf32_fast``) uses a FLOAT32 map and lets the tensor core truncate (~2.6x the
  error).  The operand-prep kernel can also round (``cvt.rna``) but only does so when asked
  (``prep_rounds=True``, the v0.2 experiment that measured the prep cost).
* **Edges.**  TMA zero-fills out-of-bounds rows and the K tail; the epilogue stores with
  predicates on the ragged M/N edges.  Bias, activation and the output conversion are fused
  into the register epilogue.
"""
from __future__ import annotations

from nova.codegen import CodegenError
from nova.codegen.gemm import SMEM, _Ir, _GemmKernel
from nova.configurator.problem import GemmProblem
from nova.configurator.schedule import Schedule

KERNEL_NAME = "nova_gemm"
PREP_NAME = "nova_prep"
ARCH = "sm_90a"
WG = 128                    # threads per warpgroup
PRODUCER_REGS = 40
SWIZZLE_BYTES = 128
SLAB_M = 64                 # wgmma M
_KSTEP = {"tf32": 8, "bf16": 16, "fp16": 16}
_WG_TYPE = {"tf32": "tf32", "bf16": "bf16", "fp16": "f16"}


def _cdiv(a, b):
    return -(-a // b)


def consumer_regs(consumer_warpgroups: int, reg_file: int = 65536) -> int:
    """setmaxnreg target of a consumer: what the producer gives back, rounded down to 8."""
    left = reg_file - WG * PRODUCER_REGS
    return min(232, (left // (WG * consumer_warpgroups)) // 8 * 8)


# The operand plan (which operand needs a transpose/pad pass, the tensor maps' element type) is a
# schedule decision: it lives in the configurator and is imported here.
from nova.configurator.hopper import operand_plan, tensor_map_type  # noqa: E402


def check_supported(problem: GemmProblem, s: Schedule) -> None:
    what = f"{problem.describe()} on {s.arch}"

    def fail(msg):
        raise CodegenError(f"cannot generate {what} with the Hopper kernel: {msg}")

    if s.mma.family != "wgmma":
        fail(f"MMA family {s.mma.family!r} (this builder generates wgmma)")
    if s.arch != ARCH:
        fail(f"arch {s.arch!r}; wgmma needs {ARCH}")
    if s.mma.k != _KSTEP[problem.dtype] or s.mma.m != SLAB_M or s.mma.n != s.block_n:
        fail(f"mma shape m{s.mma.m}n{s.mma.n}k{s.mma.k}: need m64n{s.block_n}k{_KSTEP[problem.dtype]}")
    if not (8 <= s.block_n <= 256 and s.block_n % 8 == 0):
        fail(f"block_n={s.block_n}: wgmma N is a multiple of 8 in [8, 256]")
    if s.consumer_warpgroups < 1 or s.block_m != SLAB_M * s.consumer_warpgroups:
        fail(f"block_m={s.block_m} must be 64 x consumer_warpgroups ({s.consumer_warpgroups})")
    if s.producer_warps != 4 or s.warps_m != 4 * s.consumer_warpgroups or s.warps_n != 1:
        fail("the warp layout must be one producer warpgroup + 4 warps per consumer warpgroup")
    if s.block_k * problem.in_bytes != SWIZZLE_BYTES:
        fail(f"block_k={s.block_k}: one 128-byte swizzle row of K ({SWIZZLE_BYTES // problem.in_bytes} elements)")
    if s.smem_layout != "swizzle128":
        fail(f"smem_layout {s.smem_layout!r}: the wgmma path uses 'swizzle128'")
    if s.split_k != 1:
        fail("split-K is not implemented in the Hopper kernel yet")
    if s.cluster_m != 1 or s.cluster_n != 1:
        fail("thread-block clusters are not implemented yet")
    if s.stages < 2:
        fail(f"stages={s.stages}")
    need = smem_bytes(problem, s.block_m, s.block_n, s.stages)
    if s.smem_bytes < need:
        fail(f"smem_bytes={s.smem_bytes} < {need} needed by {s.stages} stages")


def stage_bytes(block_m: int, block_n: int) -> int:
    return (block_m + block_n) * SWIZZLE_BYTES


def smem_bytes(problem: GemmProblem, block_m: int, block_n: int, stages: int) -> int:
    """Dynamic shared memory: 1 KB of alignment slack (swizzled tiles start on 1024 B) + the ring."""
    return 1024 + stages * stage_bytes(block_m, block_n)


def grid(problem: GemmProblem, s: Schedule, sm_count: int) -> tuple[int, int, int]:
    tiles = _cdiv(problem.M, s.block_m) * _cdiv(problem.N, s.block_n)
    return (min(tiles, sm_count) if s.persistent else tiles, 1, 1)


# ----------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------
class _HopperKernel:
    # epilogue helpers shared with the mma.sync kernel (they only use self.ir, self.p, self.O)
    fconst = _GemmKernel.fconst
    exp2 = _GemmKernel.exp2
    times_sigmoid = _GemmKernel.times_sigmoid
    activation = _GemmKernel.activation
    to_out = _GemmKernel.to_out
    guarded = _GemmKernel.guarded
    ctype = _GemmKernel.ctype          # C and bias memref types: the same epilogue ABI as mma.sync
    btype = _GemmKernel.btype

    def __init__(self, p: GemmProblem, s: Schedule, wait_depth: int = 1):
        self.p, self.s = p, s
        self.ir = _Ir()
        for n in ("tmA", "tmB", "tile", "kt", "it", "acc", "ktp", "itp"):
            self.ir._taken[n] = 1
        self.T = p.storage
        self.O = p.out_dtype
        self.BT = "f32" if p.dtype == "tf32" else p.out_dtype
        self.wgs = s.consumer_warpgroups
        self.threads = WG * (1 + self.wgs)
        self.BK = s.block_k
        self.kstep = s.mma.k
        self.ktiles = _cdiv(p.K, self.BK)
        self.a_bytes = s.block_m * SWIZZLE_BYTES
        self.b_bytes = s.block_n * SWIZZLE_BYTES
        self.stage = self.a_bytes + self.b_bytes
        self.nacc = s.block_n // 2
        self.acc_t = "!llvm.struct<(" + ", ".join(["f32"] * self.nacc) + ")>"
        self.mb_t = f"!nvgpu.mbarrier.group<memorySpace = {SMEM}, num_barriers = {s.stages}>"
        self.wait_depth = wait_depth
        self.ragged = {"m": p.M % s.block_m != 0, "n": p.N % s.block_n != 0}

    def tm_type(self, rows):
        return (f"!nvgpu.tensormap.descriptor<tensor = memref<{rows}x{self.BK}x{self.T}, {SMEM}>, "
                "swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>")

    def tile_type(self, rows):
        return f"memref<{rows}x{self.BK}x{self.T}, {SMEM}>"

    # ------------------------------------------------------------------------------------------
    def build(self) -> str:
        p, s, ir = self.p, self.s, self.ir
        ir.emit(f"// Nova Hopper GEMM: {p.describe()}")
        ir.emit(f"// block {s.block_m}x{s.block_n}x{s.block_k}, {self.wgs} consumer warpgroup(s) of "
                f"wgmma.m64n{s.block_n}k{self.kstep}, {s.stages}-stage TMA ring, "
                f"{'persistent' if s.persistent else 'one tile per CTA'}, group_m {s.group_m}")
        ir.emit(f"{SMEM} = #gpu.address_space<workgroup>")
        args = ["%pA: !llvm.ptr", "%pB: !llvm.ptr", f"%C: {self.ctype}"]
        if p.bias:
            args.append(f"%bias: {self.btype}")
        # registers at entry, from the schedule: setmaxnreg then moves them from the producer to the
        # consumers (entry <= the consumers' target, or ".inc" would be a decrease)
        maxnreg = min(s.regs_per_thread, 65536 // self.threads // 8 * 8, consumer_regs(self.wgs))
        with ir.region("module attributes {gpu.container_module} {"):
            with ir.region("gpu.module @nova_kernels {"):
                with ir.region(f"gpu.func @{KERNEL_NAME}({', '.join(args)}) kernel attributes "
                               f"{{known_block_size = array<i32: {self.threads}, 1, 1>, "
                               f"nvvm.maxnreg = {maxnreg} : i32}} {{"):
                    ir.anchor_constants()
                    ir.blank()
                    self.setup()
                    is_prod = ir.cmp("eq", self.wg, 0, "is_producer")
                    ir.emit(f"scf.if {is_prod} {{")
                    ir.level += 1
                    ir._memo.append({})
                    self.producer()
                    ir._memo.pop()
                    ir.level -= 1
                    with ir.region("} else {", close="}"):
                        self.consumer()
                    ir.emit("gpu.return")
        return ir.text()

    def setup(self):
        ir, s = self.ir, self.s
        ir.emit(f"%tmA = builtin.unrealized_conversion_cast %pA : !llvm.ptr to {self.tm_type(s.block_m)}")
        ir.emit(f"%tmB = builtin.unrealized_conversion_cast %pB : !llvm.ptr to {self.tm_type(s.block_n)}")
        self.tid = ir.let("tid", "gpu.thread_id x")
        self.wg = ir.div(self.tid, WG, "wg")
        self.lane = ir.rem(self.tid, 32, "lane")
        ir.comment("---- shared memory: the ring starts at the first 1024-byte boundary of dynamic smem")
        self.dsm = ir.let("dsm", f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>")
        addr = ir.let("dsm_addr", f"memref.extract_aligned_pointer_as_index {self.dsm} : memref<?xi8, {SMEM}> -> index")
        up = ir.add(addr, 1023, "dsm_up")
        al = ir.sub(up, ir.rem(up, 1024, "dsm_rem"), "dsm_aligned")
        self.base_off = ir.sub(al, addr, "ring_off")        # byte offset of the ring in the dsm view
        self.base_enc = ir.div(al, 16, "ring_enc")          # shared address >> 4 (wgmma descriptor units)
        ir.comment(f"---- mbarriers: full[{s.stages}] (TMA landed), empty[{s.stages}] (slot consumed)")
        self.full = ir.let("full", f"nvgpu.mbarrier.create -> {self.mb_t}")
        self.empty = ir.let("empty", f"nvgpu.mbarrier.create -> {self.mb_t}")
        t0 = ir.cmp("eq", self.tid, 0, "is_t0")
        for i in range(s.stages):
            ir.emit(f"nvgpu.mbarrier.init {self.full}[{ir.v(i)}], {ir.v(1)}, predicate = {t0} : {self.mb_t}")
            ir.emit(f"nvgpu.mbarrier.init {self.empty}[{ir.v(i)}], {ir.v(4 * self.wgs)}, predicate = {t0} : {self.mb_t}")
        with ir.region(f"scf.if {t0} {{"):
            ir.emit("nvvm.fence.mbarrier.init")
        ir.emit("gpu.barrier")
        self.bid = ir.let("bid", "gpu.block_id x")
        self.nblocks = ir.let("nblocks", "gpu.grid_dim x") if s.persistent else None
        self.tiles_m, self.tiles_n = _cdiv(self.p.M, s.block_m), _cdiv(self.p.N, s.block_n)
        self.ntiles = self.tiles_m * self.tiles_n
        ir.blank()

    def tile_origin(self, tile):
        """(m0, n0) of output tile ``tile`` in group-M order."""
        ir, s = self.ir, self.s
        gm = max(1, min(s.group_m, self.tiles_m))
        tn = self.tiles_n
        if gm == 1:
            pm, pn = ir.div(tile, tn, "pid_m"), ir.rem(tile, tn, "pid_n")
        else:
            per = gm * tn
            group = ir.div(tile, per, "group")
            first = ir.mul(group, gm, "group_first_m")
            rows = ir.min(ir.sub(self.tiles_m, first, "rows_left"), gm, "group_rows")
            inside = ir.rem(tile, per, "pid_in_group")
            pm = ir.add(first, ir.rem(inside, rows), "pid_m")
            pn = ir.div(inside, rows, "pid_n")
        return ir.mul(pm, s.block_m, "m0"), ir.mul(pn, s.block_n, "n0")

    def slot_phase(self, it, flip=False):
        ir, S = self.ir, self.s.stages
        slot = ir.rem(it, S, "slot")
        rnd = ir.div(it, S, "round")
        bit = ir.let("par_i", f"arith.index_cast {ir.v(rnd)} : index to i64")
        par = ir.let("par", f"arith.trunci {bit} : i64 to i1")
        if flip:
            par = ir.let("par_flip", f"arith.xori {par}, {ir.pure('true1', 'arith.constant true')} : i1")
        return slot, par

    def tile_loop(self, body):
        """scf.for over this CTA's tiles carrying the ring iteration counter; ``body(tile, it)`` returns the new it."""
        ir, s = self.ir, self.s
        if s.persistent:
            lo, step = self.bid, self.nblocks
        else:
            lo, step = self.bid, self.ntiles   # exactly one iteration
        res = ir.fresh("it_out")
        with ir.region(f"{res} = scf.for %tile = {ir.v(lo)} to {ir.v(self.ntiles)} step {ir.v(step)} "
                       f"iter_args(%it = {ir.v(0)}) -> (index) {{"):
            out = body("%tile", "%it")
            ir.emit(f"scf.yield {ir.v(out)} : index")

    # ------------------------------------------------------------------------------------------
    def producer(self):
        ir, s = self.ir, self.s
        ir.comment("---- producer warpgroup: give registers back; thread 0 issues the TMA loads")
        ir.emit(f"nvvm.setmaxregister decrease {PRODUCER_REGS}")
        lead = ir.cmp("eq", self.tid, 0, "is_leader")
        ticks = ir.const(10000000)
        tx = ir.const(self.stage)

        def tile_body(tile, it):
            m0, n0 = self.tile_origin(tile)
            res = ir.fresh("itp_out")
            with ir.region(f"{res} = scf.for %ktp = {ir.v(0)} to {ir.v(self.ktiles)} step {ir.v(1)} "
                           f"iter_args(%itp = {it}) -> (index) {{"):
                slot, par = self.slot_phase("%itp", flip=True)
                ir.emit(f"nvgpu.mbarrier.try_wait.parity {self.empty}[{slot}], {par}, {ticks} : {self.mb_t}")
                ir.emit(f"nvgpu.mbarrier.arrive.expect_tx {self.full}[{slot}], {tx} : {self.mb_t}")
                k0 = ir.mul("%ktp", self.BK, "k0")
                soff = ir.add(self.base_off, ir.mul(slot, self.stage, "slot_off"), "a_off")
                va = ir.let("tileA", f"memref.view {self.dsm}[{ir.v(soff)}][] : memref<?xi8, {SMEM}> to {self.tile_type(s.block_m)}")
                boff = ir.add(soff, self.a_bytes, "b_off")
                vb = ir.let("tileB", f"memref.view {self.dsm}[{ir.v(boff)}][] : memref<?xi8, {SMEM}> to {self.tile_type(s.block_n)}")
                ir.emit(f"nvgpu.tma.async.load %tmA[{ir.v(k0)}, {ir.v(m0)}], {self.full}[{slot}] to {va} : "
                        f"{self.tm_type(s.block_m)}, {self.mb_t} -> {self.tile_type(s.block_m)}")
                ir.emit(f"nvgpu.tma.async.load %tmB[{ir.v(k0)}, {ir.v(n0)}], {self.full}[{slot}] to {vb} : "
                        f"{self.tm_type(s.block_n)}, {self.mb_t} -> {self.tile_type(s.block_n)}")
                ir.emit(f"scf.yield {ir.v(ir.add('%itp', 1, 'itp_next'))} : index")
            return f"{res}"

        with ir.region(f"scf.if {lead} {{"):
            self.tile_loop(tile_body)

    # ------------------------------------------------------------------------------------------
    def consumer(self):
        ir, s, p = self.ir, self.s, self.p
        creg = consumer_regs(self.wgs)
        ir.comment(f"---- consumer warpgroups: take registers ({creg}), wgmma on the ring, epilogue")
        ir.emit(f"nvvm.setmaxregister increase {creg}")
        ctid = ir.sub(self.tid, WG, "ctid")
        self.cwg = ir.div(ctid, WG, "cwg")
        wtid = ir.rem(ctid, WG, "wg_tid")
        self.warp = ir.div(wtid, 32, "wg_warp")
        self.g = ir.div(self.lane, 4, "g")
        self.t = ir.rem(self.lane, 4, "t")
        lane0 = ir.cmp("eq", self.lane, 0, "lane0")
        ticks = ir.const(10000000)
        hi = (1 << 16) | ((1024 >> 4) << 32) | (1 << 62)   # LBO 16 B (unused), SBO 1024 B, 128-byte swizzle
        hi_c = ir.let("desc_hi", f"arith.constant {hi} : i64")
        slab_enc = ir.mul(self.cwg, SLAB_M * SWIZZLE_BYTES // 16, "slab_enc")
        zero = ir.let("zero_acc", f"llvm.mlir.zero : {self.acc_t}")
        ws = self.wait_depth
        attrs = (f"shape = #nvvm.shape<m = 64, n = {s.block_n}, k = {self.kstep}>, "
                 f"typeA = #nvvm.wgmma_type<{_WG_TYPE[p.dtype]}>, typeB = #nvvm.wgmma_type<{_WG_TYPE[p.dtype]}>, "
                 "typeD = #nvvm.wgmma_type<f32>, scaleD = #nvvm.wgmma_scale_out<one>, "
                 "scaleA = #nvvm.wgmma_scale_in<one>, scaleB = #nvvm.wgmma_scale_in<one>, "
                 "layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>")

        def desc(enc):
            x = ir.let("d_i64", f"arith.index_cast {ir.v(enc)} : index to i64")
            return ir.let("desc", f"arith.addi {x}, {hi_c} : i64")

        def release(it_prev):
            slot = ir.rem(it_prev, s.stages, "rel_slot")
            with ir.region(f"scf.if {lane0} {{"):
                ir.let("tok", f"nvgpu.mbarrier.arrive {self.empty}[{ir.v(slot)}] : {self.mb_t} -> !nvgpu.mbarrier.token")

        def tile_body(tile, it):
            m0, n0 = self.tile_origin(tile)
            res = ir.fresh("kres")
            with ir.region(f"{res}:2 = scf.for %kt = {ir.v(0)} to {ir.v(self.ktiles)} step {ir.v(1)} "
                           f"iter_args(%acc = {zero}, %itc = {it}) -> ({self.acc_t}, index) {{"):
                slot, par = self.slot_phase("%itc")
                ir.emit(f"nvgpu.mbarrier.try_wait.parity {self.full}[{slot}], {par}, {ticks} : {self.mb_t}")
                senc = ir.add(self.base_enc, ir.mul(slot, self.stage // 16, "slot_enc"), "stage_enc")
                aenc = ir.add(senc, slab_enc, "a_enc")
                benc = ir.add(senc, self.a_bytes // 16, "b_enc")
                ir.emit("nvvm.wgmma.fence.aligned")
                acc = "%acc"
                for kk in range(self.BK // self.kstep):
                    step = kk * self.kstep * self.p.in_bytes // 16
                    da, db = desc(ir.add(aenc, step, "a_enc_k")), desc(ir.add(benc, step, "b_enc_k"))
                    acc = ir.let("acc_k", f'"nvvm.wgmma.mma_async"({acc}, {da}, {db}) <{{{attrs}}}> : '
                                          f"({self.acc_t}, i64, i64) -> {self.acc_t}")
                ir.emit("nvvm.wgmma.commit.group.sync.aligned")
                ir.emit(f"nvvm.wgmma.wait.group.sync.aligned {ws}")
                if ws == 0:
                    release("%itc")
                else:
                    notfirst = ir.cmp("sgt", "%kt", 0, "not_first")
                    with ir.region(f"scf.if {notfirst} {{"):
                        release(ir.sub("%itc", 1, "it_prev"))
                ir.emit(f"scf.yield {acc}, {ir.v(ir.add('%itc', 1, 'itc_next'))} : {self.acc_t}, index")
            acc_out, it_out = f"{res}#0", f"{res}#1"
            if ws:
                ir.emit("nvvm.wgmma.wait.group.sync.aligned 0")
                release(ir.sub(it_out, 1, "it_last"))
            self.epilogue(acc_out, m0, n0)
            return it_out

        self.tile_loop(tile_body)

    # ------------------------------------------------------------------------------------------
    def epilogue(self, acc, m0, n0):
        """Thread holds, for j < N/8: rows (g, g+8) of its warp's 16 x cols (8j + 2t, +1)."""
        ir, s, p = self.ir, self.s, self.p
        ir.comment("---- epilogue: wgmma D fragment -> (bias, activation, convert) -> predicated stores")
        row0 = ir.add(ir.add(m0, ir.mul(self.cwg, SLAB_M)), ir.add(ir.mul(self.warp, 16), self.g), "out_row0")
        col0 = ir.add(n0, ir.mul(self.t, 2), "out_col0")
        pair = p.N % 2 == 0
        for j in range(s.block_n // 8):
            cols = [ir.add(col0, 8 * j + d, "out_col") for d in (0, 1)]
            col_ok = [ir.cmp("slt", c, p.N, "col_ok") if self.ragged["n"] else True for c in cols]
            biases = None
            if p.bias:
                biases = []
                for c, ok in zip(cols, col_ok):
                    safe = ir.select(ok, c, 0, hint="bias_col")
                    b = ir.let("bias", f"memref.load %bias[{ir.v(safe)}] : {self.btype}")
                    if self.BT != "f32":
                        b = ir.let("bias_f32", f"arith.extf {b} : {self.BT} to f32")
                    biases.append(b)
            for h in (0, 1):
                row = ir.add(row0, 8 * h, "out_row")
                row_ok = ir.cmp("slt", row, p.M, "row_ok") if self.ragged["m"] else True
                vals = []
                for d in (0, 1):
                    x = ir.let("c", f"llvm.extractvalue {acc}[{4 * j + 2 * h + d}] : {self.acc_t}")
                    if biases:
                        x = ir.let("c_bias", f"arith.addf {x}, {biases[d]} : f32")
                    vals.append(self.to_out(self.activation(x)))
                if pair:
                    ok = ir.and_(row_ok, col_ok[0])
                    self.guarded(ok, lambda: self.store_pair(vals, row, cols[0]))
                else:
                    for d in (0, 1):
                        ok = ir.and_(row_ok, col_ok[d])
                        self.guarded(ok, lambda d=d: ir.emit(
                            f"memref.store {vals[d]}, %C[{ir.v(row)}, {ir.v(cols[d])}] : {self.ctype}"))

    def store_pair(self, vals, row, col):
        ir = self.ir
        vec = ir.let("pair", f"vector.from_elements {vals[0]}, {vals[1]} : vector<2x{self.O}>")
        ir.emit(f"vector.store {vec}, %C[{ir.v(row)}, {ir.v(col)}] {{alignment = {2 * self.p.out_bytes}}} : "
                f"{self.ctype}, vector<2x{self.O}>")


def build_hopper_module(problem: GemmProblem, schedule: Schedule, *, wait_depth: int = 1) -> str:
    check_supported(problem, schedule)
    return _HopperKernel(problem, schedule, wait_depth).build()


# ----------------------------------------------------------------------------------------------
# Operand prep: K-major (transposed if needed), K padded to 16 bytes, TF32 rounded to nearest
# ----------------------------------------------------------------------------------------------
PREP_TILE = 32
PREP_THREADS = 256


def build_prep_module(problem: GemmProblem, prep: dict) -> str:
    """``dst[r, c] = rna?(src[c, r] if transpose else src[r, c])`` for c < K, 0 for K <= c < Kp.

    A 32x32 tile per block of 256 threads (8 rows per pass): reads along the source's rows and
    writes along the destination's rows through a padded shared tile, so both sides coalesce."""
    p, ir = problem, _Ir()
    T = p.storage
    sr, sc = prep["src"]
    dr, dc = prep["dst"]
    tr, rnd = prep["transpose"], prep["round"]
    src_t, dst_t = f"memref<{sr}x{sc}x{T}>", f"memref<{dr}x{dc}x{T}>"
    tile_t = f"memref<{PREP_TILE}x{PREP_TILE + 1}x{T}, {SMEM}>"
    ir._taken.update({"src": 1, "dst": 1})
    ir.emit(f"// Nova operand prep for {p.describe()}: {'transpose, ' if tr else ''}"
            f"{'round to TF32 (rna), ' if rnd else ''}pad K to {dc}")
    ir.emit(f"{SMEM} = #gpu.address_space<workgroup>")
    gx = _cdiv(dc, PREP_TILE)
    with ir.region("module attributes {gpu.container_module} {"):
        with ir.region("gpu.module @nova_kernels {"):
            with ir.region(f"gpu.func @{PREP_NAME}(%src: {src_t}, %dst: {dst_t}) kernel attributes "
                           f"{{known_block_size = array<i32: {PREP_THREADS}, 1, 1>}} {{"):
                ir.anchor_constants()
                tid = ir.let("tid", "gpu.thread_id x")
                bid = ir.let("bid", "gpu.block_id x")
                tx, ty = ir.rem(tid, 32, "tx"), ir.div(tid, 32, "ty")
                c0 = ir.mul(ir.rem(bid, gx, "bx"), PREP_TILE, "c0")     # dst column (K) origin
                r0 = ir.mul(ir.div(bid, gx, "by"), PREP_TILE, "r0")     # dst row origin
                zero = ir.const(0.0, T)

                def rounded(x):
                    if not rnd:
                        return x
                    i = ir.let("tf32_bits", f"nvvm.convert.float.to.tf32 {x} {{rnd = #nvvm.fp_rnd_mode<rna>}}")
                    return ir.let("tf32", f"arith.bitcast {i} : i32 to f32")

                def load(r, c):
                    """src element at (r, c) of the source, 0 outside."""
                    ok = ir.and_(ir.cmp("slt", r, sr, "src_r_ok"), ir.cmp("slt", c, sc, "src_c_ok"))
                    rr, cc = ir.select(ok, r, 0, hint="src_r"), ir.select(ok, c, 0, hint="src_c")
                    x = ir.let("x", f"memref.load %src[{ir.v(rr)}, {ir.v(cc)}] : {src_t}")
                    return ir.select(ok, x, zero, ty=T, hint="x")

                def store(r, c, x):
                    ok = ir.and_(ir.cmp("slt", r, dr, "dst_r_ok"), ir.cmp("slt", c, dc, "dst_c_ok"))
                    with ir.region(f"scf.if {ok} {{"):
                        ir.emit(f"memref.store {rounded(x)}, %dst[{ir.v(r)}, {ir.v(c)}] : {dst_t}")

                if not tr:
                    for i in range(PREP_TILE // 8):
                        r = ir.add(r0, ir.add(ty, 8 * i), "r")
                        c = ir.add(c0, tx, "c")
                        store(r, c, load(r, c))
                else:
                    dsm = ir.let("dsm", f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>")
                    tile = ir.let("tile", f"memref.view {dsm}[{ir.v(0)}][] : memref<?xi8, {SMEM}> to {tile_t}")
                    for i in range(PREP_TILE // 8):
                        y = ir.add(ty, 8 * i, "y")
                        # source row = dst column (k), source column = dst row
                        x = load(ir.add(c0, y, "sr"), ir.add(r0, tx, "sc"))
                        ir.emit(f"memref.store {x}, {tile}[{ir.v(y)}, {ir.v(tx)}] : {tile_t}")
                    ir.emit("gpu.barrier")
                    for i in range(PREP_TILE // 8):
                        y = ir.add(ty, 8 * i, "y")
                        x = ir.let("t", f"memref.load {tile}[{ir.v(tx)}, {ir.v(y)}] : {tile_t}")
                        store(ir.add(r0, y, "dr"), ir.add(c0, tx, "dc"), x)
                ir.emit("gpu.return")
    return ir.text()


def prep_launch(prep: dict, in_bytes: int) -> dict:
    dr, dc = prep["dst"]
    blocks = _cdiv(dr, PREP_TILE) * _cdiv(dc, PREP_TILE)
    smem = PREP_TILE * (PREP_TILE + 1) * in_bytes if prep["transpose"] else 0
    return {"grid": (blocks, 1, 1), "block": (PREP_THREADS, 1, 1), "smem_bytes": smem}


# ----------------------------------------------------------------------------------------------
# Compile: main kernel + prep kernels -> one KernelArtifact (prep artifacts in meta["hopper"])
# ----------------------------------------------------------------------------------------------
def compile_hopper(problem: GemmProblem, schedule: Schedule, *, sm_count: int = 132, cubin: bool = True,
                   wait_depth: int = 1, prep_rounds: bool = False):
    from nova.codegen import MLIR_TOOLCHAIN
    from nova.codegen import ptxas as _ptxas
    from nova.codegen.artifact import KernelArtifact
    from nova.codegen.lower import pipeline, to_ptx

    where = f"{problem.describe()} (Hopper, block {schedule.block_m}x{schedule.block_n}, {schedule.stages} stages)"

    def lower(text, kernel):
        try:
            ptx = to_ptx(text, ARCH)
        except CodegenError as e:
            raise CodegenError(f"lowering {where} [{kernel}] failed: {e}") from None
        binary, res = None, {}
        if cubin and _ptxas.available():
            try:
                binary, res = _ptxas.assemble(ptx, ARCH, kernel=kernel)
            except CodegenError as e:
                raise CodegenError(f"assembling {where} [{kernel}] failed: {e}") from None
        return ptx, binary, res

    ptx, binary, resources = lower(build_hopper_module(problem, schedule, wait_depth=wait_depth), KERNEL_NAME)
    plan = operand_plan(problem, prep_rounds)
    preps = {}
    for op in ("a", "b"):
        pr = plan[op]["prep"]
        if pr is None:
            continue
        pptx, pbin, pres = lower(build_prep_module(problem, pr), PREP_NAME)
        launch = prep_launch(pr, problem.in_bytes)
        preps[op] = KernelArtifact(name=PREP_NAME, arch=ARCH, ptx=pptx, grid=launch["grid"], block=launch["block"],
                                   smem_bytes=launch["smem_bytes"], params=("src", "dst"), cubin=pbin,
                                   resources=pres, meta={"prep": pr}).to_dict()
    s = schedule
    hopper = {
        "operands": {op: {"rows": plan[op]["rows"], "cols": plan[op]["cols"], "prep": plan[op]["prep"],
                          "box": [s.block_k, s.block_m if op == "a" else s.block_n]} for op in ("a", "b")},
        "storage": problem.storage, "tensor_map_type": "f32" if prep_rounds else tensor_map_type(problem),
        "prep_kernels": preps, "swizzle": 128,
    }
    meta = {"problem": problem.to_dict(), "schedule": s.to_dict(), "mlir": MLIR_TOOLCHAIN,
            "pipeline": pipeline(ARCH), "hopper": hopper, "wait_depth": wait_depth}
    if binary is not None:
        meta["ptxas"] = _ptxas.version()
    params = ("tmap_a", "tmap_b", "C") + (("bias",) if problem.bias else ())
    return KernelArtifact(name=KERNEL_NAME, arch=ARCH, ptx=ptx, grid=grid(problem, s, sm_count),
                          block=(WG * (1 + s.consumer_warpgroups), 1, 1), smem_bytes=s.smem_bytes,
                          params=params, zero_output=False, cubin=binary, resources=resources, meta=meta)
