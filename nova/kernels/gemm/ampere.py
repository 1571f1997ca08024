"""The Analytic Configurator for GEMM: every schedule decision in closed form, with its reason.

Order of decisions, one function each (``configure_mma_sync``), each returning its decision and
the ``Step``(s) that explain it:
 1. instruction      tensor-core family and shape for the dtype on this target
 2. balances         machine balance (FLOP/B) of shared memory, L2 and DRAM
 3. warp tile        largest accumulator tile the register budget allows; checked against smem balance
 4. block tile       warp grid so the block's L2 intensity clears the L2 balance, clamped to the problem
 5. wave fill        shrink the block tile while the output tiles cannot fill every SM slot
 6. block_k          one 128-byte line per tile row per stage
 7. occupancy        registers per thread; blocks per SM from registers, threads and shared memory;
                     SM slots, output tiles, the block's L2 intensity
 8. split-K          when the tiles still fill less than half the machine and K is long
 9. stages           Little's law: bytes in flight = latency x consumption rate, within shared memory
10. rasterization    group-M so one wave's A and B panels have the smallest L2 footprint
11. vectors, padding 16-byte copies when rows allow; row padding that makes fragment loads conflict-free;
                     the shared memory of the ring
12. prediction       the cost model (``cost.py``)
The wgmma (Hopper) family has its own steps in ``hopper.py``.
No search and no measurement: the same inputs always give the same schedule.

Batched GEMMs (``problem.batch`` > 1): the grid's blocks are (batch element, output tile), so the
wave fill, the resident blocks and the prediction count tiles x batch (``work units``); group-M
orders the tiles within an element; K is never split; the copy and store vectors also divide each
operand's batch stride (``batch_aligned``), so every element is as aligned as the first.
"""
from __future__ import annotations

import math

from nova.configurator.derivation import Derivation, NullDerivation, formula_step, note
from nova.configurator.step import MmaInstr, Prediction, Step
from nova.hwmodel import GPUModel
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import F as HW
from nova.kernels.gemm.cost import F as COST, cdiv, predict
from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.gemm.schedule import SPLIT_REDUCTIONS, Schedule, ScheduleError


# ---- formulas (each shown in the derivation; ``F.stages`` is "stages = ...") ------------------
F = formulas("""
    B_smem = tc_flops_per_clk_sm / smem_bytes_per_clk_sm
    B_l2 = peak_flops / l2_bw
    B_dram = peak_flops / dram_bw
    acc_regs = ceil(max_regs_per_thread / 4)
    warp_area = 2**floor(log(32 * acc_regs, 2))
    W_min = elem_bytes * B_smem
    T_min = elem_bytes * B_l2
    slots = sm_count * blocks_per_sm
    tiles = ceil(M / block_m) * ceil(N / block_n)
    block_k = line_bytes / elem_bytes
    regs = acc_regs + frag_a_regs * mma_tiles_m + frag_b_regs * mma_tiles_n + overhead_regs
        + plain_copy_regs * plain_copies
    bps_threads = floor(max_threads_per_sm / threads)
    bps_smem = floor(smem_per_sm / (2 * stage_bytes + smem_reserved_per_block))
    stage_bytes = (a_rows * (a_cols + pad_a) + b_rows * (b_cols + pad_b)) * elem_bytes
    inflight = 1e-9 * clock_hz * mem_latency_ns * tc_flops_per_clk_sm / I_block
    stages = 1 + ceil(inflight / (blocks_per_sm * stage_bytes))
    resident = Min(blocks_per_sm, ceil(tiles * split_k / sm_count))
    stages_max = floor((smem_per_sm / blocks_per_sm - smem_reserved_per_block) / stage_bytes)
    split_k = Min(floor(slots / tiles), floor(k_iters / 2))
    group_m = sqrt(Min(slots, tiles) * block_n / block_m)
""")

LINE_BYTES = 128          # a full L2 cache line per row and stage
ILP_WARP_MIN = 32         # >= 8 independent m16n8 MMAs per warp per k-step hide the tensor pipe latency [EST]
OVERHEAD_REGS = 40        # addresses, loop counters, predicates; fitted to ptxas on Nova's kernels (test_pipeline)
PLAIN_COPY_REGS = 24      # an operand staged by plain loads (16-bit rows of odd length: no cp.async) holds its
                          # elements in registers; fitted to ptxas (bf16 255x511x300 TT: +18 registers)
FRAG_A_REGS = 4           # 32-bit registers of one m16n8 MMA's A fragment (tf32 m16n8k8, 16-bit m16n8k16)
FRAG_B_REGS = 2           # and of its B fragment
MIN_BLOCK_WARPS_M = MIN_BLOCK_WARPS_N = 2   # 4 warps: one per warp scheduler
MAX_BLOCK_WARPS = 8
MIN_BLOCK_SIDE = 16       # the clamp to the problem keeps tiles at least this wide
MIN_SPLIT_K_ITERS = 4     # split K only when it has at least this many block_k steps
MIN_STAGES = 2            # one stage computing, one landing
PLAIN_COPY_STAGES = 2     # element-wise copies hold every prefetched element in registers
RESIDUAL_REGS = 16        # the residual's loads, which ptxas hoists ahead of the epilogue's math, and R's
                          # addresses; fitted to ptxas (a100 tf32 1000x1001x999 split 3: 16 registers spilled)


def configure_mma_sync(p: GemmProblem, gpu: GPUModel, d: Derivation) -> tuple[Schedule, Prediction]:
    """Steps 1-11 of the module docstring for the mma.sync kernel, recorded in ``d``."""
    mma = d.record(instruction(p, gpu))
    b_smem, b_l2 = d.record(balances(p, gpu, mma))
    warp_m, warp_n = d.record(warp_tile(p, gpu, b_smem))
    block_m, block_n = d.record(block_tile(p, warp_m, warp_n, b_l2))
    block_k = min(int(LINE_BYTES // p.in_bytes), max(mma.k, cdiv(p.K, mma.k) * mma.k))
    block_m, block_n = d.record(wave_fill(p, gpu, mma, block_m, block_n, block_k, warp_m, warp_n))
    schedule, prediction, _, _ = plan_tile(p, gpu, mma, block_m, block_n, block_k, warp_m, warp_n, d)
    violations = check_schedule(p, schedule, gpu)
    if violations:
        raise ScheduleError(f"configurator produced an illegal schedule for {p.describe()} on {gpu.name}: "
                            + "; ".join(violations))
    return schedule, prediction


# ---- steps 1-5: instruction, balances, warp tile, block tile, wave fill ------------------------
def instruction(p: GemmProblem, gpu: GPUModel) -> tuple[MmaInstr, Step]:
    """Step 1: the mma.sync shape for the dtype on this target, FP32 accumulation."""
    family = "mma.sync"
    if not gpu.supports(family, p.dtype):
        from nova.hwmodel import TargetError
        raise TargetError(f"{gpu.name} ({gpu.arch}) has no {family} tensor-core path for {p.dtype}")
    m, n, k = gpu.mma_shapes[family][p.dtype]
    mma = MmaInstr(family, m, n, k, "f16" if p.dtype == "fp16" else p.dtype)
    why = f"{p.dtype} on {gpu.arch}: {family} shape m{m}n{k and n}k{k}, FP32 accumulate"
    if "wgmma" in gpu.features:
        why += ("; this target's wgmma path (hopper.py) is faster and is the default: mma.sync runs when "
                "NOVA_HOPPER=0 or the family is forced")
    return mma, note("instruction", str(mma), why)


def balances(p: GemmProblem, gpu: GPUModel, mma: MmaInstr) -> tuple[tuple[float, float], list[Step]]:
    """Step 2: the machine balance (FLOP per byte at the tensor peak) of shared memory, L2 and DRAM."""
    rate = gpu.tc_flops_per_clk_sm(mma.family, p.dtype)
    peak = gpu.peak_flops(p.dtype, mma.family)
    b_smem, smem = formula_step("smem balance", F.B_smem, "FLOP per shared-memory byte the tensor cores need per SM",
                                tc_flops_per_clk_sm=rate, smem_bytes_per_clk_sm=gpu.smem_bytes_per_clk_sm)
    b_l2, l2 = formula_step("L2 balance", F.B_l2, "FLOP per L2 byte at the tensor-core peak",
                            peak_flops=peak, l2_bw=gpu.l2_bw)
    _, dram = formula_step("DRAM balance", F.B_dram, "FLOP per DRAM byte at the tensor-core peak (roofline ridge)",
                           peak_flops=peak, dram_bw=gpu.dram_bw)
    return (b_smem, b_l2), [smem, l2, dram]


def warp_tile(p: GemmProblem, gpu: GPUModel, b_smem: float) -> tuple[tuple[int, int], list[Step]]:
    """Step 3: the largest power-of-two accumulator tile the register budget allows, as square as
    possible (the M side the longer); checked against the shared-memory balance."""
    acc_regs, budget = formula_step(
        "accumulator budget", F.acc_regs, "accumulators get a quarter of a thread's registers: Nova's generated code "
        "needs ~120 more for fragments, 64-bit addresses and epilogues (ptxas, tests/test_pipeline.py), and every "
        "layout and epilogue must stay spill-free", max_regs_per_thread=gpu.max_regs_per_thread)
    area, area_step = formula_step("warp tile area", F.warp_area, "largest power-of-two warp tile whose FP32 "
                                   "accumulators (area/32 per lane) fit the budget", post=int, acc_regs=acc_regs)
    warp_m = 1 << ((area.bit_length()) // 2)
    warp_n = area // warp_m
    w_min, smem = formula_step("warp tile (smem)", F.W_min,
                               f"smallest square warp tile whose smem intensity W/elem_bytes clears B_smem; the "
                               f"register-bound tile {warp_m}x{warp_n} is chosen: more reuse per fragment, more "
                               f"independent MMAs", elem_bytes=p.in_bytes, B_smem=b_smem)
    steps = [budget, area_step, smem]
    i_warp = COST.I_warp(warp_m=warp_m, warp_n=warp_n, elem_bytes=p.in_bytes)
    if i_warp < b_smem:
        steps.append(note("warp tile limit", f"{warp_m}x{warp_n}",
                          f"registers cap the warp tile's smem intensity at {i_warp:.1f} < B_smem {b_smem:.1f} FLOP/B "
                          f"(square side {w_min:.0f} needed): shared memory, not the tensor cores, will bound this kernel"))
    return (warp_m, warp_n), steps


def block_tile(p: GemmProblem, warp_m: int, warp_n: int, b_l2: float) -> tuple[tuple[int, int], list[Step]]:
    """Step 4: the warp grid whose block side clears the L2 balance (MIN_BLOCK_WARPS_M x
    MIN_BLOCK_WARPS_N warps, doubling the shorter side up to MAX_BLOCK_WARPS), then clamped to the
    problem: no side beyond the next power of two of M or N (at least MIN_BLOCK_SIDE)."""
    t_min, side = formula_step("block side (L2)", F.T_min, "square block side whose L2 intensity "
                               "2*B*B/(2*B*elem_bytes) = B/elem_bytes clears B_l2", elem_bytes=p.in_bytes, B_l2=b_l2)
    warps_m, warps_n = MIN_BLOCK_WARPS_M, MIN_BLOCK_WARPS_N
    while min(warps_m * warp_m, warps_n * warp_n) < t_min and warps_m * warps_n < MAX_BLOCK_WARPS:
        if warps_n * warp_n <= warps_m * warp_m:
            warps_n *= 2
        else:
            warps_m *= 2
    block_m, block_n = warps_m * warp_m, warps_n * warp_n
    steps = [side, note("block tile", f"{block_m}x{block_n}",
                        f"{warps_m}x{warps_n} warps of {warp_m}x{warp_n} (at least one warp per scheduler, at most "
                        f"{MAX_BLOCK_WARPS} warps); block side {min(block_m, block_n)} vs T_min {t_min:.0f}")]
    cm = max(MIN_BLOCK_SIDE, 1 << (p.M - 1).bit_length())
    cn = max(MIN_BLOCK_SIDE, 1 << (p.N - 1).bit_length())
    if cm < block_m or cn < block_n:
        block_m, block_n = min(block_m, cm), min(block_n, cn)
        steps.append(note("clamp to problem", f"{block_m}x{block_n}", f"M={p.M}, N={p.N}: tiles no larger than the "
                          f"next power of two of the problem (min {MIN_BLOCK_SIDE})"))
    return (block_m, block_n), steps


def wave_fill(p: GemmProblem, gpu: GPUModel, mma: MmaInstr, block_m: int, block_n: int, block_k: int,
              warp_m: int, warp_n: int) -> tuple[tuple[int, int], list[Step]]:
    """Step 5: halve the block tile (the larger side first, N on ties: keeps rows of B long for
    coalescing) while the tiles cannot fill the SM slots and the model predicts a gain."""
    quiet = NullDerivation()
    best = plan_tile(p, gpu, mma, block_m, block_n, block_k, warp_m, warp_n, quiet)
    min_side = max(2 * mma.m, ILP_WARP_MIN)
    steps = []
    while True:
        _, pred_cur, tiles, slots = best
        if tiles >= slots:
            break
        options = []
        if block_n > min_side and cdiv(p.N, block_n // 2) > cdiv(p.N, block_n):
            options.append((block_m, block_n // 2))
        if block_m > min_side and cdiv(p.M, block_m // 2) > cdiv(p.M, block_m):
            options.append((block_m // 2, block_n))
        if not options:
            break
        bm, bn = max(options, key=lambda t: (t[1] < block_n) if block_n >= block_m else (t[0] < block_m))
        cand = plan_tile(p, gpu, mma, bm, bn, block_k, warp_m, warp_n, quiet)
        if cand[1].time_us >= pred_cur.time_us:
            steps.append(note("wave fill", f"keep {block_m}x{block_n}",
                              f"{tiles} tiles for {slots:.0f} slots, but halving to {bm}x{bn} would not help: model "
                              f"{cand[1].time_us:.1f} us vs {pred_cur.time_us:.1f} us: no predicted gain"))
            break
        steps.append(note("wave fill", f"{bm}x{bn}",
                          f"{tiles} tiles cannot fill {slots:.0f} SM slots; halving the larger side -> {cand[2]} tiles, "
                          f"model {pred_cur.time_us:.1f} -> {cand[1].time_us:.1f} us", "tiles < sm_count * blocks_per_sm"))
        block_m, block_n, best = bm, bn, cand
    return (block_m, block_n), steps


# ---- steps 6-11 for one block tile ---------------------------------------------------------------
def plan_tile(p: GemmProblem, gpu: GPUModel, mma: MmaInstr, block_m: int, block_n: int, block_k: int,
              warp_m: int, warp_n: int, d: Derivation):
    """Steps 6-11 for a given block tile: block_k, occupancy, split-K, stages, raster, vectors,
    padding; recorded in ``d`` (a ``NullDerivation`` for the candidates of step 5).
    Returns (schedule, prediction, tiles, slots)."""
    vector_a = copy_vector(batch_aligned(p, "a", p.M if p.trans_a else p.K), p.in_bytes)   # vectors first: a copy
    vector_b = copy_vector(batch_aligned(p, "b", p.K if p.trans_b else p.N), p.in_bytes)   # path without cp.async
    # costs registers and stages
    plain_copies = sum(1 for v in (vector_a, vector_b) if v * p.in_bytes < 4)
    wm, wn = min(warp_m, block_m), min(warp_n, block_n)
    warps_m, warps_n = block_m // wm, block_n // wn
    block_k = d.record(block_k_step(p, mma, block_k, plain_copies))
    (a_rows, a_cols, pad_a), (b_rows, b_cols, pad_b) = smem_tiles(p, block_m, block_n, block_k)
    stage_bytes = F.stage_bytes(a_rows=a_rows, a_cols=a_cols, pad_a=pad_a, b_rows=b_rows, b_cols=b_cols, pad_b=pad_b,
                                elem_bytes=p.in_bytes)
    regs = d.record(registers(gpu, mma, wm, wn, plain_copies, p.residual))
    bps = d.record(occupancy(gpu, warps_m * warps_n, regs, stage_bytes))
    slots, tiles, i_block = d.record(fill(p, gpu, mma, block_m, block_n, bps))
    units = tiles * p.batch                                # blocks over the batch (tiles when unbatched)
    k_iters = cdiv(p.K, block_k)
    split_k = d.record(split_k_step(p, units, slots, k_iters))
    resident, stages = d.record(pipeline_stages(p, gpu, mma, bps, units, split_k, i_block, stage_bytes,
                                                cdiv(k_iters, split_k), plain_copies))
    group_m = d.record(raster(p, slots, tiles, block_m, block_n))
    vector_c = 2 if batch_aligned(p, "c", p.N) % 2 == 0 else 1
    d.record(vectors_and_padding(p, vector_a, vector_b, vector_c, pad_a, pad_b))
    smem_bytes = stages * stage_bytes
    bps = d.record(shared_memory(gpu, stages, stage_bytes, bps, resident))
    schedule = Schedule(
        arch=gpu.arch, mma=mma, block_m=block_m, block_n=block_n, block_k=block_k, warps_m=warps_m, warps_n=warps_n,
        stages=stages, smem_layout="pad", smem_pad_a=pad_a, smem_pad_b=pad_b, smem_bytes=int(smem_bytes),
        vector_a=vector_a, vector_b=vector_b, vector_c=vector_c, split_k=split_k, group_m=group_m,
        regs_per_thread=regs, blocks_per_sm=bps)
    return schedule, predict(p, schedule, gpu), int(units), int(slots)


def block_k_step(p: GemmProblem, mma: MmaInstr, block_k: int, plain_copies: int) -> tuple[int, list[Step]]:
    """Step 6: one 128-byte line per tile row per stage (at most K rounded up to the MMA k); MMA k
    when an operand is copied element by element (a stage then holds as few as possible)."""
    _, line = formula_step("block_k", F.block_k, f"one {LINE_BYTES}-byte line per tile row per stage (full coalescing), "
                           f"at most K rounded up to the MMA k={mma.k}", post=lambda v: block_k, line_bytes=LINE_BYTES,
                           elem_bytes=p.in_bytes)
    if not (plain_copies and block_k > mma.k):
        return block_k, [line]
    return mma.k, [line, note("block_k (element copies)", mma.k,
                              "a 16-bit operand with rows of odd length cannot use cp.async (4-byte minimum): its "
                              "elements pass through registers, so a stage holds as few as possible: block_k = MMA k")]


def registers(gpu: GPUModel, mma: MmaInstr, wm: int, wn: int, plain_copies: int,
              residual: bool = False) -> tuple[int, Step]:
    """Step 7a: registers per thread, fitted to ptxas (``F.regs``), at most the per-thread limit."""
    return formula_step("registers per thread", F.regs,
                        "accumulators + A/B fragments + ~40 for addresses and loop state (+24 per operand copied "
                        f"without cp.async{', +16 for the residual read in the epilogue' if residual else ''}); fitted "
                        "to ptxas, which the kernel's launch bounds then hold to",
                        post=lambda v: int(min(v, gpu.max_regs_per_thread)),
                        acc_regs=wm * wn // 32, frag_a_regs=FRAG_A_REGS, mma_tiles_m=wm // mma.m, frag_b_regs=FRAG_B_REGS,
                        mma_tiles_n=wn // mma.n, overhead_regs=OVERHEAD_REGS + RESIDUAL_REGS * residual,
                        plain_copy_regs=PLAIN_COPY_REGS, plain_copies=plain_copies)


def occupancy(gpu: GPUModel, warps: int, regs: int, stage_bytes: int) -> tuple[int, list[Step]]:
    """Step 7b: blocks per SM, the least of the register, thread, shared-memory and block limits."""
    bps_regs, by_regs = formula_step("blocks/SM (registers)", HW.bps_regs,
                                     "register file / registers per block (256-register warp granules)",
                                     regs_per_sm=gpu.regs_per_sm, warps=warps, regs=regs,
                                     reg_alloc_unit=gpu.reg_alloc_unit)
    bps_threads, by_threads = formula_step("blocks/SM (threads)", F.bps_threads, "resident threads per SM / threads per block",
                                           max_threads_per_sm=gpu.max_threads_per_sm, threads=32 * warps)
    bps_smem, by_smem = formula_step("blocks/SM (smem)", F.bps_smem, "shared memory per SM / (at least 2 stages + 1 KB "
                                     "reserved)", smem_per_sm=gpu.smem_per_sm, stage_bytes=stage_bytes,
                                     smem_reserved_per_block=gpu.smem_reserved_per_block)
    limits = {"registers": bps_regs, "threads": bps_threads, "smem": bps_smem, "block limit": gpu.max_blocks_per_sm}
    bps = int(min(limits.values()))
    return bps, [by_regs, by_threads, by_smem,
                 note("blocks per SM", bps, "min of " + ", ".join(f"{k} {int(v)}" for k, v in limits.items()))]


def fill(p: GemmProblem, gpu: GPUModel, mma: MmaInstr, block_m: int, block_n: int,
         bps: int) -> tuple[tuple[float, float, float], list[Step]]:
    """Step 7c: the SM slots, the output tiles (of one batch element; batched, a row with the work
    units, tiles x batch) and the block's L2 intensity."""
    slots, by_slots = formula_step("SM slots", F.slots, "blocks that run at once", sm_count=gpu.sm_count, blocks_per_sm=bps)
    tiles, by_tiles = formula_step("output tiles", F.tiles, "blocks of C", M=p.M, N=p.N, block_m=block_m, block_n=block_n)
    i_block, intensity = formula_step("block intensity", COST.I_block, f"FLOP per byte streamed from L2 "
                                      f"(B_l2 = {gpu.balance(p.dtype, 'l2', mma.family):.1f})",
                                      block_m=block_m, block_n=block_n, elem_bytes=p.in_bytes)
    batched = [] if p.batch == 1 else [note("work units", int(tiles) * p.batch, f"{int(tiles)} tiles x batch {p.batch}: "
                                            "one block per (batch element, tile), group-M within an element")]
    return (slots, tiles, i_block), [by_slots, by_tiles, *batched, intensity]


def split_k_step(p: GemmProblem, tiles: int, slots: float, k_iters: int) -> tuple[int, Step]:
    """Step 8: split K so the slots fill when the tiles (x batch) fill under half of them and K is
    long, unless the output is 16-bit or the epilogue is non-linear (partial sums add atomically),
    or the problem is batched (not supported: the batch elements fill the slots instead)."""
    if p.batch > 1:
        return 1, note("split-K", 1, f"not with a batch: its {p.batch} elements multiply the blocks instead "
                       f"({tiles} for {slots:.0f} slots; split-K is not supported for batched GEMMs)")
    if not (tiles < slots / 2 and k_iters >= MIN_SPLIT_K_ITERS):
        return 1, note("split-K", 1, f"tiles fill {min(tiles / slots, 1):.0%} of one wave"
                       + (f" and K has only {k_iters} block_k steps" if k_iters < MIN_SPLIT_K_ITERS else "") + ": no split")
    if p.atomic_split_reason:
        return 1, note("split-K", 1, f"tiles fill {tiles / slots:.0%} of the slots, but partial sums cannot add "
                       f"atomically: {p.atomic_split_reason}")
    return formula_step("split-K", F.split_k, "tiles fill under half of the SM slots: split K so the slots fill, keeping "
                        ">= 2 block_k iterations per slice (partial sums add atomically)",
                        post=lambda v: max(1, int(v)), slots=slots, tiles=tiles, k_iters=k_iters)


def pipeline_stages(p: GemmProblem, gpu: GPUModel, mma: MmaInstr, bps: int, tiles: int, split_k: int, i_block: float,
                    stage_bytes: int, k_slice_iters: int, plain_copies: int) -> tuple[tuple[int, int], list[Step]]:
    """Step 9 (after split-K: the K steps per slice bound the useful depth): Little's law, within the
    resident blocks' share of shared memory.  Returns (resident blocks per SM, stages)."""
    rate = gpu.tc_flops_per_clk_sm(mma.family, p.dtype)
    resident, by_resident = formula_step(
        "resident blocks per SM", F.resident, "blocks actually sharing an SM: the occupancy limit, or fewer when the grid "
        "is smaller than the machine (they alone must hide the latency, and they share its shared memory)",
        post=int, blocks_per_sm=bps, tiles=tiles, split_k=split_k, sm_count=gpu.sm_count)
    inflight, by_inflight = formula_step(
        "bytes in flight per SM", F.inflight, "Little's law: loaded memory latency x the rate an SM consumes operand "
        "bytes at its tensor peak", mem_latency_ns=gpu.mem_latency_ns, tc_flops_per_clk_sm=rate, clock_hz=gpu.clock_hz,
        I_block=i_block)
    latency, by_latency = formula_step("stages (latency)", F.stages, "one stage computing plus enough stages in flight, "
                                       "shared by the resident blocks", post=int, inflight=inflight,
                                       blocks_per_sm=resident, stage_bytes=stage_bytes)
    fit, by_smem = formula_step("stages (smem)", F.stages_max, "what fits in a resident block's share of shared memory",
                                post=lambda v: int(min(v, gpu.smem_per_block // stage_bytes)),
                                smem_per_sm=gpu.smem_per_sm, blocks_per_sm=resident,
                                smem_reserved_per_block=gpu.smem_reserved_per_block, stage_bytes=stage_bytes)
    stages = int(max(MIN_STAGES, min(latency, fit, max(MIN_STAGES, k_slice_iters))))
    steps = [by_resident, by_inflight, by_latency, by_smem,
             note("stages", stages, f"clamped to [{MIN_STAGES}, min(smem fit {fit}, K steps per slice {k_slice_iters})]")]
    if plain_copies and stages > PLAIN_COPY_STAGES:
        stages = PLAIN_COPY_STAGES
        steps.append(note("stages (element copies)", stages,
                          "element-wise copies keep every prefetched element in a register until it is stored "
                          "(ptxas: 174 registers at 2 stages, spills from 6 on 255x511x301 bf16): 2 stages"))
    return (resident, stages), steps


def raster(p: GemmProblem, slots: float, tiles: float, block_m: int, block_n: int) -> tuple[int, Step]:
    """Step 10: group-M rasterization, the tile rows per group that minimise a wave's L2 footprint."""
    tiles_m = cdiv(p.M, block_m)
    if tiles_m <= 1 or tiles <= 1:
        return 1, note("group-M", 1, "a single row of tiles: plain order")
    return formula_step("group-M", F.group_m, "rows of tiles per raster group: a wave of W blocks touching G row panels "
                        "of A and W/G column panels of B has the smallest footprint when G*block_m = (W/G)*block_n",
                        post=lambda v: int(min(tiles_m, max(1, round(v)))), slots=slots, tiles=tiles,
                        block_n=block_n, block_m=block_m)


def vectors_and_padding(p: GemmProblem, vector_a: int, vector_b: int, vector_c: int, pad_a: int,
                        pad_b: int) -> tuple[tuple[int, int, int], list[Step]]:
    """Step 11a: the copy widths (``copy_vector``) and the bank-conflict-free row pads (``smem_tiles``)."""
    b = p.in_bytes
    return (vector_a, vector_b, vector_c), [
        note("vector width", f"A {vector_a * b} B, B {vector_b * b} B, C {vector_c} elts",
             "widest cp.async (16/8/4 bytes) that divides the row length, so no copy straddles a row end; "
             "C stores pairs (the MMA fragment holds 2 adjacent columns)"),
        note("smem padding", f"A +{pad_a}, B +{pad_b} elements",
             "row stride in 4-byte words = 4 mod 8 where tile rows run along M or N, = 8 mod 16 for TF32 tiles "
             "whose rows run along K: the 32 lanes of a fragment load hit 32 different banks; pads are multiples "
             "of 16 bytes so cp.async stays aligned")]


def shared_memory(gpu: GPUModel, stages: int, stage_bytes: int, bps: int, resident: int) -> tuple[int, list[Step]]:
    """Step 11b: the ring's shared memory, and the blocks per SM it leaves room for (deeper pipelines
    only where fewer blocks than the occupancy limit are resident anyway)."""
    smem_bytes = stages * stage_bytes
    steps = [note("shared memory", f"{smem_bytes} B", f"{stages} stages x {stage_bytes} B per stage")]
    bps_smem = int(gpu.smem_per_sm // (smem_bytes + gpu.smem_reserved_per_block))
    if bps_smem < bps:
        bps = bps_smem
        steps.append(note("blocks per SM (final)", bps_smem, f"{stages} stages leave room for {bps_smem} blocks; "
                          f"the grid keeps at most {resident} per SM busy"))
    return bps, steps


def check_schedule(p: GemmProblem, s: Schedule, gpu: GPUModel) -> list[str]:
    """Hardware and code-generator limits a schedule must satisfy; returns the violations."""
    out = []
    if s.smem_bytes + gpu.smem_reserved_per_block > gpu.smem_per_block + gpu.smem_reserved_per_block:
        out.append(f"smem {s.smem_bytes} B > {gpu.smem_per_block:.0f} B per block")
    if s.blocks_per_sm * (s.smem_bytes + gpu.smem_reserved_per_block) > gpu.smem_per_sm:
        out.append(f"{s.blocks_per_sm} blocks x {s.smem_bytes} B smem > {gpu.smem_per_sm:.0f} B per SM")
    if s.threads_per_block > gpu.max_threads_per_block:
        out.append(f"{s.threads_per_block} threads > {gpu.max_threads_per_block:.0f}")
    if s.blocks_per_sm < 1:
        out.append("not even one block fits on an SM")
    if s.regs_per_thread > gpu.max_regs_per_thread:
        out.append(f"{s.regs_per_thread} registers > {gpu.max_regs_per_thread:.0f}")
    if s.blocks_per_sm * s.threads_per_block * s.regs_per_thread > gpu.regs_per_sm:
        out.append("register file overflow at the stated blocks per SM")
    if s.mma.family == "wgmma" and s.hopper is None:
        out.append("a wgmma schedule without its Hopper plan (schedule.hopper)")
    elif s.mma.family == "wgmma":   # each consumer warpgroup owns a 64 x wgmma-N slab (rows along N if swapped)
        rows, cols = (s.block_n, s.block_m) if s.swap_ab else (s.block_m, s.block_n)
        if rows % (s.tile_slabs * s.mma.m) or cols % s.mma.n or s.block_k % s.mma.k:   # ping-pong: a warpgroup's slabs
            out.append(f"tile {s.block_m}x{s.block_n}x{s.block_k} is not a multiple of warpgroups x wgmma shape")
    elif s.block_m % (s.warps_m * s.mma.m) or s.block_n % (s.warps_n * s.mma.n) or s.block_k % s.mma.k:
        out.append(f"tile {s.block_m}x{s.block_n}x{s.block_k} is not a multiple of warps x MMA shape")
    if s.stages < 2:
        out.append("fewer than 2 pipeline stages")
    if s.split_k < 1:
        out.append(f"split_k={s.split_k}")
    if s.split_reduction not in SPLIT_REDUCTIONS:
        out.append(f"split reduction {s.split_reduction!r}")
    if s.zero_output and p.atomic_split_reason:
        out.append(f"atomic split-K: {p.atomic_split_reason}")
    if s.split_workspace and s.mma.family != "wgmma":
        out.append("a split-K workspace on the mma.sync kernel (Hopper only)")
    if s.stream_k and (s.mma.family != "wgmma" or s.split_k != 1 or p.batch > 1):
        out.append("stream-K runs on the Hopper kernel only, unbatched, without split-K")
    return out


def batch_aligned(p: GemmProblem, op: str, row_len: int) -> int:
    """The length a vector of operand ``op`` must divide: its rows' ``row_len``, and batched its batch
    stride too (gcd; a broadcast or unbatched operand: ``row_len``), so that no vector straddles a
    row and every batch element's matrix starts as aligned as the first."""
    return math.gcd(row_len, p.batch_stride(op))


def copy_vector(row_len: int, elem_bytes: int) -> int:
    """Elements per cp.async: 16, 8 or 4 bytes, the widest whose element count divides the row."""
    for nbytes in (16, 8, 4):
        v = nbytes // elem_bytes
        if v >= 1 and row_len % v == 0:
            return v
    return 1


def _stride_pad(row_elems: int, elem_bytes: int, residue: int, modulus: int) -> int:
    """Smallest padding (a multiple of 16 bytes) making the row stride in words = residue mod modulus."""
    step = 16 // elem_bytes
    pad = 0
    while ((row_elems + pad) * elem_bytes // 4) % modulus != residue:
        pad += step
    return pad


def smem_tiles(p: GemmProblem, block_m: int, block_n: int, block_k: int):
    """Shared-memory tiles as ``(rows, cols, pad)`` for A and B.  Tiles keep the global layout (rows
    of the tile are rows in memory, so cp.async copies stay contiguous).  The MMA fragment loads read
    8 rows x 4 words where the tile's rows run along M or N (stride = 4 mod 8 words makes them hit 32
    banks; also right for 16-byte ldmatrix rows) and 4 rows x 8 words where the rows run along K
    (scalar TF32 reads: stride = 8 mod 16 words).  Pads are multiples of 16 bytes for cp.async."""
    b = p.in_bytes

    def tile(rows, cols, rows_along_k):
        if rows_along_k and b == 4:
            return rows, cols, _stride_pad(cols, b, 8, 16)
        return rows, cols, _stride_pad(cols, b, 4, 8)

    a = tile(block_k, block_m, True) if p.trans_a else tile(block_m, block_k, False)
    bt = tile(block_n, block_k, False) if p.trans_b else tile(block_k, block_n, True)
    return a, bt
