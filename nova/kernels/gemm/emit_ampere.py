"""The GEMM kernel builder: ``(GemmProblem, Schedule) -> MLIR text``.

The kernel is an Ampere-class tensor-core GEMM (``mma.sync``; it also runs on Hopper):

* **Grid.**  ``blockIdx.x`` enumerates output tiles of ``block_m x block_n`` in group-M order
  (Triton's rasterization), ``blockIdx.z`` is the split-K slice.  Batched (``problem.batch`` > 1),
  ``blockIdx.x`` = batch element x tiles + tile, and each batched operand is a 3-D memref
  ``[batch, rows, cols]`` with its batch stride (``batched_memref``; a broadcast one stays 2-D), so
  every access adds the block's batch element as its first index (``GemmKernel.at``).  Slice ``z`` covers the K range
  ``[z*Kc, (z+1)*Kc)`` with ``Kc = ceil(ceil(K/split_k)/block_k)*block_k``.
* **Pipeline.**  A ring of ``stages`` shared-memory buffers per operand is filled by ``cp.async``
  (``nvgpu.device_async_copy``); ``stages-1`` copy groups are kept in flight.  Loop iteration
  ``kt`` issues the copies of tile ``kt+stages-1``, computes on tile ``kt``, then waits until tile
  ``kt+1`` has landed and synchronizes the block (one barrier per K tile).
* **Edges.**  Out-of-bounds rows and the K tail are handled when copying: ``srcElements`` makes
  ``cp.async`` zero-fill what lies outside the matrix, so the MMA loop never branches; the
  epilogue stores only in-bounds elements.  Nothing is predicated when the shape divides evenly.
* **Warps.**  ``warps_m x warps_n`` warps; each owns a ``warp_tile_m x warp_tile_n`` sub-tile made
  of ``mma_tiles_m x mma_tiles_n`` MMA tiles whose FP32 accumulators (``vector<2x2xf32>`` each)
  live in registers as ``scf.for`` iter_args.  Everything inside a K tile is unrolled here in
  Python, so registers are only ever indexed by constants.
* **Fragments.**  ``nvgpu.ldmatrix`` wherever the shared-memory layout allows it (16-bit types:
  always; TF32: the K-contiguous operand), scalar ``memref.load`` otherwise.  TF32 operands are
  rounded with ``cvt.rna.tf32.f32`` (round to nearest, which the error budget needs).
* **Epilogue.**  Optional bias (slice 0 only under split-K), activation (relu, gelu-tanh, gelu-erf, silu),
  conversion to the output type, then plain stores or, with split-K, ``memref.atomic_rmw addf``.

The MLIR is generated as text by small helper methods (``nova.codegen.builder.Ir``) that name SSA values after what
they hold and fold compile-time index arithmetic, so ``nova compile --emit mlir`` is readable.
"""
from __future__ import annotations

import math

from nova.codegen import CodegenError, check_mma_sync_target
from nova.codegen.builder import SMEM, Ir
from nova.kernels import activations
from nova.dtypes import MODES
from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.gemm.schedule import Schedule

KERNEL_NAME = "nova_gemm"
SUPPORTED_ARCHES = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
MAX_THREADS_PER_BLOCK = 1024   # CUDA's limit on every supported architecture
RESERVED_NAMES = ("A", "B", "C", "bias", "R", "P", "kt", "stage")   # spelled directly in the kernels' text
MMA_NAMES = {"tf32": "acc_tf32", "f16": "acc_f16", "a_bits": "a_bits", "a_pair": "a_pair", "b_bits": "b_bits",
             "b_pair": "b_pair", "c_elt": "c_elt", "d": "d_bf16", "d_elt": "d_elt", "bf16": "acc_bf16"}

# Tensor-core instruction shape per input dtype (mma.sync, FP32 accumulation).
_MMA_SHAPE = {m: (16, 8, e.mma_k) for m, e in MODES.items()}      # nova/dtypes.py
_MMA_ATYPE = {m: e.name for m, e in MODES.items()}
_LOG2E = 1.4426950408889634
_GELU_C = 0.7978845608028654  # sqrt(2/pi)
_SQRT_HALF = math.sqrt(0.5)


# ----------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_supported(problem: GemmProblem, s: Schedule) -> None:
    """Raise CodegenError, naming the offending field, if this builder cannot realize ``s``."""
    what = f"{problem.describe()} on {s.arch}"

    def fail(msg):
        raise CodegenError(f"cannot generate {what}: {msg}")

    check_mma_sync_target(s, SUPPORTED_ARCHES, fail)
    want = _MMA_SHAPE[problem.dtype]
    if (s.mma.m, s.mma.n, s.mma.k) != want:
        fail(f"mma shape m{s.mma.m}n{s.mma.n}k{s.mma.k} does not match dtype {problem.dtype} "
             f"(needs m{want[0]}n{want[1]}k{want[2]})")
    if s.mma.a_type != _MMA_ATYPE[problem.dtype] or s.mma.acc_type != "f32":
        fail(f"mma types {s.mma.a_type}/{s.mma.acc_type} do not match dtype {problem.dtype} with f32 accumulation")
    if s.smem_layout != "pad":
        fail(f"smem_layout {s.smem_layout!r} is not supported yet (only 'pad')")
    if s.producer_warps or s.consumer_warpgroups or s.persistent or s.cluster_m != 1 or s.cluster_n != 1:
        fail("warp specialization, persistent kernels and clusters are not supported by the mma.sync kernel")
    if s.stages < 2:
        fail(f"stages={s.stages}; the cp.async pipeline needs at least 2")
    if s.split_k < 1:
        fail(f"split_k={s.split_k} must be >= 1")
    if s.split_k > 1 and problem.batch > 1:
        fail(f"split_k={s.split_k} with a batch of {problem.batch}: batched GEMMs do not split K")
    if s.split_k > 1 and problem.activation != "none":
        fail("split-K accumulates partial sums atomically, so it cannot apply an activation")
    if s.split_k > 1 and problem.round_through:
        fail(f"split-K accumulates partial sums atomically, so it cannot round the sum through {problem.round_through}")
    if s.split_workspace:
        fail("split-K through a workspace is generated by the Hopper kernel only")
    if s.warps_m < 1 or s.warps_n < 1 or s.block_m % s.warps_m or s.block_n % s.warps_n:
        fail(f"block {s.block_m}x{s.block_n} does not split into {s.warps_m}x{s.warps_n} warps")
    if s.warp_tile_m % s.mma.m or s.warp_tile_n % s.mma.n or s.block_k % s.mma.k:
        fail(f"warp tile {s.warp_tile_m}x{s.warp_tile_n}x{s.block_k} is not a multiple of the "
             f"mma shape {s.mma.m}x{s.mma.n}x{s.mma.k}")
    if s.threads_per_block > MAX_THREADS_PER_BLOCK:
        fail(f"{s.threads_per_block} threads per block exceeds {MAX_THREADS_PER_BLOCK}")
    eb = problem.in_bytes
    for op, vec, pad in (("A", s.vector_a, s.smem_pad_a), ("B", s.vector_b, s.smem_pad_b)):
        g = _operand_geometry(problem, s, op)
        if vec < 1 or g.tile_cols % vec:
            fail(f"vector_{op.lower()}={vec} does not divide the {g.tile_cols}-element tile rows of {op}")
        if vec * eb not in (4, 8, 16) and not (vec == 1 and eb == 2):
            fail(f"vector_{op.lower()}={vec} ({vec * eb} bytes): cp.async copies 4, 8 or 16 bytes")
        if g.global_cols % vec:
            fail(f"vector_{op.lower()}={vec} does not divide the row length {g.global_cols} of {op} "
                 "(copies would be misaligned; the configurator should lower the vector width)")
        if pad < 0 or (g.smem_cols * eb) % 16:
            fail(f"smem_pad_{op.lower()}={pad}: rows of {g.smem_cols} elements ({g.smem_cols * eb} B) "
                 "must be a multiple of 16 bytes (cp.async / ldmatrix alignment)")
    need = smem_plan(problem, s)["total"]
    if s.smem_bytes < need:
        fail(f"schedule.smem_bytes={s.smem_bytes} is smaller than the {need} bytes the "
             f"{s.stages}-stage A/B ring needs")


# ----------------------------------------------------------------------------------------------
# Geometry helpers (pure Python, shared by the checker and the builder)
# ----------------------------------------------------------------------------------------------
class _Geom:
    """How one operand sits in global and shared memory.

    A shared-memory tile is ``[tile_rows, tile_cols + pad]``; its rows follow the rows of the
    global matrix (``[M,K]`` for A, ``[K,M]`` for trans A, ``[K,N]`` for B, ``[N,K]`` for trans B).
    ``row_dim``/``col_dim`` say which GEMM dimension ('m', 'n', 'k') each axis runs along.
    """

    def __init__(self, name, global_rows, global_cols, tile_rows, tile_cols, pad, row_dim, col_dim):
        self.name = name
        self.global_rows, self.global_cols = global_rows, global_cols
        self.tile_rows, self.tile_cols = tile_rows, tile_cols
        self.smem_cols = tile_cols + pad
        self.row_dim, self.col_dim = row_dim, col_dim


def _operand_geometry(p: GemmProblem, s: Schedule, op: str) -> _Geom:
    if op == "A":
        if p.trans_a:
            return _Geom("A", p.K, p.M, s.block_k, s.block_m, s.smem_pad_a, "k", "m")
        return _Geom("A", p.M, p.K, s.block_m, s.block_k, s.smem_pad_a, "m", "k")
    if p.trans_b:
        return _Geom("B", p.N, p.K, s.block_n, s.block_k, s.smem_pad_b, "n", "k")
    return _Geom("B", p.K, p.N, s.block_k, s.block_n, s.smem_pad_b, "k", "n")


def smem_plan(p: GemmProblem, s: Schedule) -> dict:
    a = _operand_geometry(p, s, "A")
    b = _operand_geometry(p, s, "B")
    a_bytes = s.stages * a.tile_rows * a.smem_cols * p.in_bytes
    b_off = _ceil_div(a_bytes, 16) * 16
    b_bytes = s.stages * b.tile_rows * b.smem_cols * p.in_bytes
    return {"a_offset": 0, "a_bytes": a_bytes, "b_offset": b_off, "b_bytes": b_bytes, "total": b_off + b_bytes}


def batched_memref(p: GemmProblem, op: str, rows: int, cols: int, elem: str) -> str:
    """The global memref type of operand ``op`` ("a", "b", "c") stored as row-major ``[rows, cols]``:
    2-D, or batched ``[batch, rows, cols]`` with the operand's batch stride."""
    if p.matrices(op) == 1:
        return f"memref<{rows}x{cols}x{elem}>"
    return f"memref<{p.batch}x{rows}x{cols}x{elem}, strided<[{p.batch_stride(op)}, {cols}, 1]>>"


def split_k_chunk(p: GemmProblem, s: Schedule) -> int:
    """Kc: the K extent of one split-K slice (a multiple of block_k)."""
    return _ceil_div(_ceil_div(p.K, s.split_k), s.block_k) * s.block_k


# ----------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------
class GemmKernel:
    def __init__(self, p: GemmProblem, s: Schedule, fragment_prefetch: bool = False):
        self.p, self.s = p, s
        self.prefetch = fragment_prefetch
        self.ir = Ir(RESERVED_NAMES)
        self.T = p.storage                                   # element type of A and B
        self.O = p.out_dtype                                 # element type of C
        self.BT = p.bias_dtype                           # element type of bias
        self.threads = s.threads_per_block
        self.ga = _operand_geometry(p, s, "A")
        self.gb = _operand_geometry(p, s, "B")
        self.smem = smem_plan(p, s)
        self.bound = {"m": p.M, "n": p.N, "k": p.K}
        block = {"m": s.block_m, "n": s.block_n, "k": s.block_k}
        # A dimension needs run-time bounds checks only if the tiles do not divide it.
        self.ragged = {d: self.bound[d] % block[d] != 0 for d in "mnk"}
        self.kstep = s.mma.k
        self.n_acc = s.mma_tiles_m * s.mma_tiles_n
        self.batch_index = None                              # this block's batch element (batched problems)

    # -- types
    def gtype(self, g: _Geom) -> str:
        return batched_memref(self.p, g.name.lower(), g.global_rows, g.global_cols, self.T)

    def at(self, name: str, row, col) -> str:
        """``%name[row, col]``: element (row, col) of operand ``name`` ("A", "B", "C"), in this block's
        batch element when the operand is batched (``%name[batch, row, col]``)."""
        ir = self.ir
        operand = "c" if name in ("R", "P") else name.lower()        # R and P lie as C does
        batch = f"{ir.v(self.batch_index)}, " if self.p.matrices(operand) > 1 else ""
        return f"%{name}[{batch}{ir.v(row)}, {ir.v(col)}]"

    def stype(self, g: _Geom) -> str:
        return f"memref<{self.s.stages}x{g.tile_rows}x{g.smem_cols}x{self.T}, {SMEM}>"

    @property
    def ctype(self) -> str:
        return batched_memref(self.p, "c", self.p.M, self.p.N, self.O)

    @property
    def btype(self) -> str:
        return f"memref<{self.p.N}x{self.BT}>"

    @property
    def rtype(self) -> str:
        """The memref type of the residual R and the pre-activation P: C's (the output's type and layout)."""
        return batched_memref(self.p, "c", self.p.M, self.p.N, self.p.out_dtype)

    def operand_type(self, name: str) -> str:
        return self.ctype if name == "C" else self.rtype

    # ------------------------------------------------------------------------------------------
    def build(self) -> str:
        p, s, ir = self.p, self.s, self.ir
        ir.emit(f"// Nova GEMM kernel: {p.describe()}")
        ir.emit(f"// tile {s.block_m}x{s.block_n}x{s.block_k}, warps {s.warps_m}x{s.warps_n} "
                f"(warp tile {s.warp_tile_m}x{s.warp_tile_n} = {s.mma_tiles_m}x{s.mma_tiles_n} x {s.mma}), "
                f"{s.stages} stages, split_k {s.split_k}, group_m {s.group_m}, {s.arch}")
        ir.emit(f"{SMEM} = #gpu.address_space<workgroup>")
        args = [f"%A: {self.gtype(self.ga)}", f"%B: {self.gtype(self.gb)}", f"%C: {self.ctype}"]
        args += self.epilogue_args()
        with ir.kernel(KERNEL_NAME, args, self.threads, minctasm=self.s.blocks_per_sm):
            ir.blank()
            self.thread_coordinates()
            self.block_coordinates()
            self.k_range()
            self.shared_memory()
            self.copy_plans()
            self.fragment_offsets()
            self.prologue()
            accs = self.main_loop()
            self.epilogue(accs)
            ir.emit("gpu.return")
        return ir.text()

    # ------------------------------------------------------------------------------------------
    def thread_coordinates(self):
        ir, s = self.ir, self.s
        ir.comment("---- thread coordinates: warp (warp_m, warp_n), lane = 4*g + t")
        self.tid = ir.let("tid", "gpu.thread_id x")
        lane = ir.rem(self.tid, 32, "lane")
        warp = ir.div(self.tid, 32, "warp")
        self.lane = lane
        warp_m = ir.div(warp, s.warps_n, "warp_m")
        warp_n = ir.rem(warp, s.warps_n, "warp_n")
        self.g = ir.div(lane, 4, "g")   # groupID: fragment row
        self.t = ir.rem(lane, 4, "t")   # threadID_in_group: fragment column
        self.wm0 = ir.mul(warp_m, s.warp_tile_m, "warp_row0")   # warp tile origin inside the block tile
        self.wn0 = ir.mul(warp_n, s.warp_tile_n, "warp_col0")
        ir.blank()

    def block_coordinates(self):
        ir, s, p = self.ir, self.s, self.p
        tiles_m, tiles_n = _ceil_div(p.M, s.block_m), _ceil_div(p.N, s.block_n)
        gm = max(1, min(s.group_m, tiles_m))
        ir.comment(f"---- output tile of this block: {tiles_m}x{tiles_n} tiles, group-M swizzle "
                   f"({gm} tile rows per group)")
        pid = ir.let("pid", "gpu.block_id x")
        if p.batch > 1:
            ir.comment(f"batched: block = batch element x {tiles_m * tiles_n} tiles + tile")
            self.batch_index = ir.div(pid, tiles_m * tiles_n, "batch")
            pid = ir.rem(pid, tiles_m * tiles_n, "pid_tile")
        if gm == 1:
            pid_m = ir.div(pid, tiles_n, "pid_m")
            pid_n = ir.rem(pid, tiles_n, "pid_n")
        else:
            per_group = gm * tiles_n
            group = ir.div(pid, per_group, "group")
            first_m = ir.mul(group, gm, "group_first_m")
            group_rows = ir.min(ir.sub(tiles_m, first_m, "rows_left"), gm, "group_rows")
            in_group = ir.rem(pid, per_group, "pid_in_group")
            pid_m = ir.add(first_m, ir.rem(in_group, group_rows), "pid_m")
            pid_n = ir.div(in_group, group_rows, "pid_n")
        self.m0 = ir.mul(pid_m, s.block_m, "block_row0")
        self.n0 = ir.mul(pid_n, s.block_n, "block_col0")
        ir.blank()

    def k_range(self):
        ir, s, p = self.ir, self.s, self.p
        if s.split_k == 1:
            self.k_begin = 0
            self.ntiles = _ceil_div(p.K, s.block_k)
            self.slice_id = None
            ir.comment(f"---- K loop: {self.ntiles} tiles of {s.block_k}")
        else:
            kc = split_k_chunk(p, s)
            ir.comment(f"---- split-K slice z covers K in [z*{kc}, min(K, (z+1)*{kc}))")
            self.slice_id = ir.let("slice", "gpu.block_id z")
            self.k_begin = ir.mul(self.slice_id, kc, "k_begin")
            k_len = ir.max(ir.min(ir.sub(p.K, self.k_begin, "k_left"), kc, "k_len_raw"), 0, "k_len")
            self.ntiles = ir.div(ir.add(k_len, s.block_k - 1), s.block_k, "k_tiles")
        ir.blank()

    def shared_memory(self):
        ir = self.ir
        ir.comment(f"---- dynamic shared memory: A ring {self.smem['a_bytes']} B at 0, "
                   f"B ring {self.smem['b_bytes']} B at {self.smem['b_offset']} "
                   f"(rows padded to {self.ga.smem_cols} / {self.gb.smem_cols} elements)")
        dsm = ir.let("dsm", f"gpu.dynamic_shared_memory : memref<?xi8, {SMEM}>")
        self.sA = ir.let("smem_A", f"memref.view {dsm}[{ir.v(self.smem['a_offset'])}][] : "
                                   f"memref<?xi8, {SMEM}> to {self.stype(self.ga)}")
        self.sB = ir.let("smem_B", f"memref.view {dsm}[{ir.v(self.smem['b_offset'])}][] : "
                                   f"memref<?xi8, {SMEM}> to {self.stype(self.gb)}")
        ir.blank()

    # ------------------------------------------------------------------------------------------
    # global -> shared copies
    # ------------------------------------------------------------------------------------------
    def copy_plans(self):
        """Per-thread coordinates of the copies that fill one stage (hoisted out of the loop)."""
        ir = self.ir
        self.plans = {}
        for g, vec in ((self.ga, self.s.vector_a), (self.gb, self.s.vector_b)):
            per_row = g.tile_cols // vec
            total = g.tile_rows * per_row
            iters = _ceil_div(total, self.threads)
            ir.comment(f"---- {g.name} tile [{g.tile_rows}x{g.tile_cols}]: {total} copies of {vec} "
                       f"element(s), {iters} per thread")
            copies = []
            if self.threads % per_row == 0:
                # Every thread keeps the same column; rows advance by threads/per_row.
                row0 = ir.div(self.tid, per_row, f"{g.name}_cp_row")
                col = ir.mul(ir.rem(self.tid, per_row), vec, f"{g.name}_cp_col")
                for i in range(iters):
                    guard = None
                    if (i + 1) * self.threads > total:
                        guard = ir.cmp("slt", self.tid, total - i * self.threads, f"{g.name}_cp_live")
                    copies.append((ir.add(row0, i * (self.threads // per_row)), col, guard))
            else:
                for i in range(iters):
                    c = ir.add(self.tid, i * self.threads, f"{g.name}_cp_id")
                    guard = None
                    if (i + 1) * self.threads > total:
                        guard = ir.cmp("slt", c, total, f"{g.name}_cp_live")
                    copies.append((ir.div(c, per_row, f"{g.name}_cp_row"),
                                   ir.mul(ir.rem(c, per_row), vec, f"{g.name}_cp_col"), guard))
            self.plans[g.name] = (vec, copies)
        ir.blank()

    def origin(self, dim: str, k0):
        return {"m": self.m0, "n": self.n0, "k": k0}[dim]

    def load_tile(self, ktile, stage):
        """Issue the copies of K tile ``ktile`` (relative to this slice) into ring slot ``stage``."""
        ir = self.ir
        k0 = ir.add(self.k_begin, ir.mul(ktile, self.s.block_k), "k0")
        for g, smem in ((self.ga, self.sA), (self.gb, self.sB)):
            vec, copies = self.plans[g.name]
            r0, c0 = self.origin(g.row_dim, k0), self.origin(g.col_dim, k0)
            for row, col, guard in copies:
                if guard is not None:
                    with ir.region(f"scf.if {guard} {{"):
                        self.copy_one(g, smem, vec, stage, r0, c0, row, col)
                else:
                    self.copy_one(g, smem, vec, stage, r0, c0, row, col)

    def copy_one(self, g: _Geom, smem: str, vec: int, stage, r0, c0, row, col):
        ir = self.ir
        grow = ir.add(r0, row, f"{g.name}_row")
        gcol = ir.add(c0, col, f"{g.name}_col")
        row_ok = ir.cmp("slt", grow, g.global_rows, f"{g.name}_row_ok") if self.ragged[g.row_dim] else True
        if self.ragged[g.col_dim]:
            # elements of this copy that lie inside the matrix: clamp(cols - gcol, 0, vec)
            left = ir.sub(g.global_cols, gcol, f"{g.name}_left")
            count = ir.max(ir.min(left, vec, f"{g.name}_n"), 0, f"{g.name}_n")
        else:
            count = vec
        count = ir.select(row_ok, count, 0, hint=f"{g.name}_n")
        full = isinstance(count, int)   # statically a whole in-bounds copy
        dst = f"{smem}[{ir.v(stage)}, {ir.v(row)}, {ir.v(col)}]"
        if vec == 1 and self.p.in_bytes == 2:
            # cp.async moves at least 4 bytes: a 2-byte element goes through a register.
            ok = True if full else ir.cmp("sgt", count, 0, f"{g.name}_ok")
            srow = ir.select(ok, grow, 0, hint=f"{g.name}_srow")
            scol = ir.select(ok, gcol, 0, hint=f"{g.name}_scol")
            val = ir.let(f"{g.name}_elt", f"memref.load {self.at(g.name, srow, scol)} : {self.gtype(g)}")
            if ok is not True:
                val = ir.select(ok, val, ir.const(0.0, self.T), ty=self.T, hint=f"{g.name}_elt")
            ir.emit(f"memref.store {val}, {dst} : {self.stype(g)}")
            return
        bypass = " {bypassL1}" if vec * self.p.in_bytes == 16 else ""
        if full:
            src = self.at(g.name, grow, gcol)
            ir.let(f"cp_{g.name}", f"nvgpu.device_async_copy {src}, {dst}, {vec}{bypass} : "
                                   f"{self.gtype(g)} to {self.stype(g)}")
        else:
            # Zero-filled copies point at element (0, 0) so no address leaves the matrix.
            ok = ir.cmp("sgt", count, 0, f"{g.name}_ok")
            srow = ir.select(ok, grow, 0, hint=f"{g.name}_srow")
            scol = ir.select(ok, gcol, 0, hint=f"{g.name}_scol")
            src = self.at(g.name, srow, scol)
            ir.let(f"cp_{g.name}", f"nvgpu.device_async_copy {src}, {dst}, {vec}, {ir.v(count)}{bypass} : "
                                   f"{self.gtype(g)} to {self.stype(g)}")

    def guarded_load_tile(self, ktile, stage):
        """Load tile ``ktile`` if it exists (``ktile < ntiles``)."""
        ir = self.ir
        live = ir.cmp("slt", ktile, self.ntiles, "tile_exists")
        if live is True:
            self.load_tile(ktile, stage)
        elif live is not False:
            with ir.region(f"scf.if {live} {{"):
                self.load_tile(ktile, stage)

    def commit_group(self) -> str:
        # Generic form: the custom syntax takes the copy tokens as operands, but copies issued
        # inside an scf.if cannot hand their tokens out; an empty group commits every pending copy.
        return self.ir.let("group", '"nvgpu.device_async_create_group"() : () -> !nvgpu.device.async.token')

    def prologue(self):
        ir, S = self.ir, self.s.stages
        ir.comment(f"---- prologue: start loading K tiles 0..{S - 2} (one cp.async group each)")
        grp = None
        for st in range(S - 1):
            self.guarded_load_tile(st, st)
            grp = self.commit_group()
        ir.emit(f"nvgpu.device_async_wait {grp} {{numGroups = {S - 2} : i32}}")
        ir.emit("gpu.barrier")
        ir.blank()

    # ------------------------------------------------------------------------------------------
    # the main loop
    # ------------------------------------------------------------------------------------------
    def main_loop(self):
        ir, s = self.ir, self.s
        S = s.stages
        zero = ir.const(0.0, "vector<2x2xf32>")
        accs_in = [f"%acc_in{i}" for i in range(self.n_acc)]
        res = ir.fresh("acc")
        iter_args = [f"%stage = {ir.v(0)}"] + [f"{a} = {zero}" for a in accs_in]
        types = ["index"] + ["vector<2x2xf32>"] * self.n_acc
        frags_in = None
        if self.prefetch:
            # fragments of k-step 0 of the current tile, loaded before the previous barrier
            ir.comment("fragments of k-step 0 of tile 0 (later ones are loaded one k-step ahead)")
            first = self.load_fragments(0, 0)
            frags_in = [f"%frag_in{i}" for i in range(len(first))]
            iter_args += [f"{n} = {v}" for n, v in zip(frags_in, first)]
            types += self.fragment_types()
        ir.comment(f"---- main loop over K tiles; {self.n_acc} accumulators of vector<2x2xf32> "
                   f"({s.mma_tiles_m}x{s.mma_tiles_n} per warp); %stage is the ring slot of tile kt")
        header = (f"{res}:{len(types)} = scf.for %kt = {ir.v(0)} to {ir.v(self.ntiles)} step {ir.v(1)} "
                  f"iter_args({', '.join(iter_args)}) -> ({', '.join(types)}) {{")
        with ir.region(header):
            ir.comment(f"prefetch tile kt+{S - 1} into the slot freed by tile kt-1")
            nxt = ir.add("%kt", S - 1, "next_tile")
            wslot = ir.select(ir.cmp("eq", "%stage", 0, "stage_is0"), S - 1,
                              ir.sub("%stage", 1), hint="next_slot")
            self.guarded_load_tile(nxt, wslot)
            grp = self.commit_group()
            nslot = ir.add("%stage", 1, "slot_inc")
            nslot = ir.select(ir.cmp("eq", nslot, S, "slot_wrap"), 0, nslot, hint="slot_next")

            def sync():
                ir.comment(f"wait for tile kt+1 ({S - 2} newer group(s) may stay in flight), then sync")
                ir.emit(f"nvgpu.device_async_wait {grp} {{numGroups = {S - 2} : i32}}")
                ir.emit("gpu.barrier")

            ir.comment("tensor-core work on the current slot")
            accs, frags_out = self.compute_tile("%stage", accs_in, frags_in, sync, nslot)
            yields = [ir.v(nslot)] + accs + (frags_out or [])
            ir.emit(f"scf.yield {', '.join(yields)} : {', '.join(types)}")
        ir.blank()
        return [f"{res}#{i + 1}" for i in range(self.n_acc)]

    # ------------------------------------------------------------------------------------------
    # fragments and MMAs
    # ------------------------------------------------------------------------------------------
    def fragment_offsets(self):
        """Lane-dependent offsets for ldmatrix (8 lanes address the 8 rows of each 8x8 matrix)."""
        ir = self.ir
        ir.comment("---- ldmatrix addressing: lane l feeds row l%8 of 8x8 matrix q = l/8")
        r = ir.rem(self.lane, 8, "lm_r")
        q = ir.div(self.lane, 8, "lm_q")
        self.lm_r = r
        self.q_lo = ir.rem(q, 2, "lm_q_lo")
        self.q_hi = ir.div(q, 2, "lm_q_hi")
        ir.blank()

    def use_ldmatrix(self, op: str) -> bool:
        """16-bit types always; TF32 only where K is the contiguous smem axis (no b32 transpose)."""
        if self.p.in_bytes == 2:
            return True
        return not self.p.trans_a if op == "A" else self.p.trans_b

    def ldmatrix_address(self, hint: str, base, kk, mn_q, k_q, k_contiguous: bool):
        """Row, column and transpose flag of this lane's ldmatrix row address (``<hint>_lm_row``,
        ``<hint>_lm_col``) for the MMA tile at M/N offset ``base`` and K offset ``kk``: the lane's 8x8
        matrix lies ``mn_q`` halves along M/N and ``k_q`` halves along K.  Smem [mn][k] (K contiguous)
        is read as it is, smem [k][mn] transposed by ldmatrix."""
        ir = self.ir
        if k_contiguous:
            row = ir.add(base, ir.add(self.lm_r, ir.mul(mn_q, 8)), f"{hint}_lm_row")
            col = ir.add(ir.mul(k_q, self.kstep // 2), kk, f"{hint}_lm_col")
            return row, col, "false"
        row = ir.add(ir.add(self.lm_r, ir.mul(k_q, 8)), kk, f"{hint}_lm_row")
        col = ir.add(base, ir.mul(mn_q, 8), f"{hint}_lm_col")
        return row, col, "true"

    def tf32_round(self, x: str) -> str:
        ir = self.ir
        i = ir.let("tf32_bits", f"nvvm.convert.float.to.tf32 {x} {{rnd = #nvvm.fp_rnd_mode<rna>}}")
        return ir.let("tf32", f"arith.bitcast {i} : i32 to f32")

    def load_a(self, stage, i: int, kk: int):
        """A fragment of MMA tile row ``i`` at K offset ``kk`` within the tile."""
        ir, s, sm, st = self.ir, self.s, self.sA, self.stype(self.ga)
        m = ir.add(self.wm0, i * s.mma.m)
        if self.use_ldmatrix("A"):
            # matrices (m0-7,k-lo) (m8-15,k-lo) (m0-7,k-hi) (m8-15,k-hi): q_lo picks the m half, q_hi the k half
            row, col, trans = self.ldmatrix_address("a", m, kk, self.q_lo, self.q_hi, not self.p.trans_a)
            vt = f"vector<4x{4 // self.p.in_bytes}x{self.T}>"
            frag = ir.let("a_frag", f"nvgpu.ldmatrix {sm}[{ir.v(stage)}, {ir.v(row)}, {ir.v(col)}] "
                                    f"{{numTiles = 4 : i32, transpose = {trans}}} : {st} -> {vt}")
            if self.p.dtype == "tf32":
                elts = [self.tf32_round(ir.let("a_elt", f"vector.extract {frag}[{e}, 0] : f32 from {vt}"))
                        for e in range(4)]
                return ir.let("a_frag_tf32", f"vector.from_elements {', '.join(elts)} : vector<4x1xf32>")
            return frag
        # TF32 with A stored [k][m]: a0=(g,t) a1=(g+8,t) a2=(g,t+4) a3=(g+8,t+4) as (m, k)
        elts = []
        for dm, dk in ((0, 0), (8, 0), (0, 4), (8, 4)):
            mi = ir.add(ir.add(m, self.g), dm, "a_m")
            ki = ir.add(ir.add(self.t, kk), dk, "a_k")
            x = ir.let("a_elt", f"memref.load {sm}[{ir.v(stage)}, {ir.v(ki)}, {ir.v(mi)}] : {st}")
            elts.append(self.tf32_round(x))
        return ir.let("a_frag_tf32", f"vector.from_elements {', '.join(elts)} : vector<4x1xf32>")

    def load_b(self, stage, j: int, kk: int, pair: bool):
        """B fragment(s) of MMA tile column ``j`` (and ``j+1`` when ``pair``) at K offset ``kk``.
        Returns a list of one or two fragments (vector<2xXxT>)."""
        ir, s, sm, st = self.ir, self.s, self.sB, self.stype(self.gb)
        n = ir.add(self.wn0, j * s.mma.n)
        per32 = 4 // self.p.in_bytes
        if self.use_ldmatrix("B"):
            tiles = 4 if pair else 2
            # matrices (n0-7,k-lo) (n0-7,k-hi) (n8-15,k-lo) (n8-15,k-hi): q_hi picks the n half, q_lo the k half
            # (smem [k][n] is 16-bit only)
            row, col, trans = self.ldmatrix_address("b", n, kk, self.q_hi, self.q_lo, self.p.trans_b)
            vt = f"vector<{tiles}x{per32}x{self.T}>"
            frag = ir.let("b_frags", f"nvgpu.ldmatrix {sm}[{ir.v(stage)}, {ir.v(row)}, {ir.v(col)}] "
                                     f"{{numTiles = {tiles} : i32, transpose = {trans}}} : {st} -> {vt}")
            out = []
            for h in range(tiles // 2):
                if self.p.dtype == "tf32":
                    elts = [self.tf32_round(ir.let("b_elt", f"vector.extract {frag}[{2 * h + e}, 0] : f32 from {vt}"))
                            for e in range(2)]
                    out.append(ir.let("b_frag_tf32", f"vector.from_elements {', '.join(elts)} : vector<2x1xf32>"))
                elif tiles == 2:
                    out.append(frag)
                else:
                    out.append(ir.let("b_frag", f"vector.extract_strided_slice {frag} {{offsets = [{2 * h}, 0], "
                                                f"sizes = [2, {per32}], strides = [1, 1]}} : {vt} to "
                                                f"vector<2x{per32}x{self.T}>"))
            return out
        # TF32 with B stored [k][n]: b0=(k=t, n=g) b1=(k=t+4, n=g)
        out = []
        for jj in range(2 if pair else 1):
            ni = ir.add(ir.add(n, self.g), jj * s.mma.n, "b_n")
            elts = []
            for dk in (0, 4):
                ki = ir.add(ir.add(self.t, kk), dk, "b_k")
                x = ir.let("b_elt", f"memref.load {sm}[{ir.v(stage)}, {ir.v(ki)}, {ir.v(ni)}] : {st}")
                elts.append(self.tf32_round(x))
            out.append(ir.let("b_frag_tf32", f"vector.from_elements {', '.join(elts)} : vector<2x1xf32>"))
        return out

    def mma(self, a: str, b: str, acc: str) -> str:
        s = self.s
        a_type = {"tf32": "tf32", "fp16": "f16"}.get(self.p.dtype, "bf16")
        return self.ir.mma_sync(a, b, acc, a_type, s.mma.k, MMA_NAMES)

    def fragment_types(self) -> list[str]:
        s = self.s
        if self.p.dtype == "tf32":
            a, b = "vector<4x1xf32>", "vector<2x1xf32>"
        else:
            a, b = f"vector<4x2x{self.T}>", f"vector<2x2x{self.T}>"
        return [a] * s.mma_tiles_m + [b] * s.mma_tiles_n

    def load_fragments(self, stage, kk) -> list[str]:
        """A fragments of every MMA row, then B fragments of every MMA column, for k-step ``kk``."""
        s = self.s
        a = [self.load_a(stage, i, kk) for i in range(s.mma_tiles_m)]
        b = []
        j = 0
        while j < s.mma_tiles_n:
            pair = j + 1 < s.mma_tiles_n     # ldmatrix.x4 serves two MMA columns
            b += self.load_b(stage, j, kk, pair)
            j += 2 if pair else 1
        return a + b

    def compute_tile(self, stage, accs, frags, sync, next_stage):
        """MMAs of one K tile.  With fragment prefetch, ``frags`` holds k-step 0 (loaded earlier);
        each k-step loads the next one's fragments before its MMAs, and the last k-step syncs the
        block (``sync``) and loads k-step 0 of the next tile, so shared-memory latency after the
        barrier overlaps tensor-core work.  Returns (accumulators, fragments for the next tile)."""
        ir, s = self.ir, self.s
        accs = list(accs)
        tm, tn = s.mma_tiles_m, s.mma_tiles_n
        ksteps = list(range(0, s.block_k, self.kstep))
        for idx, kk in enumerate(ksteps):
            last = idx + 1 == len(ksteps)
            ir.comment(f"k-step {idx}: {tm}x{tn} mma.sync")
            if not self.prefetch:
                frags = self.load_fragments(stage, kk)
                nxt = None
                if last:
                    sync()
            elif not last:
                nxt = self.load_fragments(stage, ksteps[idx + 1])
            else:
                sync()
                ir.comment("k-step 0 fragments of the next tile")
                nxt = self.load_fragments(next_stage, 0)
            a, b = frags[:tm], frags[tm:]
            for i in range(tm):
                # serpentine order over n keeps a B fragment hot between consecutive rows
                cols = range(tn) if i % 2 == 0 else range(tn - 1, -1, -1)
                for jn in cols:
                    accs[i * tn + jn] = self.mma(a[i], b[jn], accs[i * tn + jn])
            frags = nxt
        return accs, frags

    # ------------------------------------------------------------------------------------------
    # epilogue
    # ------------------------------------------------------------------------------------------
    def fconst(self, x: float) -> str:
        return self.ir.const(x, "f32")

    def exp2(self, x: str) -> str:
        return self.ir.let("ex2", f'llvm.inline_asm "ex2.approx.ftz.f32 $0, $1;", "=f,f" {x} : (f32) -> f32')

    def divide(self, x: str, y: str, hint: str = "q") -> str:
        """x / y by ``div.full.f32``: 2 ulp over the full range and no branch (``times_sigmoid`` says
        why not ``arith.divf``'s ``div.rn``)."""
        return self.ir.let(hint, f'llvm.inline_asm "div.full.f32 $0, $1, $2;", "=f,f,f" {x}, {y} : (f32, f32) -> f32')

    def times_sigmoid(self, x: str, z: str) -> str:
        """x * sigmoid(z) = x / (1 + 2^(-z*log2 e)) by ``div.full.f32`` (2 ulp over the full range, no
        branch): an IEEE division (``div.rn``) branches to a slow path for extreme denominators (from
        about 2^126: z below about -87, a GELU's x below about -10), and on N(0, 1) x sqrt(K) data
        that path ran a GELU GEMM 3x longer (bench/NOTES.md, 2026-12-05); ``rcp.approx`` + a multiply
        measured as fast but let ptxas interleave elements until a ragged ping-pong register epilogue
        spilled.  A denominator of +inf gives y = 0, the limit."""
        ir = self.ir
        e = self.exp2(ir.let("neg_z_log2e", f"arith.mulf {z}, {self.fconst(-_LOG2E)} : f32"))
        den = ir.let("den", f"arith.addf {e}, {self.fconst(1.0)} : f32")
        return self.divide(x, den, "y")

    def activation(self, x: str) -> str:
        ir, act = self.ir, self.p.activation
        if act == "none":
            return x
        if act == "relu":
            return ir.let("relu", f"arith.maxnumf {x}, {self.fconst(0.0)} : f32")
        if act == "silu":
            return self.times_sigmoid(x, x)
        if act == "gelu_erf":             # exact: 0.5 x (1 + erf(x / sqrt 2))
            u = ir.let("erf_in", f"arith.mulf {x}, {self.fconst(_SQRT_HALF)} : f32")
            e = ir.let("erf", f"math.erf {u} : f32")
            half = ir.let("half_x", f"arith.mulf {x}, {self.fconst(0.5)} : f32")
            return ir.let("gelu", f"math.fma {half}, {e}, {half} : f32")
        # gelu, tanh approximation: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        x2 = ir.let("x2", f"arith.mulf {x}, {x} : f32")
        x2c = ir.let("x2c", f"arith.mulf {x2}, {self.fconst(0.044715)} : f32")
        poly = ir.let("poly", f"arith.addf {x2c}, {self.fconst(1.0)} : f32")
        xp = ir.let("xpoly", f"arith.mulf {x}, {poly} : f32")
        z = ir.let("two_u", f"arith.mulf {xp}, {self.fconst(2.0 * _GELU_C)} : f32")
        return self.times_sigmoid(x, z)

    def to_out(self, x: str) -> str:
        if self.O == "f32":
            return x
        return self.ir.let("out", f"arith.truncf {x} : f32 to {self.O}")

    def epilogue_args(self) -> list[str]:
        """The kernel's arguments after C: the problem's ``epilogue_operands`` (bias, R, P)."""
        p = self.p
        return (([f"%bias: {self.btype}"] if p.bias else []) + ([f"%R: {self.rtype}"] if p.residual else [])
                + ([f"%P: {self.rtype}"] if p.preactivation else []))

    def finish(self, x: str, residual: str | None) -> tuple[str, str | None]:
        """(C's value, P's value or None) of one accumulator ``x`` with the bias added: C = act(x) + R
        and P = x (``preactivation``), each converted to the output type; under ``round_through``
        act(x) is rounded to the 16-bit type first (the cast epilogue); under ``activation_grad``
        C = x * act'(R) (``nova/kernels/activations.py``'s formula)."""
        pre = self.to_out(x) if self.p.preactivation else None
        if self.p.activation_grad:               # C = x * act'(R): the activation's backward at R
            return self.to_out(activations.gelu_tanh_backward(_F32(self), x, residual)), pre
        y = self.activation(x)
        if self.p.round_through:
            narrow = self.ir.let("c_narrow", f"arith.truncf {y} : f32 to {self.p.round_through}")
            y = self.ir.let("c_wide", f"arith.extf {narrow} : {self.p.round_through} to f32")
        if residual is not None:
            y = self.ir.let("c_res", f"arith.addf {y}, {residual} : f32")
        return self.to_out(y), pre

    def load_residual(self, row, cols, row_ok, pair: bool, first_slice) -> list[str]:
        """R[row, cols[0..1]] in FP32: one 2-element load when ``pair`` (as C's pair store: N even,
        both columns in or out of bounds together), else one load per column.  An element outside C
        reads R[0, 0] instead (its store is skipped); under split-K only slice 0 adds R, as the bias."""
        return self.widen_residual(self.load_residual_raw(row, cols, row_ok, pair), first_slice)

    def load_residual_raw(self, row, cols, row_ok, pair: bool):
        """``load_residual``'s loads alone: the pair as loaded (``vector<2xR>``, one register for a
        16-bit R) or the two elements; ``widen_residual`` makes them FP32 where they are used."""
        ir, p, R = self.ir, self.p, self.p.out_dtype

        def clamp(ok, x):
            return x if ok is True else ir.select(ok, x, 0, hint="r_index")
        row = clamp(row_ok, row)
        if pair:
            ok = ir.cmp("slt", cols[0], p.N, "r_col_ok") if self.ragged["n"] else True
            return ir.let("r_pair", f"vector.load {self.at('R', row, clamp(ok, cols[0]))} "
                                    f"{{alignment = {2 * p.out_bytes}}} : {self.rtype}, vector<2x{R}>")
        vals = []
        for col in cols:
            ok = ir.cmp("slt", col, p.N, "r_col_ok") if self.ragged["n"] else True
            vals.append(ir.let("r", f"memref.load {self.at('R', row, clamp(ok, col))} : {self.rtype}"))
        return vals

    def widen_residual(self, raw, first_slice) -> list[str]:
        """R's two FP32 values from ``load_residual_raw``'s result (under split-K zero but in slice 0)."""
        ir, R = self.ir, self.p.out_dtype
        vals = raw
        if isinstance(raw, str):
            vals = [ir.let("r", f"vector.extract {raw}[{d}] : {R} from vector<2x{R}>") for d in (0, 1)]
        if R != "f32":
            vals = [ir.let("r_f32", f"arith.extf {v} : {R} to f32") for v in vals]
        if first_slice is not None:
            vals = [ir.select(first_slice, v, self.fconst(0.0), ty="f32", hint="r") for v in vals]
        return vals

    def epilogue(self, accs):
        ir, s, p = self.ir, self.s, self.p
        ir.comment("---- epilogue: lane holds rows (g, g+8) x cols (2t, 2t+1) of each 16x8 MMA tile")
        tm, tn = s.mma_tiles_m, s.mma_tiles_n
        row_base = ir.add(ir.add(self.m0, self.wm0), self.g, "out_row0")
        col_base = ir.add(ir.add(self.n0, self.wn0), ir.mul(self.t, 2), "out_col0")
        pair_store = s.split_k == 1 and s.vector_c >= 2 and p.N % 2 == 0
        first_slice = None
        if (p.bias or p.residual) and self.slice_id is not None:
            first_slice = ir.cmp("eq", self.slice_id, 0, "first_slice")
        # bias (per column, shared by all MMA rows)
        biases = {}
        for j in range(tn):
            cols = [ir.add(col_base, j * s.mma.n + d, "out_col") for d in (0, 1)]
            biases[j] = (cols, [self.load_bias(c, first_slice) for c in cols] if p.bias else None)
        for i in range(tm):
            for half in (0, 1):
                row = ir.add(row_base, i * s.mma.m + 8 * half, "out_row")
                row_ok = ir.cmp("slt", row, p.M, "row_ok") if self.ragged["m"] else True
                # the row's R loaded before its stores (C may be R's storage: nothing moves a load
                # above an earlier store, and a load just before its store waits a memory latency)
                loaded = [self.load_residual(row, biases[j][0], row_ok, pair_store, first_slice) if p.residual
                          else None for j in range(tn)]
                for j in range(tn):
                    cols, bias = biases[j]
                    res = loaded[j]
                    vals, pres = [], []
                    for d in (0, 1):
                        x = ir.let("c", f"vector.extract {accs[i * tn + j]}[{half}, {d}] : f32 from vector<2x2xf32>")
                        if bias:
                            x = ir.let("c_bias", f"arith.addf {x}, {bias[d]} : f32")
                        val, pre = self.finish(x, res[d] if res else None)
                        vals.append(val)
                        pres.append(pre)
                    self.store_two(vals, row, cols, row_ok, pair_store)
                    if p.preactivation:
                        self.store_two(pres, row, cols, row_ok, pair_store, "P")

    def load_bias(self, col, first_slice):
        ir, p = self.ir, self.p
        ok = ir.cmp("slt", col, p.N, "bias_ok") if self.ragged["n"] else True
        safe = ir.select(ok, col, 0, hint="bias_col")
        b = ir.let("bias", f"memref.load %bias[{ir.v(safe)}] : {self.btype}")
        if self.BT != "f32":
            b = ir.let("bias_f32", f"arith.extf {b} : {self.BT} to f32")
        if first_slice is not None:   # split-K: only slice 0 adds the bias
            b = ir.select(first_slice, b, self.fconst(0.0), ty="f32", hint="bias")
        return b

    def store_two(self, vals, row, cols, row_ok, pair: bool, name: str = "C"):
        """C[row, cols[0..1]] = vals (or P's, ``name``): one 2-element store when ``pair`` (N even:
        both columns are in bounds together and 2-element aligned), else two guarded element stores."""
        ir, p = self.ir, self.p
        if pair:
            ok = ir.and_(row_ok, ir.cmp("slt", cols[0], p.N, "col_ok") if self.ragged["n"] else True)
            self.ir.guarded(ok, lambda: self.store_pair(vals, row, cols[0], name))
        else:
            for d in (0, 1):
                ok = ir.and_(row_ok, ir.cmp("slt", cols[d], p.N, "col_ok") if self.ragged["n"] else True)
                self.ir.guarded(ok, lambda d=d: self.store_one(vals[d], row, cols[d], name))

    def store_one(self, val, row, col, name: str = "C"):
        ir = self.ir
        if self.s.split_k > 1:     # only C: a problem with P has an activation, so K is not split atomically
            ir.let("old", f"memref.atomic_rmw addf {val}, {self.at('C', row, col)} : "
                          f"({self.O}, {self.ctype}) -> {self.O}")
        else:
            ir.emit(f"memref.store {val}, {self.at(name, row, col)} : {self.operand_type(name)}")

    def store_pair(self, vals, row, col, name: str = "C"):
        ir = self.ir
        vec = ir.let("pair", f"vector.from_elements {vals[0]}, {vals[1]} : vector<2x{self.O}>")
        ir.emit(f"vector.store {vec}, {self.at(name, row, col)} {{alignment = {2 * self.p.out_bytes}}} : "
                f"{self.operand_type(name)}, vector<2x{self.O}>")


class _F32:
    """``activations.Arith`` over a GEMM kernel's FP32 epilogue (the shared formulas of
    ``nova/kernels/activations.py``; tanh from ``ex2`` and a division, ``tanh``)."""

    def __init__(self, kernel):
        self.ir, self.k = kernel.ir, kernel

    def add(self, a, b):
        return self.ir.let("e", f"arith.addf {a}, {b} : f32")

    def sub(self, a, b):
        return self.ir.let("e", f"arith.subf {a}, {b} : f32")

    def mul(self, a, b):
        return self.ir.let("e", f"arith.mulf {a}, {b} : f32")

    def tanh(self, a):
        """tanh(a) = 1 - 2 / (1 + 2^(2a log2 e)) (``ex2.approx`` and ``div.full``, each a few ulp: an
        absolute error of a few 1e-7, all the GELU's backward needs from it).  ``math.tanh``'s
        polynomial with its range selects took more registers than a ping-pong consumer with R
        had (ptxas spilled the BF16 dgrad GEMM of an MLP)."""
        k = self.k
        e = k.exp2(self.mul(a, k.fconst(2.0 * _LOG2E)))
        den = self.add(e, k.fconst(1.0))
        return self.sub(k.fconst(1.0), k.divide(k.fconst(2.0), den, "e"))

    def const(self, value):
        return self.k.fconst(value)


def build_gemm_module(problem: GemmProblem, schedule: Schedule, *, fragment_prefetch: bool = False) -> str:
    """MLIR text (gpu/nvgpu/scf/memref/arith/vector dialects) of the ``nova_gemm`` kernel.

    ``fragment_prefetch`` loads each k-step's fragments one k-step ahead, across the K-tile
    barrier (register double buffering).  Off by default: it costs ~30-40% more registers
    (e.g. 128 -> 171 for tf32 128x128x32 / 8 warps), which halves occupancy; see the report."""
    check_supported(problem, schedule)
    return GemmKernel(problem, schedule, fragment_prefetch).build()
