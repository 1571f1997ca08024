"""The Analytic Configurator for GEMM: every schedule decision in closed form, with its reason.

Order of decisions (each one a ``Step`` in the derivation):
 1. instruction      tensor-core family and shape for the dtype on this target
 2. balances         machine balance (FLOP/B) of shared memory, L2 and DRAM
 3. warp tile        largest accumulator tile the register budget allows; checked against smem balance
 4. block tile       warp grid so the block's L2 intensity clears the L2 balance, clamped to the problem
 5. waves            shrink the block tile while the output tiles cannot fill every SM slot
 6. block_k          one 128-byte line per tile row per stage
 7. occupancy        blocks per SM from registers, threads and shared memory
 8. stages           Little's law: bytes in flight = latency x consumption rate, within shared memory
 9. split-K          when the tiles still fill less than half the machine and K is long
10. rasterization    group-M so one wave's A and B panels have the smallest L2 footprint
11. vectors, padding 16-byte copies when rows allow; row padding that makes fragment loads conflict-free
12. prediction       the cost model (``cost.py``)
No search and no measurement: the same inputs always give the same schedule.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from nova.configurator.cost import BLOCK_INTENSITY, WARP_INTENSITY, cdiv, predict
from nova.configurator.derivation import Derivation, NullDerivation
from nova.configurator.hopper import configure_hopper, hopper_supported
from nova.configurator.problem import GemmProblem
from nova.configurator.schedule import MmaInstr, Prediction, Schedule, Step
from nova.hwmodel import GPUModel, get_target
from nova.hwmodel.formula import Formula


class ScheduleError(RuntimeError):
    """The configurator produced a schedule that violates a hardware limit (a Nova bug)."""


@dataclass(frozen=True)
class Config:
    problem: GemmProblem
    target: GPUModel
    schedule: Schedule
    prediction: Prediction
    derivation: tuple[Step, ...]
    config_time_ms: float = field(default=0.0, compare=False)

    @property
    def calibrated_time_us(self) -> float | None:
        """The prediction with the target's fitted efficiency constants (``bench/calibrate.py``), when
        a calibration exists for this target and instruction family; None otherwise.  Schedule
        decisions never use it: it reports, it does not choose."""
        clock_and_time = self._calibrated()
        return None if clock_and_time is None else float(clock_and_time[1])

    @property
    def calibrated_clock_mhz(self) -> float | None:
        """The SM clock the calibration predicts for this kernel (its power-limited clock), when the
        calibration has the power constants; None otherwise."""
        clock_and_time = self._calibrated()
        return None if clock_and_time is None or clock_and_time[0] is None else float(clock_and_time[0])

    def _calibrated(self):
        from nova.hwmodel.calibration import clock_and_time, load
        cal = load(self.target.name, self.schedule.mma.family)
        if cal is None:
            return None
        return clock_and_time(self.prediction.terms_us, self.schedule.split_k, cal["constants"])

    def to_dict(self) -> dict:
        s = self.schedule
        sched = s.to_dict()
        sched.update(warps=s.warps, threads_per_block=s.threads_per_block, warp_tile_m=s.warp_tile_m,
                     warp_tile_n=s.warp_tile_n, grid=list(s.grid(self.problem.M, self.problem.N)),
                     mma=str(s.mma), mma_instr=s.mma.__dict__ | {})
        return {"op": "matmul", "M": self.problem.M, "N": self.problem.N, "K": self.problem.K,
                "dtype": self.problem.dtype, "target": self.target.name, "arch": self.target.arch,
                "problem": self.problem.to_dict(), "schedule": sched, "prediction": self.prediction.to_dict(),
                "derivation": [st.to_dict() for st in self.derivation], "config_time_ms": self.config_time_ms,
                "calibrated_time_us": self.calibrated_time_us, "calibrated_clock_mhz": self.calibrated_clock_mhz}


# ---- formulas (each shown in the derivation) ------------------------------------------------
SMEM_BALANCE = Formula("B_smem", "tc_flops_per_clk_sm / smem_bytes_per_clk_sm")
L2_BALANCE = Formula("B_l2", "peak_flops / l2_bw")
DRAM_BALANCE = Formula("B_dram", "peak_flops / dram_bw")
ACC_BUDGET = Formula("acc_regs", "ceil(max_regs_per_thread / 4)")
WARP_TILE_AREA = Formula("warp_area", "2**floor(log(32 * acc_regs, 2))")
WARP_TILE_MIN = Formula("W_min", "elem_bytes * B_smem")
BLOCK_SIDE_MIN = Formula("T_min", "elem_bytes * B_l2")
SLOTS = Formula("slots", "sm_count * blocks_per_sm")
TILES = Formula("tiles", "ceil(M / block_m) * ceil(N / block_n)")
BLOCK_K = Formula("block_k", "line_bytes / elem_bytes")
REGS = Formula("regs", "acc_regs + frag_a_regs * mma_tiles_m + frag_b_regs * mma_tiles_n + overhead_regs "
                       "+ plain_copy_regs * plain_copies")
BPS_REGS = Formula("bps_regs", "floor(regs_per_sm / (warps * ceil(regs * 32 / reg_alloc_unit) * reg_alloc_unit))")
BPS_THREADS = Formula("bps_threads", "floor(max_threads_per_sm / threads)")
BPS_SMEM = Formula("bps_smem", "floor(smem_per_sm / (2 * stage_bytes + smem_reserved_per_block))")
STAGE_BYTES = Formula("stage_bytes", "(a_rows * (a_cols + pad_a) + b_rows * (b_cols + pad_b)) * elem_bytes")
INFLIGHT = Formula("inflight", "1e-9 * clock_hz * mem_latency_ns * tc_flops_per_clk_sm / I_block")
STAGES = Formula("stages", "1 + ceil(inflight / (blocks_per_sm * stage_bytes))")
RESIDENT = Formula("resident", "Min(blocks_per_sm, ceil(tiles * split_k / sm_count))")
STAGES_SMEM = Formula("stages_max", "floor((smem_per_sm / blocks_per_sm - smem_reserved_per_block) / stage_bytes)")
SPLIT_K = Formula("split_k", "Min(floor(slots / tiles), floor(k_iters / 2))")
GROUP_M = Formula("group_m", "sqrt(Min(slots, tiles) * block_n / block_m)")

LINE_BYTES = 128          # a full L2 cache line per row and stage
ILP_WARP_MIN = 32         # >= 8 independent m16n8 MMAs per warp per k-step hide the tensor pipe latency [EST]
OVERHEAD_REGS = 40        # addresses, loop counters, predicates; fitted to ptxas on Nova's kernels (test_pipeline)
PLAIN_COPY_REGS = 24      # an operand staged by plain loads (16-bit rows of odd length: no cp.async) holds its
                          # elements in registers; fitted to ptxas (bf16 255x511x300 TT: +18 registers)


def configure(problem: GemmProblem, target: "GPUModel | str" = "rtx3060", *, family: str | None = None) -> Config:
    """Derive the schedule for ``problem`` on ``target``.  Pure and deterministic.

    ``family`` picks the tensor-core instruction family: None = the fastest the target and the code
    generator support (wgmma on Hopper unless ``NOVA_HOPPER=0``), ``"mma.sync"`` = the Ampere-class
    path on any target (used by the oracle's schedule space)."""
    if family not in (None, "mma.sync", "wgmma"):
        raise ValueError(f"unknown MMA family {family!r}; choose mma.sync or wgmma")
    t0 = time.perf_counter()
    gpu = get_target(target)
    d = Derivation()
    p = problem
    b = p.in_bytes

    # ---- Hopper (issue 4): the wgmma/TMA path, rules in hopper.py; on by default for targets with
    # wgmma (the H200 sweep passed: 652/652, sanitizer clean); NOVA_HOPPER=0 forces mma.sync.
    if family == "wgmma" and not use_hopper(p, gpu, forced=True):
        from nova.hwmodel import TargetError
        raise TargetError(f"the wgmma path does not apply to {p.describe()} on {gpu.name} ({gpu.arch})")
    if family != "mma.sync" and use_hopper(p, gpu, forced=family == "wgmma"):
        schedule, prediction = configure_hopper(p, gpu, d)
        d.note("prediction", f"{prediction.time_us:.1f} us",
               f"{prediction.tflops:.1f} TFLOP/s, {prediction.bound}-bound; roofline floor {prediction.floor_us:.1f} us")
        return Config(p, gpu, schedule, prediction, tuple(d.steps), (time.perf_counter() - t0) * 1e3)

    # 1. instruction --------------------------------------------------------------------------
    family = "mma.sync"
    if not gpu.supports(family, p.dtype):
        from nova.hwmodel import TargetError
        raise TargetError(f"{gpu.name} ({gpu.arch}) has no {family} tensor-core path for {p.dtype}")
    m, n, k = gpu.mma_shapes[family][p.dtype]
    mma = MmaInstr(family, m, n, k, "f16" if p.dtype == "fp16" else p.dtype)
    why = f"{p.dtype} on {gpu.arch}: {family} shape m{m}n{k and n}k{k}, FP32 accumulate"
    if "wgmma" in gpu.features:
        why += "; wgmma (Hopper) is faster but its code path is not generated yet (issue 4)"
    d.note("instruction", str(mma), why)
    rate = gpu.tc_flops_per_clk_sm(family, p.dtype)
    peak = gpu.peak_flops(p.dtype, family)

    # 2. balances -----------------------------------------------------------------------------
    b_smem = d.apply("smem balance", SMEM_BALANCE, "FLOP per shared-memory byte the tensor cores need per SM",
                     tc_flops_per_clk_sm=rate, smem_bytes_per_clk_sm=gpu.smem_bytes_per_clk_sm)
    b_l2 = d.apply("L2 balance", L2_BALANCE, "FLOP per L2 byte at the tensor-core peak",
                   peak_flops=peak, l2_bw=gpu.l2_bw)
    d.apply("DRAM balance", DRAM_BALANCE, "FLOP per DRAM byte at the tensor-core peak (roofline ridge)",
            peak_flops=peak, dram_bw=gpu.dram_bw)

    # 3. warp tile ----------------------------------------------------------------------------
    acc_regs = d.apply("accumulator budget", ACC_BUDGET,
                       "accumulators get a quarter of a thread's registers: Nova's generated code needs ~120 more for "
                       "fragments, 64-bit addresses and epilogues (ptxas, tests/test_pipeline.py), and every layout "
                       "and epilogue must stay spill-free",
                       max_regs_per_thread=gpu.max_regs_per_thread)
    area = d.apply("warp tile area", WARP_TILE_AREA,
                   "largest power-of-two warp tile whose FP32 accumulators (area/32 per lane) fit the budget",
                   post=int, acc_regs=acc_regs)
    warp_m = 1 << ((area.bit_length()) // 2)          # as square as possible, the M side the longer
    warp_n = area // warp_m
    w_min = d.apply("warp tile (smem)", WARP_TILE_MIN,
                    f"smallest square warp tile whose smem intensity W/elem_bytes clears B_smem; the register-bound "
                    f"tile {warp_m}x{warp_n} is chosen: more reuse per fragment, more independent MMAs",
                    elem_bytes=b, B_smem=b_smem)
    i_warp = WARP_INTENSITY(warp_m=warp_m, warp_n=warp_n, elem_bytes=b)
    if i_warp < b_smem:
        d.note("warp tile limit", f"{warp_m}x{warp_n}",
               f"registers cap the warp tile's smem intensity at {i_warp:.1f} < B_smem {b_smem:.1f} FLOP/B "
               f"(square side {w_min:.0f} needed): shared memory, not the tensor cores, will bound this kernel")

    # 4. block tile ---------------------------------------------------------------------------
    t_min = d.apply("block side (L2)", BLOCK_SIDE_MIN,
                    "square block side whose L2 intensity 2*B*B/(2*B*elem_bytes) = B/elem_bytes clears B_l2",
                    elem_bytes=b, B_l2=b_l2)
    warps_m, warps_n = 2, 2                         # 4 warps: one per warp scheduler
    while min(warps_m * warp_m, warps_n * warp_n) < t_min and warps_m * warps_n < 8:
        if warps_n * warp_n <= warps_m * warp_m:
            warps_n *= 2
        else:
            warps_m *= 2
    block_m, block_n = warps_m * warp_m, warps_n * warp_n
    d.note("block tile", f"{block_m}x{block_n}",
           f"{warps_m}x{warps_n} warps of {warp_m}x{warp_n} (at least one warp per scheduler, at most 8 warps); "
           f"block side {min(block_m, block_n)} vs T_min {t_min:.0f}")
    # clamp to the problem: no tile dimension beyond the next power of two of M or N
    cm = max(16, 1 << (p.M - 1).bit_length())
    cn = max(16, 1 << (p.N - 1).bit_length())
    if cm < block_m or cn < block_n:
        block_m, block_n = min(block_m, cm), min(block_n, cn)
        d.note("clamp to problem", f"{block_m}x{block_n}",
               f"M={p.M}, N={p.N}: tiles no larger than the next power of two of the problem (min 16)")

    block_k = min(int(LINE_BYTES // b), max(k, cdiv(p.K, k) * k))

    # 5. waves: halve the block tile while tiles cannot fill the SM slots and the model gains ----
    quiet = NullDerivation()
    best = _plan(p, gpu, mma, block_m, block_n, block_k, warp_m, warp_n, quiet)
    min_side = max(2 * m, ILP_WARP_MIN)
    while True:
        s_cur, pred_cur, tiles, slots = best
        if tiles >= slots:
            break
        options = []
        if block_n > min_side and cdiv(p.N, block_n // 2) > cdiv(p.N, block_n):
            options.append((block_m, block_n // 2))
        if block_m > min_side and cdiv(p.M, block_m // 2) > cdiv(p.M, block_m):
            options.append((block_m // 2, block_n))
        if not options:
            break
        # halve the larger side first (N on ties: keeps rows of B long for coalescing)
        options.sort(key=lambda t: (t[0] * t[1], -t[1] if block_n >= block_m else -t[0]))
        bm, bn = max(options, key=lambda t: (t[1] < block_n) if block_n >= block_m else (t[0] < block_m))
        cand = _plan(p, gpu, mma, bm, bn, block_k, warp_m, warp_n, quiet)
        if cand[1].time_us >= pred_cur.time_us:
            d.note("wave fill", f"keep {block_m}x{block_n}",
                   f"{tiles} tiles for {slots:.0f} slots, but halving to {bm}x{bn} would not help: model "
                   f"{cand[1].time_us:.1f} us vs {pred_cur.time_us:.1f} us: no predicted gain")
            break
        d.note("wave fill", f"{bm}x{bn}",
               f"{tiles} tiles cannot fill {slots:.0f} SM slots; halving the larger side -> {cand[2]} tiles, "
               f"model {pred_cur.time_us:.1f} -> {cand[1].time_us:.1f} us", "tiles < sm_count * blocks_per_sm")
        block_m, block_n, best = bm, bn, cand

    # 6-11 for the chosen tile, recorded ---------------------------------------------------------
    schedule, prediction, _, _ = _plan(p, gpu, mma, block_m, block_n, block_k, warp_m, warp_n, d)
    violations = check_schedule(p, schedule, gpu)
    if violations:
        raise ScheduleError(f"configurator produced an illegal schedule for {p.describe()} on {gpu.name}: "
                            + "; ".join(violations))
    d.note("prediction", f"{prediction.time_us:.1f} us",
           f"{prediction.tflops:.1f} TFLOP/s, {prediction.bound}-bound; roofline floor {prediction.floor_us:.1f} us")
    elapsed = (time.perf_counter() - t0) * 1e3
    return Config(p, gpu, schedule, prediction, tuple(d.steps), elapsed)


def use_hopper(p: GemmProblem, gpu: GPUModel, forced: bool = False) -> bool:
    """The wgmma path applies: the target has wgmma/TMA, the problem is supported, and (unless
    ``forced``) the user did not opt out with ``NOVA_HOPPER=0``."""
    import os
    if not forced and os.environ.get("NOVA_HOPPER", "1") == "0":
        return False
    return hopper_supported(p, gpu)[0]


def _plan(p: GemmProblem, gpu: GPUModel, mma: MmaInstr, block_m: int, block_n: int, block_k: int,
          warp_m: int, warp_n: int, d: Derivation):
    """Steps 6-11 for a given block tile: occupancy, split-K, stages, raster, vectors, padding.
    Returns (schedule, prediction, tiles, slots)."""
    b = p.in_bytes
    rate = gpu.tc_flops_per_clk_sm(mma.family, p.dtype)
    d.apply("block_k", BLOCK_K, f"one {LINE_BYTES}-byte line per tile row per stage (full coalescing), "
            f"at most K rounded up to the MMA k={mma.k}", post=lambda v: block_k, line_bytes=LINE_BYTES, elem_bytes=b)

    # vectors first: a copy path without cp.async costs registers
    vector_a = _vector(p.M if p.trans_a else p.K, b)
    vector_b = _vector(p.K if p.trans_b else p.N, b)
    plain_copies = sum(1 for v in (vector_a, vector_b) if v * b < 4)
    wm, wn = min(warp_m, block_m), min(warp_n, block_n)
    wgm, wgn = block_m // wm, block_n // wn
    threads = 32 * wgm * wgn
    if plain_copies and block_k > mma.k:
        block_k = d.note("block_k (element copies)", mma.k,
                         "a 16-bit operand with rows of odd length cannot use cp.async (4-byte minimum): its elements "
                         "pass through registers, so a stage holds as few as possible: block_k = MMA k")
    # 7. occupancy
    (a_rows, a_cols, pad_a), (b_rows, b_cols, pad_b) = smem_tiles(p, block_m, block_n, block_k)
    regs = d.apply("registers per thread", REGS,
                   "accumulators + A/B fragments + ~40 for addresses and loop state (+24 per operand copied "
                   "without cp.async); fitted to ptxas, which the kernel's launch bounds then hold to",
                   post=lambda v: int(min(v, gpu.max_regs_per_thread)),
                   acc_regs=wm * wn // 32, frag_a_regs=4, mma_tiles_m=wm // mma.m, frag_b_regs=2,
                   mma_tiles_n=wn // mma.n, overhead_regs=OVERHEAD_REGS, plain_copy_regs=PLAIN_COPY_REGS,
                   plain_copies=plain_copies)
    stage_bytes = STAGE_BYTES(a_rows=a_rows, a_cols=a_cols, pad_a=pad_a, b_rows=b_rows, b_cols=b_cols, pad_b=pad_b,
                              elem_bytes=b)
    limits = {
        "registers": d.apply("blocks/SM (registers)", BPS_REGS, "register file / registers per block (256-register warp granules)",
                             regs_per_sm=gpu.regs_per_sm, warps=wgm * wgn, regs=regs, reg_alloc_unit=gpu.reg_alloc_unit),
        "threads": d.apply("blocks/SM (threads)", BPS_THREADS, "resident threads per SM / threads per block",
                           max_threads_per_sm=gpu.max_threads_per_sm, threads=threads),
        "smem": d.apply("blocks/SM (smem)", BPS_SMEM, "shared memory per SM / (at least 2 stages + 1 KB reserved)",
                        smem_per_sm=gpu.smem_per_sm, stage_bytes=stage_bytes, smem_reserved_per_block=gpu.smem_reserved_per_block),
        "block limit": gpu.max_blocks_per_sm,
    }
    bps = int(min(limits.values()))
    d.note("blocks per SM", bps, "min of " + ", ".join(f"{k} {int(v)}" for k, v in limits.items()))
    slots = d.apply("SM slots", SLOTS, "blocks that run at once", sm_count=gpu.sm_count, blocks_per_sm=bps)
    tiles = d.apply("output tiles", TILES, "blocks of C", M=p.M, N=p.N, block_m=block_m, block_n=block_n)
    i_block = d.apply("block intensity", BLOCK_INTENSITY, f"FLOP per byte streamed from L2 "
                      f"(B_l2 = {gpu.balance(p.dtype, 'l2', mma.family):.1f})", block_m=block_m, block_n=block_n, elem_bytes=b)

    # 9. split-K
    k_iters = cdiv(p.K, block_k)
    split_k = 1
    if tiles < slots / 2 and k_iters >= 4:
        if p.out_bytes < 4:
            d.note("split-K", 1, f"tiles fill {tiles / slots:.0%} of the slots, but partial sums added atomically "
                   f"into a {p.out_dtype} output would be rounded to 16 bits at every add")
        elif p.activation != "none":
            d.note("split-K", 1, f"tiles fill {tiles / slots:.0%} of the slots, but a {p.activation} epilogue "
                   "cannot be applied to partial sums")
        else:
            split_k = max(1, int(d.apply("split-K", SPLIT_K,
                                         "tiles fill under half of the SM slots: split K so the slots fill, "
                                         "keeping >= 2 block_k iterations per slice (partial sums add atomically)",
                                         slots=slots, tiles=tiles, k_iters=k_iters)))
    else:
        d.note("split-K", 1, f"tiles fill {min(tiles / slots, 1):.0%} of one wave"
               + (f" and K has only {k_iters} block_k steps" if k_iters < 4 else "") + ": no split")

    # 8. stages (after split-K: the K steps per slice bound the useful depth)
    k_slice_iters = cdiv(k_iters, split_k)
    resident = d.apply("resident blocks per SM", RESIDENT,
                       "blocks actually sharing an SM: the occupancy limit, or fewer when the grid is smaller "
                       "than the machine (they alone must hide the latency, and they share its shared memory)",
                       post=int, blocks_per_sm=bps, tiles=tiles, split_k=split_k, sm_count=gpu.sm_count)
    inflight = d.apply("bytes in flight per SM", INFLIGHT,
                       "Little's law: loaded memory latency x the rate an SM consumes operand bytes at its tensor peak",
                       mem_latency_ns=gpu.mem_latency_ns, tc_flops_per_clk_sm=rate, clock_hz=gpu.clock_hz, I_block=i_block)
    stages = d.apply("stages (latency)", STAGES, "one stage computing plus enough stages in flight, shared by the "
                     "resident blocks", post=int, inflight=inflight, blocks_per_sm=resident, stage_bytes=stage_bytes)
    stages_max = d.apply("stages (smem)", STAGES_SMEM, "what fits in a resident block's share of shared memory",
                         post=lambda v: int(min(v, gpu.smem_per_block // stage_bytes)),
                         smem_per_sm=gpu.smem_per_sm, blocks_per_sm=resident,
                         smem_reserved_per_block=gpu.smem_reserved_per_block, stage_bytes=stage_bytes)
    stages = int(max(2, min(stages, stages_max, max(2, k_slice_iters))))
    d.note("stages", stages, f"clamped to [2, min(smem fit {stages_max}, K steps per slice {k_slice_iters})]")
    if plain_copies and stages > 2:
        stages = d.note("stages (element copies)", 2,
                        "element-wise copies keep every prefetched element in a register until it is stored "
                        "(ptxas: 174 registers at 2 stages, spills from 6 on 255x511x301 bf16): 2 stages")

    # 10. rasterization
    tiles_m = cdiv(p.M, block_m)
    group_m = 1
    if tiles_m > 1 and tiles > 1:
        group_m = d.apply("group-M", GROUP_M,
                          "rows of tiles per raster group: a wave of W blocks touching G row panels of A and W/G "
                          "column panels of B has the smallest footprint when G*block_m = (W/G)*block_n",
                          post=lambda v: int(min(tiles_m, max(1, round(v)))), slots=slots, tiles=tiles,
                          block_n=block_n, block_m=block_m)
    else:
        d.note("group-M", 1, "a single row of tiles: plain order")

    # 11. vectors and padding
    vector_c = 2 if p.N % 2 == 0 else 1
    d.note("vector width", f"A {vector_a * b} B, B {vector_b * b} B, C {vector_c} elts",
           "widest cp.async (16/8/4 bytes) that divides the row length, so no copy straddles a row end; "
           "C stores pairs (the MMA fragment holds 2 adjacent columns)")
    d.note("smem padding", f"A +{pad_a}, B +{pad_b} elements",
           "row stride in 4-byte words = 4 mod 8 where tile rows run along M or N, = 8 mod 16 for TF32 tiles "
           "whose rows run along K: the 32 lanes of a fragment load hit 32 different banks; pads are multiples "
           "of 16 bytes so cp.async stays aligned")
    smem_bytes = stages * stage_bytes
    d.note("shared memory", f"{smem_bytes} B", f"{stages} stages x {stage_bytes} B per stage")
    bps_smem = int(gpu.smem_per_sm // (smem_bytes + gpu.smem_reserved_per_block))
    if bps_smem < bps:
        # deeper pipelines only where fewer blocks than the occupancy limit are resident anyway
        bps = d.note("blocks per SM (final)", bps_smem, f"{stages} stages leave room for {bps_smem} blocks; "
                     f"the grid keeps at most {resident} per SM busy")
    schedule = Schedule(
        arch=gpu.arch, mma=mma, block_m=block_m, block_n=block_n, block_k=block_k, warps_m=wgm, warps_n=wgn,
        stages=stages, smem_layout="pad", smem_pad_a=pad_a, smem_pad_b=pad_b, smem_bytes=int(smem_bytes),
        vector_a=vector_a, vector_b=vector_b, vector_c=vector_c, split_k=split_k, group_m=group_m,
        regs_per_thread=regs, blocks_per_sm=bps)
    return schedule, predict(p, schedule, gpu), int(tiles), int(slots)


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
    if s.mma.family == "wgmma":     # each consumer warpgroup owns a 64 x wgmma-N slab (rows along N if swapped)
        rows, cols = (s.block_n, s.block_m) if s.swap_ab else (s.block_m, s.block_n)
        if rows % (s.consumer_warpgroups * s.mma.m) or cols % s.mma.n or s.block_k % s.mma.k:
            out.append(f"tile {s.block_m}x{s.block_n}x{s.block_k} is not a multiple of warpgroups x wgmma shape")
    elif s.block_m % (s.warps_m * s.mma.m) or s.block_n % (s.warps_n * s.mma.n) or s.block_k % s.mma.k:
        out.append(f"tile {s.block_m}x{s.block_n}x{s.block_k} is not a multiple of warps x MMA shape")
    if s.stages < 2:
        out.append("fewer than 2 pipeline stages")
    if s.split_k < 1 or (s.split_k > 1 and p.activation != "none"):
        out.append("split-K with a non-linear epilogue")
    if s.split_k > 1 and p.out_bytes < 4:
        out.append("split-K into a 16-bit output")
    return out


def _vector(row_len: int, elem_bytes: int) -> int:
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
