"""Nova's own schedule space for one GEMM: every legal schedule the code generator supports.

The oracle (``nova.bench.tune``) times every schedule of this space on the device and asks how far the
analytic pick (``configure``) is from the best.  The space is the cross product of

  block tile     block_m, block_n in {16, 32, 64, 128, 256}, at most the next power of two of M / N
                 (the configurator's clamp: a larger tile only computes padding)
  warp layout    warps_m x warps_n in powers of two with 1..8 warps; the warp tile
                 (block_m/warps_m) x (block_n/warps_n) a multiple of the MMA shape and its FP32
                 accumulators warp_m*warp_n/32 <= 128 registers per thread
  block_k        MMA k .. 128 bytes / element (one L2 line per row, as the configurator), powers of
                 two, each clamped to K rounded up to the MMA k (``ampere.py`` step 6)
  stages         2..6, within shared memory, and at most max(2, K tiles per split-K slice)
  split_k        {1, 2, 4, 8}, only into an f32 output without activation in a problem that is
                 not deterministic (the slices add atomically), no empty slice
  group_m        {1, 4, 8, 16}, values >= the number of tile rows merged (they raster identically)

Every other field follows from these exactly as in the configurator's ``plan_tile`` (same helpers and
formulas): cp.async vectors (``copy_vector``), shared-memory tiles and pads (``smem_tiles``), the
register estimate (``ampere.F.regs``) and the blocks per SM, which is the most blocks that fit with
that many stages:

  blocks_per_sm = min(bps_regs, bps_threads, floor(smem_per_sm / (stages*stage_bytes + reserved)),
                      max_blocks_per_sm)

At stages = 2 this is the configurator's ``BPS_SMEM``; for the stages the configurator picks it
equals the configurator's blocks per SM, so the analytic pick is a point of this space.  A
16-bit operand with odd-length rows (no cp.async) keeps the configurator's rule: block_k = MMA k
and 2 stages.  Candidates are filtered by ``check_schedule``; the space's rules stay inside what
the code generator builds (tests/test_space.py checks every candidate with codegen's
``check_supported``, so this module never imports codegen).  The order is deterministic (sorted
by the tuple of decisions).

The wgmma (Hopper) family, on a target with wgmma, is built by the Hopper rules' own schedule
builder (``hopper.wgmma_schedule``: the TMA boxes, setmaxnreg targets, shared-memory ring and grid
follow from the tiling) with the pick's operand plan, in the pick's orientation (``swap_ab`` runs
the wgmma rows along N: the space works in wgmma rows x wgmma N and maps back to block_m x block_n
as the pick does):

  consumer WGs   1, 2: 64 wgmma rows each (4 warps per warpgroup), at most the next power of two
                 of the rows' extent (min 64); hopper.py's register rule (N/2 accumulators +
                 overhead within the consumers' setmaxnreg share) rejects what does not fit
  wgmma N        64, 128, 192, 256 up to the target's wgmma N and the next power of two of N's extent
  split_k        {1, hopper.py's SPLIT_TRIES (2, 3, 4, 5, 6, 8, 10, 12, 16), 32, the pick's}, no empty K slice, each split added by every
                 reduction hopper.py's ``split_reductions`` allows (FP32 atomics into an f32
                 output without activation; a workspace + reduction kernel where the tiles make
                 less than two waves, as hopper.py's ``split_candidates``)
  stream-K       split 1 with the last tiles' K iterations spread over the CTAs (hopper.py's
                 ``stream_k_plan``), where ``stream_k_blocker`` allows it and the tiles make less than
                 two waves (as hopper.py's ``tile_candidates``; any tile count when the pick is stream-K);
                 register epilogue, persistent, 1x1
  epilogue       registers, and the TMA store where hopper.py's ``epilogues`` allows it (no split-K,
                 C's rows a multiple of 16 bytes)
  stages         2 .. hopper.py's ``F.stages`` (what the per-block shared memory holds beside the
                 epilogue's staging), and no more than the K tiles a CTA ever loads (K tiles per
                 slice x its work units)
  group_m        {1, the pick's, 8, 16} clamped to the tile rows, as for mma.sync
  grid           persistent; also one CTA per work unit when there are more units than SMs
  cluster        1x1, and each of hopper.py's ``CLUSTER_SHAPES`` (2x1, 1x2: TMA multicast of B's / A's
                 tile) that its ``cluster_blocker`` and ``target_cluster_blocker`` allow, on a
                 persistent grid; group_m then counts cluster-tile rows (clamped to them)
  consumers      cooperative, and ping-pong (hopper.py's consumers step: two warpgroups on whole tiles,
                 alternately) on hopper.py's ``pingpong_tiles`` (64 or 128 wgmma rows x N whose registers
                 fit), split 1, persistent, 1x1, each epilogue, stages and group_m as above

The Hopper model (hopper.py's prediction, ``predict_wgmma``) sees tiles, K slices, the epilogue and
the ring's depth (its latency bound) but not group-M or the grid, so model ranking breaks its ties
toward the Hopper rules' choices: deeper rings, persistent.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
import zlib

from nova.kernels.gemm.cost import cdiv, predict
from nova.kernels.gemm.ampere import (F as AMPERE, FRAG_A_REGS, FRAG_B_REGS, LINE_BYTES, OVERHEAD_REGS, PLAIN_COPY_REGS, copy_vector, check_schedule, smem_tiles)
from nova.kernels.gemm.configure import configure
from nova.kernels.gemm.hopper import (CLUSTER_SHAPES, MAX_CONSUMER_WARPGROUPS, PINGPONG_MIN_STAGES, F as HOPPER,
                                      SPLIT_TRIES, WGMMA_M, accumulators_fit, cluster_blocker, cluster_extents,
                                      configure_tiles, consumer_regs, epilogues, operand_plan, pingpong_ring_cap,
                                      pingpong_tiles, predict_hopper, raster_groups, split_reductions, splits_may_pay,
                                      staging_bytes, stream_k_blocker, stream_k_plan, stream_k_registers_fit,
                                      target_cluster_blocker, wgmma_schedule, wide_consumers_fit)
from nova.kernels.gemm.problem import GemmProblem
from nova.configurator.derivation import NullDerivation
from nova.configurator.step import MmaInstr, Prediction
from nova.kernels.gemm.schedule import Schedule
from nova.hwmodel import GPUModel, get_target
from nova.hwmodel.formula import Formula
from nova.hwmodel.model import F as HW

BLOCK_SIDES = (16, 32, 64, 128, 256)
WARP_COUNTS = (1, 2, 4, 8)
STAGE_RANGE = range(2, 7)
SPLIT_K_VALUES = (1, 2, 4, 8)
GROUP_M_VALUES = (1, 4, 8, 16)
MAX_ACC_REGS = 128          # FP32 accumulator registers per thread (half the 255-register file)

WGMMA_WARPGROUPS = (1, 2, 3)     # 3: hopper.py's WIDE_CONSUMER_WARPGROUPS (192 wgmma rows at N <= 192)
WGMMA_N = (64, 128, 192, 256)   # hopper.py's tile_widths of 256 and below
WGMMA_SPLIT_K = tuple(sorted({1, 32, *SPLIT_TRIES}))   # step 8's tries, 32, and the pick's (it fills the SMs: up to SMs / tiles)
WGMMA_GROUP_M = (1, 8, 16)             # and the pick's

BPS_SMEM_STAGES = Formula("bps_smem", "floor(smem_per_sm / (stages * stage_bytes + smem_reserved_per_block))")


def _mma_for(problem: GemmProblem, gpu: GPUModel) -> MmaInstr:
    """The configurator's instruction (step 1): mma.sync with the target's shape for the dtype."""
    family = "mma.sync"
    m, n, k = gpu.mma_shapes[family][problem.dtype]
    return MmaInstr(family, m, n, k, "f16" if problem.dtype == "fp16" else problem.dtype)


def _clamp_side(extent: int) -> int:
    """The configurator's clamp: no tile side beyond the next power of two of the extent (min 16)."""
    return max(16, 1 << (extent - 1).bit_length())


def block_k_options(problem: GemmProblem, mma: MmaInstr, plain_copies: bool) -> list[int]:
    """Powers of two from MMA k to 128 B / element, each clamped to K rounded up to the MMA k."""
    k_cap = cdiv(problem.K, mma.k) * mma.k
    if plain_copies:                          # element copies: one MMA k per stage (configurator rule)
        return [min(mma.k, k_cap)]
    top = LINE_BYTES // problem.in_bytes
    values, v = set(), mma.k
    while v <= top:
        values.add(min(v, k_cap))
        v *= 2
    return sorted(values)


def warp_grids(block_m: int, block_n: int, mma: MmaInstr) -> list[tuple[int, int]]:
    """(warps_m, warps_n) with 1..8 warps whose warp tile is a multiple of the MMA shape and whose
    accumulators fit ``MAX_ACC_REGS`` registers per thread."""
    out = []
    for wm, wn in itertools.product(WARP_COUNTS, WARP_COUNTS):
        if wm * wn > 8 or block_m % (wm * mma.m) or block_n % (wn * mma.n):
            continue
        if (block_m // wm) * (block_n // wn) // 32 > MAX_ACC_REGS:
            continue
        out.append((wm, wn))
    return out


def _tile_resources(p: GemmProblem, gpu: GPUModel, mma: MmaInstr, block_m: int, block_n: int, block_k: int,
                    warps_m: int, warps_n: int, plain_copies: int) -> dict:
    """Registers, stage bytes, pads and the smem-independent blocks/SM limit: ``plan_tile``'s formulas."""
    (a_rows, a_cols, pad_a), (b_rows, b_cols, pad_b) = smem_tiles(p, block_m, block_n, block_k)
    wm, wn = block_m // warps_m, block_n // warps_n
    regs = int(min(AMPERE.regs(acc_regs=wm * wn // 32, frag_a_regs=FRAG_A_REGS, mma_tiles_m=wm // mma.m,
                               frag_b_regs=FRAG_B_REGS, mma_tiles_n=wn // mma.n, overhead_regs=OVERHEAD_REGS,
                               plain_copy_regs=PLAIN_COPY_REGS, plain_copies=plain_copies), gpu.max_regs_per_thread))
    warps = warps_m * warps_n
    bps = min(HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=warps, regs=regs, reg_alloc_unit=gpu.reg_alloc_unit),
              AMPERE.bps_threads(max_threads_per_sm=gpu.max_threads_per_sm, threads=32 * warps),
              gpu.max_blocks_per_sm)
    stage_bytes = AMPERE.stage_bytes(a_rows=a_rows, a_cols=a_cols, pad_a=pad_a, b_rows=b_rows, b_cols=b_cols,
                                     pad_b=pad_b, elem_bytes=p.in_bytes)
    return {"regs": regs, "pad_a": pad_a, "pad_b": pad_b, "stage_bytes": int(stage_bytes), "bps_no_smem": int(bps)}


def enumerate_schedules(problem: GemmProblem, target: "GPUModel | str", limit: int | None = None,
                        strategy: str = "mixed", family: str | None = None) -> list[Schedule]:
    """Every legal schedule of ``problem`` on ``target`` (see the module docstring), sorted.

    ``family``: "wgmma" or "mma.sync"; None = the family ``configure`` picks (the path users run:
    wgmma on Hopper).  With ``limit``, a deterministic subsample of at most ``limit`` schedules that
    always holds the analytic pick first; see ``subsample``.
    """
    gpu = get_target(target)
    pick = analytic_pick(problem, gpu, family)
    space = schedule_space(problem, gpu, pick)
    if limit is None:
        return space
    return subsample(problem, gpu, space, pick, limit, strategy)


def analytic_pick(problem: GemmProblem, gpu: GPUModel, family: str | None = None) -> Schedule:
    """The configurator's tensor-core schedule for ``family`` (None: the family it chooses itself); the
    space is of tiles, so a problem the skinny kernel runs is tuned from its tiles' pick."""
    return configure(problem, gpu, family=family, kernel="tiles").schedule


def schedule_space(problem: GemmProblem, gpu: GPUModel, pick: Schedule) -> list[Schedule]:
    """The sorted space of ``pick``'s instruction family, holding ``pick`` (added when the
    enumeration does not reach it, e.g. a split-K of 3 or a group-M of 11).  Unbatched GEMMs only:
    the space's candidates count one matrix's tiles."""
    if problem.batch > 1:
        raise ValueError(f"{problem.describe()}: the schedule space (nova tune, the oracle) covers unbatched GEMMs "
                         "only; the configurator's pick is nova-config explain matmul")
    if pick.mma.family == "wgmma":
        space = wgmma_space_around(problem, gpu, pick)
    else:
        space = mma_sync_space(problem, gpu)
    if pick not in space:
        space = sorted(space + [pick], key=schedule_sort_key)
    return space


def schedule_sort_key(s: Schedule) -> tuple:
    return (s.block_m, s.block_n, s.warps_m, s.warps_n, s.block_k, s.stages, s.split_k, s.split_reduction,
            s.group_m, not s.persistent, s.hopper is not None and s.hopper.tma_store, s.cluster_m, s.cluster_n,
            s.stream_k_tiles, s.pingpong)


def _split_options(k_iters: int, values) -> list[int]:
    """Split-K values that leave no K slice empty (ceil(k_iters / split) K tiles per slice)."""
    return sorted({s for s in values if s == 1 or cdiv(k_iters, s) * (s - 1) < k_iters})


def _raster(gpu: GPUModel, rows: int, tile_rows: int, cols: int, tile_cols: int) -> int:
    """The group-M hopper.py's step 14 gives a tile (the raster its own pick would have)."""
    tiles_i = cdiv(rows, tile_rows)
    return raster_groups(gpu, tiles_i, tiles_i * cdiv(cols, tile_cols), tile_rows, tile_cols)[0]


def _wgmma_groups(gpu: GPUModel, rows: int, tile_rows: int, cols: int, tile_cols: int, pick: Schedule) -> list[int]:
    """A wgmma tile's group-M options: the fixed ones, the pick's, and the tile's own step-14 raster."""
    return _group_options(rows, tile_rows, cols, tile_cols,
                          WGMMA_GROUP_M + (pick.group_m, _raster(gpu, rows, tile_rows, cols, tile_cols)))


def _group_options(rows: int, tile_rows: int, cols: int, tile_cols: int, values) -> list[int]:
    """Group-M values that raster differently: each clamped to the tile rows; 1 for a single tile
    row or a single tile."""
    tiles_m = cdiv(rows, tile_rows)
    if tiles_m > 1 and tiles_m * cdiv(cols, tile_cols) > 1:
        return sorted({min(g, tiles_m) for g in values})
    return [1]


def mma_sync_space(p: GemmProblem, gpu: GPUModel) -> list[Schedule]:
    mma = _mma_for(p, gpu)
    b = p.in_bytes
    vector_a = copy_vector(p.M if p.trans_a else p.K, b)
    vector_b = copy_vector(p.K if p.trans_b else p.N, b)
    vector_c = 2 if p.N % 2 == 0 else 1
    plain_copies = sum(1 for v in (vector_a, vector_b) if v * b < 4)
    split_ok = not p.atomic_split_reason                      # atomic adds only
    max_m, max_n = _clamp_side(p.M), _clamp_side(p.N)
    out: set[Schedule] = set()
    for block_m, block_n in itertools.product(BLOCK_SIDES, BLOCK_SIDES):
        if block_m > max_m or block_n > max_n:
            continue
        groups = _group_options(p.M, block_m, p.N, block_n, GROUP_M_VALUES)
        for (warps_m, warps_n), block_k in itertools.product(warp_grids(block_m, block_n, mma),
                                                             block_k_options(p, mma, bool(plain_copies))):
            res = _tile_resources(p, gpu, mma, block_m, block_n, block_k, warps_m, warps_n, plain_copies)
            k_iters = cdiv(p.K, block_k)
            for split_k in _split_options(k_iters, SPLIT_K_VALUES if split_ok else (1,)):
                slice_iters = cdiv(k_iters, split_k)
                for stages in STAGE_RANGE:
                    if stages > max(2, slice_iters) or (plain_copies and stages > 2):
                        continue
                    bps = int(min(res["bps_no_smem"], BPS_SMEM_STAGES(
                        smem_per_sm=gpu.smem_per_sm, stages=stages, stage_bytes=res["stage_bytes"],
                        smem_reserved_per_block=gpu.smem_reserved_per_block)))
                    if bps < 1:
                        continue
                    for group_m in groups:
                        s = Schedule(arch=gpu.arch, mma=mma, block_m=block_m, block_n=block_n, block_k=block_k,
                                     warps_m=warps_m, warps_n=warps_n, stages=stages, smem_layout="pad",
                                     smem_pad_a=res["pad_a"], smem_pad_b=res["pad_b"],
                                     smem_bytes=stages * res["stage_bytes"], vector_a=vector_a,
                                     vector_b=vector_b, vector_c=vector_c, split_k=split_k, group_m=group_m,
                                     regs_per_thread=res["regs"], blocks_per_sm=bps)
                        if check_schedule(p, s, gpu):
                            continue
                        out.add(s)
    return sorted(out, key=schedule_sort_key)


# ---- the wgmma (Hopper) family
def wgmma_fits(gpu: GPUModel, wgs: int, n: int) -> bool:
    """hopper.py's register rule (steps 3-4): N/2 FP32 accumulators + the consumers' overhead fit their registers."""
    return accumulators_fit(gpu.regs_per_sm, wgs, n)


def wgmma_space_around(p: GemmProblem, gpu: GPUModel, pick: Schedule) -> list[Schedule]:
    rows, cols = (p.N, p.M) if pick.swap_ab else (p.M, p.N)       # wgmma rows (the warps) x wgmma N
    n_top = min(gpu.mma_shapes["wgmma"][p.dtype][1], max(64, _clamp_side(cols)))
    k_iters = cdiv(p.K, pick.block_k)
    splits = _split_options(k_iters, WGMMA_SPLIT_K + (pick.split_k,))
    ways = [(split_k, reduction) for split_k in splits
            for reduction in (split_reductions(p) if split_k > 1 else ("atomic",))] + [(1, "stream_k")]
    out = _wgmma_space(p, gpu, pick, pick.hopper.operands, rows, cols, n_top, k_iters, ways)
    in_place = operand_plan(p)
    if in_place != pick.hopper.operands:          # step 2b padded an operand: the in-place schedules too,
        seed = configure_tiles(p, gpu, NullDerivation(), gpu.mma_shapes["wgmma"][p.dtype][1], in_place)[0]
        out += _wgmma_space(p, gpu, seed, in_place, rows, cols, n_top, k_iters, ways)   # around their own pick
    return sorted(dict.fromkeys(out), key=schedule_sort_key)


def _wgmma_space(p: GemmProblem, gpu: GPUModel, pick: Schedule, operands, rows: int, cols: int, n_top: int,
                 k_iters: int, ways: list) -> list[Schedule]:
    """``wgmma_space_around``'s schedules on one operand plan."""
    out = []
    for wgs, n, (split_k, reduction) in itertools.product(WGMMA_WARPGROUPS, WGMMA_N, ways):
        tile_rows = WGMMA_M * wgs
        if tile_rows > max(WGMMA_M, _clamp_side(rows)) or n > n_top or not wgmma_fits(gpu, wgs, n):
            continue
        if wgs > MAX_CONSUMER_WARPGROUPS and not wide_consumers_fit(operands):
            continue
        tiles = cdiv(rows, tile_rows) * cdiv(cols, n)
        if reduction == "stream_k":        # as hopper.py's tile_candidates: under two waves (or the pick's way)
            if stream_k_blocker(p, tiles, k_iters, gpu.sm_count) or not stream_k_registers_fit(operands, n) or \
                    not (splits_may_pay(tiles, gpu.sm_count) or pick.stream_k):
                continue
            groups = _wgmma_groups(gpu, rows, tile_rows, cols, n, pick)
            max_stages = int(HOPPER.stages(smem_per_block=gpu.smem_per_block, block_m=tile_rows, N=n, staging=0))
            panels = stream_k_plan(tiles, k_iters, gpu.sm_count).busiest_iters           # K tiles a CTA loads
            for stages, group_m in itertools.product(range(2, min(max_stages, max(2, panels)) + 1), groups):
                s = wgmma_schedule(p, gpu, operands, wgs, n, 1, stages, group_m, True, "stream_k", "registers")
                if not check_schedule(p, s, gpu):
                    out.append(s)
            continue
        if reduction == "workspace" and not splits_may_pay(tiles, gpu.sm_count) and \
                (split_k, reduction) != (pick.split_k, pick.split_reduction):
            continue                       # as hopper.py's split_candidates: a workspace only under two waves of tiles
        units = tiles * split_k                                                    # tiles x K slices
        groups = _wgmma_groups(gpu, rows, tile_rows, cols, n, pick)
        for epilogue in epilogues(p, operands, split_k, n):
            max_stages = int(HOPPER.stages(smem_per_block=gpu.smem_per_block, block_m=tile_rows, N=n,
                                           staging=staging_bytes(wgs, epilogue)))
            for persistent in (True, False) if units > gpu.sm_count else (True,):
                panels = cdiv(k_iters, split_k) * (cdiv(units, gpu.sm_count) if persistent else 1)  # K tiles a CTA loads
                for stages, group_m in itertools.product(range(2, min(max_stages, max(2, panels)) + 1), groups):
                    s = wgmma_schedule(p, gpu, operands, wgs, n, split_k, stages, group_m, persistent, reduction,
                                       epilogue)
                    if not check_schedule(p, s, gpu):
                        out.append(s)
                        out += cluster_variants(p, gpu, s)
    return out + pingpong_space(p, gpu, operands, pick)


def pingpong_space(p: GemmProblem, gpu: GPUModel, operands, pick: Schedule) -> list[Schedule]:
    """Ping-pong schedules (hopper.py's consumers step): each of ``pingpong_tiles`` (slabs x N) with
    every epilogue ``epilogues`` allows, split 1, persistent, 1x1, stages ``PINGPONG_MIN_STAGES`` .. what
    the shared memory holds and no more than a unit's K tiles (``hopper.pingpong_ring_cap``), group_m as
    for the cooperative tiles."""
    rows, cols = (p.N, p.M) if operands.swap else (p.M, p.N)
    n_max = gpu.mma_shapes["wgmma"][p.dtype][1]
    out = []
    for slabs, n in pingpong_tiles(p, gpu, operands, n_max):
        tile_rows = WGMMA_M * slabs
        groups = _wgmma_groups(gpu, rows, tile_rows, cols, n, pick)
        for epilogue in epilogues(p, operands, 1, n):
            max_stages = int(HOPPER.stages(smem_per_block=gpu.smem_per_block, block_m=tile_rows, N=n,
                                           staging=staging_bytes(2, epilogue)))
            deepest = min(max_stages, pingpong_ring_cap(p))               # a unit's K tiles at most
            for stages, group_m in itertools.product(range(PINGPONG_MIN_STAGES, deepest + 1), groups):
                s = wgmma_schedule(p, gpu, operands, 2, n, 1, stages, group_m, epilogue=epilogue, pingpong=slabs)
                if not check_schedule(p, s, gpu):
                    out.append(s)
    return out


def cluster_variants(p: GemmProblem, gpu: GPUModel, s: Schedule) -> list[Schedule]:
    """``s`` (1x1) in each of hopper.py's ``CLUSTER_SHAPES`` that the kernel and the target allow,
    its group_m clamped to the cluster-tile rows (two group_m values may give one schedule: the
    caller drops repeats)."""
    out = []
    wgs, n, ops = s.consumer_warpgroups, s.mma.n, s.hopper.operands
    for shape in CLUSTER_SHAPES:
        if target_cluster_blocker(gpu, shape) or cluster_blocker(p, s, shape):
            continue
        ci = cluster_extents(shape, ops.swap)[0]
        rows = cdiv(cdiv(p.N if ops.swap else p.M, WGMMA_M * wgs), ci)          # cluster-tile rows
        c = wgmma_schedule(p, gpu, ops, wgs, n, s.split_k, s.stages, max(1, min(s.group_m, rows)), s.persistent,
                           s.split_reduction, s.hopper.epilogue, shape)
        if not check_schedule(p, c, gpu):
            out.append(c)
    return out


def predict_wgmma(p: GemmProblem, s: Schedule, gpu: GPUModel) -> Prediction:
    """hopper.py's prediction for any wgmma schedule (argument order of ``cost.predict``)."""
    return predict_hopper(p, gpu, s)


def predict_schedule(p: GemmProblem, s: Schedule, gpu: GPUModel) -> Prediction:
    """The cost model of ``s``'s family: hopper.py's for wgmma, cost.py's for mma.sync."""
    return predict_wgmma(p, s, gpu) if s.mma.family == "wgmma" else predict(p, s, gpu)


def _model_order(p: GemmProblem, s: Schedule, gpu: GPUModel) -> tuple:
    """Predicted time; the Hopper model does not see the grid (and stages only where the ring's
    latency bound binds), so its ties go to the Hopper rules' choices (the deepest ring,
    persistent) before the sort key."""
    ties = (-s.stages, not s.persistent) if s.mma.family == "wgmma" else ()
    return (predict_schedule(p, s, gpu).time_us, *ties, schedule_sort_key(s))


SUBSAMPLE_STRATEGIES = ("mixed", "model", "uniform", "structure")


def subsample(problem: GemmProblem, gpu: GPUModel, space: list[Schedule], pick: Schedule, limit: int,
              strategy: str = "mixed") -> list[Schedule]:
    """At most ``limit`` schedules, the analytic pick first, chosen deterministically.

    ``model``: the pick and the schedules the cost model of their family ranks fastest, the best
    of each distinct block/warp tiling first (tests the model's ranking near its optimum).
    ``structure``: the pick and the model's best schedule of each distinct structure (tiling,
    split-K and its reduction, stream-K, cluster, ping-pong, epilogue, persistence), the best of
    each coarse kind (split or not, stream-K, cluster, ping-pong, epilogue) first, then the rest
    fastest first: which kind of kernel wins, each at its best stages and raster.
    ``uniform``: the pick and a seeded random sample (seed = CRC32 of the problem), an unbiased
    look at the whole space.  ``mixed`` (default): half of each, so the oracle can find a better
    schedule the model ranks badly, not only among its favourites.
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if strategy not in SUBSAMPLE_STRATEGIES:
        raise ValueError(f"unknown subsample strategy {strategy!r}: {', '.join(SUBSAMPLE_STRATEGIES)}")
    rest = [s for s in space if s != pick]
    if strategy == "structure":
        ranked = sorted(rest, key=lambda s: _model_order(problem, s, gpu))
        best: dict[tuple, Schedule] = {_structure(pick): pick}
        for s in ranked:
            best.setdefault(_structure(s), s)
        kinds: dict[tuple, Schedule] = {}          # the best of each coarse kind first: none is crowded out
        for s in best.values():
            kinds.setdefault(_kind(s), s)
        firsts = [s for s in kinds.values() if s != pick]
        chosen = (firsts + [s for s in best.values() if s != pick and s not in firsts])[:limit - 1]
        return [pick] + sorted(chosen, key=schedule_sort_key)
    n_model = {"model": limit - 1, "uniform": 0, "mixed": limit // 2}[strategy]
    ranked = sorted(rest, key=lambda s: _model_order(problem, s, gpu))
    # the model's best schedule of each distinct block/warp tiling first, then its runners-up
    seen, firsts, seconds = {_tiling(pick)}, [], []
    for s in ranked:
        (seconds if _tiling(s) in seen else firsts).append(s)
        seen.add(_tiling(s))
    chosen = (firsts + seconds)[:n_model]
    remaining = [s for s in rest if s not in set(chosen)]
    rng = random.Random(zlib.crc32(problem.describe().encode()))
    chosen += rng.sample(remaining, min(limit - 1 - len(chosen), len(remaining)))
    return [pick] + sorted(chosen, key=schedule_sort_key)


def _tiling(s: Schedule) -> tuple:
    return (s.block_m, s.block_n, s.warps_m, s.warps_n)


def _kind(s: Schedule) -> tuple:
    """The coarse kind of kernel ``s`` is (the ``structure`` subsample keeps the best of each)."""
    return (s.split_k > 1, s.stream_k_tiles > 0, s.cluster_m * s.cluster_n > 1, s.pingpong,
            s.hopper.epilogue if s.hopper else None)


def _structure(s: Schedule) -> tuple:
    """What kind of kernel ``s`` is, beside its stages and raster (the ``structure`` subsample)."""
    hopper = s.hopper
    return (_tiling(s), s.block_k, s.split_k, s.split_reduction, s.stream_k_tiles, s.cluster_m, s.cluster_n,
            s.pingpong, hopper.epilogue if hopper else None, s.persistent)


def label(s: Schedule) -> str:
    """``"128x128x32 w2x4 st2 sk1 g16"``: the same notation as ``bench/results`` (``schedule`` column);
    a split-K through a workspace reads ``sk8ws``; a wgmma schedule with one CTA per tile (not
    persistent) ends in `` np``, one with the TMA-store epilogue in `` tma``, one in thread-block
    clusters in `` c2x1`` (cluster_m x cluster_n), a stream-K one in `` streamk72`` (its stream-K tiles),
    one with ping-pong consumers in `` pp``, one whose K-major operands step 2b pads to whole 128-byte
    lines in `` padA``, `` padB`` or `` padAB``; the skinny kernel's reads ``skinny ...``
    (``SkinnySchedule.label``)."""
    if s.kernel == "skinny":
        return s.label()
    grid = " np" if s.mma.family == "wgmma" and not s.persistent else ""
    ws = "ws" if s.split_workspace else ""
    tma = " tma" if s.hopper is not None and s.hopper.tma_store else ""
    cluster = f" c{s.cluster_m}x{s.cluster_n}" if s.cluster_m * s.cluster_n > 1 else ""
    stream = f" streamk{s.stream_k_tiles}" if s.stream_k else ""
    pingpong = " pp" if s.pingpong else ""
    padded = [op for op in "ab" if s.hopper is not None and (prep := s.hopper.operands.role(op).prep) and prep.line]
    pad = f" pad{''.join(op.upper() for op in padded)}" if padded else ""
    return (f"{s.block_m}x{s.block_n}x{s.block_k} w{s.warps_m}x{s.warps_n} st{s.stages} "
            f"sk{s.split_k}{ws} g{s.group_m}{grid}{tma}{cluster}{stream}{pingpong}{pad}")


def measured_config(problem: GemmProblem, target: "GPUModel | str", schedule_label: str | None):
    """The ``Config`` whose schedule a results row measured (its ``schedule`` label): the automatic
    pick or the mma.sync one when the label matches, else that schedule found in the family's space
    (a skinny label: derived again with its threads, unroll and splits, ``skinny.priced_label``) and
    predicted by today's model (the configurator changed its pick since the measurement; the
    derivation then is the pick's).  None if no schedule of the space has that label."""
    picks = []
    for family in (None, "mma.sync"):
        cfg = configure(problem, target, family=family)
        if schedule_label is None or label(cfg.schedule) == schedule_label:
            return cfg
        picks.append(cfg)
    if schedule_label is not None and schedule_label.startswith("skinny"):
        from nova.kernels.gemm.skinny import priced_label
        cfg = configure(problem, target, kernel="skinny")
        priced = priced_label(problem, cfg.target, schedule_label) if cfg.skinny else None
        return None if priced is None else dataclasses.replace(cfg, schedule=priced[0], prediction=priced[1])
    for cfg in picks:
        if cfg.skinny:               # the space is of tiles: search it from the tiles' pick
            cfg = configure(problem, target, kernel="tiles")
        for s in schedule_space(problem, cfg.target, cfg.schedule):
            if label(s) == schedule_label:
                return dataclasses.replace(cfg, schedule=s, prediction=predict_schedule(problem, s, cfg.target))
    return None


def space_size(problem: GemmProblem, target: "GPUModel | str", family: str | None = None) -> int:
    return len(enumerate_schedules(problem, target, family=family))


__all__ = ["enumerate_schedules", "analytic_pick", "schedule_space", "subsample", "label", "measured_config",
           "space_size", "block_k_options", "warp_grids", "schedule_sort_key", "predict_schedule", "predict_wgmma",
           "consumer_regs", "wgmma_fits", "MAX_ACC_REGS"]
