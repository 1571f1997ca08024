"""Hopper rules (issue 4): the wgmma schedule in closed form, each decision explained.

Used by ``configure()`` when the target has wgmma (unless ``NOVA_HOPPER=0``).
The kernel it configures is ``nova/codegen/gemm_hopper.py``: one producer warpgroup (TMA), C
consumer warpgroups each owning a 64 x N slab (wgmma m64nNk), a ring of S stages of 128-byte
swizzled K panels, a persistent grid.  Decisions, in order:

 1. instruction        wgmma.m64nNk{8,16}, FP32 accumulate; TF32 rounding by the TMA unit (TFLOAT32 maps)
 2. operand roles      which operand is the wgmma A (registers for 32-bit MN-major data: C^T = B^T A^T)
 3. register budget    the producer keeps 56 registers/thread (setmaxnreg.dec); the consumers share the rest
 4. consumer WGs, N    largest N <= 256 whose N/2 accumulators + overhead fit; as many WGs as fit the budget
 5. smem traffic       bytes/clock the wgmma operand reads + TMA writes need at the tensor peak vs 128 B/clk:
                       the reason N = 256 (80 + 48 = 128 B/clk for TF32) beats N = 128 (96 + 64 = 160)
 6. tile and split     of the few tile shapes (1-2 WGs x N, N/2, N/4) and K splits, the one step 13's model
                       predicts fastest (smaller tiles or K slices give idle SMs work at a price)
 7. stages             as many as fit the per-block shared memory (a deeper ring only hides more latency)
 8. TMA boxes          [BK = 128 B of K] x [block_m] and x [block_n], 128-byte swizzle = the wgmma descriptor layout
 9. cluster            1x1 (multicast not generated yet)
10. grid               persistent: min(tiles x K slices, SMs) CTAs walk the work units
11. rasterization      group-M, as for the mma.sync path
12. operand prep       which operands need a transpose/pad pass (TMA needs 16-byte aligned rows)
13. prediction         max(tensor x smem cap, L2 fills at each SM's port, DRAM) + first fill + epilogues
                       + prep + split-K + launches (``time_terms``, ``total_time``)
"""
from __future__ import annotations

import math

from nova.configurator.cost import cdiv
from nova.configurator.problem import GemmProblem
from nova.configurator.schedule import MmaInstr, Prediction, Schedule
from nova.hwmodel.formula import Formula

WG_THREADS = 128
PRODUCER_REGS = 56            # producer warpgroup after setmaxnreg.dec: one thread issues the TMA loads (at 40
                              # ptxas spilled the producer's address math on some shapes, e.g. 8192x1536x512 bf16)
SETMAXNREG_MAX = 232          # registers a thread may hold after setmaxnreg.inc (less than 255: PTX ISA)
CONSUMER_OVERHEAD_REGS = 40   # descriptors, ring counters, epilogue addresses; ptxas: 168 regs at N=256 (128 acc)
SWIZZLE = 128                 # bytes of K per smem row = TMA box inner extent = 128B swizzle span
SLACK = 1024                  # runtime alignment of the ring to 1024 B (128B-swizzle atom)

CONSUMER_REGS = Formula("consumer_regs", "floor((regs_per_sm - 128 * producer_regs) / (128 * wgs) / 8) * 8")


def consumer_regs(regs_per_sm: int, wgs: int) -> int:
    """setmaxnreg target of each consumer thread: what the producer gives back, shared by ``wgs``
    consumer warpgroups, a multiple of 8, at most SETMAXNREG_MAX."""
    return min(SETMAXNREG_MAX, int(CONSUMER_REGS(regs_per_sm=regs_per_sm, producer_regs=PRODUCER_REGS, wgs=wgs)))
SMEM_TRAFFIC = Formula("smem_traffic", "rate * elem_bytes * ((64 + N) / (128 * N) + (block_m + N) / (2 * block_m * N))")
SMEM_CAP = Formula("smem_cap", "Min(1, smem_bytes_per_clk / smem_traffic)")
STAGES = Formula("stages", "floor((smem_per_block - 1024) / ((block_m + N) * 128))")
GROUP_M = Formula("group_m", "sqrt(Min(sm_count, tiles) * block_n / block_m)")


MIN_SLICE_K_TILES = 8          # a K slice streams >= 8 K tiles: the ring fill and the atomic epilogue amortise
LAUNCH_S = 5e-6                # per kernel launch (the memset of split-K, each prep pass)


def smem_cap(p: GemmProblem, gpu, block_i: int, n: int) -> float:
    """Fraction of the tensor peak shared memory can feed a block_i x n tile (step 4's formulas)."""
    rate = gpu.tc_flops_per_clk_sm("wgmma", p.dtype)
    traffic = SMEM_TRAFFIC(rate=rate, elem_bytes=p.in_bytes, N=n, block_m=block_i)
    return float(SMEM_CAP(smem_bytes_per_clk=gpu.smem_bytes_per_clk_sm, smem_traffic=traffic))


def mainloop_time(p: GemmProblem, gpu, block_i: int, n: int, units: int, ktiles: int, split: int = 1,
                  terms: bool = False):
    """Seconds for ``units`` work units (tile x K slice) on a persistent grid.  The busiest SM runs
    ceil(units / SMs) of them, each 2 x block_i x n x (its K) FLOP *as the tile computes them*
    (a 64-wide tile on N = 7 still does 64 columns of work), at the SM's share of the tensor peak
    times the smem cap; every unit also fills its tiles from L2, K x (block_i + n) bytes at the SM's
    share of the L2 bandwidth of TMA loads (an SM's port to L2 is its own limit: a grid that leaves
    SMs idle also leaves their share unused).  Returns max(tensor, L2), or both terms with ``terms``."""
    cap = smem_cap(p, gpu, block_i, n)
    k_unit = min(p.K, cdiv(ktiles, split) * (SWIZZLE // p.in_bytes))   # K one unit streams
    per_sm = math.ceil(units / gpu.sm_count)
    t_mma = per_sm * 2 * block_i * n * k_unit / (gpu.peak_flops(p.dtype, "wgmma") / gpu.sm_count * cap)
    t_l2 = per_sm * (ktiles / split) * (block_i + n) * SWIZZLE / (gpu.l2_tma_bw / gpu.sm_count)
    if terms:
        return {"mma": t_mma, "l2": t_l2, "smem_cap": cap}
    return max(t_mma, t_l2)


def output_vector(p: GemmProblem, swap: bool, split: int) -> int:
    """Elements per epilogue store: 1 under split-K (scalar atomics); 4 (8 bytes, after a lane
    exchange) for 16-bit outputs with N % 4 == 0; else a pair when N is even (along N: swapped, the
    two wgmma rows of a lane are adjacent n).  The runtime checks C's alignment against it."""
    if split > 1:
        return 1
    if p.out_bytes == 2 and not swap and p.N % 4 == 0:
        return 4
    return 2 if p.N % 2 == 0 else 1


def epilogue_time(p: GemmProblem, gpu, block_m: int, block_n: int, units: int, split: int = 1, *,
                  rows: int, cols: int) -> float:
    """Seconds the busiest SM spends storing its tiles, not overlapped with the main loop (the
    consumers run the epilogue between tiles): ceil(units / SMs) x the tile's stored elements
    (block_m x block_n, clipped to the ``rows`` x ``cols`` of C in the tile's coordinates) x out_bytes
    at the SM's share of the L2 bandwidth of the load/store path.  Under split-K each element is a 4-byte atomic
    read-modify-write instead of half of an 8-byte store: 2 x the L2 traffic in 2 x the accesses."""
    per_sm_bw = gpu.l2_bw / gpu.sm_count
    atomic = 4 if split > 1 else 1
    stored = min(block_m, rows) * min(block_n, cols)          # a tile wider than C stores only C's part
    return math.ceil(units / gpu.sm_count) * stored * p.out_bytes * atomic / per_sm_bw


def fill_time(p: GemmProblem, gpu, block_i: int, n: int, units: int, dram_bound: bool = False) -> float:
    """Seconds before the first wgmma: the ring's first stage of every CTA comes from DRAM, one
    loaded latency plus min(units, SMs) x (block_i + n) x 128 B at the DRAM bandwidth (only the
    latency when the kernel is DRAM-bound: those bytes are already in its DRAM time).  Once per
    kernel: the persistent producer loads each later tile while the consumers finish the previous one."""
    transfer = 0.0 if dram_bound else min(units, gpu.sm_count) * (block_i + n) * SWIZZLE / gpu.dram_bw
    return gpu.mem_latency_ns * 1e-9 + transfer


def split_k_blocker(p: GemmProblem) -> str | None:
    """Why split-K cannot apply (None if it can): the slices add with FP32 atomics."""
    if p.out_dtype != "f32":
        return f"the {p.out_dtype} output cannot take FP32 atomic adds"
    if p.activation != "none":
        return f"{p.activation}(sum) is not a sum of {p.activation}s"
    return None


def max_split(ktiles: int, limit: int) -> int:
    """Largest split <= limit whose slices all hold >= MIN_SLICE_K_TILES K tiles (none empty)."""
    for s in range(max(1, limit), 1, -1):
        per = cdiv(ktiles, s)
        if per >= MIN_SLICE_K_TILES and (s - 1) * per < ktiles:
            return s
    return 1


def split_overhead(p: GemmProblem, gpu, split: int) -> float:
    """Zeroing C (M*N*4 bytes) and the slices' atomic read-modify-writes in L2; the memset's launch
    is counted with the other launches."""
    return p.M * p.N * 4 / gpu.dram_bw + split * p.M * p.N * 4 * 2 / gpu.l2_bw


def hopper_supported(problem: GemmProblem, gpu) -> tuple[bool, str]:
    """Whether the Hopper kernel covers ``problem`` on ``gpu`` (else configure() uses mma.sync)."""
    if "wgmma" not in gpu.features or "tma" not in gpu.features:
        return False, f"{gpu.name} has no wgmma/TMA"
    if not gpu.supports("wgmma", problem.dtype):
        return False, f"no wgmma path for {problem.dtype}"
    return True, "wgmma + TMA available"


def configure_hopper(p: GemmProblem, gpu, d):
    """Steps 1-13 above; returns (schedule, prediction)."""
    b = p.in_bytes
    _, n_max, k = gpu.mma_shapes["wgmma"][p.dtype]
    rate = gpu.tc_flops_per_clk_sm("wgmma", p.dtype)
    rounding = ("the TMA unit rounds FP32 to nearest TF32 while it copies (tensor maps of type TFLOAT32: "
                "2.94e-4 error on the H200, as cvt.rna/cuBLAS), free" if p.dtype == "tf32" and p.tf32_rounding == "rna"
                else "tf32_fast: raw FP32, the tensor core truncates" if p.dtype == "tf32" else "16-bit inputs")
    d.note("instruction", f"wgmma.m64nNk{k}.f32.{p.dtype}",
           f"{p.dtype} on {gpu.arch}a: warpgroup MMA from shared memory, FP32 accumulate; {rounding}")
    plan = operand_plan(p)
    feeds = ", ".join(f"{op.upper()} {plan[op]['major'].upper()}-major -> {plan[op]['feed']}" for op in ("a", "b"))
    if plan["swap"]:
        d.note("operand roles", "C^T = B^T A^T", f"{feeds}: TF32 wgmma reads shared memory only K-major, and only its "
               "A operand may come from registers, so row-major B (N-major) becomes the wgmma A operand, loaded "
               "from its TMA tile into registers; wgmma rows run along N, the tile's N side is 64 per warpgroup")
    else:
        d.note("operand roles", "C = A B", f"{feeds}" + (": the transpose bit of the descriptor reads MN-major "
               "16-bit tiles in place" if "smem_t" in feeds else ""))
    I, J = (p.N, p.M) if plan["swap"] else (p.M, p.N)      # wgmma rows (64 per warpgroup) x wgmma N

    # 2-3. registers -> consumer warpgroups and N
    choice = None
    for wgs in (2, 1):
        regs = consumer_regs(gpu.regs_per_sm, wgs)
        n = n_max
        while n > 8 and n // 2 + CONSUMER_OVERHEAD_REGS > regs:
            n //= 2
        if choice is None or n * wgs > choice[1] * choice[0]:
            choice = (wgs, n, regs)
    wgs, n, regs = choice
    d.apply("consumer registers", CONSUMER_REGS,
            f"setmaxnreg: the producer warpgroup keeps {PRODUCER_REGS}, {wgs} consumer warpgroups share the rest "
            f"(multiple of 8, at most {SETMAXNREG_MAX})", post=lambda v: regs,
            regs_per_sm=gpu.regs_per_sm, producer_regs=PRODUCER_REGS, wgs=wgs)
    d.note("warpgroup tile", f"64x{n}",
           f"largest wgmma N <= {n_max} whose N/2 FP32 accumulators + {CONSUMER_OVERHEAD_REGS} registers fit {regs}; "
           f"{wgs} consumer warpgroups -> block {64 * wgs}x{n} (3 would leave {int(CONSUMER_REGS(regs_per_sm=gpu.regs_per_sm, producer_regs=PRODUCER_REGS, wgs=3))} "
           f"registers: N=256 does not fit)")
    block_m = 64 * wgs

    # 4. shared-memory traffic at the tensor peak (why N = 256)
    traffic = {}
    for nn in (n, n // 2):
        traffic[nn] = SMEM_TRAFFIC(rate=rate, elem_bytes=b, N=nn, block_m=block_m)
    cap = d.apply("smem traffic", SMEM_TRAFFIC,
                  f"B/clk per SM the wgmma operand reads (A 64xk, B Nxk per 2*64*N*k FLOP) plus the TMA writes of "
                  f"a {block_m}x{n} tile need at the tensor peak; N={n // 2} would need {traffic[n // 2]:.0f}",
                  rate=rate, elem_bytes=b, N=n, block_m=block_m)
    d.apply("smem-bound fraction", SMEM_CAP, "the fraction of the tensor peak shared memory can feed",
                       smem_bytes_per_clk=gpu.smem_bytes_per_clk_sm, smem_traffic=cap)

    # 5. fill the machine: of the few tile shapes (warpgroups x wgmma N) and K splits the kernel
    #    offers, the one the model predicts fastest (smaller tiles or K slices give idle SMs work, at
    #    the price of more shared-memory/L2 traffic per FLOP, or of zeroing + atomics)
    jname = "M" if plan["swap"] else "N"
    n_fit = max(64, 1 << (J - 1).bit_length())
    if n_fit < n:
        n = d.note("clamp N", n_fit, f"{jname}={J}: a wgmma N no wider than the next power of two of {jname} (min 64) "
                   "wastes no MMA work")
    ktiles = cdiv(p.K, SWIZZLE // b)
    blocker = split_k_blocker(p)
    candidates = []
    for w in sorted({wgs, 1}, reverse=True):
        for nn in (n, n // 2, n // 4):
            if nn < 64 or (nn < n and cdiv(J, nn) == cdiv(J, 2 * nn)):
                continue                                     # narrower N without more tiles: no gain
            tiles_c = cdiv(I, 64 * w) * cdiv(J, nn)
            splits = [1]
            if blocker is None and 2 * tiles_c <= gpu.sm_count:
                splits.append(max_split(ktiles, gpu.sm_count // tiles_c))
            for sp in sorted(set(splits)):
                t = time_terms(p, gpu, 64 * w, nn, sp)
                slack = t["mma"] + t["l2"] + t["dram"]        # ties on the max: the most slack in the other limits
                candidates.append((round(total_time(t), 12), slack, -w, -nn, sp, tiles_c))
    t_best, _, w_neg, n_neg, split, tiles = min(candidates)  # then more warpgroups, wider N, no split
    wgs, n, block_m = -w_neg, -n_neg, -64 * w_neg
    table = ", ".join(f"{64 * -c[2]}x{-c[3]}{f' split {c[4]}' if c[4] > 1 else ''} {c[0] * 1e6:.1f}"
                      for c in sorted(candidates))
    d.note("tile and split", f"{block_m}x{n}" + (f", split-K {split}" if split > 1 else ""),
           f"tiles are (wgmma rows) x (wgmma N); predicted us (step 13's model: max(the busiest SM's units of padded "
           f"tile work at the smem-bound rate, the L2 fills, DRAM) + the ring's first fill + epilogues + prep"
           f"{' + zeroing and atomics' if any(c[4] > 1 for c in candidates) else ''} + launches; on a tie, the "
           f"candidate with the least mma + L2 + DRAM time): {table}")
    tiles = d.note("output tiles", tiles, f"ceil({I}/{block_m}) * ceil({J}/{n})")
    d.note("split-K", split, (f"{split} K slices of {cdiv(ktiles, split)} K tiles add into the zeroed FP32 output with "
                              "atomics") if split > 1 else (blocker or "the model prefers whole-K tiles"))

    # 6. stages
    stages = int(d.apply("stages", STAGES, "every stage the per-block shared memory holds after 1 KB of alignment slack: "
                         "one landing, one computing, the rest hide DRAM/L2 latency", post=int,
                         smem_per_block=gpu.smem_per_block, block_m=block_m, N=n))
    stages = max(2, min(stages, 8))
    smem = SLACK + stages * (block_m + n) * SWIZZLE

    # 7-11
    bk = SWIZZLE // b
    extent = {plan["x"]: block_m, plan["y"]: n}
    boxes = {op: tma_boxes(p, plan[op]["major"], extent[op]) for op in ("a", "b")}
    d.note("TMA boxes", ", ".join(f"{op.upper()} {boxes[op][2]} x [{boxes[op][1]}x{boxes[op][0]}]" for op in ("a", "b")),
           f"128-byte swizzled boxes (inner extent 128 B, the span the wgmma descriptors and the register loads "
           f"address): a K-major tile is one box [tile rows x {bk} of K], an MN-major tile is "
           f"tile/{SWIZZLE // b} boxes [{bk} of K x {SWIZZLE // b}]; out-of-bounds rows and the K tail read as zero")
    d.note("cluster", "1x1", "TMA multicast across a cluster is not generated yet")
    units = tiles * split
    grid = min(units, gpu.sm_count)
    d.note("grid", f"persistent, {grid} CTAs",
           "min(tiles x K slices, SMs) CTAs walk the work units; the ring runs on across them, so the producer loads the next "
           "tile while the consumers store this one")
    tiles_m = cdiv(I, block_m)
    group_m = 1
    if tiles_m > 1 and tiles > 1:
        group_m = d.apply("group-M", GROUP_M, "tile rows per raster group: a wave's A and B panels have the smallest "
                          "L2 footprint when G*block_m = (W/G)*block_n", post=lambda v: int(min(tiles_m, max(1, round(v)))),
                          sm_count=gpu.sm_count, tiles=tiles, block_n=n, block_m=block_m)

    # 12. operand prep
    preps = [op.upper() + (" (transpose)" if plan[op]["prep"]["transpose"] else " (pad K)")
             for op in ("a", "b") if plan[op]["prep"]]
    prep_bytes = sum(2 * plan[op]["rows"] * plan[op]["cols"] * b for op in ("a", "b") if plan[op]["prep"])
    d.note("operand prep", ", ".join(preps) or "none",
           "TMA cannot transpose and needs 16-byte aligned rows: an operand whose rows are not (or a second MN-major "
           "TF32 operand, which neither registers nor the descriptor can take) goes through one transpose/pad pass "
           f"into a workspace ({prep_bytes / 1e6:.1f} MB of DRAM traffic)")

    mma = MmaInstr("wgmma", 64, n, k, "f16" if p.dtype == "fp16" else p.dtype)
    # the Schedule speaks the problem's coordinates: swapped, the wgmma rows (64 per warpgroup) run along N
    tile_m, tile_n, warps_m, warps_n = (n, block_m, 1, 4 * wgs) if plan["swap"] else (block_m, n, 4 * wgs, 1)
    s = Schedule(arch="sm_90a", mma=mma, block_m=tile_m, block_n=tile_n, block_k=bk, warps_m=warps_m, warps_n=warps_n,
                 stages=stages, smem_layout="swizzle128", smem_pad_a=0, smem_pad_b=0, smem_bytes=smem,
                 vector_a=1, vector_b=1, vector_c=output_vector(p, plan["swap"], split),  # TMA checks A/B bases
                 split_k=split, group_m=group_m,
                 regs_per_thread=min(regs, gpu.regs_per_sm // (WG_THREADS * 3) // 8 * 8), blocks_per_sm=1, cluster_m=1, cluster_n=1, consumer_warpgroups=wgs,
                 producer_warps=4, persistent=True, swap_ab=plan["swap"])
    return s, predict_hopper(p, gpu, s)


def time_terms(p: GemmProblem, gpu, block_i: int, n: int, split: int) -> dict:
    """The model's terms in seconds for a tile of ``block_i`` wgmma rows x wgmma N = ``n`` and
    ``split`` K slices (what the kernel's time depends on; stages, raster and grid do not enter):
    mma, l2, dram (overlapped: the total takes their max), fill, epilogue, prep, split, launches."""
    plan = operand_plan(p)
    preps = [op for op in ("a", "b") if plan[op]["prep"]]
    I, J = (p.N, p.M) if plan["swap"] else (p.M, p.N)
    units = cdiv(I, block_i) * cdiv(J, n) * split
    main = mainloop_time(p, gpu, block_i, n, units, cdiv(p.K, SWIZZLE // p.in_bytes), split, terms=True)
    t_dram = p.min_bytes / gpu.dram_bw
    return {"mma": main["mma"], "l2": main["l2"], "dram": t_dram, "smem_cap": main["smem_cap"],
            "fill": fill_time(p, gpu, block_i, n, units, dram_bound=t_dram >= max(main["mma"], main["l2"])),
            "epilogue": epilogue_time(p, gpu, block_i, n, units, split, rows=I, cols=J),
            "prep": sum(2 * plan[op]["rows"] * plan[op]["cols"] * p.in_bytes for op in preps) / gpu.dram_bw,
            "split": split_overhead(p, gpu, split) if split > 1 else 0.0,
            "launches": 1 + len(preps) + (split > 1)}


def total_time(t: dict) -> float:
    """Seconds from ``time_terms``: max(mma, l2, dram) + fill + epilogue + prep + split + launches."""
    return (max(t["mma"], t["l2"], t["dram"]) + t["fill"] + t["epilogue"] + t["prep"] + t["split"]
            + LAUNCH_S * t["launches"])


def predict_hopper(p: GemmProblem, gpu, s: Schedule) -> Prediction:
    """Step 13 for any wgmma schedule: max(tensor peak x smem cap x SM utilisation, L2 fills, DRAM)
    + the ring's first fill + the epilogues (not overlapped) + the operand-prep passes at DRAM
    bandwidth + split-K's zeroing and atomics + the launches."""
    t = time_terms(p, gpu, s.mma.m * s.consumer_warpgroups, s.mma.n, s.split_k)
    total = total_time(t)
    bound = max((t["mma"], "tensor-core"), (t["l2"], "l2"), (t["dram"], "dram"))[1]
    if t["smem_cap"] < 1 and bound == "tensor-core":
        bound = "smem"
    return Prediction(time_us=total * 1e6, tflops=p.flops / total / 1e12, bound=bound,
                      floor_us=max(p.flops / gpu.peak_flops(p.dtype, "wgmma"), t["dram"]) * 1e6,
                      terms_us={k: t[k] * 1e6 for k in ("mma", "l2", "dram", "fill", "epilogue", "prep", "split")})


# ---- operand plan: where each operand comes from (codegen and runtime follow it)
def tma_boxes(problem: GemmProblem, major: str, tile_rows: int) -> tuple[int, int, int]:
    """(box_cols, box_rows, boxes per stage) of one operand's tile: the inner extent is always the
    128-byte swizzle span.  K-major: one [tile_rows x BK] box; MN-major: tile_rows / (128 B) boxes of
    [BK x 128 B], side by side along M/N (each 1024-byte aligned: BK rows of 128 B)."""
    per_row = SWIZZLE // problem.in_bytes
    if major == "k":
        return per_row, tile_rows, 1
    return per_row, per_row, cdiv(tile_rows, per_row)


def k_pad(problem: GemmProblem) -> int:
    """K rounded up so a K-major row is a multiple of 16 bytes (TMA's stride rule)."""
    q = 16 // problem.in_bytes
    return cdiv(problem.K, q) * q


def tensor_map_type(problem: GemmProblem) -> str:
    """Element type of the TMA tensor maps: 'tf32' (TMA rounds FP32 to nearest) for TF32 with
    round-to-nearest, else the storage type ('f32' truncates in the tensor core)."""
    if problem.dtype == "tf32" and problem.tf32_rounding == "rna":
        return "tf32"
    return problem.storage


def operand_plan(problem: GemmProblem, prep_rounds: bool = False, transpose_in_kernel: bool = True) -> dict:
    """Where each operand comes from and how the wgmma reads it (codegen and runtime follow it).

    For A and B: ``major`` ("k" or "mn": which index is contiguous in memory), the row-major
    ``[rows, cols]`` tensor the TMA map describes (K-major ``[M|N, K]``, MN-major ``[K, M|N]``),
    ``feed`` (how the wgmma reads the shared tile) and ``prep`` (None, or the pass that writes a
    K-major, K-padded copy first).  ``swap``: the kernel computes C^T = B^T A^T, so wgmma rows run
    along N (then B is the wgmma A operand, "x", and A is "y").

    Feeds: "smem" (K-major, descriptor), "smem_t" (MN-major, descriptor with the transpose bit:
    16-bit types only), "regs" (MN-major, loaded to registers: the wgmma A operand may come from
    registers, which is how 32-bit MN-major data gets in: TF32 wgmma has no transpose bit).
    A prep pass runs only when TMA cannot read the tensor (contiguous rows not a multiple of 16 B),
    when TF32 has two MN-major operands (only one can go through registers), or when asked
    (``prep_rounds``: the v0.2 experiment; ``transpose_in_kernel=False``: the v0.4 layout)."""
    p = problem
    q = 16 // p.in_bytes                               # elements per 16 bytes (TMA stride rule)
    kp = k_pad(p)
    wide = p.dtype == "tf32"
    rna = prep_rounds and wide and p.tf32_rounding == "rna"
    ops = {}
    for op, dim, kmajor in (("a", p.M, not p.trans_a), ("b", p.N, p.trans_b)):
        readable = (p.K % q == 0) if kmajor else (dim % q == 0 and transpose_in_kernel)
        ops[op] = {"dim": dim, "kmajor": kmajor, "prep": rna or not readable}
    if wide and not ops["a"]["kmajor"] and not ops["b"]["kmajor"]:
        ops["a"]["prep"] = True                        # two MN-major TF32 operands: transpose A
    plan = {}
    for op, o in ops.items():
        major = "k" if (o["kmajor"] or o["prep"]) else "mn"
        plan[op] = {
            "major": major,
            "rows": o["dim"] if major == "k" else p.K,
            "cols": (kp if o["prep"] else p.K) if major == "k" else o["dim"],
            "prep": None if not o["prep"] else {"transpose": not o["kmajor"], "round": rna,
                                                "src": [o["dim"], p.K] if o["kmajor"] else [p.K, o["dim"]],
                                                "dst": [o["dim"], kp]},
        }
    plan["swap"] = wide and plan["b"]["major"] == "mn"
    x, y = ("b", "a") if plan["swap"] else ("a", "b")
    plan[x]["feed"] = "smem" if plan[x]["major"] == "k" else ("regs" if wide else "smem_t")
    plan[y]["feed"] = "smem" if plan[y]["major"] == "k" else "smem_t"
    plan["x"], plan["y"] = x, y
    return plan
