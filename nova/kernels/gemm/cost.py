"""Closed-form performance model of a GEMM schedule: time per resource, the bound, the floor.

time = max(t_tensor, t_smem, t_l2, t_dram) + t_fill + t_launch, where
  t_tensor = the busiest SM's blocks (ceil(blocks / SMs)) x one block's MMA work at the SM's tensor
             rate, slowed when fewer warps are resident than the SM has warp schedulers
  t_smem   = fragment bytes read from shared memory / shared-memory bandwidth (scaled by waves)
  t_l2     = bytes the blocks stream from L2 / L2 bandwidth
  t_dram   = DRAM bytes (A once, B once per group-M row group unless it fits L2, C once) / DRAM bandwidth
  t_fill   = one memory latency per wave (the pipeline prologue)
The roofline floor is max(FLOPs / best tensor peak, compulsory bytes / DRAM bandwidth); every
prediction is at or above it because each term only adds to its roofline counterpart.  Batched,
``tiles`` counts every batch element's tiles and the DRAM bytes every distinct matrix (a broadcast
operand once).
"""
from __future__ import annotations

from nova.kernels.gemm.problem import GemmProblem
from nova.configurator.step import Prediction
from nova.kernels.gemm.schedule import Schedule
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import GPUModel

def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# The model's formulas (``F.t_tensor`` is "t_tensor = ..."); the derivation shows some of them.
F = formulas("""
    k_slice = ceil(ceil(K / split_k) / block_k) * block_k
    waves = ceil(tiles * split_k / (sm_count * blocks_per_sm))
    blocks_busiest_sm = ceil(tiles * split_k / sm_count)
    util = Min(1, Min(blocks_per_sm, blocks_busiest_sm) * warps / warp_schedulers_per_sm)
    t_block = 2 * block_m * block_n * k_slice / (tc_flops_per_clk_sm * clock_hz)
    t_tensor = blocks_busiest_sm * t_block / util
    I_warp = 2 * warp_m * warp_n / ((warp_m + warp_n) * elem_bytes)
    I_block = 2 * block_m * block_n / ((block_m + block_n) * elem_bytes)
    t_smem = t_tensor * tc_flops_per_clk_sm / (I_warp * smem_bytes_per_clk_sm)
    l2_bytes = elem_bytes * k_slice * split_k * tiles * (block_m + block_n)
    dram_bytes = a_bytes + b_bytes * b_refetch + c_bytes * (2 * split_k - 1)
    floor = Max(flops / peak_flops, min_bytes / dram_bw)
""")


def tiles_of(problem: GemmProblem, block_m: int, block_n: int) -> int:
    """Output tiles of every batch element: ceil(M / block_m) * ceil(N / block_n) * batch."""
    return cdiv(problem.M, block_m) * cdiv(problem.N, block_n) * problem.batch


def roofline_floor_s(problem: GemmProblem, gpu: GPUModel) -> float:
    return F.floor(flops=problem.flops, peak_flops=gpu.peak_flops(problem.dtype),
                   min_bytes=problem.min_bytes, dram_bw=gpu.dram_bw)


def b_refetch(problem: GemmProblem, s: Schedule, gpu: GPUModel) -> int:
    """How often B is read from DRAM: once if it fits in half the L2, else once per row group."""
    b_bytes = problem.K * problem.N * problem.in_bytes
    if b_bytes <= gpu.l2_bytes / 2:
        return 1
    return cdiv(cdiv(problem.M, s.block_m), max(1, s.group_m))


def predict(problem: GemmProblem, s: Schedule, gpu: GPUModel) -> Prediction:
    rate = gpu.tc_flops_per_clk_sm(s.mma.family, problem.dtype)
    tiles = tiles_of(problem, s.block_m, s.block_n)
    k_slice = F.k_slice(K=problem.K, split_k=s.split_k, block_k=s.block_k)
    waves = F.waves(tiles=tiles, split_k=s.split_k, sm_count=gpu.sm_count, blocks_per_sm=s.blocks_per_sm)
    busiest = F.blocks_busiest_sm(tiles=tiles, split_k=s.split_k, sm_count=gpu.sm_count)
    util = F.util(blocks_per_sm=s.blocks_per_sm, blocks_busiest_sm=busiest, warps=s.warps,
                  warp_schedulers_per_sm=gpu.warp_schedulers_per_sm)
    t_block = F.t_block(block_m=s.block_m, block_n=s.block_n, k_slice=k_slice, tc_flops_per_clk_sm=rate,
                        clock_hz=gpu.clock_hz)
    t_tensor = F.t_tensor(blocks_busiest_sm=busiest, t_block=t_block, util=util)
    i_warp = F.I_warp(warp_m=s.warp_tile_m, warp_n=s.warp_tile_n, elem_bytes=problem.in_bytes)
    t_smem = F.t_smem(t_tensor=t_tensor, tc_flops_per_clk_sm=rate, I_warp=i_warp,
                      smem_bytes_per_clk_sm=gpu.smem_bytes_per_clk_sm)
    t_l2 = F.l2_bytes(tiles=tiles, split_k=s.split_k, block_m=s.block_m, block_n=s.block_n, k_slice=k_slice,
                      elem_bytes=problem.in_bytes) / gpu.l2_bw
    p = problem
    dram = F.dram_bytes(a_bytes=p.matrices("a") * p.M * p.K * p.in_bytes,
                        b_bytes=p.matrices("b") * p.K * p.N * p.in_bytes, b_refetch=b_refetch(p, s, gpu),
                        c_bytes=p.c_like_operands * p.batch * p.M * p.N * p.out_bytes, split_k=s.split_k)
    t_dram = dram / gpu.dram_bw
    t_fill = waves * gpu.mem_latency_ns * 1e-9
    t_launch = gpu.launch_overhead_us * 1e-6 * (2 if s.split_k > 1 else 1)   # split-K adds the C memset
    terms = {"tensor-core": t_tensor, "smem": t_smem, "l2": t_l2, "dram": t_dram}
    bound = max(terms, key=terms.get)
    total = terms[bound] + t_fill + t_launch
    if t_launch > terms[bound]:
        bound = "launch"
    floor = roofline_floor_s(problem, gpu)
    return Prediction(time_us=total * 1e6, tflops=problem.flops / total / 1e12, bound=bound,
                      floor_us=floor * 1e6,
                      terms_us={k: v * 1e6 for k, v in {**terms, "fill": t_fill, "launch": t_launch}.items()})
