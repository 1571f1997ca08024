"""Hopper GEMM kernel builder: TMA + mbarrier ring + ``wgmma``, warp-specialized, persistent.

``(GemmProblem, Schedule with mma.family == "wgmma") -> MLIR text`` for sm_90a.

Design (each point is a decision; the configurator's ``hopper.py`` explains the numbers):

Every number the kernel and its launch depend on comes from the schedule (``schedule.hopper``,
decided by ``nova/kernels/gemm/hopper.py``): the operand roles and TMA boxes, the setmaxnreg
targets, the shared-memory ring, the grid.  Nothing here knows the target.

* **Roles.**  ``1 + consumer_warpgroups`` warpgroups of 128 threads.  Warpgroup 0 is the producer:
  it gives registers back (``setmaxnreg.dec`` to ``hopper.producer_regs``) and one thread issues
  the TMA loads; the consumer warpgroups take them (``setmaxnreg.inc`` to ``hopper.consumer_regs``)
  and each computes a 64 x block_n slab of the block tile with ``wgmma.mma_async.m64nNk{8,16}``.
* **Ring.**  ``stages`` slots of (A tile block_m x BK, B tile block_n x BK), BK = 128 bytes of K,
  each a TMA box stored with the 128-byte swizzle that the wgmma descriptors (layout type 1,
  SBO 1024 B) read.  ``full[s]`` (count 1 + transaction bytes) says a slot landed; ``empty[s]``
  (one arrival per consumer warp) says every consumer's wgmma on it completed.  Consumers keep one
  wgmma group in flight (``wait_group 1``) and release the previous slot.
* **Persistent grid.**  ``hopper.ctas`` (min(work units, SMs)) CTAs walk the output tiles
  ``tile = blockIdx.x + i * gridDim.x`` in group-M order; the ring's phase runs on across tiles, so the producer prefetches
  the next tile's K panels while the consumers run the epilogue of the current one.
* **Operands** (``hopper.operands``).  wgmma reads TF32 only K-major from shared memory: an
  MN-major TF32 operand is loaded from its TMA tile into registers (the wgmma A operand, swapping
  to C^T = B^T A^T for row-major B); 16-bit MN-major tiles are read by the descriptor's transpose
  bit.  When TMA cannot read an operand (rows not 16-byte aligned) or TF32 has two MN-major
  operands, a small *operand-prep* kernel writes a K-major, K-padded copy into a workspace first.
* **TF32 rounding.**  ``problem.tf32_rounding == "rna"`` (default): the tensor maps of FP32
  operands use ``CU_TENSOR_MAP_DATA_TYPE_TFLOAT32``, and the TMA unit rounds each element to
  nearest TF32 while it copies (measured on the H200: relative error 2.940e-4 on raw FP32 data, the
  same as ``cvt.rna`` and cuBLAS; with a FLOAT32 map 7.78e-4), at no cost in speed (393 vs 384
  TFLOP/s at 4096^3).  So rounding costs nothing in the kernel: no shared-memory pass, no registers.
  "truncate" (``tf32_fast``) uses a FLOAT32 map and lets the tensor core truncate (~2.6x the
  error).  The operand-prep kernel can also round (``cvt.rna``) but only does so when the operand
  plan asks (``operand_plan(prep_rounds=True)``, the v0.2 experiment that measured the prep cost).
* **Batched** (``problem.batch`` > 1).  A work unit is (batch element, tile): unit u is tile
  u % tiles of element u / tiles (group-M within an element).  A batched operand's tensor map is
  3-D (its box ``[1, rows, cols]``, the element the outer coordinate; ``OperandRole.batch``), a
  broadcast one the 2-D map of its one matrix; C is a 3-D memref with its batch stride (register
  epilogue) or a 3-D tensor map (TMA store).  K is never split with a batch.  The prep kernel
  transposes/pads every matrix of a batched operand into a packed workspace.
* **Edges.**  TMA zero-fills out-of-bounds rows and the K tail; the register epilogue stores with
  predicates on the ragged M/N edges (the TMA store clips them).  Bias, activation and the output
  conversion are fused into the epilogue.
* **Epilogue** (``hopper.epilogue``).  "registers": each thread stores its accumulators into C
  (predicated) between tiles.  "tma_store": each consumer warpgroup writes its 64 x N slab into
  shared memory one 8 KB step at a time (``hopper.box_c``: a [64 x 128 B] box of C, or, swapped,
  boxes of C's rows side by side along N), 128-byte swizzled, in two buffers after the ring; per
  step its elected thread first waits until the store that last read the buffer has read it
  (``cp.async.bulk.wait_group.read 1``), the warpgroup syncs on its named barrier (id 1 + its
  index; the kernel's ``gpu.barrier`` is id 0), writes, fences the async proxy, syncs again, and
  the elected thread issues the step's TMA store(s) and commits a bulk group.  The consumers then
  go on to the next tile while the stores drain; ``wait_group 0`` before the kernel exits.  A
  pre-activation output P (the same box, its own tensor map) takes a staging step of its own before
  C's; a residual R is read by each thread from global memory at the elements it writes, a step's
  loads issued before the step's barriers (cooperative: a step ahead), after every thread asked L2
  for its share of the tile's R lines (``prefetch.global.L2``) before the tile's K loop.  The
  register -> shared writes are bank-conflict-free: where a warp's lanes would meet in a bank, a
  lane writes its items in a rotated order (``staging_rotation``: slot i holds item i ^ q).
* **Clusters** (``schedule.cluster_m`` x ``cluster_n``, hopper.py step 12; 1-D: 2x1, 1x2, up to 8).
  The kernel carries the shape (``nvvm.cluster_dim`` -> PTX ``.reqnctapercluster``), so a plain
  launch of ``hopper.ctas`` CTAs (a multiple of the cluster size) forms the clusters: no launch
  attribute, CUDA graphs unchanged.  Each cluster walks *cluster units* (cluster tiles of ci x cj
  tiles, x K slices; ``group_m`` counts cluster-tile rows) from ``%clusterid.x`` in steps of
  ``%nclusterid.x``, and each CTA computes the tile at its ``%cluster_ctarank`` along the cluster,
  so all CTAs of a cluster run the same units and K tiles.  The CTAs along M share B's
  tile (along N, A's): the shared tile's TMA boxes are split into cluster-size slices
  (``schedule.multicast``, ``hopper.tma_box``) and CTA r loads slice r with
  ``cp.async.bulk.tensor ... .multicast::cluster`` (mask = every CTA), so it lands at the same
  offset in each CTA and signals each one's ``full[s]``, which still expects the whole stage's
  bytes (a peer's bytes may come before the local expect_tx: the tx-count goes negative, the
  producer's arrival keeps the phase open).  A CTA's slot may be overwritten only when the
  consumers of every CTA its producer writes into are done with it, and every producer of the
  cluster writes into it: ``empty[s]`` counts 4 x warpgroups x cluster-size arrivals, and lane r of
  each consumer warp releases a slot on the ``empty[s]`` of the CTA of rank r (``mapa`` +
  ``mbarrier.arrive.shared::cluster``, CTA-scope release).  Cluster barriers (``barrier.cluster.arrive``
  release + ``wait`` acquire, after ``fence.mbarrier_init.release.cluster``) replace the CTA
  barrier after the mbarrier init (no multicast or remote arrive before every peer's barriers
  exist) and end the kernel (no CTA exits while a peer can still arrive on its barriers).  A tile
  of a ragged cluster tile may lie wholly outside C: it loads (TMA zero-fills; its slice of the
  shared tile feeds its peers) and computes, and stores nothing (the register epilogue's
  predicates count C's edge in cluster tiles; the TMA store skips boxes wholly outside C; the
  split-K workspace's rows are predicated the same way).
* **Ping-pong consumers** (``schedule.consumers == "pingpong"``, hopper.py's consumers step; as
  CUTLASS's ``KernelTmaWarpSpecializedPingpong``).  The two consumer warpgroups compute *different*
  work units: the CTA's units (its walk ``bid, bid + G, ...``, index j) alternate, warpgroup w taking
  j = w, w + 2, ...; each computes the whole tile (``tile_slabs`` 64-row slabs x N: one accumulator
  set and one wgmma per slab and k-step) and runs its own epilogue, which overlaps the other
  warpgroup's K loop.  The producer is unchanged: it loads the units in the CTA's order, so unit j's
  K tiles are ring iterations j x ktiles .. (j + 1) x ktiles - 1 (every unit streams all of K: no
  split-K, no stream-K), and warpgroup w's loop starts at it = w x ktiles and skips the other's
  ktiles after each unit.  ``empty[s]`` counts the 4 warps of one warpgroup (only one reads a slot).
  The TMA-store epilogue keeps one pair of staging buffers per warpgroup (their stores may overlap).

  Why the K loops must be ordered (named barriers ``PINGPONG_ORDER_BARRIER + w``: warpgroup w
  ``bar.sync``s on its own before unit j > 0, the other ``bar.arrive``s on it after waiting for every
  K tile of unit j - 1, 256 threads in all; an arrival only where the CTA has a unit j + 1, so no
  barrier is left half-complete at exit).  ``try_wait.parity(r & 1)`` on ``full[s]`` passes once the
  phase of that parity completed: if the barrier had completed only r - 1 phases (it is one behind),
  the phase of parity r & 1 it sees completed is r - 2, and the wait passes on a slot whose round r
  has not landed (a stale slot: wrong results); if it had completed r + 1 (one ahead) the wait would
  block for ever.  A waiter on ring iteration i (round r = i / S) is safe exactly when round r - 1
  of slot s (iteration i - S) has completed and round r + 1 has not.  The second holds in any
  order: iteration i + S is loaded only after empty[s] saw iteration i's release, which follows the
  wait.  The first needs the ordering: without it, warpgroup 1 could wait on unit 1's iteration i
  = ktiles + x while iteration i - S, of unit 0 (when S > x), has not landed yet, e.g. S = 4,
  ktiles = 8: iteration 8 waits on slot 0 round 2 while round 1 (iteration 4) is still in flight.
  With the ordering, unit j's owner starts waiting only after unit j - 1's owner has seen every
  full phase of unit j - 1 complete, and transitively of every earlier unit, so every iteration
  before j x ktiles has landed, and within its own unit it waits in order.  Empty phases cannot mix
  either: iteration i + S's consumer releases only after i + S landed, which needed iteration i's
  release (tests/test_hopper_pingpong.py runs this protocol under random interleavings, and shows
  the unordered variant reading stale slots).
"""
from __future__ import annotations

from nova.codegen import CodegenError
from nova.codegen.builder import SMEM, Ir
from nova.codegen.nvgpu import (KMAJOR_LEADING_BYTE_OFFSET, SM90A, SWIZZLE_BYTES, WARPGROUP_THREADS,
                                aligned_dynamic_shared_memory, descriptor, descriptor_high_bits,
                                descriptor_high_constant, descriptor_start, fence_mbarrier_init,
                                fence_proxy_async_shared, mbarrier_group_type, mbarrier_try_wait, mbarrier_wait_ticks,
                                named_barrier_arrive, named_barrier_sync, setmaxnreg, slot_phase, wgmma_attributes,
                                wgmma_commit_group, wgmma_fence, wgmma_wait_group)
from nova.dtypes import MODES
from nova.kernels.gemm.emit_ampere import RESERVED_NAMES, GemmKernel, batched_memref
from nova.kernels.gemm.hopper import PREP_THREADS, PREP_TILE  # the prep pass's geometry (its time model's)
from nova.kernels.gemm.hopper import (PINGPONG_MIN_STAGES, PINGPONG_ORDER_BARRIER, PINGPONG_SLABS,  # rules
                                      STAGING_BUFFERS, STAGING_STEP_BYTES, atomic_split_blocker,  # the schedule
                                      c_box, cluster_blocker, cluster_extents, cluster_units,     # must follow
                                      output_vector, pingpong_blocker, pingpong_ring_cap, staging_bytes,
                                      tma_store_blocker, workspace_vector)
from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.gemm.schedule import CONSUMER_SCHEDULES, EPILOGUES, SPLIT_REDUCTIONS, OperandPrep, Schedule

KERNEL_NAME = "nova_gemm"
PREP_NAME = "nova_prep"
REDUCE_NAME = "nova_split_reduce"
ARCH = SM90A
WG = WARPGROUP_THREADS
SLAB_M = 64                 # wgmma M
PREFETCH_LINE_BYTES = 128     # the L2 line a prefetch.global.L2 asks for (R's lines before a tile's K loop)
EPILOGUE_PREFETCH_BLOCKS = 4   # [EST] column blocks of 8 whose bias and R a thread loads before their stores
                               # (24 values; 8 spilled a ping-pong consumer with ragged edges: ptxas checks):
                               # the H100 ran 16384x512x512 +bias+residual at 2.05x its prediction loading
                               # them a block at a time
CLUSTER_EXPERIMENTS = ("local_loads", "local_all")   # build_hopper_module(cluster_experiment=...): probes only
_KSTEP = {m: e.mma_k for m, e in MODES.items()}         # nova/dtypes.py
_WG_TYPE = {m: e.name for m, e in MODES.items()}


def _cdiv(a, b):
    return -(-a // b)


def check_supported(problem: GemmProblem, s: Schedule) -> None:
    what = f"{problem.describe()} on {s.arch}"

    def fail(msg):
        raise CodegenError(f"cannot generate {what} with the Hopper kernel: {msg}")

    if s.mma.family != "wgmma":
        fail(f"MMA family {s.mma.family!r} (this builder generates wgmma)")
    if s.arch != ARCH:
        fail(f"arch {s.arch!r}; wgmma needs {ARCH}")
    if s.hopper is None:
        fail("the schedule has no Hopper plan (schedule.hopper)")
    h = s.hopper
    ops = h.operands
    if s.swap_ab and ops.role(ops.x).feed != "regs":
        fail("a swapped kernel feeds B^T from registers")
    # wgmma rows (64 per consumer warpgroup, the warps) run along M, or along N when swapped
    rows, rows_name, cols, cols_name = ((s.block_n, "block_n", s.block_m, "block_m") if s.swap_ab
                                        else (s.block_m, "block_m", s.block_n, "block_n"))
    if s.mma.k != _KSTEP[problem.dtype] or s.mma.m != SLAB_M or s.mma.n != cols:
        fail(f"mma shape m{s.mma.m}n{s.mma.n}k{s.mma.k}: need m64n{cols}k{_KSTEP[problem.dtype]}")
    if not (8 <= cols <= 256 and cols % 8 == 0):
        fail(f"{cols_name}={cols}: wgmma N is a multiple of 8 in [8, 256]")
    if s.consumers not in CONSUMER_SCHEDULES:
        fail(f"consumers {s.consumers!r}; one of {', '.join(CONSUMER_SCHEDULES)}")
    if s.pingpong:
        blocker = pingpong_blocker(problem, s.consumer_warpgroups, s.split_k,
                                   "stream_k" if s.stream_k else s.split_reduction, (s.cluster_m, s.cluster_n),
                                   s.persistent)
        if blocker:
            fail(f"ping-pong consumers: {blocker}")
        if not PINGPONG_MIN_STAGES <= s.stages <= pingpong_ring_cap(problem):
            fail(f"ping-pong consumers: a ring of {s.stages} stages for {pingpong_ring_cap(problem)} K tiles a unit "
                 f"(hopper.pingpong_ring_cap: only {PINGPONG_MIN_STAGES} stages up to the K tiles computed right "
                 "on the H100)")
        if rows % SLAB_M or rows // SLAB_M not in PINGPONG_SLABS:
            fail(f"{rows_name}={rows}: a ping-pong warpgroup's tile is 64 x one of {PINGPONG_SLABS} rows")
    elif s.consumer_warpgroups < 1 or rows != SLAB_M * s.consumer_warpgroups:
        fail(f"{rows_name}={rows} must be 64 x consumer_warpgroups ({s.consumer_warpgroups})")
    warps = (s.warps_n, s.warps_m) if s.swap_ab else (s.warps_m, s.warps_n)
    if s.producer_warps != 4 or warps != (4 * s.consumer_warpgroups, 1):
        fail("the warp layout must be one producer warpgroup + 4 warps per consumer warpgroup along the wgmma rows")
    if h.epilogue not in EPILOGUES:
        fail(f"epilogue {h.epilogue!r}; one of {', '.join(EPILOGUES)}")
    if (problem.residual or problem.preactivation) and s.stream_k:
        fail("stream-K with a residual or a pre-activation output (its segments store C alone)")
    if h.tma_store:
        blocker = tma_store_blocker(problem, s.swap_ab, s.split_k, cols)
        if blocker:
            fail(f"TMA-store epilogue: {blocker}")
        if h.box_c != c_box(problem, s.swap_ab):
            fail(f"C's TMA box {h.box_c}: the staging steps are {c_box(problem, s.swap_ab)}")
    elif h.box_c is not None:
        fail("a C box without the TMA-store epilogue")
    if h.ring.staging != staging_bytes(s.consumer_warpgroups, h.epilogue):
        fail(f"ring staging {h.ring.staging} B: the {h.epilogue} epilogue of {s.consumer_warpgroups} consumer "
             f"warpgroup(s) stages {staging_bytes(s.consumer_warpgroups, h.epilogue)} B")
    stores = output_vector(problem, s.swap_ab, s.split_k, s.split_reduction, h.epilogue)
    if s.vector_c != stores:
        fail(f"vector_c={s.vector_c}: C is stored {stores} elements at a time ({h.epilogue})")
    per_row = SWIZZLE_BYTES // problem.in_bytes
    cluster = (s.cluster_m, s.cluster_n)
    blocker = cluster_blocker(problem, s, cluster)
    if blocker:
        fail(f"cluster {s.cluster_m}x{s.cluster_n}: {blocker}")
    for op in ("a", "b"):
        extent, box = (s.block_m if op == "a" else s.block_n), h.box(op)
        slices = s.multicast[1] if s.multicast and s.multicast[0] == op else 1     # a multicast tile: one slice per CTA
        if ops.role(op).major == "mn" and extent % per_row:
            fail(f"an MN-major {op.upper()} tile of {extent} is not a whole number of 128-byte boxes")
        covers = ((box.rows * box.count, box.count) == (extent, slices) if ops.role(op).major == "k"
                  else box.rows == s.block_k and box.cols * box.count == extent)
        if box.cols != per_row or not covers:
            fail(f"TMA box {box} of {op.upper()} does not cover its {extent}-wide {ops.role(op).major}-major tile "
                 "in 128-byte rows")
    if s.block_k * problem.in_bytes != SWIZZLE_BYTES:
        fail(f"block_k={s.block_k}: one 128-byte swizzle row of K ({SWIZZLE_BYTES // problem.in_bytes} elements)")
    if s.smem_layout != "swizzle128":
        fail(f"smem_layout {s.smem_layout!r}: the wgmma path uses 'swizzle128'")
    if s.split_k < 1:
        fail(f"split_k={s.split_k}")
    if s.split_reduction not in SPLIT_REDUCTIONS:
        fail(f"split reduction {s.split_reduction!r}; one of {', '.join(SPLIT_REDUCTIONS)}")
    if s.split_k > 1:
        blocker = atomic_split_blocker(problem)
        if s.split_reduction == "atomic" and blocker:
            fail(f"split-K with FP32 atomics: {blocker} (use the workspace reduction)")
        per = _cdiv(_cdiv(problem.K, s.block_k), s.split_k)
        if (s.split_k - 1) * per >= _cdiv(problem.K, s.block_k):
            fail(f"split_k={s.split_k} leaves a K slice empty ({_cdiv(problem.K, s.block_k)} K tiles)")
    if s.stages < 2:
        fail(f"stages={s.stages}")
    if (h.ring.x_bytes, h.ring.y_bytes) != (rows * SWIZZLE_BYTES, cols * SWIZZLE_BYTES):
        fail(f"ring stage {h.ring}: a stage holds the {rows}- and {cols}-row tiles of 128 bytes")
    if s.smem_bytes < h.ring.size(s.stages):
        fail(f"smem_bytes={s.smem_bytes} < {h.ring.size(s.stages)} needed by {s.stages} stages"
             + (f" and {h.ring.staging} B of staging" if h.ring.staging else ""))
    if not h.producer_regs <= s.regs_per_thread <= h.consumer_regs:
        fail(f"registers at entry ({s.regs_per_thread}) must lie between the producer's setmaxnreg target "
             f"({h.producer_regs}) and the consumers' ({h.consumer_regs})")
    check_batch(problem, s, fail)
    units = _cdiv(problem.M, s.block_m) * _cdiv(problem.N, s.block_n) * s.split_k * problem.batch
    if s.stream_k:
        check_stream_k(problem, s, fail)
    elif cluster != (1, 1):                  # whole clusters, each walking cluster units (ragged ones padded)
        size = s.cluster_m * s.cluster_n
        per = cluster_units(_cdiv(problem.M, s.block_m), _cdiv(problem.N, s.block_n), s.split_k, cluster)
        if h.ctas % size or not size <= h.ctas <= per * size:
            fail(f"grid of {h.ctas} CTAs for {per} units of {s.cluster_m}x{s.cluster_n} clusters")
    elif not 1 <= h.ctas <= units or (not s.persistent and h.ctas != units):
        fail(f"grid of {h.ctas} CTAs for {units} work units ({'persistent' if s.persistent else 'one per CTA'})")


def check_stream_k(problem: GemmProblem, s: Schedule, fail) -> None:
    """A stream-K schedule (``Schedule.stream_k``): unbatched, no split-K, a persistent 1x1 grid of
    at most one CTA per stream-K iteration, the register epilogue."""
    if problem.batch > 1:
        fail(f"stream-K with a batch of {problem.batch}: the batched walk covers whole tiles")
    if s.split_k != 1:
        fail(f"stream-K with split_k={s.split_k}: the stream-K walk replaces the K slices")
    if not s.persistent or s.cluster_m * s.cluster_n != 1:
        fail("stream-K runs on a persistent grid of single CTAs (no cluster)")
    if s.hopper.tma_store:
        fail("stream-K keeps the register epilogue (a segment stores C or an FP32 partial tile)")
    tiles = _cdiv(problem.M, s.block_m) * _cdiv(problem.N, s.block_n)
    try:
        s.stream_k_plan(problem.M, problem.N, problem.K)
    except ValueError:
        fail(f"stream-K over {s.stream_k_tiles} of {tiles} tiles x {_cdiv(problem.K, s.block_k)} K tiles on "
             f"{s.hopper.ctas} CTAs: 1 <= stream-K tiles <= tiles and 1 <= CTAs <= their K-tile iterations")


def check_batch(problem: GemmProblem, s: Schedule, fail) -> None:
    """A batched problem's schedule: no split-K, and each operand's tensor map covers the batch as
    the operand plan says (3-D over every matrix with a 16-byte batch stride, or a 2-D map of one)."""
    if problem.batch > 1 and s.split_k > 1:
        fail(f"split_k={s.split_k} with a batch of {problem.batch}: batched GEMMs do not split K")
    for op in ("a", "b"):
        role = s.hopper.operands.role(op)
        prep_batch = role.prep.batch if role.prep else role.batch
        if role.batch not in (1, problem.batch) or prep_batch != role.batch or \
                (role.batch > 1) != (role.batch_stride > 0):
            fail(f"{op.upper()}'s tensor map covers {role.batch} matrices {role.batch_stride} elements apart "
                 f"(prep: {prep_batch}); the problem has a batch of {problem.batch}")
        if role.batch_stride * problem.in_bytes % 16:
            fail(f"{op.upper()}'s batch stride {role.batch_stride} is not a multiple of 16 bytes (TMA)")


# ----------------------------------------------------------------------------------------------
# Where the TMA boxes of an operand's tile go (the producer's loads; tests/test_hopper_cluster.py
# checks, on integers, that a cluster's CTAs together write what the 1x1 kernel writes).  ``ir``
# is an Ir (index values, or plain ints that it folds).
# ----------------------------------------------------------------------------------------------
def boxes_per_cta(box, shared: bool, csize: int) -> int:
    """Boxes of a tile one CTA loads: all of them, or its slice of a tile its cluster shares."""
    return box.count // csize if shared else box.count


def box_index(ir, shared: bool, rank, per: int, q: int):
    """Index (along the tile) of the q-th box this CTA loads: q, or rank x per + q of a shared tile."""
    return ir.add(ir.mul(rank, per), q, "box") if shared else q


def box_smem_offset(ir, box, c):
    """Byte offset of box c from its tile's start in the ring slot: the boxes are stacked whole,
    ``box.rows`` rows of 128 bytes each (K-major: rows of M/N; MN-major: BK rows of K, so box c is
    the c-th 128-byte column block along M/N, where the descriptor's LBO = BK x 128 B puts it)."""
    return ir.mul(c, box.rows * SWIZZLE_BYTES, "box_off")


def box_coords(ir, major: str, box, c, r0, k0):
    """TMA coordinates (inner, outer) of box c of the tile at rows r0 (M/N) and K k0: K-major
    (k0, r0 + c x box.rows); MN-major (r0 + c x box.cols, k0)."""
    if major == "k":
        return k0, ir.add(r0, ir.mul(c, box.rows, "box_row"))
    return ir.add(r0, ir.mul(c, box.cols, "box_col")), k0


# ----------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------
class _HopperKernel:
    """The kernel in wgmma coordinates: rows ``i`` (64 per consumer warpgroup) and columns ``j``
    (wgmma N).  Not swapped: i = m, j = n, X = A, Y = B.  Swapped (``schedule.swap_ab``): the
    kernel computes C^T = B^T A^T, i = n, j = m, X = B, Y = A.  X is the wgmma A operand (shared
    memory, or registers for a 32-bit MN-major tile), Y the wgmma B operand (shared memory)."""
    # epilogue helpers shared with the mma.sync kernel (they only use self.ir, self.p, self.O, ...)
    fconst = GemmKernel.fconst
    exp2 = GemmKernel.exp2
    divide = GemmKernel.divide
    times_sigmoid = GemmKernel.times_sigmoid
    activation = GemmKernel.activation
    to_out = GemmKernel.to_out
    load_bias = GemmKernel.load_bias
    btype = GemmKernel.btype          # the bias memref type: the same epilogue ABI as mma.sync
    rtype = GemmKernel.rtype          # R's and P's: C's
    finish = GemmKernel.finish
    load_residual_raw = GemmKernel.load_residual_raw
    widen_residual = GemmKernel.widen_residual
    operand_type = GemmKernel.operand_type

    def __init__(self, p: GemmProblem, s: Schedule, wait_depth: int = 1, cluster_experiment: str | None = None,
                 masked_descriptors: bool = False):
        self.p, self.s = p, s
        self.masked_descriptors = masked_descriptors
        self.ir = Ir(RESERVED_NAMES)
        self.ir.reserve("tmA", "tmB", "tmC", "pC", "tmP", "pP", "tile", "kp", "it", "acc", "itc", "ktp", "itp")
        self.T = p.storage
        # split-K through a workspace: this kernel stores each slice's raw FP32 partial tile at rows
        # kslice * M + m of a [split_k * M, N] workspace; the reduction kernel does the epilogue
        self.partial = s.split_workspace
        self.O = "f32" if self.partial else p.out_dtype
        self.BT = p.bias_dtype
        self.wgs = s.consumer_warpgroups
        self.threads = WG * (1 + self.wgs)
        self.BK = s.block_k
        self.kstep = s.mma.k
        self.ktiles = _cdiv(p.K, self.BK)
        self.h = s.hopper
        self.ops = s.hopper.operands
        self.swap = s.swap_ab
        self.X, self.Y = self.ops.x, self.ops.y
        self.I, self.J = (p.N, p.M) if self.swap else (p.M, p.N)
        # ping-pong (Schedule.consumers): each warpgroup computes whole tiles of ``slabs`` 64-row slabs
        # (one accumulator set and one wgmma per slab and k-step); cooperative: one slab per warpgroup
        self.pingpong = s.pingpong
        self.slabs = s.tile_slabs if self.pingpong else 1
        self.tile_i, self.tile_j = SLAB_M * s.tile_slabs, s.mma.n
        self.x_bytes, self.stage = self.h.ring.x_bytes, self.h.ring.stage_bytes   # a ring slot: [X tile | Y tile]
        self.x_regs = self.ops.role(self.X).feed == "regs"
        self.nacc = self.tile_j // 2
        self.acc_t = "!llvm.struct<(" + ", ".join(["f32"] * self.nacc) + ")>"
        self.mb_t = mbarrier_group_type(s.stages)
        self.wait_depth = wait_depth
        # a tile may lie past C's edge where C is not whole (cluster) tiles: its stores are predicated
        self.ragged = {"m": p.M % (s.block_m * s.cluster_m) != 0, "n": p.N % (s.block_n * s.cluster_n) != 0}
        self.tma_store = self.h.tma_store
        # thread-block cluster (module docstring): ci x cj CTAs along the wgmma rows x wgmma N; the
        # multicast group is the whole (1-D) cluster
        self.ci, self.cj = cluster_extents((s.cluster_m, s.cluster_n), self.swap)
        self.csize = self.ci * self.cj
        self.shared_op = s.multicast[0] if s.multicast else None
        # experiments (CLUSTER_EXPERIMENTS; default None: the kernel above): "local_loads", each CTA
        # loads the whole shared tile itself (no multicast); "local_all", also releases only its own
        # slots (the 1x1 ring in a cluster launch, walking cluster tiles)
        if cluster_experiment not in (None,) + CLUSTER_EXPERIMENTS:
            raise CodegenError(f"cluster experiment {cluster_experiment!r}; one of {', '.join(CLUSTER_EXPERIMENTS)}")
        self.experiment = cluster_experiment if self.csize > 1 else None
        self.release_peers = self.csize > 1 and self.experiment != "local_all"
        # empty[s] arrivals: every consumer warp that reads the slot (ping-pong: one warpgroup's)
        self.arrivals = 4 * (1 if self.pingpong else self.wgs) * (self.csize if self.release_peers else 1)
        self.batch_index = None      # the work unit's batch element (batched problems: set by tile_loop)
        # stream-K (Schedule.stream_k): the walk's closed forms; while the consumers' epilogue of a
        # split tile's segment is emitted, C is the workspace %W (``c_arg``) at slot ``workspace_slot``
        self.sk = s.stream_k_plan(p.M, p.N, p.K) if s.stream_k else None
        self.segment = None          # (whole tile: i1, segment index) of the stream-K unit (set by tile_loop)
        self.c_arg, self.workspace_slot = "C", None
        if self.sk is not None:
            self.ir.reserve("W", "skt", "its")
        if self.slabs > 1:
            self.ir.reserve(*(f"acc{q}" for q in range(1, self.slabs)))

    def epilogue_args(self) -> list[str]:
        """The kernel's arguments after C (``GemmKernel.epilogue_args``: bias, R, P); with the
        TMA-store epilogue P is written as C is, through its tensor map (``%pP``)."""
        args = GemmKernel.epilogue_args(self)
        if self.tma_store and self.p.preactivation:
            args[-1] = "%pP: !llvm.ptr"
        return args

    @property
    def ctype(self) -> str:
        """The memref type of the kernel's output argument: C [M, N] ([batch, M, N] batched), or the
        split-K workspace."""
        if self.c_arg == "W":
            return self.wtype
        rows = self.s.split_k * self.p.M if self.partial else self.p.M
        return batched_memref(self.p, "c", rows, self.p.N, self.O)

    @property
    def wtype(self) -> str:
        """The memref type of the stream-K workspace: [slots x M, N] FP32."""
        return f"memref<{self.sk.slots * self.p.M}x{self.p.N}xf32>"

    def at(self, name, row, col) -> str:
        """``%C[(batch, )row, col]`` (GemmKernel's), or the stream-K workspace's ``%W[row, col]``."""
        if name == "C" and self.c_arg == "W":
            return f"%W[{self.ir.v(row)}, {self.ir.v(col)}]"
        return GemmKernel.at(self, name, row, col)

    def box_type(self, op):
        """Shared-memory type of one TMA box of ``op`` ("a", "b", "c"): ``[rows, cols]``, or
        ``[1, rows, cols]`` where the operand's tensor map is 3-D (batched)."""
        box = self.h.box(op)
        batched = self.h.operands.role(op).batch > 1 if op != "c" else self.p.batch > 1
        return f"memref<{'1x' if batched else ''}{box.rows}x{box.cols}x{self.O if op == 'c' else self.T}, {SMEM}>"

    def tma_coords(self, op, inner, outer) -> str:
        """The TMA coordinates of a box of ``op``: (inner, outer), and the batch element where the
        operand's tensor map is 3-D."""
        batched = self.h.operands.role(op).batch > 1 if op != "c" else self.p.batch > 1
        coords = [inner, outer] + ([self.batch_index] if batched else [])
        return ", ".join(self.ir.v(c) for c in coords)

    def tm_type(self, op):
        return (f"!nvgpu.tensormap.descriptor<tensor = {self.box_type(op)}, "
                "swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>")

    @property
    def c_box_type(self) -> str:
        return self.box_type("c")

    @property
    def c_tm_type(self) -> str:
        return (f"!nvgpu.tensormap.descriptor<tensor = {self.c_box_type}, "
                "swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none>")

    # ------------------------------------------------------------------------------------------
    def build(self) -> str:
        p, s, ir = self.p, self.s, self.ir
        ir.emit(f"// Nova Hopper GEMM: {p.describe()}")
        ir.emit(f"// block {s.block_m}x{s.block_n}x{s.block_k}, {self.wgs} consumer warpgroup(s) of "
                f"wgmma.m64n{self.tile_j}k{self.kstep}, {s.stages}-stage TMA ring, "
                f"{'persistent' if s.persistent else 'one tile per CTA'}, group_m {s.group_m}"
                + (", swapped (C^T = B^T A^T)" if self.swap else "")
                + f", A {self.ops.a.feed}, B {self.ops.b.feed}"
                + (", TMA-store epilogue" if self.tma_store else "")
                + (f", {s.cluster_m}x{s.cluster_n} cluster multicasting {self.shared_op.upper()}" if self.csize > 1 else "")
                + (f", experiment {self.experiment}" if self.experiment else "")
                + (f", stream-K over the last {self.sk.sk_tiles} tiles ({self.sk.slots} workspace slots)"
                   if self.sk is not None else "")
                + (f", ping-pong consumers ({self.tile_i}x{self.tile_j} per warpgroup, units alternately)"
                   if self.pingpong else ""))
        ir.emit(f"{SMEM} = #gpu.address_space<workgroup>")
        args = ["%pA: !llvm.ptr", "%pB: !llvm.ptr", "%pC: !llvm.ptr" if self.tma_store else f"%C: {self.ctype}"]
        if self.sk is not None:
            args.append(f"%W: {self.wtype}")
        if not self.partial:           # a split-K workspace's reduction kernel takes them instead
            args += self.epilogue_args()
        # registers at entry (the schedule's): setmaxnreg then moves them from the producer to the consumers;
        # a cluster's shape is the kernel's (PTX .reqnctapercluster): a plain launch of a multiple of it
        cluster = {"cluster_dim": (self.csize, 1, 1)} if self.csize > 1 else {}
        with ir.kernel(KERNEL_NAME, args, self.threads, maxnreg=s.regs_per_thread, **cluster):
            ir.blank()
            self.setup()
            ir.if_else(ir.cmp("eq", self.wg, 0, "is_producer"), self.producer, self.consumer)
            if self.csize > 1:
                ir.comment("no CTA leaves while a peer may still arrive on its barriers (or multicast into it)")
                self.cluster_sync()
            ir.emit("gpu.return")
        return ir.text()

    def setup(self):
        ir, s = self.ir, self.s
        self.tm = {"a": "%tmA", "b": "%tmB"}
        for op, ptr in (("a", "%pA"), ("b", "%pB")):
            ir.emit(f"{self.tm[op]} = builtin.unrealized_conversion_cast {ptr} : !llvm.ptr to {self.tm_type(op)}")
        if self.tma_store:
            self.tm["c"] = "%tmC"
            ir.emit(f"%tmC = builtin.unrealized_conversion_cast %pC : !llvm.ptr to {self.c_tm_type}")
            if self.p.preactivation:                     # P lies as C does: the same box and map type
                self.tm["p"] = "%tmP"
                ir.emit(f"%tmP = builtin.unrealized_conversion_cast %pP : !llvm.ptr to {self.c_tm_type}")
        self.tid = ir.let("tid", "gpu.thread_id x")
        self.wg = ir.div(self.tid, WG, "wg")
        self.lane = ir.rem(self.tid, 32, "lane")
        align = self.h.ring.align
        ir.comment(f"---- shared memory: the ring starts at the first {align}-byte boundary of dynamic smem")
        self.dsm, addr, al = aligned_dynamic_shared_memory(ir, align)
        self.base_off = ir.sub(al, addr, "ring_off")        # byte offset of the ring in the dsm view
        # shared address >> 4 (wgmma descriptor units), masked to the start-address field in every kernel
        # (nvgpu.descriptor_start says why; the H200 runs that showed it: a cluster's rank >= 1 CTAs read
        # MN-major boxes 1.. from the wrong place, bench/results/h200-2026-12-01/b/call1; the attention dK/dV
        # kernel's out-of-range shared reads, bench/results/h200-2026-12-01/c/call1)
        self.base_enc = descriptor_start(ir, al, "ring_enc")
        ir.comment(f"---- mbarriers: full[{s.stages}] (TMA landed), empty[{s.stages}] (slot consumed"
                   + (f" by the consumers of all {self.csize} CTAs of the cluster)" if self.csize > 1 else ")"))
        self.full = ir.let("full", f"nvgpu.mbarrier.create -> {self.mb_t}")
        self.empty = ir.let("empty", f"nvgpu.mbarrier.create -> {self.mb_t}")
        t0 = ir.cmp("eq", self.tid, 0, "is_t0")
        for i in range(s.stages):
            ir.emit(f"nvgpu.mbarrier.init {self.full}[{ir.v(i)}], {ir.v(1)}, predicate = {t0} : {self.mb_t}")
            ir.emit(f"nvgpu.mbarrier.init {self.empty}[{ir.v(i)}], {ir.v(self.arrivals)}, "
                    f"predicate = {t0} : {self.mb_t}")
        with ir.region(f"scf.if {t0} {{"):
            fence_mbarrier_init(ir)
        if self.csize > 1:
            ir.comment("every CTA's barriers are initialised before any peer multicasts into it or arrives on them")
            self.cluster_sync()
        else:
            ir.emit("gpu.barrier")
        self.bid = ir.let("bid", "gpu.block_id x")
        self.nblocks = ir.let("nblocks", "gpu.grid_dim x") if s.persistent else None
        self.tiles_i, self.tiles_j = _cdiv(self.I, self.tile_i), _cdiv(self.J, self.tile_j)
        self.walk_i, self.walk_j = _cdiv(self.tiles_i, self.ci), _cdiv(self.tiles_j, self.cj)   # (cluster) tiles walked
        self.ntiles = self.walk_i * self.walk_j
        self.k_per_slice = _cdiv(self.ktiles, s.split_k)
        self.rank = 0
        if self.csize > 1:
            self.cluster_ids()
        ir.blank()

    def cluster_sync(self):
        """barrier.cluster.arrive (release) + barrier.cluster.wait (acquire) by every thread of the
        cluster; not .aligned: the threads come from divergent branches (the producer's, the
        elected threads')."""
        self.ir.emit("nvvm.cluster.arrive")
        self.ir.emit("nvvm.cluster.wait")

    def cluster_ids(self):
        """This CTA's rank in its (1-D) cluster (%cluster_ctarank: the bit of the multicast masks,
        the CTA ``mapa`` addresses), the cluster's index (%clusterid.x) and the clusters (%nclusterid.x)."""
        ir = self.ir

        def sreg(hint, reg):
            raw = ir.let(f"{hint}_i32", f"nvvm.read.ptx.sreg.{reg} : i32")
            return ir.let(hint, f"arith.index_cast {raw} : i32 to index")
        self.rank = sreg("cta_rank", "cluster.ctarank")
        self.cluster_id = sreg("cluster_id", "clusterid.x")
        self.nclusters = sreg("nclusters", "nclusterid.x")
        self.mc_mask = ir.let("mc_mask", f"arith.constant {(1 << self.csize) - 1} : i16")

    def tile_origin(self, tile):
        """(i0, j0) of output tile ``tile`` in group order (``group_m`` tile rows along i per group).
        In a cluster, ``tile`` is a cluster tile (ci x cj tiles; ``group_m`` counts cluster-tile rows)
        and this CTA computes the one at its rank along the cluster."""
        ir, s = self.ir, self.s
        gm = max(1, min(s.group_m, self.walk_i))
        tn = self.walk_j
        if gm == 1:
            pm, pn = ir.div(tile, tn, "pid_i"), ir.rem(tile, tn, "pid_j")
        else:
            per = gm * tn
            group = ir.div(tile, per, "group")
            first = ir.mul(group, gm, "group_first_i")
            rows = ir.min(ir.sub(self.walk_i, first, "rows_left"), gm, "group_rows")
            inside = ir.rem(tile, per, "pid_in_group")
            pm = ir.add(first, ir.rem(inside, rows), "pid_i")
            pn = ir.div(inside, rows, "pid_j")
        if self.csize > 1:                      # the tile at this CTA's rank in the cluster tile
            pm = ir.add(ir.mul(pm, self.ci), self.rank if self.ci > 1 else 0, "cta_tile_i")
            pn = ir.add(ir.mul(pn, self.cj), self.rank if self.cj > 1 else 0, "cta_tile_j")
        return ir.mul(pm, self.tile_i, "i0"), ir.mul(pn, self.tile_j, "j0")

    def slot_phase(self, it, flip=False):
        return slot_phase(self.ir, it, self.s.stages, flip)

    def tile_loop(self, body, warpgroup=None):
        """scf.for over this CTA's work units (output tile x K slice, or batch element x tile)
        carrying the ring iteration counter; ``body(tile, k_begin, k_count, it)`` returns the new it.
        Unit u is tile u % tiles of K slice u / tiles: slice z covers K tiles [z * per, min((z + 1) *
        per, ktiles)); batched, of batch element u / tiles (``self.batch_index``).  ``warpgroup`` (a
        ping-pong consumer's index w): only the CTA's units j = w, w + 2, ..., unit j's K tiles at
        ring iterations j x ktiles .. (every unit streams all of K): the loop starts at it = w x
        ktiles and steps over the other warpgroup's units' ktiles."""
        ir, s = self.ir, self.s
        if self.sk is not None:
            self.stream_k_loop(body)
            return
        units = self.ntiles * s.split_k * self.p.batch
        if self.csize > 1:                      # each cluster walks cluster units, all its CTAs the same ones
            lo, step = self.cluster_id, self.nclusters
        elif s.persistent:
            lo, step = self.bid, self.nblocks
        else:
            lo, step = self.bid, units          # exactly one iteration
        it0, skip = None, 0
        if warpgroup is not None:
            self.cta_walk = (lo, step, units)
            warpgroup = self.warp_uniform(warpgroup)
            lo = ir.add(lo, ir.mul(warpgroup, step), "pp_first")
            step = ir.mul(step, 2, "pp_step")
            it0, skip = ir.mul(warpgroup, self.ktiles, "pp_it0"), self.ktiles
        self.walk = (lo, step)
        res = ir.fresh("it_out")
        with ir.region(f"{res} = scf.for %tile = {ir.v(lo)} to {ir.v(units)} step {ir.v(step)} "
                       f"iter_args(%it = {ir.v(0 if it0 is None else it0)}) -> (index) {{"):
            if self.p.batch > 1:                # batched (no split-K): unit = batch element x tiles + tile
                self.kslice = None
                self.batch_index = ir.div("%tile", self.ntiles, "batch")
                out = body(ir.rem("%tile", self.ntiles, "unit_tile"), 0, self.ktiles, "%it")
            elif s.split_k == 1:
                self.kslice = None
                out = body("%tile", 0, self.ktiles, "%it")
            else:
                self.kslice = ir.div("%tile", self.ntiles, "kslice")
                tile = ir.rem("%tile", self.ntiles, "unit_tile")
                per = self.k_per_slice
                begin = ir.mul(self.kslice, per, "k_begin")
                count = ir.min(ir.sub(self.ktiles, begin, "k_left"), per, "k_count")
                out = body(tile, begin, count, "%it")
            if skip:                            # the other warpgroup's unit: its K tiles are not ours
                out = ir.add(out, skip, "pp_it_next")
            ir.emit(f"scf.yield {ir.v(out)} : index")

    def warp_uniform(self, x):
        """``x`` (an index the same on every lane of a warp, e.g. tid / 128) broadcast from lane 0 with
        ``shfl.sync.idx``, which ptxas knows to be warp-uniform.  A ping-pong warpgroup's tile loop
        starts at bid + w x grid.  With w = tid / 128 as such and the second slab's zeros written
        between wgmmas, ptxas serialised every wgmma of the kernel (C7520); with this broadcast it
        injected one arrive/wait instead (C7519/C7517), which ``fence_operand`` removes (the fences
        alone also give a clean kernel; the kernels measured on the H200 have both)."""
        ir = self.ir
        x32 = ir.let("wu_i32", f"arith.index_cast {ir.v(x)} : index to i32")
        c0, c32 = ir.pure("c0_i32", "arith.constant 0 : i32"), ir.pure("c32_i32", "arith.constant 32 : i32")
        out, ok = ir.fresh("wu_b"), ir.fresh("wu_ok")
        ir.emit(f"{out}, {ok} = gpu.shuffle idx {x32}, {c0}, {c32} : i32")
        return ir.let("wu", f"arith.index_cast {out} : i32 to index")

    def stream_k_loop(self, body):
        """``tile_loop`` of a stream-K schedule (``hopper.StreamKPlan``; the producer and the consumers
        walk it alike, so their ring counters agree): the data-parallel tiles bid, bid + G, ... <
        dp_tiles whole, then CTA bid's iterations [floor(bid*I/G), floor((bid+1)*I/G)) of the stream-K
        tiles, one unit per tile they touch: tile dp_tiles + t, its K tiles [max(lo, t*kt), min(hi,
        (t+1)*kt)) - t*kt; ``self.segment`` = (the tile is one segment, bid - owner(t*kt)), owner(i)
        = floor(((i+1)*G - 1)/I)."""
        ir, sk = self.ir, self.sk
        G, I, kt = sk.ctas, sk.iters, sk.ktiles
        self.kslice = None
        self.walk = (self.bid, self.nblocks)
        it = ir.v(0)
        if sk.dp_tiles:
            res = ir.fresh("it_dp")
            with ir.region(f"{res} = scf.for %tile = {ir.v(self.bid)} to {ir.v(sk.dp_tiles)} step {ir.v(self.nblocks)} "
                           f"iter_args(%it = {ir.v(0)}) -> (index) {{"):
                out = body("%tile", 0, kt, "%it")
                ir.emit(f"scf.yield {ir.v(out)} : index")
            it = res

        def owner(i):
            return ir.div(ir.sub(ir.mul(ir.add(i, 1), G), 1), I, "sk_owner")
        ir.comment(f"---- stream-K: this CTA's share of {I} K-tile iterations of the last {sk.sk_tiles} tiles")
        lo = ir.div(ir.mul(self.bid, I), G, "sk_lo")
        hi = ir.div(ir.mul(ir.add(self.bid, 1), I), G, "sk_hi")
        t0, t1 = ir.div(lo, kt, "sk_t0"), ir.div(ir.add(hi, kt - 1), kt, "sk_t1")
        res = ir.fresh("it_out")
        with ir.region(f"{res} = scf.for %skt = {ir.v(t0)} to {ir.v(t1)} step {ir.v(1)} "
                       f"iter_args(%its = {it}) -> (index) {{"):
            base = ir.mul("%skt", kt, "sk_base")
            begin = ir.sub(ir.max(lo, base), base, "k_begin")
            count = ir.sub(ir.sub(ir.min(hi, ir.add(base, kt)), base), begin, "k_count")
            first, last = owner(base), owner(ir.add(base, kt - 1))
            self.segment = (ir.cmp("eq", first, last, "whole_tile"), ir.sub(self.bid, first, "segment"))
            out = body(ir.add("%skt", sk.dp_tiles, "sk_tile"), begin, count, "%its")
            ir.emit(f"scf.yield {ir.v(out)} : index")
        self.segment = None

    # ------------------------------------------------------------------------------------------
    def producer(self):
        ir = self.ir
        ir.comment("---- producer warpgroup: give registers back; thread 0 issues the TMA loads")
        setmaxnreg(ir, self.h.producer_regs, increase=False)
        lead = ir.cmp("eq", self.tid, 0, "is_leader")
        ticks = mbarrier_wait_ticks(ir)
        tx = ir.const(self.stage)

        def load(op, slot, slot_off, r0, k0):
            """TMA of operand ``op``'s tile (rows r0.., K k0..) into ring slot ``slot`` at byte ``slot_off``.
            The tile a cluster shares: this CTA's slice (boxes rank x per ..), multicast to the same
            offset of every CTA of the cluster (each one's full[slot] counts the bytes that land in it)."""
            box = self.h.box(op)
            shared = op == self.shared_op and self.experiment is None
            per = boxes_per_cta(box, shared, self.csize)
            multicast = f" multicast_mask = {self.mc_mask}" if shared else ""
            for q in range(per):
                c = box_index(ir, shared, self.rank, per, q)
                off = ir.add(slot_off, box_smem_offset(ir, box, c))
                view = ir.let(f"tile{op.upper()}", f"memref.view {self.dsm}[{ir.v(off)}][] "
                                                   f": memref<?xi8, {SMEM}> to {self.box_type(op)}")
                coords = box_coords(ir, self.ops.role(op).major, box, c, r0, k0)
                ir.emit(f"nvgpu.tma.async.load {self.tm[op]}[{self.tma_coords(op, *coords)}], "
                        f"{self.full}[{slot}] to {view}{multicast} : {self.tm_type(op)}, {self.mb_t} -> {self.box_type(op)}")

        def tile_body(tile, k_begin, k_count, it):
            i0, j0 = self.tile_origin(tile)
            res = ir.fresh("itp_out")
            k_end = ir.add(k_begin, k_count, "k_end")
            with ir.region(f"{res} = scf.for %ktp = {ir.v(k_begin)} to {ir.v(k_end)} step {ir.v(1)} "
                           f"iter_args(%itp = {it}) -> (index) {{"):
                slot, par = self.slot_phase("%itp", flip=True)
                mbarrier_try_wait(ir, self.empty, slot, par, ticks, self.mb_t)
                ir.emit(f"nvgpu.mbarrier.arrive.expect_tx {self.full}[{slot}], {tx} : {self.mb_t}")
                k0 = ir.mul("%ktp", self.BK, "k0")
                xoff = ir.add(self.base_off, ir.mul(slot, self.stage, "slot_off"), "x_off")
                load(self.X, slot, xoff, i0, k0)
                load(self.Y, slot, ir.add(xoff, self.x_bytes, "y_off"), j0, k0)
                ir.emit(f"scf.yield {ir.v(ir.add('%itp', 1, 'itp_next'))} : index")
            return f"{res}"

        with ir.region(f"scf.if {lead} {{"):
            self.tile_loop(tile_body)

    # ------------------------------------------------------------------------------------------
    def leading_byte_offset(self, op) -> int:
        """The LBO of operand ``op``'s wgmma descriptor (``nvgpu.WgmmaDescriptor``): unused K-major (16 B);
        MN-major the bytes between 128-byte column blocks along M/N (one TMA box: BK rows x 128 B)."""
        return KMAJOR_LEADING_BYTE_OFFSET if self.ops.role(op).major == "k" else self.BK * SWIZZLE_BYTES

    def descriptor_hi(self, op) -> int:
        """Bits 16-63 of operand ``op``'s 128B-swizzled wgmma descriptor (SBO 1024 B between 8-row groups)."""
        return descriptor_high_bits(self.leading_byte_offset(op))

    def kstep_bytes(self, op) -> int:
        """Byte advance of the descriptor start per wgmma k-step: along a K-major row, or down K rows."""
        return self.kstep * (self.p.in_bytes if self.ops.role(op).major == "k" else SWIZZLE_BYTES)

    def consumer(self):
        ir, s, p = self.ir, self.s, self.p
        creg = self.h.consumer_regs
        ir.comment(f"---- consumer warpgroups: take registers ({creg}), wgmma on the ring, epilogue")
        setmaxnreg(ir, creg, increase=True)
        ctid = ir.sub(self.tid, WG, "ctid")
        self.cwg = ir.div(ctid, WG, "cwg")
        wtid = self.wtid = ir.rem(ctid, WG, "wg_tid")
        self.warp = ir.div(wtid, 32, "wg_warp")
        self.g = ir.div(self.lane, 4, "g")
        self.t = ir.rem(self.lane, 4, "t")
        lane0 = ir.cmp("eq", self.lane, 0, "lane0")
        ticks = mbarrier_wait_ticks(ir)
        his = {op: descriptor_high_constant(ir, f"desc_hi_{op}", self.leading_byte_offset(op)) for op in ("a", "b")}
        # the X slab(s) this warpgroup reads in a ring slot, in wgmma-descriptor units: its own 64 rows
        # (cooperative), or every slab of its tile (ping-pong)
        if self.pingpong:
            slab_encs = [q * SLAB_M * SWIZZLE_BYTES // 16 for q in range(self.slabs)]
        else:
            slab_encs = [ir.mul(self.cwg, SLAB_M * SWIZZLE_BYTES // 16, "slab_enc")]
        zero = ir.let("zero_acc", f"llvm.mlir.zero : {self.acc_t}")
        ws = self.wait_depth
        layout_x = "col" if self.ops.role(self.X).feed == "smem_t" else "row"
        layout_y = "row" if self.ops.role(self.Y).feed == "smem_t" else "col"
        attrs = wgmma_attributes(self.tile_j, self.kstep, _WG_TYPE[p.dtype], layout_x, layout_y)
        if self.x_regs:
            self.fragment_setup()
        if self.tma_store:
            self.staging_setup()
        if self.pingpong:
            self.order_setup()

        def desc(op, enc):     # the sum, or the masked fields where ptxas dropped the sum's high word
            return descriptor(ir, enc, his[op], as_fields=self.masked_descriptors)

        def release(it_prev):
            slot = ir.rem(it_prev, s.stages, "rel_slot")
            if self.release_peers:
                self.release_cluster(slot)
                return
            with ir.region(f"scf.if {lane0} {{"):
                ir.let("tok", f"nvgpu.mbarrier.arrive {self.empty}[{ir.v(slot)}] : {self.mb_t} -> !nvgpu.mbarrier.token")

        def k_tile(kt, itc, accs):
            """One K tile: wait for its slot, wgmma over it (each slab), release the previous slot."""
            slot, par = self.slot_phase(itc)
            mbarrier_try_wait(ir, self.full, slot, par, ticks, self.mb_t)
            senc = ir.add(self.base_enc, ir.mul(slot, self.stage // 16, "slot_enc"), "stage_enc")
            xencs = [ir.add(senc, e, "x_enc") for e in slab_encs]
            yenc = ir.add(senc, self.x_bytes // 16, "y_enc")
            steps = range(self.BK // self.kstep)
            frags = None
            if self.x_regs:
                frags = [[self.load_fragment(slot, kk, q if self.pingpong else None) for kk in steps]
                         for q in range(self.slabs)]
            accs = list(accs)
            if self.pingpong:
                accs = [self.fence_operand(a) for a in accs]
            wgmma_fence(ir)
            for kk in steps:
                db = desc(self.Y, ir.add(yenc, kk * self.kstep_bytes(self.Y) // 16, "y_enc_k"))
                for q in range(self.slabs):
                    if self.x_regs:
                        accs[q] = self.wgmma_rs(accs[q], frags[q][kk], db)
                    else:
                        da = desc(self.X, ir.add(xencs[q], kk * self.kstep_bytes(self.X) // 16, "x_enc_k"))
                        accs[q] = ir.let("acc_k", f'"nvvm.wgmma.mma_async"({accs[q]}, {da}, {db}) <{{{attrs}}}> : '
                                                  f"({self.acc_t}, i64, i64) -> {self.acc_t}")
            wgmma_commit_group(ir)
            wgmma_wait_group(ir, ws)
            if ws == 0:
                release(itc)
            else:
                self.ir.guarded(ir.cmp("sgt", kt, 0, "not_first"), lambda: release(ir.sub(itc, 1, "it_prev")))
            return accs, ir.add(itc, 1, "itc_next")

        # Register-fed X with a wgmma group left in flight: the fragments of consecutive K tiles must
        # live in different registers (PTX: a register an in-flight wgmma reads must not be written
        # before its wait_group), so the loop body holds two K tiles, each with its own fragments.
        unroll = 2 if self.x_regs and ws else 1
        n = self.slabs
        acc_names = ["%acc"] + [f"%acc{q}" for q in range(1, n)]
        acc_types = ", ".join([self.acc_t] * n)

        def tile_body(tile, k_begin, k_count, it):
            i0, j0 = self.tile_origin(tile)
            if self.tma_store and p.residual and p.batch == 1:
                self.prefetch_residual(i0, j0)
            if self.pingpong:
                self.order_wait(tile)
            res = ir.fresh("kres")
            inits = ", ".join(f"{a} = {zero}" for a in acc_names)
            with ir.region(f"{res}:{n + 1} = scf.for %kp = {ir.v(0)} to {ir.v(ir.div(k_count, unroll, 'k_pairs'))} "
                           f"step {ir.v(1)} iter_args({inits}, %itc = {it}) -> ({acc_types}, index) {{"):
                accs, itc = acc_names, "%itc"
                for u in range(unroll):
                    accs, itc = k_tile(ir.add(ir.mul("%kp", unroll), u, "kt"), itc, accs)
                ir.emit(f"scf.yield {', '.join(accs)}, {ir.v(itc)} : {acc_types}, index")
            accs_out, it_out = [f"{res}#{q}" for q in range(n)], f"{res}#{n}"
            if unroll > 1:                                  # odd tail of the unrolled loop
                # The tail's fragments are new registers that the allocator may place where the
                # loop's last in-flight wgmma group still reads; ptxas then serialises every wgmma
                # of the kernel (C7513).  Retiring that group first removes the hazard (one bubble
                # per tile, odd K-tile counts only).
                odd = ir.cmp("ne", ir.rem(k_count, unroll, "k_odd"), 0, "has_tail")
                if odd is True:
                    wgmma_wait_group(ir, 0)
                    accs_out, it_out = k_tile(ir.sub(k_count, 1), it_out, accs_out)
                elif odd is not False:
                    tail = ir.fresh("tail")
                    with ir.region(f"{tail}:{n + 1} = scf.if {odd} -> ({acc_types}, index) {{", close="} else {"):
                        wgmma_wait_group(ir, 0)
                        a2, i2 = k_tile(ir.sub(k_count, 1, "k_last"), it_out, accs_out)
                        ir.emit(f"scf.yield {', '.join(a2)}, {ir.v(i2)} : {acc_types}, index")
                    ir.level += 1
                    ir.emit(f"scf.yield {', '.join(accs_out)}, {it_out} : {acc_types}, index")
                    ir.level -= 1
                    ir.emit("}")
                    accs_out, it_out = [f"{tail}#{q}" for q in range(n)], f"{tail}#{n}"
            if self.pingpong:                               # every K tile of this unit waited for: the
                self.order_signal()                         # other warpgroup's next unit may start
            if ws:
                wgmma_wait_group(ir, 0)
                release(ir.sub(it_out, 1, "it_last"))
            for q, acc_out in enumerate(accs_out):
                slab = q if self.pingpong else None
                if self.tma_store:
                    self.tma_epilogue(acc_out, i0, j0, slab)
                elif self.segment is not None:
                    self.stream_k_epilogue(acc_out, i0, j0)
                else:
                    self.epilogue(acc_out, i0, j0, slab)
            return it_out

        self.tile_loop(tile_body, self.cwg if self.pingpong else None)
        if self.tma_store:
            ir.comment("the staging buffers must outlive the TMA stores that read them; C is complete at exit")
            with ir.region(f"scf.if {self.wg_leader} {{"):
                ir.emit("nvvm.cp.async.bulk.wait_group 0")

    def prefetch_residual(self, i0, j0):
        """Ask L2 for the lines of R this warpgroup's epilogue will read (its slab, or every slab of its
        ping-pong tile) before the tile's K loop: ``prefetch.global.L2``, no registers held, so the
        epilogue's loads (a staging step's before its barriers) wait an L2 latency instead of DRAM's.
        Each thread asks for lines WG apart; indices past C clamp to its last row / column."""
        ir, p = self.ir, self.p
        ob, line = p.out_bytes, PREFETCH_LINE_BYTES // p.out_bytes
        first_i = self.slab_origin(i0, 0 if self.pingpong else None)
        extent_i = SLAB_M * self.slabs
        r0, nr, c0, nc = (j0, self.tile_j, first_i, extent_i) if self.swap else (first_i, extent_i, j0, self.tile_j)
        per_row = _cdiv(nc, line)
        total = nr * per_row
        ir.comment(f"R's {total} lines of this warpgroup's tile into L2 before the K loop")
        base = ir.pure("r_base", f"memref.extract_aligned_pointer_as_index %R : {self.rtype} -> index")
        for k in range(_cdiv(total, WG)):
            idx = ir.add(self.wtid, k * WG, "pf_idx")
            if (k + 1) * WG > total:
                idx = ir.min(idx, total - 1, "pf_idx")
            row = ir.min(ir.add(r0, ir.div(idx, per_row, "pf_row")), p.M - 1, "pf_row")
            col = ir.min(ir.add(c0, ir.mul(ir.rem(idx, per_row, "pf_line"), line)), p.N - 1, "pf_col")
            at = ir.add(base, ir.mul(ir.add(ir.mul(row, p.N), col), ob), "pf_addr")
            ptr = ir.let("pf_ptr", f"arith.index_cast {ir.v(at)} : index to i64")
            ir.emit(f'llvm.inline_asm has_side_effects "prefetch.global.L2 [$0];", "l" {ptr} : (i64) -> ()')

    def stream_k_epilogue(self, acc, i0, j0):
        """A stream-K segment: the whole tile stores C with the epilogue; a part of a split tile stores
        its raw FP32 partial at rows segment x M + m of the workspace %W (the reduction adds them)."""
        ir = self.ir
        whole, segment = self.segment
        with ir.region(f"scf.if {whole} {{"):
            self.epilogue(acc, i0, j0)
            ir.else_()
            ir.comment("stream-K: a split tile's segment -> its FP32 partial in workspace slot `segment`")
            saved = (self.partial, self.O, self.c_arg, self.workspace_slot)
            self.partial, self.O, self.c_arg, self.workspace_slot = True, "f32", "W", segment
            try:
                self.epilogue(acc, i0, j0)
            finally:
                self.partial, self.O, self.c_arg, self.workspace_slot = saved

    def release_cluster(self, slot):
        """The warp's release of ring slot ``slot`` to every producer that writes into this CTA (all
        of the cluster's: each multicasts its slice here): lane r arrives on empty[slot] of the CTA
        of rank r (``mapa`` maps the barrier's shared address into that CTA's), with mbarrier.arrive's
        default semantics (release at CTA scope, as CUTLASS's remote arrive), so the producers reuse
        the slot only once every consumer of the cluster is done.  At cluster scope each arrival was
        a cluster-wide release fence from every consumer warp every K tile: Nsight Compute put 34% of
        the kernel's stall cycles on it and the kernels ran 2.4-3.5x slower (bench/results/h200-2026-12-01/a/call6-ncu)."""
        ir = self.ir
        lane_i32 = ir.pure("lane_i32", f"arith.index_cast {self.lane} : index to i32")
        with ir.region(f"scf.if {ir.cmp('slt', self.lane, self.csize, 'signals_peer')} {{"):
            local = ir.let("empty_addr", f"nvgpu.mbarrier.get {self.empty}[{ir.v(slot)}] : {self.mb_t} -> i32")
            ptr = ir.let("empty_ptr", f"llvm.inttoptr {local} : i32 to !llvm.ptr<3>")
            peer = ir.let("peer_empty", f"nvvm.mapa {ptr}, {lane_i32} : !llvm.ptr<3> -> !llvm.ptr<7>")
            ir.emit(f"nvvm.mbarrier.arrive {peer} : !llvm.ptr<7>")

    # ------------------------------------------------------------------------------------------
    # Ping-pong consumers (module docstring, "Ping-pong consumers")
    def order_setup(self):
        """The named barriers that order the two warpgroups' K loops: warpgroup w waits on barrier
        PINGPONG_ORDER_BARRIER + w (bar.sync, its 128 threads), the other arrives on it (bar.arrive,
        128 more: 256 in all) once it has waited for every K tile of its unit."""
        ir = self.ir
        ir.comment(f"---- ping-pong: named barriers {PINGPONG_ORDER_BARRIER} + w order the warpgroups' K loops "
                   "(warpgroup w bar.syncs on its own, the other bar.arrives on it)")
        mine = ir.add(self.cwg, PINGPONG_ORDER_BARRIER, "order_mine_idx")
        other = ir.sub(PINGPONG_ORDER_BARRIER + 1, self.cwg, "order_other_idx")
        self.order_mine = ir.let("order_mine", f"arith.index_cast {ir.v(mine)} : index to i32")
        self.order_other = ir.let("order_other", f"arith.index_cast {ir.v(other)} : index to i32")
        self.order_n = ir.pure("c256_i32", f"arith.constant {2 * WG} : i32")

    def order_wait(self, tile):
        """Before the K loop of the CTA's unit j (``%tile``; j > 0): wait until the warpgroup of unit
        j - 1 has waited for all of its K tiles."""
        ir = self.ir
        lo, step, units = self.cta_walk
        self.order_j = ir.div(ir.sub("%tile", lo), step, "pp_unit")
        ir.guarded(ir.cmp("sgt", self.order_j, 0, "pp_after_first"),
                   lambda: named_barrier_sync(ir, self.order_mine, self.order_n))

    def order_signal(self):
        """After waiting for every K tile of unit j: let the other warpgroup start unit j + 1 (if the
        CTA has one: every arrival meets a bar.sync, no barrier is left half-complete at exit)."""
        ir = self.ir
        lo, step, units = self.cta_walk
        count = ir.div(ir.sub(ir.add(ir.sub(units, lo, "pp_left"), step), 1), step, "pp_units")
        more = ir.cmp("slt", ir.add(self.order_j, 1, "pp_next"), count, "pp_has_next")
        ir.guarded(more, lambda: named_barrier_arrive(ir, self.order_other, self.order_n))

    # ------------------------------------------------------------------------------------------
    # X from registers (32-bit MN-major tile: TF32 wgmma has no transpose bit, registers can take it)
    def fragment_setup(self):
        """Per-thread byte offsets of the two 8-byte loads of each k-step, and the rows they feed.

        wgmma's A fragment (m64k8, 32-bit): lane (g, t) of warp w holds rows (g, g+8) of the warp's
        16 x columns (t, t+4).  Rows are free to permute (the epilogue follows), so rows g and g+8
        take two *adjacent* M/N indices: one 8-byte load per K column.  The index pair of lane g is
        chosen so each 16-lane phase of the load touches 16 distinct 8-byte bank pairs of the
        128-byte swizzled box (chunk = (n/4) XOR (k%8) takes 8 values over (g, t)):
            n = 8*(w%2) + 16*((g%4)/2) + 4*(g/4) + 2*(g%2)   inside box w/2 (32 indices per box)."""
        ir = self.ir
        w, g, t = self.warp, self.g, self.t
        per_row = SWIZZLE_BYTES // self.p.in_bytes                 # 32 indices per 128-byte box row
        nb = ir.add(ir.add(ir.mul(ir.rem(w, 2), 8), ir.mul(ir.div(ir.rem(g, 4), 2), 16)),
                    ir.add(ir.mul(ir.div(g, 4), 4), ir.mul(ir.rem(g, 2), 2)), "frag_n")
        box = ir.div(w, 2, "frag_box")
        chunk = ir.div(nb, 4, "frag_chunk")
        within = ir.mul(ir.rem(nb, 4), self.p.in_bytes, "frag_within")
        box_off = ir.mul(box, self.BK * SWIZZLE_BYTES, "frag_box_off")
        self.frag_off = []
        for dk in (0, 4):
            k = ir.add(t, dk, "frag_k")
            sw = ir.pure("frag_sw", f"arith.xori {ir.v(chunk)}, {ir.v(k)} : index")
            off = ir.add(ir.add(box_off, ir.mul(k, SWIZZLE_BYTES)), ir.add(ir.mul(sw, 16), within), "frag_off")
            self.frag_off.append(off)
        # wgmma row -> i inside the warpgroup's 64: rows g and g+8 are indices nb and nb+1
        self.frag_i = ir.add(ir.mul(box, per_row), nb, "frag_i")
        words = self.s.stages * self.stage // 4
        self.ring32 = ir.let("ring_i32", f"memref.view {self.dsm}[{ir.v(self.base_off)}][] : memref<?xi8, {SMEM}> "
                                         f"to memref<{words}xi32, {SMEM}>")
        self.ring32_t = f"memref<{words}xi32, {SMEM}>"

    def load_fragment(self, slot, kk, slab=None):
        """The 4 registers of k-step ``kk`` (two 8-byte shared loads), as i32 SSA values, of this
        warpgroup's slab (cooperative) or of slab ``slab`` of the tile (ping-pong)."""
        ir = self.ir
        slot_bytes = ir.mul(slot, self.stage, "slot_bytes")
        slab_off = ir.mul(self.cwg, SLAB_M * SWIZZLE_BYTES) if slab is None else slab * SLAB_M * SWIZZLE_BYTES
        base = ir.add(slot_bytes, slab_off, "frag_slab")
        regs = []
        for off in self.frag_off:
            byte = ir.add(ir.add(base, off), kk * self.kstep * SWIZZLE_BYTES, "frag_byte")
            vec = ir.let("frag", f"vector.load {self.ring32}[{ir.v(ir.div(byte, 4, 'frag_word'))}] {{alignment = 8}} : "
                                 f"{self.ring32_t}, vector<2xi32>")
            regs += [ir.let("a", f"vector.extract {vec}[{d}] : i32 from vector<2xi32>") for d in (0, 1)]
        return [regs[0], regs[1], regs[2], regs[3]]      # (row g, k t), (g+8, t), (g, t+4), (g+8, t+4)

    def fence_operand(self, acc):
        """``acc`` through an empty inline asm that reads and writes every accumulator register (CUTLASS's
        ``warpgroup_fence_operand``): their values are defined before the ``wgmma.fence`` that follows.
        A ping-pong warpgroup's second slab started from zeros that LLVM wrote with ``mov``s after the
        first slab's wgmmas were issued, and ptxas injected a ``warpgroup.arrive`` there (C7519)."""
        ir, n = self.ir, self.nacc
        vals = [ir.let("d", f"llvm.extractvalue {acc}[{i}] : {self.acc_t}") for i in range(n)]
        cons = ",".join(["=f"] * n + [str(i) for i in range(n)])
        return ir.let("acc_f", f'llvm.inline_asm has_side_effects asm_dialect = att "", "{cons}" '
                               f"{', '.join(vals)} : ({', '.join(['f32'] * n)}) -> {self.acc_t}")

    def wgmma_rs(self, acc, frag, db):
        """``wgmma.mma_async`` with A from registers (TF32): inline PTX, as MLIR's NVVM op has only
        the shared-memory form.  The accumulators are tied in/out operands."""
        ir, n = self.ir, self.nacc
        accs = [ir.let("d", f"llvm.extractvalue {acc}[{i}] : {self.acc_t}") for i in range(n)]
        one = ir.pure("one_i32", "arith.constant 1 : i32")
        d_list = ", ".join(f"${i}" for i in range(n))
        a_list = ", ".join(f"${n + i}" for i in range(4))
        ptx = (f"{{\\n.reg .pred p;\\nsetp.ne.b32 p, ${n + 5}, 0;\\n"
               f"wgmma.mma_async.sync.aligned.m64n{self.tile_j}k{self.kstep}.f32.tf32.tf32 "
               f"{{{d_list}}}, {{{a_list}}}, ${n + 4}, p, 1, 1;\\n}}")
        cons = ",".join(["=f"] * n + ["r"] * 4 + ["l", "r"] + [str(i) for i in range(n)])
        operands = ", ".join(frag + [db, one] + accs)
        types = ", ".join(["i32"] * 4 + ["i64", "i32"] + ["f32"] * n)
        return ir.let("acc_k", f'llvm.inline_asm has_side_effects asm_dialect = att "{ptx}", "{cons}" '
                               f"{operands} : ({types}) -> {self.acc_t}")

    # ------------------------------------------------------------------------------------------
    def epilogue(self, acc, i0, j0, slab=None):
        """Thread holds, for jj < tile_j/8: wgmma rows (g, g+8) x columns (8jj + 2t, +1).  Rows map to
        i = 16*warp + g (+8), or with a register-fed X to the adjacent pair frag_i (+1).  Not swapped:
        C[i, j] (column pairs stored together); swapped: C[j, i] (row pairs are adjacent n: stored together)."""
        ir, p = self.ir, self.p
        ir.comment("---- epilogue: wgmma D fragment -> (bias, activation, convert) -> predicated stores")
        slab = self.slab_origin(i0, slab)
        if self.x_regs:
            rows_i = [ir.add(slab, ir.add(self.frag_i, h), "out_i") for h in (0, 1)]
        else:
            rows_i = [ir.add(slab, ir.add(ir.mul(self.warp, 16), ir.add(self.g, 8 * h)), "out_i") for h in (0, 1)]
        col0 = ir.add(j0, ir.mul(self.t, 2), "out_j0")
        # output (row, col) of accumulator (h, d) in column block jj; pairs that are adjacent in memory
        if not self.swap:
            pairs = lambda jj: [((rows_i[h], ir.add(col0, 8 * jj + 0, "out_col")), (4 * jj + 2 * h, 4 * jj + 2 * h + 1))
                                for h in (0, 1)]
        else:   # C[m = j, n = i]: accumulators (h=0, h=1) of one column are C[m, n], C[m, n + 1]
            pairs = lambda jj: [((ir.add(col0, 8 * jj + d, "out_row"), rows_i[0]), (4 * jj + d, 4 * jj + 2 + d))
                                for d in (0, 1)]
        pair_ok = (workspace_vector(p, self.swap) if self.partial else self.s.vector_c) >= 2

        first = ir.cmp("eq", self.kslice, 0, "first_slice") if self.kslice is not None else None
        if self.partial:
            ir.comment("split-K workspace: the raw FP32 partial at row kslice * M + m; the reduction kernel adds")
            slot = self.kslice if self.workspace_slot is None else self.workspace_slot
            slice_rows = ir.mul(slot, p.M, "slice_row0")
        values = self.output_values(acc, first)

        if self.s.vector_c == 4 and not self.partial:
            self.store_quads(rows_i, col0, values)
            return
        if self.partial and workspace_vector(p, self.swap) == 4 and self.tile_j % 16 == 0:
            self.store_partial_quads(rows_i, col0, values, slice_rows)
            return
        # the bias and R of EPILOGUE_PREFETCH_BLOCKS column blocks loaded before any of their stores: C
        # may be R's storage (in place), so nothing moves a later block's loads above an earlier
        # block's stores, and loading each block's just before its stores waits a memory latency a block
        blocks = self.tile_j // 8
        chunk = EPILOGUE_PREFETCH_BLOCKS if (p.bias or p.residual) and not self.partial else blocks
        for start in range(0, blocks, chunk):
            ready = []
            for jj in range(start, min(blocks, start + chunk)):
                for (row, col), idx in pairs(jj):
                    cols = [col, ir.add(col, 1, "out_col1")]
                    row_ok = ir.cmp("slt", row, p.M, "row_ok") if self.ragged["m"] else True
                    ready.append((row, cols, idx, row_ok, values.load(cols, row, row_ok, pair_ok)))
            for row, cols, idx, row_ok, loaded in ready:
                vals, pres = values(cols, idx, row, row_ok, pair_ok, loaded)
                self.store_two(vals, ir.add(row, slice_rows, "ws_row") if self.partial else row, cols, row_ok, pair_ok)
                if pres:
                    self.store_two(pres, row, cols, row_ok, pair_ok, "P")

    def output_values(self, acc, first):
        """``values(cols, idx, row, row_ok, pair)``: the two accumulators ``idx`` of C's columns ``cols``
        of ``row`` (they set the bias), each through bias, activation, the residual (read in pairs
        when ``pair``) and the output conversion (raw into a split-K workspace; ``first``: only K slice
        0 adds the bias and R), as ``(C's two values, P's two or None)``; each bias element is loaded once.
        ``values.prefetch(cols)`` issues the bias loads of ``cols`` now (the TMA-store epilogue
        loads the next step's bias before this step's barrier: its latency then hides behind the
        staging writes instead of stalling every step); ``values.load(cols, row, row_ok, pair)``
        the bias and R loads of a pair now, R's values for ``values(..., loaded=)``, the one place R
        is loaded (the register epilogue loads EPILOGUE_PREFETCH_BLOCKS blocks' before their stores,
        the TMA-store epilogue a staging step's before its barriers)."""
        ir, p = self.ir, self.p
        bias_cache = {}

        def bias(col):
            if col not in bias_cache:
                bias_cache[col] = self.load_bias(col, first)
            return bias_cache[col]

        def load(cols, row=None, row_ok=True, pair=False):
            """Issue the bias and R loads of ``cols`` of ``row`` now: R's two values as loaded (or
            None), which ``values`` then takes as ``loaded`` and widens where it uses them (a 16-bit
            pair stays one register until then)."""
            prefetch(cols)
            return self.load_residual_raw(row, cols, row_ok, pair) if p.residual and not self.partial else None

        def values(cols, idx, row=None, row_ok=True, pair=False, loaded=None):
            if loaded is None and p.residual and not self.partial:
                raise CodegenError(f"{p.describe()}: the epilogue's R values are loaded by values.load first")
            res = self.widen_residual(loaded, first) if loaded is not None else None
            vals, pres = [], []
            for d in (0, 1):
                x = ir.let("c", f"llvm.extractvalue {acc}[{idx[d]}] : {self.acc_t}")
                if self.partial:
                    vals.append(x)
                    continue
                if p.bias:
                    x = ir.let("c_bias", f"arith.addf {x}, {bias(cols[d])} : f32")
                val, pre = self.finish(x, res[d] if res else None)
                vals.append(val)
                pres.append(pre)
            return vals, (pres if p.preactivation and not self.partial else None)

        def prefetch(cols):
            if p.bias and not self.partial:
                for col in cols:
                    bias(col)
        values.prefetch = prefetch
        values.load = load
        return values

    def store_one(self, val, row, col, name: str = "C"):
        """One element: a plain store into the workspace, else as the mma.sync kernel (an atomic
        add into the zeroed output under atomic split-K)."""
        if self.partial:
            self.ir.emit(f"memref.store {val}, {self.at('C', row, col)} : {self.ctype}")
        else:
            GemmKernel.store_one(self, val, row, col, name)

    store_two = GemmKernel.store_two
    store_pair = GemmKernel.store_pair

    def quad_lanes(self):
        """(odd, shift, 1, 32) of the lane exchanges of ``store_quads`` and ``store_partial_quads``: an
        odd lane takes column block jj+1, its quad starting 6 columns past its even partner's, and
        swaps with lane t^1 (xor 1, width 32)."""
        ir = self.ir
        odd = ir.cmp("ne", ir.rem(self.t, 2, "t_odd"), 0, "lane_odd")
        shift = ir.select(odd, 6, 0, hint="quad_shift")       # odd lane: block jj+1, its partner's columns first
        one, width = ir.pure("c1_i32", "arith.constant 1 : i32"), ir.pure("c32_i32", "arith.constant 32 : i32")
        return odd, shift, one, width

    def store_quads(self, rows_i, col0, values):
        """16-bit output, 8-byte stores: lanes t and t^1 swap one 4-byte pair per two column blocks
        (one shuffle), so the even lane holds 4 adjacent columns of block jj and the odd lane 4 of
        block jj+1; a quad then writes 32 contiguous bytes per row (a full sector) instead of 16."""
        ir, p = self.ir, self.p
        odd, shift, one, width = self.quad_lanes()
        pair_t = f"vector<2x{self.O}>"
        for jj in range(0, self.tile_j // 8, 2):
            for h in (0, 1):
                row = rows_i[h]
                words = []
                for q in (0, 1):
                    c = ir.add(col0, 8 * (jj + q), "out_col")
                    vals, _ = values([c, ir.add(c, 1, "out_col1")], (4 * (jj + q) + 2 * h, 4 * (jj + q) + 2 * h + 1))
                    v = ir.let("pair", f"vector.from_elements {vals[0]}, {vals[1]} : {pair_t}")
                    w = ir.let("pair_w", f"vector.bitcast {v} : {pair_t} to vector<1xi32>")
                    words.append(ir.let("word", f"vector.extract {w}[0] : i32 from vector<1xi32>"))
                send = ir.select(odd, words[0], words[1], ty="i32", hint="send")
                got = ir.fresh("got")
                ir.emit(f"{got}, {ir.fresh('got_ok')} = gpu.shuffle xor {send}, {one}, {width} : i32")
                lo = ir.select(odd, got, words[0], ty="i32", hint="lo")
                hi = ir.select(odd, words[1], got, ty="i32", hint="hi")
                col = ir.add(ir.add(col0, 8 * jj, "quad_col0"), shift, "quad_col")
                row_ok = ir.cmp("slt", row, p.M, "row_ok") if self.ragged["m"] else True
                ok = ir.and_(row_ok, ir.cmp("slt", col, p.N, "col_ok") if self.ragged["n"] else True)

                def store(lo=lo, hi=hi, row=row, col=col):
                    v = ir.let("quad_w", f"vector.from_elements {lo}, {hi} : vector<2xi32>")
                    q4 = ir.let("quad", f"vector.bitcast {v} : vector<2xi32> to vector<4x{self.O}>")
                    ir.emit(f"vector.store {q4}, {self.at('C', row, col)} {{alignment = {4 * p.out_bytes}}} : "
                            f"{self.ctype}, vector<4x{self.O}>")
                self.ir.guarded(ok, store)

    def store_partial_quads(self, rows_i, col0, values, slice_rows):
        """FP32 partials into the split-K / stream-K workspace, 16-byte stores: lanes t and t^1 swap
        one column pair per two column blocks (two shuffles), so the even lane holds 4 adjacent columns
        of block jj and the odd lane 4 of block jj+1 (as ``store_quads``).  Half the store
        instructions of 8-byte pairs: the partial epilogue waits on the load/store queue (LG throttle,
        31% of the warp cycles of a split-K unit; bench/results/h200-2026-12-01/e/call4-ncu).  N % 4 == 0 keeps every
        row 16-byte aligned and a quad of columns wholly in or out of bounds."""
        ir, p = self.ir, self.p
        odd, shift, one, width = self.quad_lanes()
        for jj in range(0, self.tile_j // 8, 2):
            for h in (0, 1):
                row = rows_i[h]
                pairs = []
                for q in (0, 1):
                    c = ir.add(col0, 8 * (jj + q), "out_col")
                    pairs.append(values([c, ir.add(c, 1, "out_col1")], (4 * (jj + q) + 2 * h, 4 * (jj + q) + 2 * h + 1))[0])
                got = []
                for d in (0, 1):               # the even lane sends its block jj+1 pair, the odd its block jj pair
                    send = ir.select(odd, pairs[0][d], pairs[1][d], ty="f32", hint="send")
                    g = ir.fresh("got")
                    ir.emit(f"{g}, {ir.fresh('got_ok')} = gpu.shuffle xor {send}, {one}, {width} : f32")
                    got.append(g)
                quad = [ir.select(odd, got[0], pairs[0][0], ty="f32", hint="q0"),
                        ir.select(odd, got[1], pairs[0][1], ty="f32", hint="q1"),
                        ir.select(odd, pairs[1][0], got[0], ty="f32", hint="q2"),
                        ir.select(odd, pairs[1][1], got[1], ty="f32", hint="q3")]
                col = ir.add(ir.add(col0, 8 * jj, "quad_col0"), shift, "quad_col")
                row_ok = ir.cmp("slt", row, p.M, "row_ok") if self.ragged["m"] else True
                ok = ir.and_(row_ok, ir.cmp("slt", col, p.N, "col_ok") if self.ragged["n"] else True)

                def store(quad=quad, row=row, col=col):
                    v = ir.let("quad", f"vector.from_elements {', '.join(quad)} : vector<4xf32>")
                    ir.emit(f"vector.store {v}, {self.at('C', ir.add(row, slice_rows, 'ws_row'), col)} "
                            f"{{alignment = 16}} : {self.ctype}, vector<4xf32>")
                self.ir.guarded(ok, store)

    # ------------------------------------------------------------------------------------------
    # TMA-store epilogue (hopper.epilogue == "tma_store")
    def staging_setup(self):
        """This consumer warpgroup's staging buffers (``STAGING_BUFFERS`` steps of 8 KB after the
        ring, 1024-byte aligned as the 128-byte swizzle needs), its named barrier and elected thread."""
        ir, s, ob = self.ir, self.s, self.p.out_bytes
        ir.comment(f"---- TMA-store epilogue: {STAGING_BUFFERS} staging steps of {STAGING_STEP_BYTES} B per consumer "
                   "warpgroup after the ring; named barrier 1 + warpgroup")
        self.stg_step = STAGING_STEP_BYTES // ob                      # elements per staging step
        stg_off = ir.add(self.base_off, s.stages * self.stage, "stg_off")
        self.stg_t = f"memref<{self.h.ring.staging // ob}x{self.O}, {SMEM}>"
        self.stg = ir.let("stg", f"memref.view {self.dsm}[{ir.v(stg_off)}][] : memref<?xi8, {SMEM}> to {self.stg_t}")
        self.stg_wg_off = ir.add(stg_off, ir.mul(self.cwg, STAGING_BUFFERS * STAGING_STEP_BYTES), "stg_wg_off")
        self.stg_wg_elem = ir.mul(self.cwg, STAGING_BUFFERS * self.stg_step, "stg_wg_elem")
        self.wg_bar = ir.let("wg_bar", f"arith.index_cast {ir.v(ir.add(self.cwg, 1, 'wg_bar_idx'))} : index to i32")
        self.wg_leader = ir.cmp("eq", self.wtid, 0, "wg_leader")

    def slab_row(self, h):
        """Slab-local wgmma row (0..63) of this lane's accumulator rows g (h = 0) and g + 8 (h = 1):
        16 x warp + g (+ 8), or with a register-fed X the adjacent pair frag_i (+ 1)."""
        ir = self.ir
        if self.x_regs:
            return ir.add(self.frag_i, h, "slab_row")
        return ir.add(ir.mul(self.warp, 16), ir.add(self.g, 8 * h), "slab_row")

    def staging_rotation(self) -> list[tuple[int, object]]:
        """This lane's rotation q as ``[(weight, bit)]`` (q = sum of weight x bit, each bit 0 or 1):
        in a group of store slots the lane writes item i ^ q into slot i, so that the lanes of one
        store never meet in a shared-memory bank (a 128-byte swizzled row XORs its 16-byte chunks
        with row % 8, and the lanes of a (half-)warp cover too few rows % 8).  Not swapped, the items
        are the box's 8-column blocks of one accumulator row: f32 q = g % 4; with a register-fed X
        (rows frag_i) f32 q = 2 x bit 1 of g, 16-bit q = bit 1 of g; 16-bit with X from shared memory
        needs none.  Swapped, the items are the two columns d of one 8-column block: q = bit 1 of g.
        tests/test_hopper.py simulates every lane's addresses."""
        ir, g = self.ir, self.g
        b0, b1 = ir.rem(g, 2, "g_bit0"), ir.rem(ir.div(g, 2, "g_half"), 2, "g_bit1")
        f32 = self.p.out_bytes == 4
        if self.swap or (self.x_regs and not f32):
            return [(1, b1)]
        if self.x_regs:
            return [(2, b1)]
        return [(1, b0), (2, b1)] if f32 else []

    def staging_byte(self, r, c):
        """Byte of element (r, c) in a 128-byte-swizzled box of 128-byte rows (TMA's SWIZZLE_128B:
        16-byte chunk c' = c XOR r % 8)."""
        ir, ob = self.ir, self.p.out_bytes
        cb = ir.mul(c, ob)
        chunk = ir.xor(ir.div(cb, 16), ir.rem(r, 8), "stg_chunk")
        return ir.add(ir.add(ir.mul(r, SWIZZLE_BYTES), ir.mul(chunk, 16)), ir.rem(cb, 16), "stg_byte")

    def staging_groups(self, step):
        """The store slots of staging step ``step`` for this lane: a list of groups, each
        ``(items, slot)``: ``items`` the group's (C columns, accumulator indices) pairs (static, in
        item order: the values' source) and ``slot(i)`` -> (slab-local row, slab-local column, byte
        in the step's buffer) of the item slot i writes (item i ^ q, ``staging_rotation``).  Slab
        coordinates are C's: not swapped (row, column) = (wgmma row, j); swapped (j, wgmma row)."""
        ir, box = self.ir, self.h.box_c
        q = 0
        for weight, bit in self.staging_rotation():
            q = ir.add(q, ir.mul(bit, weight), "stg_rot")
        two_t = ir.mul(self.t, 2)
        groups = []
        if not self.swap:                               # a step = one box: 64 slab rows x box.cols columns
            per = box.cols // 8                         # 8-column blocks per box
            for h in (0, 1):
                r = self.slab_row(h)
                jjs = [step * per + b for b in range(per)]
                items = [([8 * jj, 8 * jj + 1], (4 * jj + 2 * h, 4 * jj + 2 * h + 1)) for jj in jjs]

                def slot(i, r=r):
                    c = ir.add(ir.mul(ir.xor(i, q, "stg_item"), 8), two_t, "stg_col")
                    return r, ir.add(c, step * box.cols), self.staging_byte(r, c)
                groups.append((items, slot))
        else:                                           # a step = box.rows rows of C x the slab's 64 columns
            lr = self.slab_row(0)                       # the pair (h = 0, 1) is two adjacent columns of C
            k, c = ir.div(lr, box.cols, "stg_box"), ir.rem(lr, box.cols, "stg_col")
            box_off = ir.mul(k, box.rows * SWIZZLE_BYTES)
            for jl in range(box.rows // 8):
                jj = step * (box.rows // 8) + jl
                items = [([0, 1], (4 * jj + d, 4 * jj + 2 + d)) for d in (0, 1)]

                def slot(i, jl=jl):
                    r = ir.add(ir.add(ir.xor(i, q, "stg_item"), two_t), 8 * jl, "stg_row")
                    return ir.add(r, step * box.rows), lr, ir.add(box_off, self.staging_byte(r, c))
                groups.append((items, slot))
        return groups

    def rotate(self, vals, ty):
        """[vals[i ^ q] for i]: a conditional swap per bit of this lane's rotation q."""
        ir, out = self.ir, list(vals)
        for weight, bit in self.staging_rotation():
            cond = ir.cmp("ne", bit, 0, "rot_bit")
            for i in range(len(out)):
                if not i & weight:
                    a, b = out[i], out[i | weight]
                    out[i] = ir.select(cond, b, a, ty=ty, hint="rot")
                    out[i | weight] = ir.select(cond, a, b, ty=ty, hint="rot")
        return out

    def wg_barrier(self):
        """bar.sync over this consumer warpgroup's 128 threads (named barrier 1 + warpgroup)."""
        n = self.ir.pure("c128_i32", f"arith.constant {WG} : i32")
        named_barrier_sync(self.ir, self.wg_bar, n)

    def slab_origin(self, i0, slab):
        """wgmma row of the first row of this thread's slab: i0 + 64 x its warpgroup (cooperative), or
        i0 + 64 x ``slab`` (ping-pong: the warpgroup's tile holds every slab)."""
        if slab is None:
            return self.ir.add(i0, self.ir.mul(self.cwg, SLAB_M), "slab_i0")
        return self.ir.add(i0, slab * SLAB_M, "slab_i0")

    def tma_epilogue(self, acc, i0, j0, slab=None):
        """Stage the warpgroup's 64 x tile_j slab one 8 KB step at a time and TMA-store it (module
        docstring): per step, wait for the buffer (its last store has read it), sync, write the
        step's accumulators (bias, activation, residual, conversion) into the swizzled box(es),
        fence the async proxy, sync, and the elected thread stores the box(es) and commits one bulk
        group.  With a pre-activation output a step stages P first (its own buffer and bulk group,
        stored through P's tensor map), then C.  A residual R is read from global memory by each
        thread at the elements it writes (pairs along a row), a step's loads issued before its
        barriers (a step ahead where registers allow), its lines asked into L2 before the tile's K
        loop (``prefetch_residual``)."""
        ir, p, box = self.ir, self.p, self.h.box_c
        ob, O = p.out_bytes, self.O
        ir.comment("---- epilogue: wgmma D fragment -> (bias, activation, residual, convert) -> staging (swizzled) -> TMA store"
                   + (" of P, then of C" if p.preactivation else ""))
        q = slab
        slab = self.slab_origin(i0, q)
        rows0, cols0 = (j0, slab) if self.swap else (slab, j0)      # the slab's origin in C
        values = self.output_values(acc, None)
        pair_t = f"vector<2x{O}>"
        extent = box.rows if self.swap else box.cols                # j per step
        steps = self.tile_j // extent
        outputs = ("p", "c") if p.preactivation else ("c",)         # staged one after the other per step
        per_tile = steps * self.slabs * len(outputs)                # this warpgroup's staging steps per tile
        if per_tile % STAGING_BUFFERS:                              # the buffer alternates across tiles too
            # the work units this warpgroup ran before this one (%tile: the unit, of any batch element)
            lo, step = self.walk
            local = (ir.div(ir.sub("%tile", lo), step, "tile_n") if self.s.persistent else 0)
            first = ir.mul(local, per_tile, "stg_first")
        else:
            first = 0
        if q:                                                       # the tile's earlier slabs' steps
            first = ir.add(first, q * steps * len(outputs), "stg_first_slab")
        groups = {}

        def step_items(step):
            """Staging step ``step``'s groups and, per item, the C columns its two values take the bias
            (and R) of and the C row R is read at.  Not swapped: cols0 + 2t + its column offsets, the
            group's slab row; swapped: the slab rows' columns of C, row rows0 + 8 x jj + 2t + d."""
            if step not in groups:
                grps = self.staging_groups(step)
                if self.swap:
                    cs = [ir.add(cols0, self.slab_row(h), "out_col") for h in (0, 1)]
                    cols = [[cs for _ in items] for items, _ in grps]
                    two_t = ir.mul(self.t, 2)
                    rows = [[ir.add(rows0, ir.add(two_t, step * box.rows + 8 * jl + d), "out_row")
                             for d in range(len(items))] for jl, (items, _) in enumerate(grps)]
                else:
                    cols = [[[ir.add(ir.add(cols0, ir.mul(self.t, 2)), c, "out_col") for c in item_cols]
                             for item_cols, _ in items] for items, _ in grps]
                    rows = [[ir.add(rows0, self.slab_row(h), "out_row")] * len(items)
                            for h, (items, _) in enumerate(grps)]
                groups[step] = (grps, cols, rows)
            return groups[step]

        def load(step):
            """Issue step ``step``'s bias loads and R's (per group, per item: R's two values, or None)."""
            _, cols, rows = step_items(step)
            if not p.residual:
                values.prefetch([c for grp in cols for cs in grp for c in cs])
                return None
            # an item's two values are adjacent in C (one 8-byte or 4-byte load of R): along a row
            # not swapped; swapped, where a register-fed X makes the accumulator rows g and g + 8 the
            # adjacent columns frag_i and frag_i + 1 (even; the TMA store's 16-byte rows make N even)
            return [[values.load(cs, row, ir.cmp("slt", row, p.M, "row_ok") if self.ragged["m"] else True,
                                 not self.swap or self.x_regs)
                     for cs, row in zip(grp_cols, grp_rows)] for grp_cols, grp_rows in zip(cols, rows)]

        # The bias and R of step s + 1 are loaded before step s's barriers (one step's registers more;
        # not in a ping-pong tile, whose other slab's accumulators leave no room: ptxas spilled there),
        # else step s's own before its barriers; R's lines were asked into L2 before the K loop
        ahead = not self.pingpong
        loaded = {0: load(0)} if ahead else {}
        for step in range(steps):
            if ahead and step + 1 < steps:
                loaded[step + 1] = load(step + 1)                   # in flight across this step's barriers
            elif not ahead:
                loaded[step] = load(step)
            grps, cols, _ = step_items(step)
            r_values = loaded.pop(step)
            for o_index, output in enumerate(outputs):
                buf = ir.rem(ir.add(first, step * len(outputs) + o_index), STAGING_BUFFERS, "stg_buf")
                ir.comment(f"staging step {step}{' (P)' if output == 'p' else ''}: buffer free (its last store "
                           "has read it), then write")
                with ir.region(f"scf.if {self.wg_leader} {{"):
                    ir.emit(f"nvvm.cp.async.bulk.wait_group {STAGING_BUFFERS - 1} {{read}}")
                self.wg_barrier()
                base = ir.add(self.stg_wg_elem, ir.mul(buf, self.stg_step), "stg_base")
                for g, ((items, slot), grp_cols) in enumerate(zip(grps, cols)):
                    vals = []
                    for k, ((_, idx), cs) in enumerate(zip(items, grp_cols)):
                        # P's pass computes x + bias, C's the whole epilogue: each pass keeps what it
                        # stores (the other's arithmetic is dead code), nothing lives across the barriers
                        c_pair, p_pair = values(cs, idx, loaded=r_values[g][k] if r_values else None)
                        v = p_pair if output == "p" else c_pair
                        vals.append(ir.let("pair", f"vector.from_elements {v[0]}, {v[1]} : {pair_t}"))
                    for i, v in enumerate(self.rotate(vals, pair_t)):
                        _, _, byte = slot(i)
                        at = ir.add(base, ir.div(byte, ob), "stg_at")
                        ir.emit(f"vector.store {v}, {self.stg}[{ir.v(at)}] {{alignment = {2 * ob}}} : "
                                f"{self.stg_t}, {pair_t}")
                fence_proxy_async_shared(ir)
                self.wg_barrier()
                with ir.region(f"scf.if {self.wg_leader} {{"):
                    off = ir.add(self.stg_wg_off, ir.mul(buf, STAGING_STEP_BYTES), "stg_buf_off")
                    for k in range(box.count):
                        if self.swap:
                            r0, c0 = ir.add(rows0, step * box.rows), ir.add(cols0, k * box.cols)
                        else:
                            r0, c0 = rows0, ir.add(cols0, step * box.cols)
                        view = ir.let("stg_box", f"memref.view {self.dsm}[{ir.v(ir.add(off, k * box.rows * SWIZZLE_BYTES))}][] "
                                                 f": memref<?xi8, {SMEM}> to {self.c_box_type}")
                        inside = ir.and_(ir.cmp("slt", r0, p.M, "box_in_m"), ir.cmp("slt", c0, p.N, "box_in_n"))

                        def store(view=view, r0=r0, c0=c0, tm=self.tm[output]):
                            ir.emit(f"nvgpu.tma.async.store {view} to {tm}[{self.tma_coords('c', c0, r0)}] : "
                                    f"{self.c_box_type} -> {self.c_tm_type}")
                        self.ir.guarded(inside, store)          # a box wholly past a ragged edge stores nothing
                    ir.emit("nvvm.cp.async.bulk.commit.group")


def build_hopper_module(problem: GemmProblem, schedule: Schedule, *, wait_depth: int = 1,
                        cluster_experiment: str | None = None, masked_descriptors: bool = False) -> str:
    """MLIR text of the Hopper kernel (``wait_depth``: wgmma groups left in flight, and
    ``cluster_experiment`` (CLUSTER_EXPERIMENTS), experiment knobs).  ``masked_descriptors``: the wgmma
    descriptors as masked fields, not the sum (``nvgpu.descriptor``; ``compile_hopper`` says when)."""
    check_supported(problem, schedule)
    return _HopperKernel(problem, schedule, wait_depth, cluster_experiment, masked_descriptors).build()


# ----------------------------------------------------------------------------------------------
# Operand prep: K-major (transposed if needed), K padded to 16 bytes, TF32 rounded to nearest
# ----------------------------------------------------------------------------------------------
def build_prep_module(problem: GemmProblem, prep: OperandPrep) -> str:
    """``dst[r, c] = rna?(src[c, r] if transpose else src[r, c])`` for c < K, 0 for K <= c < Kp.

    A 32x32 tile per block of 256 threads (8 rows per pass): reads along the source's rows and
    writes along the destination's rows through a padded shared tile, so both sides coalesce.
    Batched (``prep.batch`` > 1): block = matrix x tiles + tile; the source is ``[batch, sr, sc]``
    with its batch stride, the workspace a packed ``[batch, dr, dc]``."""
    p, ir = problem, Ir(RESERVED_NAMES)
    T = p.storage
    sr, sc = prep.src
    dr, dc = prep.dst
    tr, rnd = prep.transpose, prep.round
    src_t, dst_t = f"memref<{sr}x{sc}x{T}>", f"memref<{dr}x{dc}x{T}>"
    matrix = ""                                       # "%batch, ": the batch index of every global access
    if prep.batch > 1:
        src_t = f"memref<{prep.batch}x{sr}x{sc}x{T}, strided<[{prep.src_stride}, {sc}, 1]>>"
        dst_t = f"memref<{prep.batch}x{dr}x{dc}x{T}>"
    tile_t = f"memref<{PREP_TILE}x{PREP_TILE + 1}x{T}, {SMEM}>"
    ir.reserve("src", "dst")
    ir.emit(f"// Nova operand prep for {p.describe()}: {'transpose, ' if tr else ''}"
            f"{'round to TF32 (rna), ' if rnd else ''}pad K to {dc}")
    ir.emit(f"{SMEM} = #gpu.address_space<workgroup>")
    gx = _cdiv(dc, PREP_TILE)
    with ir.kernel(PREP_NAME, [f"%src: {src_t}", f"%dst: {dst_t}"], PREP_THREADS):
        tid = ir.let("tid", "gpu.thread_id x")
        bid = ir.let("bid", "gpu.block_id x")
        if prep.batch > 1:
            tiles = gx * _cdiv(dr, PREP_TILE)
            matrix = f"{ir.v(ir.div(bid, tiles, 'batch'))}, "
            bid = ir.rem(bid, tiles, "bid_tile")
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
            x = ir.let("x", f"memref.load %src[{matrix}{ir.v(rr)}, {ir.v(cc)}] : {src_t}")
            return ir.select(ok, x, zero, ty=T, hint="x")

        def store(r, c, x):
            ok = ir.and_(ir.cmp("slt", r, dr, "dst_r_ok"), ir.cmp("slt", c, dc, "dst_c_ok"))
            with ir.region(f"scf.if {ok} {{"):
                ir.emit(f"memref.store {rounded(x)}, %dst[{matrix}{ir.v(r)}, {ir.v(c)}] : {dst_t}")

        if not tr:
            # every load before the first store: the pointers carry no alias information, so a store
            # between two loads would make the second wait for the first (one latency per element)
            c = ir.add(c0, tx, "c")
            rows = [ir.add(r0, ir.add(ty, 8 * i), "r") for i in range(PREP_TILE // 8)]
            values = [load(r, c) for r in rows]
            for r, x in zip(rows, values):
                store(r, c, x)
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


def prep_launch(prep: OperandPrep, in_bytes: int) -> dict:
    """The prep kernel's launch: a block per 32x32 tile of the workspace, of every matrix."""
    dr, dc = prep.dst
    blocks = _cdiv(dr, PREP_TILE) * _cdiv(dc, PREP_TILE) * prep.batch
    smem = PREP_TILE * (PREP_TILE + 1) * in_bytes if prep.transpose else 0
    return {"grid": (blocks, 1, 1), "block": (PREP_THREADS, 1, 1), "smem_bytes": smem}


# ----------------------------------------------------------------------------------------------
# Split-K reduction: C = act(sum of the slices' FP32 partials + bias), in slice order
# ----------------------------------------------------------------------------------------------
REDUCE_THREADS = 256


class _SplitReduce:
    """``C[e .. e+v) = out(act(W[0, e..] + W[1, e..] + ... + W[split-1, e..] + bias[col..]))`` over
    the flat index e of C (row-major [M, N]), v = ``schedule.vector_c`` adjacent elements of one row
    per thread (N % v == 0).  The slices add in slice order whatever order the GEMM's CTAs ran in:
    the result is the same bits on every run."""
    fconst = GemmKernel.fconst
    exp2 = GemmKernel.exp2
    divide = GemmKernel.divide
    times_sigmoid = GemmKernel.times_sigmoid
    activation = GemmKernel.activation
    to_out = GemmKernel.to_out
    finish = GemmKernel.finish

    def __init__(self, p: GemmProblem, s: Schedule):
        self.p, self.s, self.ir = p, s, Ir(RESERVED_NAMES)
        self.O = p.out_dtype
        self.BT = p.bias_dtype
        self.vec = s.vector_c

    def stream_k_segments(self, e):
        """Stream-K: the i1 "element ``e`` lies in a split tile" and that tile's segment count (the
        slots to add), from the walk's closed forms: the tile (i, j) of C's element (swapped: i
        along N), its walk index u by inverting tile_origin's group-M order (group = pid_i / gm,
        rows = min(tiles_i - group*gm, gm), u = group*gm*tiles_j + pid_j*rows + pid_i - group*gm),
        stream-K tile t = u - dp_tiles, and owner(t*kt + kt - 1) - owner(t*kt) + 1 segments."""
        ir, p, s, sk = self.ir, self.p, self.s, self.sk
        swap = s.swap_ab
        tile_i, tile_j = (s.block_n, s.block_m) if swap else (s.block_m, s.block_n)
        I, J = (p.N, p.M) if swap else (p.M, p.N)
        tiles_i, tiles_j = _cdiv(I, tile_i), _cdiv(J, tile_j)
        row, col = ir.div(e, p.N, "row"), ir.rem(e, p.N, "col")
        ei, ej = (col, row) if swap else (row, col)
        pid_i, pid_j = ir.div(ei, tile_i, "pid_i"), ir.div(ej, tile_j, "pid_j")
        gm = max(1, min(s.group_m, tiles_i))
        group = ir.div(pid_i, gm, "group")
        first_i = ir.mul(group, gm, "group_first_i")
        rows = ir.min(ir.sub(tiles_i, first_i, "rows_left"), gm, "group_rows")
        u = ir.add(ir.add(ir.mul(group, gm * tiles_j), ir.mul(pid_j, rows)), ir.sub(pid_i, first_i), "tile")
        t = ir.sub(ir.max(u, sk.dp_tiles), sk.dp_tiles, "sk_t") if sk.dp_tiles else u
        base = ir.mul(t, sk.ktiles, "sk_base")

        def owner(i):
            return ir.div(ir.sub(ir.mul(ir.add(i, 1), sk.ctas), 1), sk.iters, "sk_owner")
        count = ir.add(ir.sub(owner(ir.add(base, sk.ktiles - 1)), owner(base)), 1, "segments")
        split = ir.cmp("sgt", count, 1, "split_tile")
        if sk.dp_tiles:                         # a data-parallel tile: the GEMM stored it
            split = ir.and_(ir.cmp("sge", u, sk.dp_tiles, "sk_tile"), split, "split_tile")
        return split, count

    def build(self) -> str:
        p, s, ir, v = self.p, self.s, self.ir, self.vec
        size = p.M * p.N
        self.sk = s.stream_k_plan(p.M, p.N, p.K) if s.stream_k else None
        slots = self.sk.slots if self.sk is not None else s.split_k
        ws_t, c_t, b_t = f"memref<{slots * size}xf32>", f"memref<{size}x{self.O}>", f"memref<{p.N}x{self.BT}>"
        acc_t, out_t = f"vector<{v}xf32>", f"vector<{v}x{self.O}>"
        ir.reserve("W", "C", "bias", "R", "P", "slice", "acc")
        if self.sk is None:
            ir.emit(f"// Nova split-K reduction for {p.describe()}: {s.split_k} FP32 partial slices -> C, "
                    f"{v} elements per thread")
        else:
            ir.emit(f"// Nova stream-K reduction for {p.describe()}: each split tile's FP32 partial segments "
                    f"(up to {slots}) -> C, {v} elements per thread; tiles in one segment are the GEMM's")
        args = ([f"%W: {ws_t}", f"%C: {c_t}"] + ([f"%bias: {b_t}"] if p.bias else [])
                + [f"%{name}: {c_t}" for name, on in (("R", p.residual), ("P", p.preactivation)) if on])
        with ir.kernel(REDUCE_NAME, args, REDUCE_THREADS):
            tid = ir.let("tid", "gpu.thread_id x")
            bid = ir.let("bid", "gpu.block_id x")
            e = ir.mul(ir.add(ir.mul(bid, REDUCE_THREADS), tid, "thread"), v, "e")
            with ir.region(f"scf.if {ir.cmp('slt', e, size, 'in_c')} {{"):
                if self.sk is not None:
                    split, count = self.stream_k_segments(e)
                    ir.emit(f"scf.if {split} {{")
                    ir.level += 1
                first = ir.let("w0", f"vector.load %W[{ir.v(e)}] : {ws_t}, {acc_t}")
                total = ir.fresh("sum")
                slices = s.split_k if self.sk is None else count
                with ir.region(f"{total} = scf.for %slice = {ir.v(1)} to {ir.v(slices)} step {ir.v(1)} "
                               f"iter_args(%acc = {first}) -> ({acc_t}) {{"):
                    at = ir.add(ir.mul("%slice", size, "slice_off"), e, "w_at")
                    w = ir.let("w", f"vector.load %W[{ir.v(at)}] : {ws_t}, {acc_t}")
                    ir.emit(f"scf.yield {ir.let('acc_next', f'arith.addf %acc, {w} : {acc_t}')} : {acc_t}")
                col = ir.rem(e, p.N, "col") if p.bias else None
                align = f"{{alignment = {v * p.out_bytes}}}"
                if p.residual:
                    r = ir.let("r", f"vector.load %R[{ir.v(e)}] {align} : {c_t}, {out_t}")
                outs, pres = [], []
                for d in range(v):
                    x = ir.let("x", f"vector.extract {total}[{d}] : f32 from {acc_t}")
                    if p.bias:
                        b = ir.let("b", f"memref.load %bias[{ir.v(ir.add(col, d, 'bias_col'))}] : {b_t}")
                        if self.BT != "f32":
                            b = ir.let("b_f32", f"arith.extf {b} : {self.BT} to f32")
                        x = ir.let("x_bias", f"arith.addf {x}, {b} : f32")
                    res = None
                    if p.residual:
                        res = ir.let("r_d", f"vector.extract {r}[{d}] : {self.O} from {out_t}")
                        if self.O != "f32":
                            res = ir.let("r_f32", f"arith.extf {res} : {self.O} to f32")
                    val, pre = self.finish(x, res)
                    outs.append(val)
                    pres.append(pre)
                y = ir.let("y", f"vector.from_elements {', '.join(outs)} : {out_t}")
                ir.emit(f"vector.store {y}, %C[{ir.v(e)}] {align} : {c_t}, {out_t}")
                if p.preactivation:
                    y = ir.let("y_pre", f"vector.from_elements {', '.join(pres)} : {out_t}")
                    ir.emit(f"vector.store {y}, %P[{ir.v(e)}] {align} : {c_t}, {out_t}")
                if self.sk is not None:
                    ir.level -= 1
                    ir.emit("}")
            ir.emit("gpu.return")
        return ir.text()


def build_split_reduce_module(problem: GemmProblem, schedule: Schedule) -> str:
    """MLIR text of the reduction kernel of a split-K workspace schedule (``Schedule.split_workspace``)
    or of a stream-K one (``Schedule.stream_k``: only the split tiles' elements, their segments' slots)."""
    if not (schedule.split_workspace or schedule.stream_k):
        raise CodegenError(f"{problem.describe()}: the schedule adds its K slices "
                           f"{'atomically' if schedule.split_k > 1 else 'not at all (no split)'}: no reduction kernel")
    return _SplitReduce(problem, schedule).build()


def reduce_launch(problem: GemmProblem, schedule: Schedule) -> dict:
    threads = _cdiv(problem.M * problem.N, schedule.vector_c)
    return {"grid": (_cdiv(threads, REDUCE_THREADS), 1, 1), "block": (REDUCE_THREADS, 1, 1), "smem_bytes": 0}


# ----------------------------------------------------------------------------------------------
# Compile: main kernel + prep kernels -> one KernelArtifact (prep artifacts in meta["prep_kernels"])
# ----------------------------------------------------------------------------------------------
def compile_hopper(problem: GemmProblem, schedule: Schedule, *, cubin: bool = True, wait_depth: int = 1,
                   cluster_experiment: str | None = None):
    """The Hopper kernel's artifact: launched on ``schedule.hopper.ctas`` CTAs, with the operand-prep
    kernels the operand plan asks for in ``meta["prep_kernels"]`` (by operand, as artifact dicts)
    and, for a split-K workspace, the reduction kernel in ``meta["reduce_kernel"]`` (params
    ``(W, C[, bias][, residual][, preactivation])``, ``problem.epilogue_operands``; the GEMM itself
    then takes ``(tmap_a, tmap_b, W)``; else the GEMM takes them after C; with the TMA-store
    epilogue it takes ``(tmap_a, tmap_b, tmap_c[, bias][, residual][, tmap_p])``; stream-K, ``(tmap_a, tmap_b, C, W[,
    bias])`` and a reduction kernel over the split tiles).  The runtime reads everything else
    (tensor maps, workspaces) from the schedule."""
    from nova.codegen import MLIR_TOOLCHAIN, lower_and_assemble, sass
    from nova.codegen.artifact import KernelArtifact
    from nova.codegen.lower import pipeline

    where = f"{problem.describe()} (Hopper, block {schedule.block_m}x{schedule.block_n}, {schedule.stages} stages)"

    def lower(text, kernel):
        return lower_and_assemble(text, ARCH, kernel, f"{where} [{kernel}]", cubin=cubin)

    s = schedule

    def main_kernel(masked: bool):
        return lower(build_hopper_module(problem, s, wait_depth=wait_depth, cluster_experiment=cluster_experiment,
                                         masked_descriptors=masked), KERNEL_NAME)

    # The wgmma descriptors as the sum (the SASS the GEMMs were timed and calibrated on) where the SASS
    # shows ptxas wrote every descriptor word; else as masked fields (nvgpu.descriptor): ptxas 13.0 left
    # the sum's high word unwritten where LLVM hoisted a ring slot out of the unit loop (ping-pong rings
    # of 8 stages for 4 K tiles and 2 for 1, among them the batched 256x512x512x64 bf16 NT's 2-stage
    # pick): wrong results or illegal addresses on the H100 (bench/results/h100-2026-12-08/run128-h100).
    # Unchecked (no cubin, or no nvdisasm): the masked fields.
    masked = not (cubin and sass.available())
    ptx, binary, resources, ptxas_version = main_kernel(masked)
    if resources.get("descriptor_hazards") and not masked:
        masked = True
        ptx, binary, resources, ptxas_version = main_kernel(masked)
    if resources.get("descriptor_hazards"):
        raise CodegenError(sass.refusal(f"{where} (its descriptors as masked fields)", resources["descriptor_hazards"]))
    preps = {}
    for op in ("a", "b"):
        pr = s.hopper.operands.role(op).prep
        if pr is None:
            continue
        pptx, pbin, pres, _ = lower(build_prep_module(problem, pr), PREP_NAME)
        launch = prep_launch(pr, problem.in_bytes)
        preps[op] = KernelArtifact(name=PREP_NAME, arch=ARCH, ptx=pptx, grid=launch["grid"], block=launch["block"],
                                   smem_bytes=launch["smem_bytes"], params=("src", "dst"), cubin=pbin,
                                   resources=pres, meta={"prep": pr.to_dict()}).to_dict()
    meta = {"problem": problem.to_dict(), "schedule": s.to_dict(), "mlir": MLIR_TOOLCHAIN,
            "pipeline": pipeline(ARCH), "prep_kernels": preps, "wait_depth": wait_depth,
            "descriptors": "masked fields" if masked else "sum"}
    if cluster_experiment:
        meta["cluster_experiment"] = cluster_experiment
    if s.split_workspace or s.stream_k:
        rptx, rbin, rres, _ = lower(build_split_reduce_module(problem, s), REDUCE_NAME)
        launch = reduce_launch(problem, s)
        meta["reduce_kernel"] = KernelArtifact(
            name=REDUCE_NAME, arch=ARCH, ptx=rptx, grid=launch["grid"], block=launch["block"], smem_bytes=0,
            params=("W", "C") + problem.epilogue_operands, cubin=rbin, resources=rres).to_dict()
    if ptxas_version is not None:
        meta["ptxas"] = ptxas_version
    c_param = "W" if s.split_workspace else ("tmap_c" if s.hopper.tma_store else "C")
    epilogue = () if s.split_workspace else problem.epilogue_operands
    if s.hopper.tma_store and problem.preactivation:          # P stored by TMA, as C: its tensor map
        epilogue = epilogue[:-1] + ("tmap_p",)
    params = ("tmap_a", "tmap_b", c_param) + (("W",) if s.stream_k else ()) + epilogue
    return KernelArtifact(name=KERNEL_NAME, arch=ARCH, ptx=ptx, grid=(s.hopper.ctas, 1, 1),
                          block=(WG * (1 + s.consumer_warpgroups), 1, 1), smem_bytes=s.smem_bytes,
                          params=params, zero_output=s.zero_output, cubin=binary, resources=resources, meta=meta)
