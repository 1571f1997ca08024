"""Hopper rules (issue 4): the wgmma schedule in closed form, each decision explained.

Used by ``configure()`` when the target has wgmma (unless ``NOVA_HOPPER=0``).
The kernel it configures is ``nova/codegen/gemm_hopper.py``: one producer warpgroup (TMA), C
consumer warpgroups each owning a 64 x N slab (wgmma m64nNk), a ring of S stages of 128-byte
swizzled K panels, a persistent grid.  Decisions, in order:

 1. instruction        wgmma.m64nNk{8,16}, FP32 accumulate; TF32 rounding by the TMA unit (TFLOAT32 maps)
 2. register budget    the producer keeps 40 registers/thread (setmaxnreg.dec); the consumers share the rest
 3. consumer WGs, N    largest N <= 256 whose N/2 accumulators + overhead fit; as many WGs as fit the budget
 4. smem traffic       bytes/clock the wgmma operand reads + TMA writes need at the tensor peak vs 128 B/clk:
                       the reason N = 256 (80 + 48 = 128 B/clk for TF32) beats N = 128 (96 + 64 = 160)
 5. wave fill          halve N while the tiles cannot give every SM one
 6. stages             as many as fit the per-block shared memory (a deeper ring only hides more latency)
 7. TMA boxes          [BK = 128 B of K] x [block_m] and x [block_n], 128-byte swizzle = the wgmma descriptor layout
 8. cluster            1x1 (multicast not generated yet)
 9. grid               persistent: min(tiles, SMs) CTAs walk the tiles
10. split-K            none (not generated yet: shapes with tiles < SMs run at tiles/SMs of the machine)
11. rasterization      group-M, as for the mma.sync path
12. operand prep       which operands need a transpose/pad pass (TMA cannot transpose; TF32 wgmma reads K-major only)
13. prediction
"""
from __future__ import annotations

import math

from nova.configurator.cost import cdiv
from nova.configurator.problem import GemmProblem
from nova.configurator.schedule import MmaInstr, Prediction, Schedule
from nova.hwmodel.formula import Formula

WG_THREADS = 128
PRODUCER_REGS = 40            # producer warpgroup after setmaxnreg.dec (one thread issues TMA)
CONSUMER_OVERHEAD_REGS = 40   # descriptors, ring counters, epilogue addresses; ptxas: 168 regs at N=256 (128 acc)
SWIZZLE = 128                 # bytes of K per smem row = TMA box inner extent = 128B swizzle span
SLACK = 1024                  # runtime alignment of the ring to 1024 B (128B-swizzle atom)

CONSUMER_REGS = Formula("consumer_regs", "floor((regs_per_sm - 128 * producer_regs) / (128 * wgs) / 8) * 8")
SMEM_TRAFFIC = Formula("smem_traffic", "rate * elem_bytes * ((64 + N) / (128 * N) + (block_m + N) / (2 * block_m * N))")
SMEM_CAP = Formula("smem_cap", "Min(1, smem_bytes_per_clk / smem_traffic)")
STAGES = Formula("stages", "floor((smem_per_block - 1024) / ((block_m + N) * 128))")
GROUP_M = Formula("group_m", "sqrt(Min(sm_count, tiles) * block_n / block_m)")


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
    peak = gpu.peak_flops(p.dtype, "wgmma")
    rounding = ("the TMA unit rounds FP32 to nearest TF32 while it copies (tensor maps of type TFLOAT32: "
                "2.94e-4 error on the H200, as cvt.rna/cuBLAS), free" if p.dtype == "tf32" and p.tf32_rounding == "rna"
                else "tf32_fast: raw FP32, the tensor core truncates" if p.dtype == "tf32" else "16-bit inputs")
    d.note("instruction", f"wgmma.m64nNk{k}.f32.{p.dtype}",
           f"{p.dtype} on {gpu.arch}a: warpgroup MMA from shared memory, FP32 accumulate; {rounding}")

    # 2-3. registers -> consumer warpgroups and N
    choice = None
    for wgs in (2, 1):
        regs = CONSUMER_REGS(regs_per_sm=gpu.regs_per_sm, producer_regs=PRODUCER_REGS, wgs=wgs)
        regs = min(232, int(regs))
        n = n_max
        while n > 8 and n // 2 + CONSUMER_OVERHEAD_REGS > regs:
            n //= 2
        if choice is None or n * wgs > choice[1] * choice[0]:
            choice = (wgs, n, regs)
    wgs, n, regs = choice
    d.apply("consumer registers", CONSUMER_REGS,
            f"setmaxnreg: the producer warpgroup keeps {PRODUCER_REGS}, {wgs} consumer warpgroups share the rest "
            "(multiple of 8, at most 232)", post=lambda v: regs,
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
    smem_cap = d.apply("smem-bound fraction", SMEM_CAP, "the fraction of the tensor peak shared memory can feed",
                       smem_bytes_per_clk=gpu.smem_bytes_per_clk_sm, smem_traffic=cap)

    # 5. wave fill
    n_fit = max(64, 1 << (p.N - 1).bit_length())
    if n_fit < n:
        n = d.note("clamp N", n_fit, f"N={p.N}: a tile no wider than the next power of two of N (min 64) wastes no MMA work")
    tiles = cdiv(p.M, block_m) * cdiv(p.N, n)
    while tiles < gpu.sm_count and n > 64 and cdiv(p.N, n // 2) > cdiv(p.N, n):
        n //= 2
        tiles = cdiv(p.M, block_m) * cdiv(p.N, n)
        d.note("wave fill", f"N={n}", f"{tiles} tiles of {block_m}x{n}: halving N while tiles < {gpu.sm_count} SMs "
               "gives more SMs work (the smaller tile costs smem traffic, less than idle SMs)")
    if wgs == 2 and 2 * tiles <= gpu.sm_count and cdiv(p.M, 64) > cdiv(p.M, block_m):
        wgs, block_m = 1, 64
        tiles = cdiv(p.M, block_m) * cdiv(p.N, n)
        d.note("wave fill", "1 consumer warpgroup", f"{tiles // 2} tiles would leave over half of the {gpu.sm_count} "
               f"SMs idle: one consumer warpgroup per CTA (block 64x{n}) doubles the tiles to {tiles}, still one wave")
    tiles = d.note("output tiles", tiles, f"ceil({p.M}/{block_m}) * ceil({p.N}/{n})")

    # 6. stages
    stages = int(d.apply("stages", STAGES, "every stage the per-block shared memory holds after 1 KB of alignment slack: "
                         "one landing, one computing, the rest hide DRAM/L2 latency", post=int,
                         smem_per_block=gpu.smem_per_block, block_m=block_m, N=n))
    stages = max(2, min(stages, 8))
    smem = SLACK + stages * (block_m + n) * SWIZZLE

    # 7-11
    bk = SWIZZLE // b
    d.note("TMA boxes", f"A {bk}x{block_m}, B {bk}x{n}",
           f"inner extent 128 B = block_k {bk} (the 128B-swizzle span the wgmma descriptors address: SBO 1024 B per "
           f"8 rows, +32 B per k-step), outer = the tile rows; out-of-bounds rows and K tail read as zero")
    d.note("cluster", "1x1", "TMA multicast across a cluster is not generated yet")
    grid = min(tiles, gpu.sm_count)
    d.note("grid", f"persistent, {grid} CTAs",
           "min(tiles, SMs) CTAs walk the tiles; the ring runs on across tiles, so the producer loads the next "
           "tile while the consumers store this one")
    d.note("split-K", 1, f"not generated for wgmma yet: {tiles} tiles use {min(1.0, tiles / gpu.sm_count):.0%} of the SMs")
    tiles_m = cdiv(p.M, block_m)
    group_m = 1
    if tiles_m > 1 and tiles > 1:
        group_m = d.apply("group-M", GROUP_M, "tile rows per raster group: a wave's A and B panels have the smallest "
                          "L2 footprint when G*block_m = (W/G)*block_n", post=lambda v: int(min(tiles_m, max(1, round(v)))),
                          sm_count=gpu.sm_count, tiles=tiles, block_n=n, block_m=block_m)

    # 12. operand prep
    plan = operand_plan(p)
    preps = [op.upper() + (" (transpose)" if plan[op]["prep"]["transpose"] else " (pad K)")
             for op in ("a", "b") if plan[op]["prep"]]
    prep_bytes = sum(2 * plan[op]["rows"] * plan[op]["cols"] * b for op in ("a", "b") if plan[op]["prep"])
    d.note("operand prep", ", ".join(preps) or "none",
           "TF32 wgmma reads only K-major shared memory and TMA cannot transpose: a non-K-major operand (row-major B, "
           "transposed A) or K rows not 16-byte aligned go through one transpose/pad pass into a workspace "
           f"({prep_bytes / 1e6:.1f} MB of DRAM traffic)")

    # 13. prediction: tensor peak x smem cap x wave efficiency, + prep passes at DRAM bandwidth
    waves = tiles / (grid * math.ceil(tiles / grid))
    t_mma = p.flops / (peak * smem_cap * waves)
    t_dram = p.min_bytes / gpu.dram_bw
    t_prep = prep_bytes / gpu.dram_bw
    t = max(t_mma, t_dram) + t_prep + 5e-6 * (1 + len(preps))
    floor = max(p.flops / peak, t_dram)
    bound = "tensor-core" if t_mma >= t_dram else "dram"
    if smem_cap < 1 and bound == "tensor-core":
        bound = "smem"
    pred = Prediction(time_us=t * 1e6, tflops=p.flops / t / 1e12, bound=bound, floor_us=floor * 1e6,
                      terms_us={"mma": t_mma * 1e6, "dram": t_dram * 1e6, "prep": t_prep * 1e6})
    mma = MmaInstr("wgmma", 64, n, k, "f16" if p.dtype == "fp16" else p.dtype)
    s = Schedule(arch="sm_90a", mma=mma, block_m=block_m, block_n=n, block_k=bk, warps_m=4 * wgs, warps_n=1,
                 stages=stages, smem_layout="swizzle128", smem_pad_a=0, smem_pad_b=0, smem_bytes=smem,
                 vector_a=1, vector_b=1, vector_c=2 if p.N % 2 == 0 else 1, split_k=1, group_m=group_m,
                 regs_per_thread=min(regs, gpu.regs_per_sm // (WG_THREADS * 3) // 8 * 8), blocks_per_sm=1, cluster_m=1, cluster_n=1, consumer_warpgroups=wgs,
                 producer_warps=4, persistent=True)
    return s, pred


# ---- operand plan: where each operand comes from (codegen and runtime follow it)
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


def operand_plan(problem: GemmProblem, prep_rounds: bool = False) -> dict:
    """For A and B: ``prep`` (None: TMA reads the user's tensor; else what the prep kernel does)
    and the K-major source ``[rows, cols]`` the tensor map describes.  A prep pass runs only for
    layout (a non-K-major operand must be transposed: TMA cannot, TF32 wgmma cannot read it) or
    for K rows that are not 16-byte aligned (TMA's stride rule); ``prep_rounds`` also sends TF32
    operands through it to be rounded there (measured slower: the TFLOAT32 tensor map rounds free)."""
    p = problem
    rna = prep_rounds and p.dtype == "tf32" and p.tf32_rounding == "rna"
    aligned = p.K == k_pad(p)
    kp = k_pad(p)
    plan = {}
    # A: K-major when not trans_a.  B: K-major when trans_b (stored [N, K]).
    for op, rows, kmajor in (("a", p.M, not p.trans_a), ("b", p.N, p.trans_b)):
        need = rna or not kmajor or not aligned
        plan[op] = {
            "rows": rows, "cols": kp if need else p.K,
            "prep": None if not need else {"transpose": not kmajor, "round": rna,
                                           "src": [rows, p.K] if kmajor else [p.K, rows],
                                           "dst": [rows, kp]},
        }
    return plan
