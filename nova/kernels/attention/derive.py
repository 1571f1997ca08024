"""The Analytic Configurator for fused attention (mma.sync + cp.async family).

One function per numbered step; each returns its value and the ``Step`` (formula with this GPU's
numbers, value, reason) that ``nova-config explain attention`` prints.  Closed form: no search, no
measurement.

 1. instruction        mma.sync shape and FP32 accumulation for the dtype
 2. exp vs MMA         MUFU (ex2) time per score against tensor-core time per score
 3. warps              one warp per scheduler; every warp owns 16 rows (one MMA row tile)
 4. streamed tile      per kernel: the largest KV (or Q) tile whose accumulators fit the registers
 5. stages             per kernel: Little's law for the cp.async ring, within shared memory
 6. occupancy          per kernel: blocks per SM from registers, shared memory, threads
 7. grid               per kernel: blocks, waves, causal tile skipping; splits of a grid that leaves
                       block slots idle (the forward's and dQ's keys, dK/dV's query tiles), with their
                       combine kernel (the backward's on the kernel step 11 chose)
 8. dQ strategy        separate dQ pass vs atomics
 9. prediction         per kernel time = max(tensor, MUFU, FP32 ALU, DRAM) / wave efficiency + launch
10. Hopper forward     (sm_90 targets with wgmma + TMA, BF16/FP16/TF32) the forward on TMA + mbarrier ring + wgmma
                       with warp specialization (``build_hopper.py``): warpgroups, registers, key tile,
                       stages, shared memory, grid and its predicted time; taken when that time is below
                       the mma.sync forward's (step 9); where either forward is split over its keys
                       (step 7: the Hopper one where it is neither persistent nor causal, derived, never
                       a caller's count), the two are compared by device time, each with its combine.
                       (The Hopper forward's split is weighed only once the throughput model took it.)
11. Hopper backward    (same targets and dtypes) dK/dV and dQ on TMA + mbarrier ring + wgmma (``build_hopper_bwd.py``):
                       per kernel its streamed tile, registers, stages, shared memory, grid and predicted time,
                       taken where that time is below the mma.sync kernel's (step 9); bwd_pre stays (a DRAM pass).
"""
from __future__ import annotations

import time
from dataclasses import replace

from nova.codegen.nvgpu import SM90A, SWIZZLE_ATOM_BYTES
from nova.configurator.derivation import Derivation, formula_step, note
from nova.configurator.step import MmaInstr, Prediction, Step
from nova.hwmodel import GPUModel, TargetError, get_target
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import F as HW
from nova.kernels.attention.problem import AttentionProblem, AttentionProblemError
from nova.kernels.attention.schedule import COMBINES, AttentionConfig, AttentionSchedule, KernelTile
from nova.options import DEFAULTS, Options
from nova.options import current as current_options

# Quantities the hardware model does not carry yet (used only when the target lacks them).
MUFU_EX2_PER_CLK_SM = 16     # [CC] CUDA C++ Programming Guide, arithmetic instruction throughput: base-2
                             # exponential / logarithm / reciprocal: 16 results per clock per SM, cc 8.0-9.0
REG_OVERHEAD = {"fwd": 84, "bwd_dq": 96, "bwd_dkv": 72}   # fitted to ptxas 13.0 on the generated kernels:
                             # addresses, softmax state, fragments in flight and the scalar copy of the
                             # scores beyond the accumulators (tests/test_attention.py checks the estimate)
REG_TF32_EXTRA = 12          # TF32 streamed operands are rounded (cvt.rna) as they are loaded: more live values
REG_SHARE = {"fwd": 0.9, "bwd_dq": 0.7, "bwd_dkv": 0.7}   # a second m tile per warp adds this share of the
                             # first one's accumulator registers (fitted to ptxas 13.0 on 78 phase-2 variants:
                             # addresses and fragments in flight are shared; bench/results/h200-attention-v0.2)
ACHIEVED = 0.81              # [FITTED] share of the binding pipe's peak the mma.sync kernels sustain: 102 kernel
                             # timings on the H200 (bench/results/h200-attention-v0.2/call{1,2}_variants.json) fit
                             # t = max(smem, tensor)/0.81 + 6.3 us per block + 0.15 us per streamed tile (per
                             # block slot): rms error 17%, 77 of 102 within 20%
ACHIEVED_SPLIT = {"3xtf32": 0.95, "fp32": 1.0}   # [FITTED] the same share where products are split into three
                             # MMAs (score_precision): the extra MMAs issue while the softmax and the splits run,
                             # so the tensor pipe stays fuller; 24 kernel timings (4 causal shapes x fwd, dK/dV,
                             # dQ, CUPTI; bench/results/h200-2026-12-04/run26/) all within +-15% (at 0.81: 3xtf32
                             # 6 of 12, fp32 2 of 12, every one over-predicted)
BLOCK_FIXED_US = 6.3         # [FITTED] per block: prologue (kept tile + first ring slots at DRAM latency),
                             # epilogue and the tail of a causal triangle; the same fit
TILE_FIXED_US = 0.15         # [FITTED] per streamed tile: barrier, cp.async issue and wait, the row statistics
                             # and the O rescale that do not shrink with the tile; the same fit
SMEM_WAVEFRONT_BYTES = 128   # [CC] shared memory delivers one 128-byte wavefront per clock per SM
MIN_TILES_PER_SPLIT = 2      # splits: a block streams at least this many tiles (its ring's prologue and
                             # one step overlap; one tile a block would pay the whole prologue per tile)
MAX_SPLITS = 32              # splits: the combine kernel holds every split's four columns (and LSE) of a row in
                             # registers at once (5 per split + ~24: 184 at 32 splits, within 255 without spills)
COMBINE_REGS_FIXED, COMBINE_REGS_PER_SPLIT = 24, 5
SPLIT_SLACK = 0.03           # splits: the fewest whose predicted time is within 3% of the fastest count's
SPLIT_MAX_WAVES = 4          # splits: weighed for grids of fewer waves than this (more waves leave little idle:
                             # at most the last wave's share)
NK_GEMMS = {"fwd": 1, "bwd_dq": 2, "bwd_dkv": 2}      # matmuls with A = a kept tile, B = a streamed tile [n][k]
KN_GEMMS = {"fwd": 1, "bwd_dq": 1, "bwd_dkv": 2}      # matmuls with A from registers, B = a streamed tile [k][n]
KEPT, STREAMED = {"fwd": ("q",), "bwd_dq": ("q", "dout"), "bwd_dkv": ("k", "v")}, \
                 {"fwd": ("k", "v"), "bwd_dq": ("k", "v"), "bwd_dkv": ("q", "dout")}
GEMMS = {"fwd": 2, "bwd_dkv": 4, "bwd_dq": 3}          # matmuls per (query, key) pair in each kernel
ALU_PER_SCORE = {"fwd": 5, "bwd_dkv": 4, "bwd_dq": 3}   # FP32 ops per score (scale/max/exp-arg/sum/convert)
SPLIT_OPS_PER_ELEMENT = 3    # 3xtf32 scores: IADD + AND + FSUB per fragment element (build.tf32_split)
REG_SPLIT_EXTRA = 16         # 3xtf32 scores: the small halves of the fragments in flight (an estimate; ptxas checks)
REG_SPLIT_ALL_EXTRA = 24     # fp32 (every product split): the small halves of every product's fragments (likewise)

# Formulas, each shown in the derivation with this GPU's numbers (``F.stages`` is "stages = ...").
F = formulas("""
    mufu_share = tc_flops_per_clk_sm / (4 * D * mufu_per_clk_sm)
    acc_regs = (score_tiles * block_cols + out_tiles * D) / 2 + block_cols / 2
    kept_bytes = kept * block_rows * (D + pad) * elem_bytes
    stage_bytes = streamed * block_cols * (D + pad) * elem_bytes + vec_bytes
    t_tile_ns = 1e9 * gemms * 2 * block_rows * block_cols * D / (tc_flops_per_clk_sm * clock_hz)
    stages = 1 + ceil(mem_latency_ns / t_tile_ns)
    stages_max = floor((smem_per_block - kept_bytes) / stage_bytes)
    bps_smem = floor(smem_per_sm / (smem_bytes + smem_reserved_per_block))
    waves = ceil(blocks / (sm_count * blocks_per_sm))
    t_tc = gemms * 2 * D * visited / (sm_count * clock_hz * tc_flops_per_clk_sm)
    t_mufu = visited / (sm_count * clock_hz * mufu_per_clk_sm)
    wavefronts = nk * 4 * mt * D / ks + (nk + kn) * D * block_cols / (4 * ks) + extra
    t_smem = wavefronts * visited / (16 * mt * block_cols) / (sm_count * clock_hz)
    t_kernel = Max(t_tc, t_smem, t_mufu, t_alu, t_dram) / achieved
        + (block_fixed * blocks + tile_fixed * tiles) / (sm_count * blocks_per_sm)
    t_alu = alu * visited / (sm_count * clock_hz * fp32_lanes_per_sm)
    atomic_bytes = 4 * D * visited / block_cols
    hopper_entry_regs = floor(regs_per_sm / (128 * (1 + wgs)) / 8) * 8
    hopper_consumer_regs = floor((128 * (1 + wgs) * entry_regs - 128 * producer_regs) / (128 * wgs) / 8) * 8
    hopper_regs = block_cols / 2 + block_cols * elem_bytes / 8 + D / 2 + overhead
    hopper_stage_bytes = tiles * block_cols * D * elem_bytes
    hopper_smem = block_rows * D * elem_bytes + stages * stage_bytes + align
    t_softmax = (mufu_clk + alu_clk) * visited / (sm_count * clock_hz)
    t_hopper_core = Max(t_tc, t_softmax, (t_tc + t_softmax) / wgs)
    hopper_bwd_regs = outs * D / 2 + block_cols + outs * block_cols * elem_bytes / 16 + overhead
    hopper_bwd_smem = 2 * block_rows * D * elem_bytes + stages * (tiles * block_cols * D * elem_bytes + vec_bytes) + align
    t_hopper = Max(t_hopper_core, t_smem, t_dram) / achieved
        + (block_fixed * blocks + tile_fixed * tiles) / (sm_count * blocks_per_sm)
""")


def _cdiv(a, b):
    return -(-a // b)


_step = formula_step          # (value, Step) of a Formula applied to this problem's numbers


def _note(name, value, reason, formula=""):
    return value, note(name, value, reason, formula)


def mufu_rate(gpu: GPUModel) -> float:
    return gpu.mufu_ex2_per_clk_sm if gpu.has("mufu_ex2_per_clk_sm") else MUFU_EX2_PER_CLK_SM


# ---- 1 -----------------------------------------------------------------------------------------
def step1_instruction(p: AttentionProblem, gpu: GPUModel):
    fam = "mma.sync"
    if not gpu.supports(fam, p.dtype) or "cp.async" not in gpu.features:
        raise TargetError(f"{gpu.name} ({gpu.arch}) has no mma.sync + cp.async path for {p.dtype}")
    m, n, k = gpu.mma_shapes[fam][p.dtype]
    mma = MmaInstr(fam, m, n, k, "f16" if p.dtype == "fp16" else p.dtype)
    why = (f"{p.dtype}: every matmul (S = QK^T, O = PV and the backward's four) on {mma}, FP32 accumulation; "
           "softmax in FP32")
    if p.split_all:
        why += ("; fp32: every product as three TF32 products, A B = Ab Bb + Ab Bs + As Bb (x = big + small, big "
                "rounded to TF32, small the rest), FP32-accurate at three MMAs per k-step")
    elif p.split_scores:
        why += ("; 3xtf32 scores: S = Qb Kb + Qb Ks + Qs Kb (x = big + small, big rounded to TF32, small the rest), "
                "FP32-accurate scores at three MMAs per score k-step; the other products on TF32 (cvt.rna)")
    elif p.dtype == "tf32":
        why += "; operands rounded to nearest TF32 (cvt.rna) like the GEMMs"
    if "wgmma" in gpu.features:
        why += ("; the forward may instead run on wgmma + TMA (step 10 weighs it), the backward's dK/dV and dQ "
                "kernels too (step 11)")
    return _note("1 instruction", mma, why)


# ---- 2 -----------------------------------------------------------------------------------------
def step2_exp_balance(p: AttentionProblem, gpu: GPUModel):
    rate = gpu.tc_flops_per_clk_sm("mma.sync", p.dtype)
    return _step("2 exp vs MMA", F.mufu_share,
                 "MUFU (ex2) time per score over tensor time per score (forward: 4D FLOP per score): "
                 "they are separate pipes, so the exponentials hide under the MMAs of other warps only while "
                 "this is < 1; the kernel uses exactly one ex2 per score (scale*log2 e folded into an FMA)",
                 tc_flops_per_clk_sm=rate, D=p.head_dim, mufu_per_clk_sm=mufu_rate(gpu))


# ---- 3 -----------------------------------------------------------------------------------------
def step3_warps(gpu: GPUModel):
    w = int(gpu.warp_schedulers_per_sm)
    return _note("3 warps", w, f"{w} warps per block, one per warp scheduler; each owns 16 rows (one m16 MMA tile) "
                 "of the kept tile, so the row statistics (max, sum) stay inside a lane quad: no shared-memory reduction")


# ---- 4 -----------------------------------------------------------------------------------------
TILE_CANDIDATES = ((2, 64), (2, 32), (2, 16), (1, 64), (1, 32), (1, 16))   # (m tiles per warp, streamed rows)


def tile_regs(p: AttentionProblem, role: str, mt: int, bc: int) -> float:
    score_tiles = 2 if role != "fwd" else 1          # S (and dP) accumulators
    out_tiles = 2 if role == "bwd_dkv" else 1        # O / dQ, or dK and dV
    acc = F.acc_regs(score_tiles=score_tiles, block_cols=bc, out_tiles=out_tiles, D=p.head_dim)
    if p.split_all:              # a tile's output product summed from zero first (build.gemm_kn): one more D/2
        acc += p.head_dim / 2
    split = REG_SPLIT_ALL_EXTRA if p.split_all else REG_SPLIT_EXTRA if p.split_scores else 0
    over = REG_OVERHEAD[role] + (REG_TF32_EXTRA if p.dtype == "tf32" else 0) + split
    return over + acc * (1 + REG_SHARE[role] * (mt - 1))


def step4_tile(p: AttentionProblem, gpu: GPUModel, role: str, warps: int, pad: int):
    """Every (m tiles per warp, streamed rows) candidate whose registers and shared memory fit, timed by
    the step-9 model (a closed form: no measurement); the fastest is the kernel's tile.  Two m tiles per
    warp halve the shared-memory traffic of the streamed operand per MMA (its fragments serve both)."""
    tried, best = [], None
    ks = 8 if p.dtype == "tf32" else 16
    for w in sorted({warps, max(1, warps // 2), 1}, reverse=True):     # fewer warps only if nothing fits
        if best is not None:
            break
        for mt, bc in TILE_CANDIDATES:
            regs = tile_regs(p, role, mt, bc)
            rows = 16 * w * mt
            if bc < 2 * ks and not (mt, bc) == (1, 16):
                # one k step of the MMA per tile leaves the P V / dS K product a single dependent MMA per output
                # tile: measured 5-30% slower than the model says for BF16 (bench/results/h200-attention-v0.2), so at least two
                tried.append(f"{rows}x{bc}: < 2 k steps")
                continue
            if regs > gpu.max_regs_per_thread and (mt, bc) != (1, 16):    # 16 rows: the last resort, as phase 1
                tried.append(f"{rows}x{bc}: {regs:.0f} regs")
                continue
            regs = min(regs, gpu.max_regs_per_thread)
            stages, smem, _ = step5_stages(p, gpu, role, rows, bc, pad, w, int(regs))
            if smem > gpu.smem_per_block:
                tried.append(f"{rows}x{bc}: smem {smem}")
                continue
            bps, _ = step6_occupancy(gpu, role, w, int(regs), smem)
            vis = visited_pairs(p, role, rows, bc)
            kt = KernelTile(role, rows, bc, w, stages, pad, smem, int(regs), bps, _grid(p, role, rows))
            t, _ = kernel_time(p, gpu, role, kt, vis)
            tried.append(f"{rows}x{bc}{'' if w == warps else f' ({w} warps)'}: {t * 1e6:.0f} us")
            if best is None or t < best[0] * 0.97:      # ties (within 3%) go to the earlier, larger tile
                best = (t, mt, bc, regs, w)
    if best is None:
        raise TargetError(f"{p.describe()}: no {role} tile fits {gpu.name} ({'; '.join(tried)})")
    _, mt, bc, regs, warps = best
    d = Derivation()
    acc = d.apply(f"4 {role} registers", F.acc_regs, "accumulators per thread and m tile: scores (S, and dP in the "
                  "backward) of 16 x block_cols plus outputs of 16 x D over 32 lanes, plus the scores' scalar copy",
                  score_tiles=2 if role != "fwd" else 1, block_cols=bc, out_tiles=2 if role == "bwd_dkv" else 1,
                  D=p.head_dim)
    d.note(f"4 {role} tile", f"{16 * warps * mt}x{bc}",
           f"{mt} m tile(s) of 16 rows per warp, {bc} streamed rows; {regs:.0f} registers estimated (overhead "
           f"{REG_OVERHEAD[role]} fitted to ptxas, a second m tile adds {REG_SHARE[role]:.0%} of the first's "
           f"{acc:.0f}); candidates by predicted time (step 9): {', '.join(tried)}")
    return (mt, bc, int(min(regs, gpu.max_regs_per_thread)), warps), d.steps


def _grid(p: AttentionProblem, role: str, rows: int):
    if role == "bwd_dkv":
        return (_cdiv(p.seq_k, rows), p.batch * p.kv_heads, 1)
    return (_cdiv(p.seq_q, rows), p.batch * p.heads, 1)


# ---- 5 -----------------------------------------------------------------------------------------
def gemms_per_pair(p: AttentionProblem, role: str) -> int:
    """Tensor-core matmuls per (query, key) pair: ``GEMMS[role]``; two more where the score product is
    split into three TF32 products (``score_precision == "3xtf32"``), three times as many where every
    product is (``"fp32"``)."""
    if p.split_all:
        return 3 * GEMMS[role]
    return GEMMS[role] + (2 if p.split_scores else 0)


BIAS_OPS_PER_SCORE = 2      # an additive bias: one FMA (score + bias / scale) and one max (the floor) per score


def alu_per_score(p: AttentionProblem, role: str, rows_per_warp: int, block_cols: int) -> float:
    """FP32 lane operations per score: ``ALU_PER_SCORE[role]``, plus, for 3xtf32 scores, the split of
    every score-operand fragment element: a warp splits its A rows (16 mt x D) and the streamed B tile
    (block_cols x D) once per tile of 16 mt x block_cols scores, ``SPLIT_OPS_PER_ELEMENT`` each:
    3 D (1/block_cols + 1/(16 mt)).  For fp32 every product's: each of the ``NK_GEMMS`` products with
    a kept A splits that much; each of the ``KN_GEMMS`` products splits its register A (one element
    per score) and its streamed B tile (block_cols x D): 3 (1 + D/(16 mt)) per score."""
    d = p.head_dim
    if p.split_all:
        nk = NK_GEMMS[role] * d * (1 / block_cols + 1 / rows_per_warp)
        kn = KN_GEMMS[role] * (1 + d / rows_per_warp)
        extra = SPLIT_OPS_PER_ELEMENT * (nk + kn)
    else:
        extra = SPLIT_OPS_PER_ELEMENT * d * (1 / block_cols + 1 / rows_per_warp) if p.split_scores else 0
    bias = BIAS_OPS_PER_SCORE if p.bias else 0
    return ALU_PER_SCORE[role] + extra + bias


def step5_stages(p: AttentionProblem, gpu: GPUModel, role: str, rows: int, cols: int, pad: int, warps: int, regs: int):
    """Ring depth: Little's law, within the shared memory of as many blocks as the registers allow."""
    d = Derivation()
    eb = p.elem_bytes
    kept = d.apply(f"5 {role} kept smem", F.kept_bytes, "the tile a block keeps for its whole life",
                   kept=len(KEPT[role]), block_rows=rows, D=p.head_dim, pad=pad, elem_bytes=eb)
    stage = d.apply(f"5 {role} stage smem", F.stage_bytes, "one ring slot: the streamed tiles (+ LSE and D for dK/dV)",
                    streamed=len(STREAMED[role]), block_cols=cols, D=p.head_dim, pad=pad, elem_bytes=eb,
                    vec_bytes=8 * cols if role == "bwd_dkv" else 0)
    rate = gpu.tc_flops_per_clk_sm("mma.sync", p.dtype)
    t_tile = d.apply(f"5 {role} tile time", F.t_tile_ns, "tensor time of one streamed tile at the SM's mma.sync peak",
                     gemms=gemms_per_pair(p, role), block_rows=rows, block_cols=cols, D=p.head_dim,
                     tc_flops_per_clk_sm=rate, clock_hz=gpu.clock_hz)
    want = d.apply(f"5 {role} stages (latency)", F.stages, "Little's law: one slot computing, enough in flight to "
                   "cover the loaded memory latency", post=int, mem_latency_ns=gpu.mem_latency_ns, t_tile_ns=t_tile)
    bps_regs = int(HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=warps, regs=regs, reg_alloc_unit=gpu.reg_alloc_unit))
    bps_regs = max(1, min(bps_regs, gpu.max_blocks_per_sm))
    for bps in range(bps_regs, 0, -1):
        share = min(gpu.smem_per_block, gpu.smem_per_sm / bps - gpu.smem_reserved_per_block)
        cap = d.apply(f"5 {role} stages (smem)", F.stages_max, f"what fits next to the kept tile in the shared memory "
                      f"of one of {bps} block(s) per SM (the registers allow {bps_regs})", post=int,
                      smem_per_block=share, kept_bytes=kept, stage_bytes=stage) if bps == 1 or \
            F.stages_max(smem_per_block=share, kept_bytes=kept, stage_bytes=stage) >= 2 else 0
        if cap >= 2 or bps == 1:
            break
    stages = max(2, min(want, cap, 3))
    from nova.kernels.attention.build import smem_plan          # the builder's layout: 128-byte aligned regions
    total = smem_plan(p, KernelTile(role, rows, cols, warps, stages, pad, 0, 0, 1, (1, 1, 1)))["total"]
    d.note(f"5 {role} stages", stages, f"clamped to [2, min({cap}, 3)]: occupancy first (a second block per SM hides "
           "latency and the softmax better than a deeper ring), then Little's law")
    return stages, int(total), d.steps


# ---- 6 -----------------------------------------------------------------------------------------
def step6_occupancy(gpu: GPUModel, role: str, warps: int, regs: int, smem: int):
    d = Derivation()
    br = d.apply(f"6 {role} blocks/SM (regs)", HW.bps_regs, "register file / registers per block (256-register granules)",
                 regs_per_sm=gpu.regs_per_sm, warps=warps, regs=regs, reg_alloc_unit=gpu.reg_alloc_unit)
    bs = d.apply(f"6 {role} blocks/SM (smem)", F.bps_smem, "shared memory per SM / per block (+1 KB reserved)",
                 smem_per_sm=gpu.smem_per_sm, smem_bytes=smem, smem_reserved_per_block=gpu.smem_reserved_per_block)
    bt = gpu.max_threads_per_sm // (32 * warps)
    bps = int(max(1, min(br, bs, bt, gpu.max_blocks_per_sm)))
    d.note(f"6 {role} blocks/SM", bps, f"min(registers {int(br)}, smem {int(bs)}, threads {int(bt)}); "
           f"{bps * warps} warps per SM interleave MMA, ex2 and cp.async")
    return bps, d.steps


# ---- 7 -----------------------------------------------------------------------------------------
def visited_pairs(p: AttentionProblem, role: str, rows: int, cols: int) -> int:
    """(query, key) scores a kernel computes per (batch, head), counting whole visited tiles."""
    tq, tk = p.seq_q, p.seq_k
    total = 0
    if role in ("fwd", "bwd_dq"):
        for qt in range(_cdiv(tq, rows)):
            end = min(tk, (qt + 1) * rows) if p.causal else tk
            total += _cdiv(end, cols) * cols * rows
    else:
        for kt in range(_cdiv(tk, rows)):
            lo = (kt * rows) // cols if p.causal else 0
            total += max(0, _cdiv(tq, cols) - lo) * cols * rows
    return total


def step7_grid(p: AttentionProblem, gpu: GPUModel, role: str, rows: int, cols: int, bps: int):
    if role == "bwd_dkv":
        grid = (_cdiv(p.seq_k, rows), p.batch * p.kv_heads, 1)
        what = f"KV tiles x (batch x kv heads); each walks {p.group} query head(s) of its group"
    else:
        grid = (_cdiv(p.seq_q, rows), p.batch * p.heads, 1)
        what = "query tiles x (batch x heads)"
    blocks = grid[0] * grid[1]
    waves = F.waves(blocks=blocks, sm_count=gpu.sm_count, blocks_per_sm=bps)
    vis = visited_pairs(p, role, rows, cols)
    full = _cdiv(p.seq_q, 1) * p.seq_k
    skip = f"; causal: {vis / (rows * _cdiv(p.seq_q if role != 'bwd_dkv' else p.seq_k, rows) * _cdiv(p.seq_k if role != 'bwd_dkv' else p.seq_q, cols) * cols):.0%} of the tiles visited (the rest lie above the diagonal)" if p.causal else ""
    return grid, _note(f"7 {role} grid", f"{grid[0]} x {grid[1]}",
                       f"{what}: {blocks} blocks, {waves:.0f} wave(s) of {int(gpu.sm_count) * bps}{skip}",
                       f"waves = ceil({blocks} / ({int(gpu.sm_count)} * {bps})) = {waves:.0f}")[1], vis, full


def combine_tile(p: AttentionProblem, role: str, splits: int) -> KernelTile:
    """The combine kernel of ``role`` split ``splits`` ways (``build_combine``): D/4 lanes a row, 128 threads,
    one block per ``128 / (D/4)`` rows; registers: every split's four columns and LSE in flight."""
    from nova.kernels.attention.build import slab_rows
    from nova.kernels.attention.build_combine import THREADS, rows_per_block
    rpb = rows_per_block(p.head_dim)
    regs = -(-(COMBINE_REGS_FIXED + COMBINE_REGS_PER_SPLIT * splits) // 8) * 8
    regs = min(255, regs * (2 if role == "bwd_dkv" else 1))   # dK/dV: two slab sets' columns in flight
                                                             # (ptxas: 254-255 at 32 splits, no spills)
    return KernelTile(COMBINES[role], rpb, 0, THREADS // 32, 1, 0, 0, regs, max(1, min(16, 65536 // (regs * THREADS))),
                      (_cdiv(slab_rows(p, role), rpb), 1, 1), splits=splits)


def split_kernels(p: AttentionProblem, role: str, kt: KernelTile, n: int) -> tuple[KernelTile, KernelTile]:
    """``kt`` split ``n`` ways over grid z, and its combine kernel."""
    return replace(kt, grid=(kt.grid[0], kt.grid[1], n), splits=n), combine_tile(p, role, n)


def predicted_us(p: AttentionProblem, gpu: GPUModel, kt: KernelTile, vis: int) -> float:
    """Step 9's device time of kernel ``kt`` (``vis``: its visited score pairs), in microseconds."""
    return device_time(p, gpu, kt.role, kt, kernel_time(p, gpu, kt.role, kt, vis)[1])[0] * 1e6


def given_splits(p: AttentionProblem, gpu: GPUModel, role: str, kt: KernelTile, n: int):
    """A caller's split count for ``role`` (an experiment, or a replay of the kernels a run measured):
    (tile, combine tile or None, steps).  1: unsplit."""
    if type(n) is not int or not 1 <= n <= MAX_SPLITS:
        raise ValueError(f"splits for {role} must be an integer from 1 to {MAX_SPLITS}, got {n!r}")
    if n > 1 and p.causal and role in ("fwd", "bwd_dq") and not kt.hopper:
        raise ValueError(f"splits for {role}: the mma.sync {role} kernel is not split with a causal mask, got {n}")
    if n == 1:
        return kt, None, [_note(f"7 {role} splits", 1, "given by the caller (experiment or replay): unsplit")[1]]
    return (*split_kernels(p, role, kt, n), [_note(f"7 {role} splits", n, "given by the caller (experiment or "
                                                   "replay)")[1]])


def step7_splits(p: AttentionProblem, gpu: GPUModel, role: str, kt: KernelTile, vis: int):
    """Split the streamed loop of a grid that leaves block slots idle: the forward's or dQ's key tiles
    (FlashDecoding's split KV; the mma.sync kernels and the Hopper forward not causal: there the long
    walks belong to the many query tiles; the Hopper dQ causal too, its empty splits writing zeros) or dK/dV's query tiles over
    its group's heads (split Q: a grouped-query or long-T dK/dV has one
    block per key tile and K/V head); also a grid of a few waves whose last one leaves slots idle (a
    long sequence's 180 blocks on 132 SMs).  Grids of ``SPLIT_MAX_WAVES`` waves or more are not split.  The
    candidates: s = 2 .. min(``MAX_SPLITS``, steps / ``MIN_TILES_PER_SPLIT``) splits, each made
    non-empty (``s = ceil(steps / ceil(steps / s))``; a causal dK/dV block's shorter walk aside) and
    priced by step 9's device time, the split kernel's plus its combine's; the fastest is taken (fewer
    splits where within ``SPLIT_SLACK``: fewer partial bytes, a lighter combine) where it is below the
    unsplit kernel's.  Returns (tile, combine tile or None, steps)."""
    if role not in COMBINES or (kt.hopper and role == "fwd" and (kt.persistent or p.causal)):
        return kt, None, []     # a persistent Hopper forward walks more tiles than SMs; causal: as mma.sync's
    dkv = role == "bwd_dkv"
    what, tag = ("query-tile", f"7 {role} query-tile splits") if dkv else ("key", f"7 {role} key splits")
    tiles = p.group * _cdiv(p.seq_q, kt.block_cols) if dkv else _cdiv(p.seq_k, kt.block_cols)
    blocks, slots = kt.grid[0] * kt.grid[1], int(gpu.sm_count) * kt.blocks_per_sm
    if p.causal and not (dkv or kt.hopper):
        return kt, None, [_note(tag, 1, "causal: a query tile visits only the key tiles up to its diagonal, so the "
                                "blocks that have the long walks are the many query tiles (the mma.sync kernels "
                                "split only non-causal walks)")[1]]
    if blocks >= SPLIT_MAX_WAVES * slots or tiles < 2 * MIN_TILES_PER_SPLIT:
        return kt, None, [_note(tag, 1, f"{blocks} blocks of {tiles} steps for {slots} block slots: "
                                f"{SPLIT_MAX_WAVES} waves or more, or too few steps to share")[1]]

    whole = predicted_us(p, gpu, kt, vis)
    priced = {}
    for n in range(2, min(MAX_SPLITS, tiles // MIN_TILES_PER_SPLIT) + 1):
        n = _cdiv(tiles, _cdiv(tiles, n))                  # no split left empty
        if n not in priced:
            split, combine = split_kernels(p, role, kt, n)
            priced[n] = (predicted_us(p, gpu, split, vis), predicted_us(p, gpu, combine, 0), split, combine)
    best = min(x[0] + x[1] for x in priced.values())
    splits = min(n for n, x in priced.items() if x[0] + x[1] <= best * (1 + SPLIT_SLACK))
    parts, merge, split, combine = priced[splits]
    table = ", ".join(f"{n}: {x[0] + x[1]:.1f}" for n, x in sorted(priced.items()))
    formula = f"device time of s splits + combine (us): {table}; unsplit {whole:.1f}"
    if parts + merge >= whole:
        return kt, None, [_note(tag, 1, f"{splits} splits would take {parts:.1f} + combine {merge:.1f} us against "
                                f"{whole:.1f} us unsplit", formula)[1]]
    idle = -blocks % slots
    return split, combine, [_note(tag, splits, f"{blocks} blocks leave {idle} of {slots} block slots idle: "
                                  f"each walks {_cdiv(tiles, splits)} of the {tiles} {what} steps and writes FP32 "
                                  f"partials; {parts:.1f} + combine {merge:.1f} us against {whole:.1f} us unsplit "
                                  f"(the fastest count, fewer within {SPLIT_SLACK:.0%})", formula)[1]]


# ---- 8 -----------------------------------------------------------------------------------------
def step8_dq_mode(p: AttentionProblem, gpu: GPUModel, dkv_cols: int, vis_dkv: int):
    rate = gpu.tc_flops_per_clk_sm("mma.sync", p.dtype)
    bh = p.batch * p.heads
    extra_tc = 2 * 2 * p.head_dim * vis_dkv * bh / (gpu.sm_count * gpu.clock_hz * rate)
    atomic = F.atomic_bytes(D=p.head_dim, visited=vis_dkv * bh, block_cols=dkv_cols)
    t_atomic = atomic / gpu.l2_bw + 4 * p.batch * p.heads * p.seq_q * p.head_dim * 3 / gpu.dram_bw
    return _note("8 dQ strategy", "separate",
                 f"a dQ kernel recomputes S and dP (+{extra_tc * 1e6:.1f} us of tensor work) instead of adding "
                 f"dS K into an FP32 dQ scratch with atomics from the dK/dV kernel ({atomic / 1e6:.1f} MB of L2 "
                 f"atomics ~{t_atomic * 1e6:.1f} us + a B*H*T*D FP32 buffer, zeroing and a conversion pass): the "
                 "separate pass is deterministic, needs no scratch and no shared-memory transpose of dS; "
                 "atomics are not generated in this phase",
                 "t_recompute = 4*D*visited/(SMs*clk*tc) vs atomic_bytes = 4*D*visited/block_cols")


# ---- 9 -----------------------------------------------------------------------------------------
def smem_wavefronts(p: AttentionProblem, role: str, kt: KernelTile, tf32_prep: str = "fragment") -> float:
    """128-byte shared-memory wavefronts per warp and streamed tile: ldmatrix of the kept A operand (per m
    tile), of the streamed B operand (shared by the warp's m tiles), TF32 scalar B loads (4 per fragment
    pair, conflict-free), the LSE/D columns of dK/dV and, for ``tf32_prep == "smem"``, the rounding pass."""
    ks = 8 if p.dtype == "tf32" else 16
    mt, bc, d = kt.rows_per_warp // 16, kt.block_cols, p.head_dim
    extra = bc / 2 if role == "bwd_dkv" else 0
    if p.dtype == "tf32" and tf32_prep == "smem":
        extra += 2 * len(STREAMED[role]) * bc * d * 4 / SMEM_WAVEFRONT_BYTES / kt.warps
    return F.wavefronts(nk=NK_GEMMS[role], kn=KN_GEMMS[role], mt=mt, D=d, ks=ks, block_cols=bc, extra=extra)


def kernel_time(p: AttentionProblem, gpu: GPUModel, role: str, kt: KernelTile, vis: int,
                tf32_prep: str = "fragment") -> tuple[float, dict]:
    bh = p.batch * p.heads
    if kt.hopper:
        if role != "fwd":
            return hopper_bwd_time(p, gpu, role, kt, vis)
        return hopper_fwd_time(p, gpu, kt, vis)
    if role == "bwd_pre":
        t = (2 * p.q_bytes + p.row_bytes) / gpu.dram_bw
        return t + gpu.launch_overhead_us * 1e-6, {"dram": t}
    if role in COMBINES.values():
        from nova.kernels.attention.device_time import dram_bytes
        t = dram_bytes(p, role, kt.block_rows, kt.splits) / gpu.dram_bw
        return t + gpu.launch_overhead_us * 1e-6, {"dram": t}
    rate = gpu.tc_flops_per_clk_sm("mma.sync", p.dtype)
    visited = vis * bh
    t_tc = F.t_tc(gemms=gemms_per_pair(p, role), D=p.head_dim, visited=visited, sm_count=gpu.sm_count, clock_hz=gpu.clock_hz,
                  tc_flops_per_clk_sm=rate)
    t_smem = F.t_smem(wavefronts=smem_wavefronts(p, role, kt, tf32_prep), visited=visited, mt=kt.rows_per_warp // 16,
                      block_cols=kt.block_cols, sm_count=gpu.sm_count, clock_hz=gpu.clock_hz)
    t_mufu = F.t_mufu(visited=visited, sm_count=gpu.sm_count, clock_hz=gpu.clock_hz, mufu_per_clk_sm=mufu_rate(gpu))
    t_alu = F.t_alu(alu=alu_per_score(p, role, kt.rows_per_warp, kt.block_cols), visited=visited,
                    sm_count=gpu.sm_count, clock_hz=gpu.clock_hz,
                    fp32_lanes_per_sm=gpu.fp32_lanes_per_sm)
    nbytes = {"fwd": p.fwd_bytes, "bwd_dq": p.fwd_bytes + p.fwd_bytes // 2, "bwd_dkv": p.bwd_bytes}[role] \
        + p.bias_bytes
    t_dram = nbytes / gpu.dram_bw
    blocks = kt.grid[0] * kt.grid[1] * kt.grid[2]
    terms = {"tensor-core": t_tc, "smem": t_smem, "mufu": t_mufu, "alu": t_alu, "dram": t_dram}
    tiles = visited / (kt.block_rows * kt.block_cols)
    t = F.t_kernel(t_tc=t_tc, t_smem=t_smem, t_mufu=t_mufu, t_alu=t_alu, t_dram=t_dram, achieved=mma_sync_achieved(p),
                   block_fixed=BLOCK_FIXED_US * 1e-6, blocks=blocks, tile_fixed=TILE_FIXED_US * 1e-6, tiles=tiles,
                   sm_count=gpu.sm_count, blocks_per_sm=kt.blocks_per_sm)
    terms["blocks"] = (BLOCK_FIXED_US * blocks + TILE_FIXED_US * tiles) * 1e-6 / (gpu.sm_count * kt.blocks_per_sm)
    return t, terms


def mma_sync_achieved(p: AttentionProblem) -> float:
    """The share of the binding pipe's peak an mma.sync kernel sustains: ``ACHIEVED``, or with split
    products ``ACHIEVED_SPLIT[score_precision]``."""
    return ACHIEVED_SPLIT.get(p.score_precision, ACHIEVED) if p.split_scores else ACHIEVED


# ---- 10 ----------------------------------------------------------------------------------------
HOPPER_DTYPES = ("bf16", "fp16", "tf32")   # forward and backward; TF32 with V^T (forward), K^T (dQ), Q^T and
                             # dO^T (dK/dV) written by producer warps (build_hopper.py, build_hopper_bwd.py)
HOPPER_TF32_ROUND_ALU = 1.5  # TF32 forward: P rounded by IADD + LOP3 per score where 16 bits pack half a cvt
HOPPER_PRODUCER_REGS = 40    # the producer warpgroup after setmaxnreg.dec: one thread, a TMA loop (FA3: 24-56)
HOPPER_TF32_PRODUCER_REGS = 88   # TF32, two consumer warpgroups: the producer's idle warps transpose tiles; 88
                             # (3 units in flight, ``transpose_in_flight``) where the consumers' tile fits in
                             # the 208 left, else 40 (the D64 forward's 128-key tile needs 216)
HOPPER_SETMAXNREG_MAX = 232  # as the GEMM path (nova/kernels/gemm/hopper.py SETMAXNREG_MAX)
HOPPER_WGS = 2               # consumer warpgroups: one's softmax runs while the other's wgmmas do (step 10)
HOPPER_REG_OVERHEAD = 56     # [EST] consumer registers beyond S (BC/2), P (BC/4) and O (D/2): softmax state,
                             # descriptors, addresses; ptxas (no spills at 232) checks it
HOPPER_KEY_TILES = {"bf16": (128, 64), "fp16": (128, 64), "tf32": (128, 64, 32)}   # wgmma N of S = Q K^T (keys
                             # per streamed tile), largest first; TF32 D128 fits only 32 (a stage holds K, V, V^T)
HOPPER_ALIGN = SWIZZLE_ATOM_BYTES   # the tiles start on a 1024-byte boundary (128-byte swizzle atom): that much slack
HOPPER_ACHIEVED = ACHIEVED   # [EST] share of the binding pipe sustained: the mma.sync kernels' fitted 0.81 until
                             # the Hopper forward is measured
HOPPER_BLOCK_FIXED_US = 7.5  # [FITTED] per block: Q and the first K/V tile at DRAM latency through TMA, the
                             # epilogue, the causal triangle's uneven tail.  Fitted to the forward's H200 times
                             # (bench/results/h200-2026-12-01/b/call1 and call3, BF16 causal: 32x8x512x64 95/102 us,
                             # 16x12x1024x64 120/165, 8x16x2048x128 313/313) with the other constants held: per
                             # block 9.5, 6.5, 7.2 us; the model says 83 / 154 / 318 us (-16%, +8%, +2% of the
                             # runs' means).  Those D64 times are CUDA events around Python calls, partly the
                             # launch path, so this over-prices short blocks; it prices only the forward with
                             # a block per query tile (work tiles <= SMs, or NOVA_ATTENTION_PERSISTENT=0)
HOPPER_PERSISTENT_FIXED_US = 0.0  # [FITTED] per work tile (query tile) of the persistent forward, and
HOPPER_PERSISTENT_STEP_US = 0.52  # [FITTED] per K/V step of it (bench/results/h200-2026-12-01/g, see below), and
TRANSPOSE_STEP_CYCLES = 78        # [FITTED] per transposer loop iteration of a TF32 step (a 16-byte load and
                                  # four 4-byte stores per lane, ``in_flight`` units at a time): least squares
                                  # of the relative errors of the six persistent forwards in head order
                                  # (CUPTI, bench/results/h200-2026-12-01/g/call2 to call4: BF16 39.7 / 84.8 / 257.4,
                                  # TF32 66.5 / 155.9 / 704 us at 32x8x512x64, 16x12x1024x64, 8x16x2048x128
                                  # causal) -> -20%, +1%, -3%, -4%, -3%, +17% (a step of 1.03 fitted alone:
                                  # +5%, +33%, +24%, -18%, -19%, +42%).
                             # The persistent forward's query-tile order, measured by CUDA-graph replay
                             # (bench/results/h200-2026-12-01/c/call6, BF16 causal): 32x8x512x64 43 us,
                             # 16x12x1024x64 89, 8x16x2048x128 327 (the
                             # mma.sync forward: 62/136/568).  A per-work-tile term does not fit them (least
                             # squares with both constants makes it negative): the tile switch is hidden; one
                             # per-step constant (in sample) gives 42/113/318 us (-3%, +27%, -3%).  What it
                             # stands for: the serial S -> softmax -> P V chain of a warpgroup that the core's
                             # interleaving of two does not hide.  (CUDA events, 87/135/326 us, time the
                             # Python launch path at D64, not the kernel: bench/results/h200-2026-12-01/c/call4.)
HOPPER_TILE_FIXED_US = 0.15  # [EST] per streamed tile: a warpgroup's wgmma waits (S, then P V) and ring
                             # barriers not hidden by the other warpgroup; the mma.sync fit's per-tile figure
HOPPER_ALU_PER_SCORE = 5     # FP32 ops per score: max, FMA (scale, -max), sum, half a cvt pack, mask select


def hopper_blocker(p: AttentionProblem, gpu: GPUModel) -> str:
    """Why the forward cannot run on the Hopper kernel ('' when it can)."""
    from nova.kernels.attention.build_hopper import tma_blocker
    if not {"wgmma", "tma", "setmaxnreg"} <= set(gpu.features) or not gpu.supports("wgmma", p.dtype):
        return f"{gpu.name} ({gpu.arch}) has no wgmma + TMA for {p.dtype}"
    if p.dtype not in HOPPER_DTYPES:
        return f"{p.dtype}: no Hopper forward"
    if p.split_scores:
        return f"{p.score_precision} (NOVA_ATTENTION_PRECISION) runs on the mma.sync forward (three products each)"
    return tma_blocker(p)


def transpose_steps(p: AttentionProblem, kt: KernelTile, tiles: int, warps: int) -> int:
    """TF32: the transposer loop iterations of one streamed step (``build_hopper.transpose_loop``): per
    transposed [BC, D] tile, units = BC/32 x D/4 over ``warps`` warps, ``transpose_in_flight`` at a time
    while every warp has that many, then one at a time."""
    from nova.kernels.attention.build_hopper import transpose_loop
    return tiles * sum(transpose_loop(kt.block_cols // 32 * p.head_dim // 4, warps, max(1, kt.transpose_in_flight)))


def hopper_kernel_time(p: AttentionProblem, gpu: GPUModel, kt: KernelTile, vis: int, *, gemms: int,
                       alu_per_score: float, kept_tiles: int, streamed_tiles: int, dram_bytes: int,
                       pipe: str, achieved: float = HOPPER_ACHIEVED,
                       block_fixed_us: float = HOPPER_BLOCK_FIXED_US, transposes: int = 0) -> tuple[float, dict]:
    """The model of a Hopper attention kernel (steps 10 and 11): within a consumer warpgroup the
    score-shaped wgmmas, the elementwise pass (``pipe``: MUFU ex2 + ``alu_per_score`` FP32 ops per
    score) and the register-A wgmmas run in sequence; ``wgs`` warpgroups interleave, so the SM is
    bound by the tensor core (``gemms`` matmuls of a score tile's size), by the elementwise pipes, by
    one warpgroup's chain / wgs, by shared memory (per 64 x BC scores of a warpgroup: ``kept_tiles``
    64-row tiles and ``streamed_tiles`` BC-row tiles of D elements) or by DRAM (``dram_bytes``);
    ``achieved`` and ``block_fixed_us``: the fitted share of that bound and cost per block; TF32's
    ``transposes`` (transposer loop iterations per streamed step, ``transpose_steps``) add their
    latency to the persistent forward's cost per step (the consumers wait for the transposes)."""
    rate = gpu.tc_flops_per_clk_sm("wgmma", p.dtype)
    visited = vis * p.batch * p.heads
    clk = gpu.sm_count * gpu.clock_hz
    t_tc = F.t_tc(gemms=gemms, D=p.head_dim, visited=visited, sm_count=gpu.sm_count, clock_hz=gpu.clock_hz,
                  tc_flops_per_clk_sm=rate)
    t_sfx = F.t_softmax(mufu_clk=1 / mufu_rate(gpu), alu_clk=alu_per_score / gpu.fp32_lanes_per_sm,
                        visited=visited, sm_count=gpu.sm_count, clock_hz=gpu.clock_hz)
    smem_bytes = (kept_tiles * 64 + streamed_tiles * kt.block_cols) * p.head_dim * p.elem_bytes
    t_smem = smem_bytes / (64 * kt.block_cols) * visited / (SMEM_WAVEFRONT_BYTES * clk)
    t_dram = dram_bytes / gpu.dram_bw
    wgs = kt.consumer_warpgroups
    core = F.t_hopper_core(t_tc=t_tc, t_softmax=t_sfx, wgs=wgs)
    if kt.persistent:     # the fixed cost is paid per work tile, the launch's once per CTA is in it
        blocks, fixed = _cdiv(p.seq_q, kt.block_rows) * p.batch * p.heads, HOPPER_PERSISTENT_FIXED_US
        step = HOPPER_PERSISTENT_STEP_US + transposes * TRANSPOSE_STEP_CYCLES / gpu.clock_hz * 1e6
    else:
        blocks, fixed, step = kt.grid[0] * kt.grid[1] * kt.grid[2], block_fixed_us, HOPPER_TILE_FIXED_US
    tiles = visited / (kt.block_rows * kt.block_cols)
    t = F.t_hopper(t_hopper_core=core, t_smem=t_smem, t_dram=t_dram, achieved=achieved,
                   block_fixed=fixed * 1e-6, blocks=blocks, tile_fixed=step * 1e-6,
                   tiles=tiles, sm_count=gpu.sm_count, blocks_per_sm=kt.blocks_per_sm)
    terms = {"tensor-core": t_tc, pipe: t_sfx, "chain/wgs": (t_tc + t_sfx) / wgs, "smem": t_smem,
             "dram": t_dram,
             "blocks": (fixed * blocks + step * tiles) * 1e-6 / gpu.sm_count}
    return t, terms


def hopper_fwd_time(p: AttentionProblem, gpu: GPUModel, kt: KernelTile, vis: int) -> tuple[float, dict]:
    """Step 10's model of the Hopper forward (``hopper_kernel_time``): S = Q K^T and O += P V, the
    softmax between them; shared memory per warpgroup tile: Q (64 x D) and K, V (BC x D).  TF32: the
    producer's V -> V^T copy reads and writes a BC x D tile per block step (per warpgroup: 2 / wgs
    tiles more), and P is rounded (``HOPPER_TF32_ROUND_ALU``)."""
    tf32 = p.dtype == "tf32"
    from nova.kernels.attention.build_hopper import TRANSPOSER_WARPS
    return hopper_kernel_time(p, gpu, kt, vis, gemms=2,
                              alu_per_score=HOPPER_ALU_PER_SCORE + (HOPPER_TF32_ROUND_ALU if tf32 else 0)
                              + (BIAS_OPS_PER_SCORE if p.bias else 0),
                              kept_tiles=1, streamed_tiles=2 + (2 / kt.consumer_warpgroups if tf32 else 0),
                              dram_bytes=p.fwd_bytes + p.bias_bytes, pipe="softmax",
                              transposes=transpose_steps(p, kt, 1, TRANSPOSER_WARPS) if tf32 else 0)


def step10_hopper_forward(p: AttentionProblem, gpu: GPUModel, mma_fwd_us: float, force: bool = False,
                          opts: Options = DEFAULTS):
    """(KernelTile or None, steps, predicted seconds or None): the Hopper forward's schedule, and
    whether it beats the mma.sync forward (``mma_fwd_us``, step 9); ``force``: taken wherever it can run;
    ``opts``: ``NOVA_ATTENTION_PERSISTENT`` and ``NOVA_ATTENTION_TILE_ORDER``."""
    from nova.kernels.attention.build_hopper import ring_tiles
    why = hopper_blocker(p, gpu)
    if why:
        return None, [note("10 fwd path", "mma.sync", f"the forward stays on mma.sync + cp.async: {why}")], None
    d = Derivation()
    wgs = HOPPER_WGS
    tf32 = p.dtype == "tf32"
    k = 8 if tf32 else 16
    if tf32:
        pv = ("wgmma with A = P from registers, rounded to TF32 (the m64nN accumulators of each 8-key group, taken "
              "in the order 0, 2, 1, 3, are the m64k8 register A fragment when the keys are permuted), B = V^T "
              "[D, keys] K-major: wgmma reads 32-bit B only K-major, so producer warps 1-3 copy each landed V "
              "tile to V^T in the ring slot, keys permuted, and signal a vt_full barrier")
    else:
        pv = (f"wgmma with A = P from registers (the m64nN accumulator layout is the m64k16 register A layout "
              f"pairwise, packed to {p.dtype}) and B = V [keys, D] MN-major (the descriptor's transpose bit)")
    d.note("10 fwd instruction", f"wgmma m64nNk{k} + m64n{p.head_dim}k{k}",
           f"S = Q K^T (N = keys per tile, below): wgmma with both operands in shared memory, K-major over D "
           f"(128-byte swizzle); O += P V: {pv}; FP32 accumulation; TMA loads"
           + (" (TF32 tensor maps: rounded to nearest as they land)" if tf32 else "") + ", a full/empty mbarrier ring")
    entry = int(F.hopper_entry_regs(regs_per_sm=gpu.regs_per_sm, wgs=wgs))
    consumer_regs = lambda prod: int(min(F.hopper_consumer_regs(entry_regs=entry, producer_regs=prod, wgs=wgs),
                                         HOPPER_SETMAXNREG_MAX))
    producers = (HOPPER_TF32_PRODUCER_REGS, HOPPER_PRODUCER_REGS) if tf32 else (HOPPER_PRODUCER_REGS,)
    d.note("10 warpgroups", f"1 producer + {wgs} consumers",
           f"block_rows = 64 x {wgs} = {64 * wgs} query rows, 64 per consumer warpgroup (wgmma M); two so that "
           "one warpgroup's softmax (MUFU, FP32) runs while the other's wgmmas do (a warpgroup alone runs "
           "S, softmax, P V in sequence); three would leave "
           f"{int(F.hopper_consumer_regs(entry_regs=F.hopper_entry_regs(regs_per_sm=gpu.regs_per_sm, wgs=3), producer_regs=HOPPER_PRODUCER_REGS, wgs=3))} "
           "registers per consumer thread, too few for S, P and O of a 128-key tile")
    rows = 64 * wgs
    work = _cdiv(p.seq_q, rows) * p.batch * p.heads
    persistent = opts.attention_persistent and work > gpu.sm_count
    order = opts.attention_tile_order if persistent else ""
    grid = (int(gpu.sm_count), 1, 1) if persistent else (_cdiv(p.seq_q, rows), p.batch * p.heads, 1)
    eb = p.elem_bytes
    rate = gpu.tc_flops_per_clk_sm("wgmma", p.dtype)
    tried, best = [], None
    for bc in HOPPER_KEY_TILES[p.dtype]:
        regs = F.hopper_regs(block_cols=bc, D=p.head_dim, elem_bytes=eb, overhead=HOPPER_REG_OVERHEAD)
        prod = next((pr for pr in producers if regs <= consumer_regs(pr)), None)   # TF32: the most the tile leaves
        if prod is None:
            tried.append(f"{bc} keys: {regs:.0f} regs")
            continue
        cregs = consumer_regs(prod)
        stage = F.hopper_stage_bytes(tiles=ring_tiles(p), block_cols=bc, D=p.head_dim, elem_bytes=eb)
        t_tile = F.t_tile_ns(gemms=2, block_rows=rows, block_cols=bc, D=p.head_dim, tc_flops_per_clk_sm=rate,
                             clock_hz=gpu.clock_hz)
        want = int(F.stages(mem_latency_ns=gpu.mem_latency_ns, t_tile_ns=t_tile))
        cap = int((gpu.smem_per_block - rows * p.head_dim * eb - HOPPER_ALIGN) // stage)
        stages = max(2, min(want, cap, 4))
        smem = int(F.hopper_smem(block_rows=rows, D=p.head_dim, elem_bytes=eb, stages=stages, stage_bytes=stage,
                                 align=HOPPER_ALIGN))
        if smem > gpu.smem_per_block or cap < 2:
            tried.append(f"{bc} keys: smem {smem}")
            continue
        kt = KernelTile("fwd", rows, bc, 4 * wgs, stages, 0, smem, entry, 1, grid, consumer_warpgroups=wgs,
                        producer_warps=4, smem_layout="swizzle128", producer_regs=prod,
                        consumer_regs=cregs, persistent=persistent, tile_order=order,
                        transpose_in_flight=transpose_in_flight(prod) if tf32 else 0)
        vis = visited_pairs(p, "fwd", rows, bc)
        t, terms = hopper_fwd_time(p, gpu, kt, vis)
        tried.append(f"{bc} keys: {t * 1e6:.1f} us")
        if best is None or t < best[0] * 0.97:
            best = (t, kt, regs, want, cap, stage, t_tile, vis, terms)
    if best is None:
        d.note("10 fwd path", "mma.sync", f"no Hopper key tile fits ({'; '.join(tried)})")
        return None, d.steps, None
    t, kt, regs, want, cap, stage, t_tile, vis, terms = best
    prod, cregs = kt.producer_regs, kt.consumer_regs
    d.apply("10 consumer registers", F.hopper_consumer_regs,
            f"setmaxnreg: the producer warpgroup keeps {prod} (one thread issues TMA"
            + (f"; TF32: its idle warps transpose V, {HOPPER_TF32_PRODUCER_REGS} where the consumers' tile fits in "
               f"the rest, else {HOPPER_PRODUCER_REGS}" if tf32 else "")
            + f"), {wgs} consumer warpgroups share the rest of the block's registers at launch ({128 * (1 + wgs)} "
            f"threads x {entry}: setmaxnreg.inc waits for registers the block does not hold, forever; at most "
            f"{HOPPER_SETMAXNREG_MAX})",
            post=lambda v: int(min(v, HOPPER_SETMAXNREG_MAX)), entry_regs=entry, producer_regs=prod, wgs=wgs)
    if tf32:
        note_transposes(d, "10", kt, "V^T")
    d.apply("10 key tile registers", F.hopper_regs, f"per consumer thread: S (BC/2 FP32), P (BC/2 x elem_bytes/4: "
            f"{'TF32 words' if tf32 else '16-bit pairs'}), O (D/2 "
            f"FP32) + {HOPPER_REG_OVERHEAD} [EST] <= {cregs}; candidates {', '.join(tried)}",
            block_cols=kt.block_cols, D=p.head_dim, elem_bytes=eb, overhead=HOPPER_REG_OVERHEAD)
    d.note("10 key tile", f"{rows}x{kt.block_cols}", f"{kt.block_cols} keys per streamed K/V tile (wgmma N of S); "
           f"the fastest (within 3%: the larger) by this step's model")
    d.note("10 stages", kt.stages, f"Little's law: 1 + ceil({gpu.mem_latency_ns:.0f} ns / {t_tile:.0f} ns of tensor "
           f"time per tile) = {want}, within the {cap} K/V slots of {stage} B that fit beside Q, clamped to [2, 4]")
    d.apply("10 smem", F.hopper_smem, f"Q once + the {'K/V/V^T' if tf32 else 'K/V'} ring (each tile TMA boxes of [rows, 128 B], "
            "128-byte swizzle) + alignment slack; 1 block per SM (the registers: "
            f"{128 * (1 + wgs)} threads x {entry} at launch)", block_rows=rows, D=p.head_dim, elem_bytes=eb,
            stages=kt.stages, stage_bytes=stage, align=HOPPER_ALIGN)
    blocks = grid[0] * grid[1]
    if persistent:
        how = {"head": f"work tiles ordered head by head (a head's query tiles side by side, the longest "
                       f"first), CTA bx taking position bx of even rounds of {grid[0]} tiles and {grid[0]} - 1 - bx "
                       "of odd ones: the CTAs in flight read the K/V of a few dozen heads, which stay in L2 "
                       "(query-tile-major order re-read every head's K/V from DRAM per query tile: 1.6x the "
                       "forward's bytes at 32x8x512x64, Nsight Compute on the H200), and each CTA's long and "
                       "short tiles pair up across rounds (causal balance)",
               "query": "tiles bx, bx + grid, ... in decreasing query-tile order across heads (causal: the "
                        "longest first)"}[kt.tile_order]
        d.note("10 grid", f"{grid[0]} (persistent, {kt.tile_order} order)", f"{work} work tiles (query tiles x "
               f"batch x heads) > {int(gpu.sm_count)} SMs: one CTA per SM loops over them, {how}; its K/V ring "
               "runs on across tiles, so the next tile's Q and first K/V load during this tile's last softmax "
               "and epilogue (NOVA_ATTENTION_PERSISTENT=0: a block per tile; NOVA_ATTENTION_TILE_ORDER)")
    else:
        d.note("10 grid", f"{grid[0]} x {grid[1]}", f"query tiles x (batch x heads): {blocks} blocks, "
               f"{_cdiv(blocks, int(gpu.sm_count))} wave(s) of {int(gpu.sm_count)}; causal: only the K/V tiles up "
               "to the block's diagonal are loaded")
    d.note("10 fwd time (Hopper)", f"{t * 1e6:.1f} us", ", ".join(f"{k} {v * 1e6:.1f}" for k, v in terms.items())
           + f"; bound: {max((k for k in terms if k != 'blocks'), key=terms.get)}", F.t_hopper.text)
    if force:
        d.note("10 fwd path", "wgmma + TMA", f"NOVA_ATTENTION_HOPPER=force (the model: Hopper {t * 1e6:.1f} us, "
               f"mma.sync {mma_fwd_us:.1f} us); the backward: step 11")
        return kt, d.steps, t
    if t * 1e6 >= mma_fwd_us:
        d.note("10 fwd path", "mma.sync", f"Hopper forward {t * 1e6:.1f} us >= mma.sync forward {mma_fwd_us:.1f} us")
        return None, d.steps, None
    d.note("10 fwd path", "wgmma + TMA", f"Hopper forward {t * 1e6:.1f} us < mma.sync forward {mma_fwd_us:.1f} us "
           "(step 9); the backward kernels (step 11) read this forward's O and LSE")
    return kt, d.steps, t


# ---- 11 ----------------------------------------------------------------------------------------
HOPPER_BWD_PRODUCER_REGS = {"bwd_dkv": (32, 24), "bwd_dq": (24,)}   # the producer warpgroup after setmaxnreg.dec:
                                 # one TMA thread and (dK/dV) one warp writing LSE/D columns.  The block holds
                                 # 384 x 168 = 64512 registers from launch: producer x 128 + consumer x 256 must fit
                                 # in them, or setmaxnreg.inc waits forever (the first H200 run's hang: 32 x 128 +
                                 # 240 x 256 = 65536).  dQ: 24 -> 240 consumer registers (FA3's).  dK/dV: 32 -> 232
                                 # first (24 spilled the LSE/D warp's loop in ptxas 13.0: 52 B at B2 H2 T200 D64);
                                 # 24 -> 240 where that lets the consumers hold a tile >= 3% faster by the model
                                 # (D128: 64-row query tiles instead of 32; ptxas: no spills there)
HOPPER_BWD_TF32_PRODUCER_REGS = {2: (HOPPER_TF32_PRODUCER_REGS, HOPPER_PRODUCER_REGS), 1: (104,)}   # TF32, by consumer warpgroups:
                                 # the producer's idle warps transpose tiles (64-bit addresses); with two, 88 (3
                                 # units in flight) where the consumers' tile fits in the 208 left, else 40; with
                                 # one, registers are plentiful (its 240 stay): 104, 4 in flight (40 spilled there,
                                 # ptxas 13.0: 48 B at D64 with 32-query tiles, 272 B at T = 1)
TRANSPOSE_BASE_REGS = 40         # [FITTED to ptxas 13.0] a transposer loop with one unit in flight (the 40 the
TRANSPOSE_UNIT_REGS = 20         # producers keep) and each further unit (4 values, 64-bit addresses: 88
TRANSPOSE_MAX_IN_FLIGHT = 4      # registers hold 3, with 4 the D64 dQ's transposer spilled 4 B); at most 4
HOPPER_BWD_TF32_TILES = {"bwd_dkv": (128, 64, 32), "bwd_dq": (128, 64, 32)}   # TF32 (a slot also holds the
                                 # transposes): at D128 dQ fits only 32-key tiles (K, V, K^T beside 128-row Q, dO)
                                 # and dK/dV only 32-query tiles beside 64-row K, V (one consumer warpgroup).
                                 # 32-query dK/dV tiles at D64 spill the 40-register producer (ptxas 13.0: 48-52
                                 # B; 56 registers do not): the model never picks them there (64-row tiles fit
                                 # and are faster; tests/test_attention.py checks a grid of D64 shapes)
HOPPER_BWD_ACHIEVED = 0.70       # [FITTED] share of the binding pipe the wgmma dK/dV and dQ sustain, and
HOPPER_BWD_BLOCK_FIXED_US = 4.0  # [FITTED] their cost per block: least squares of both on CUPTI's kernel times
                                 # (bench/results/h200-2026-12-01/c/call10-kernel-times, BF16 causal dK-dV/dQ: 83/59,
                                 # 173/117, 542/384 us at 32x8x512x64, 16x12x1024x64, 8x16x2048x128), in sample
                                 # +12/+9%, -14/+2%, -2/+5% (the forward's 0.81 and 7.5 us: +34/+47%, +1/+28%, -4/+7%)
HOPPER_BWD_SETMAXNREG_MAX = 240  # FA3's backward: 240 (with a 24-register producer)
HOPPER_BWD_REG_OVERHEAD = 32     # [FITTED] consumer registers beyond the output accumulators (D/2 each), S and
                                 # dP (N/2 each, both live when their wgmmas complete) and the 16-bit P/dS pairs
                                 # in flight (N/8 per packed operand): LSE/D, descriptors, addresses.  ptxas 13.0:
                                 # dK/dV D64 N128 spills 80 B at 240, D128 N64 and dQ D128 N128 do not; dK/dV
                                 # D128 N64 spills 16 B at 232 (B8 H16 T2048 causal), so with a 32-register
                                 # producer D128 dK/dV stays on mma.sync (the estimate, 240 > 232, says so)
                                 # (tests/test_attention.py assembles every case without spills)
HOPPER_BWD_BIAS_REGS = 16       # [FITTED] a biased problem's consumer registers beyond them: the step's bias
                                 # values and their column predicates (ptxas 13.0, a padding mask: D128 16-bit
                                 # dK/dV at N64 and dQ at N128 spilled 12-36 B at 240 registers; at the next
                                 # tile down none spills: tests/test_attention_mask.py's D128 cases)
HOPPER_BWD_TILES = {"bwd_dkv": (128, 64, 32), "bwd_dq": (128, 64)}   # streamed rows (wgmma N of S), largest first
HOPPER_BWD_WGS = (2, 1)          # consumer warpgroups, preferred first: two interleave (one's elementwise pass
                                 # beside the other's wgmmas); one keeps half the rows (64-row K, V: TF32 D128
                                 # dK/dV, whose 128-row K, V leave no room for a slot of Q, dO, Q^T, dO^T) and
                                 # takes the block's registers alone (launch registers capped at the setmaxnreg
                                 # maximum: 256 x 240 hold a 104-register producer and a 240-register consumer)
HOPPER_BWD_ALU_PER_SCORE = {"bwd_dkv": 5, "bwd_dq": 4}   # FP32 ops per score: FMA (scale, -LSE), dP - D, x P,
                                 # two half cvt packs (P and dS; dQ packs dS only, plus the mask select), dK/dV:
                                 # the LSE/D column loads
HOPPER_BWD_GEMMS = {"bwd_dkv": 4, "bwd_dq": 3}           # S, dP, dV, dK / S, dP, dQ
HOPPER_BWD_SMEM_TILES = {"bwd_dkv": 4, "bwd_dq": 3}      # streamed tiles read per 64 x BC scores (B operands)


# the Hopper dK/dV and dQ kernels hold S and dP in registers; a bias element of its own per score (a bias
# with both a query and a key stride) beside them spilled dK/dV (ptxas, 12-100 bytes a thread at D128;
# dQ, its estimate taking the bias, did not; not measured on a GPU): those problems' backward runs on
# mma.sync (a padding mask, one value a key, runs on the Hopper kernels)
BIAS_PER_SCORE_BLOCKER = ("a bias with a value of its own per score (query and key strides) spills the Hopper "
                          "backward's registers: the mma.sync backward reads it")


def hopper_bwd_blocker(p: AttentionProblem, gpu: GPUModel) -> str:
    """Why the backward cannot run on the Hopper kernels ('' when it can)."""
    from nova.kernels.attention.build_hopper_bwd import tma_blocker_bwd
    if not {"wgmma", "tma", "setmaxnreg"} <= set(gpu.features) or not gpu.supports("wgmma", p.dtype):
        return f"{gpu.name} ({gpu.arch}) has no wgmma + TMA for {p.dtype}"
    if p.dtype not in HOPPER_DTYPES:
        return f"{p.dtype}: no Hopper backward"
    if p.split_scores:
        return f"{p.score_precision} (NOVA_ATTENTION_PRECISION) runs on the mma.sync backward (three products each)"
    if p.bias and p.bias[2] and p.bias[3]:
        return BIAS_PER_SCORE_BLOCKER
    return tma_blocker_bwd(p)


def hopper_bwd_time(p: AttentionProblem, gpu: GPUModel, role: str, kt: KernelTile, vis: int) -> tuple[float, dict]:
    """Step 11's model of a Hopper backward kernel (``hopper_kernel_time``): the two score-shaped wgmmas
    (S and dP), the elementwise P/dS and the register-A wgmmas; shared memory per warpgroup tile: its
    two kept 64-row tiles (A of S and dP) and the streamed tiles as B (S, dP, and dV/dK or dQ).  TF32:
    the producer's transposes read and write each transposed tile once per block step (per warpgroup
    2 x tiles / wgs more) and P/dS are rounded (HOPPER_TF32_ROUND_ALU each)."""
    from nova.kernels.attention.build_hopper_bwd import ring_tiles_bwd
    tf32 = p.dtype == "tf32"
    rounded = (2 if role == "bwd_dkv" else 1) * HOPPER_TF32_ROUND_ALU if tf32 else 0
    moved = 2 * (ring_tiles_bwd(p, role) - 2) / kt.consumer_warpgroups      # TF32's transposes: read + written
    return hopper_kernel_time(p, gpu, kt, vis, gemms=HOPPER_BWD_GEMMS[role],
                              alu_per_score=HOPPER_BWD_ALU_PER_SCORE[role] + rounded
                              + (BIAS_OPS_PER_SCORE if p.bias else 0), kept_tiles=2,
                              streamed_tiles=HOPPER_BWD_SMEM_TILES[role] + moved,
                              dram_bytes={"bwd_dq": p.fwd_bytes + p.fwd_bytes // 2, "bwd_dkv": p.bwd_bytes}[role]
                              + p.bias_bytes,
                              pipe="elementwise", achieved=HOPPER_BWD_ACHIEVED, block_fixed_us=HOPPER_BWD_BLOCK_FIXED_US)


def transpose_in_flight(producer_regs: int) -> int:
    """TF32: tile-transpose units a producer thread keeps in flight (loads issued before their
    stores): 1 + (producer_regs - TRANSPOSE_BASE_REGS) // TRANSPOSE_UNIT_REGS, in [1, TRANSPOSE_MAX_IN_FLIGHT].
    One unit's load-to-store latency per 16 bytes bound the transposes (the one-warpgroup D128 dK/dV:
    32 units per step and warp, ~1.9 us per step measured on the H200, bench/results/h200-2026-12-01/g)."""
    return max(1, min(TRANSPOSE_MAX_IN_FLIGHT, 1 + (producer_regs - TRANSPOSE_BASE_REGS) // TRANSPOSE_UNIT_REGS))


def note_transposes(d: Derivation, tag: str, kt: KernelTile, what: str) -> None:
    """Steps 10 and 11 (TF32): the derivation row of ``transpose_in_flight`` for the tile ``what``."""
    prod = kt.producer_regs
    d.note(f"{tag} transposes in flight", kt.transpose_in_flight,
           f"units of {what} (16 bytes in, 4 words out per lane) a transposer thread keeps in flight within its "
           f"{prod} registers (at most {TRANSPOSE_MAX_IN_FLIGHT}): one load-to-store latency per unit bounds the "
           "copies otherwise", formula=f"1 + ({prod} - {TRANSPOSE_BASE_REGS}) // {TRANSPOSE_UNIT_REGS}")


def hopper_bwd_entry_regs(gpu: GPUModel, wgs: int) -> int:
    """Registers per thread at launch of a backward block of 1 + ``wgs`` warpgroups: the SM's file shared
    by its threads (``hopper_entry_regs``), at most HOPPER_BWD_SETMAXNREG_MAX (one consumer warpgroup:
    256 threads x 256 would exceed the 255 a thread can hold; setmaxnreg only needs the pool to hold
    producer + consumers)."""
    return int(min(F.hopper_entry_regs(regs_per_sm=gpu.regs_per_sm, wgs=wgs), HOPPER_BWD_SETMAXNREG_MAX))


def step11_hopper_backward(p: AttentionProblem, gpu: GPUModel, role: str, mma_us: float, force: bool = False):
    """(KernelTile or None, steps): the Hopper schedule of backward kernel ``role`` (bwd_dkv or bwd_dq)
    and whether it beats the mma.sync kernel's step-9 time ``mma_us``; ``force``: taken wherever it runs."""
    from nova.kernels.attention.build_hopper_bwd import ring_tiles_bwd, smem_plan_hopper_bwd
    tag = f"11 {role}"
    why = hopper_bwd_blocker(p, gpu)
    if why:
        return None, [note(f"{tag} path", "mma.sync", f"{role} stays on mma.sync + cp.async: {why}")]
    d = Derivation()
    tf32 = p.dtype == "tf32"
    k = 8 if tf32 else 16
    xt = {"bwd_dkv": "Q^T and dO^T", "bwd_dq": "K^T"}[role]
    tf32_note = (f"; TF32: wgmma reads 32-bit B only K-major, so idle producer warps copy each landed tile's "
                 f"{xt} into the ring slot (rows permuted so that the accumulators, 0, 2, 1, 3 per 8 columns, are the "
                 "m64k8 register A fragment) and signal an xt_full barrier; P/dS rounded to TF32 in registers") if tf32 else ""
    if role == "bwd_dkv":
        d.note(f"{tag} instruction", f"wgmma m64nNk{k} x2 + m64n{p.head_dim}k{k} x2",
               "per key block (64 keys per consumer warpgroup) and streamed query tile (N rows): S^T = K Q^T and "
               "dP^T = V dO^T with both operands K-major in shared memory; dV += P^T dO and dK += dS^T Q with A = "
               f"P^T / dS^T packed to {p.dtype} in registers (the accumulator layout is the register A layout) and "
               "B = dO / Q [queries, D] MN-major (the transpose bit); LSE and D of the tile's queries written to "
               "the ring slot by a producer warp; every query head of the GQA group streamed through one block"
               + tf32_note)
    else:
        d.note(f"{tag} instruction", f"wgmma m64nNk{k} x2 + m64n{p.head_dim}k{k}",
               "per query block (64 rows per consumer warpgroup) and streamed key tile (N keys): S = Q K^T and "
               "dP = dO V^T (smem x smem), dQ += dS K with dS from registers and K MN-major; a separate pass, not "
               "FP32 atomics from the dK/dV kernel (step 8's reasons: deterministic, no scratch, no conversion)"
               + tf32_note)
    eb = p.elem_bytes
    rate = gpu.tc_flops_per_clk_sm("wgmma", p.dtype)
    outs = 2 if role == "bwd_dkv" else 1
    overhead = HOPPER_BWD_REG_OVERHEAD + (HOPPER_BWD_BIAS_REGS if p.bias else 0)
    tried, best = [], None
    producer_regs = lambda wgs: HOPPER_BWD_TF32_PRODUCER_REGS[wgs] if tf32 else HOPPER_BWD_PRODUCER_REGS[role]
    ntiles = ring_tiles_bwd(p, role)
    tiles = HOPPER_BWD_TF32_TILES[role] if tf32 else HOPPER_BWD_TILES[role]
    for wgs, prod, bc in ((w, pr, bc) for w in HOPPER_BWD_WGS for pr in producer_regs(w) for bc in tiles):
        prods = producer_regs(wgs)
        entry = hopper_bwd_entry_regs(gpu, wgs)
        rows = 64 * wgs
        grid = _grid(p, role, rows)
        cregs = int(min(F.hopper_consumer_regs(entry_regs=entry, producer_regs=prod, wgs=wgs),
                        HOPPER_BWD_SETMAXNREG_MAX))
        regs = F.hopper_bwd_regs(outs=outs, D=p.head_dim, block_cols=bc, elem_bytes=eb, overhead=overhead)
        name = f"{rows}x{bc}" + (f" ({prod}/{cregs})" if len(prods) > 1 else "")
        if regs > cregs:
            tried.append(f"{name}: {regs:.0f} regs")
            continue
        vec = 8 * bc if role == "bwd_dkv" else 0
        stage = ntiles * bc * p.head_dim * eb + vec
        t_tile = F.t_tile_ns(gemms=HOPPER_BWD_GEMMS[role], block_rows=rows, block_cols=bc, D=p.head_dim,
                             tc_flops_per_clk_sm=rate, clock_hz=gpu.clock_hz)
        want = int(F.stages(mem_latency_ns=gpu.mem_latency_ns, t_tile_ns=t_tile))
        cap = int((gpu.smem_per_block - 2 * rows * p.head_dim * eb - HOPPER_ALIGN) // stage)
        stages = max(2, min(want, cap, 4))
        smem = smem_plan_hopper_bwd(p, role, rows, bc, stages)["total"]
        if smem > gpu.smem_per_block or cap < 2:
            tried.append(f"{name}: smem {smem}")
            continue
        kt = KernelTile(role, rows, bc, 4 * wgs, stages, 0, smem, entry, 1, grid, consumer_warpgroups=wgs,
                        producer_warps=4, smem_layout="swizzle128", producer_regs=prod, consumer_regs=cregs,
                        transpose_in_flight=transpose_in_flight(prod) if tf32 else 0)
        vis = visited_pairs(p, role, rows, bc)
        t, terms = hopper_bwd_time(p, gpu, role, kt, vis)
        tried.append(f"{name}: {t * 1e6:.1f} us")
        if best is None or t < best[0] * 0.97:
            best = (t, kt, want, cap, stage, t_tile, terms, vec)
    if best is None:
        d.note(f"{tag} path", "mma.sync", f"no Hopper tile fits ({'; '.join(tried)})")
        return None, d.steps
    t, kt, want, cap, stage, t_tile, terms, vec = best
    prod, cregs, entry, wgs, rows = kt.producer_regs, kt.consumer_regs, kt.regs_per_thread, kt.consumer_warpgroups, kt.block_rows
    prods = producer_regs(wgs)
    d.apply(f"{tag} consumer registers", F.hopper_consumer_regs,
            f"setmaxnreg: the producer warpgroup keeps {prod}"
            + (f" (of {', '.join(map(str, prods))}: the fastest tile's, fewer only if >= 3% faster)" if len(prods) > 1
               else "")
            + f", {wgs} consumer warpgroups share the rest of the block's registers at launch ({128 * (1 + wgs)} "
            f"threads x {entry}: setmaxnreg.inc waits for registers the block does not hold, forever; at most "
            f"{HOPPER_BWD_SETMAXNREG_MAX})",
            post=lambda v: int(min(v, HOPPER_BWD_SETMAXNREG_MAX)), entry_regs=entry, producer_regs=prod, wgs=wgs)
    d.apply(f"{tag} registers", F.hopper_bwd_regs, f"per consumer thread: {'dK and dV' if outs == 2 else 'dQ'} "
            f"(D/2 FP32 each), S and dP (N/2 FP32 each, both live when their wgmmas complete), the "
            f"{'P/dS' if outs == 2 else 'dS'} fragments in flight (N x elem_bytes / 16 each) + {HOPPER_BWD_REG_OVERHEAD} "
            + (f"+ {HOPPER_BWD_BIAS_REGS} for the bias " if p.bias else "") + f"[FITTED to "
            f"ptxas] <= {cregs}; candidates {', '.join(tried)}",
            outs=outs, D=p.head_dim, block_cols=kt.block_cols, elem_bytes=eb, overhead=overhead)
    what = "query rows per streamed Q/dO tile" if role == "bwd_dkv" else "keys per streamed K/V tile"
    if tf32:
        note_transposes(d, tag, kt, xt)
    d.note(f"{tag} tile", f"{rows}x{kt.block_cols}", f"{rows} kept rows (64 per consumer warpgroup), "
           f"{kt.block_cols} {what} (wgmma N of S): the fastest (within 3%: the larger) by this step's model")
    d.note(f"{tag} stages", kt.stages, f"Little's law: 1 + ceil({gpu.mem_latency_ns:.0f} ns / {t_tile:.0f} ns of "
           f"tensor time per tile) = {want}, within the {cap} slots of {stage} B that fit beside the kept tiles, "
           "clamped to [2, 4]")
    d.apply(f"{tag} smem", F.hopper_bwd_smem, "the two kept tiles + the ring (the two streamed tiles"
            f"{f', {xt}' if tf32 else ''}{' and their LSE/D columns' if vec else ''}) + alignment slack; 1 block per SM "
            f"({128 * (1 + wgs)} threads x {entry} registers at launch)", block_rows=rows, D=p.head_dim, elem_bytes=eb,
            tiles=ntiles, stages=kt.stages, block_cols=kt.block_cols, vec_bytes=vec, align=HOPPER_ALIGN)
    blocks = grid[0] * grid[1]
    d.note(f"{tag} grid", f"{grid[0]} x {grid[1]}", f"{blocks} blocks, {_cdiv(blocks, int(gpu.sm_count))} wave(s) "
           f"of {int(gpu.sm_count)}")
    d.note(f"{tag} time (Hopper)", f"{t * 1e6:.1f} us", ", ".join(f"{k} {v * 1e6:.1f}" for k, v in terms.items())
           + f"; bound: {max((k for k in terms if k != 'blocks'), key=terms.get)}", F.t_hopper.text)
    if force:
        d.note(f"{tag} path", "wgmma + TMA", f"NOVA_ATTENTION_HOPPER=force (the model: Hopper {t * 1e6:.1f} us, "
               f"mma.sync {mma_us:.1f} us)")
        return kt, d.steps
    if t * 1e6 >= mma_us:
        d.note(f"{tag} path", "mma.sync", f"Hopper {role} {t * 1e6:.1f} us >= mma.sync {mma_us:.1f} us (step 9)")
        return None, d.steps
    d.note(f"{tag} path", "wgmma + TMA", f"Hopper {role} {t * 1e6:.1f} us < mma.sync {mma_us:.1f} us (step 9)")
    return kt, d.steps


def step10_split_or_hopper(p: AttentionProblem, gpu: GPUModel, split: KernelTile, combine: KernelTile | None,
                           hopper: KernelTile, hopper_combine: KernelTile | None, vis: int, steps: list) -> bool:
    """Step 10 ranks the Hopper forward against the mma.sync one by the throughput model, which spreads
    the work over every SM; a split-KV forward exists because the unsplit grid leaves block slots idle,
    where the busiest SM decides.  So where either is split, the two are compared by step 9's device
    time: each kernel (split or not: its blocks' walks) plus its combine.  (The backward's kernels are
    split after step 11, whichever it chose.)  Returns whether the Hopper forward is faster (a note in
    ``steps`` says which)."""
    def priced(kt, merge, visited):
        return (predicted_us(p, gpu, kt, visited) + (predicted_us(p, gpu, merge, 0) if merge is not None else 0.0),
                f"split {kt.splits} ways plus its combine" if merge is not None else "unsplit")
    h, h_what = priced(hopper, hopper_combine, visited_pairs(p, "fwd", hopper.block_rows, hopper.block_cols))
    m, m_what = priced(split, combine, vis)
    if h < m:
        steps.append(note("10 fwd path (device time)", "wgmma + TMA" + (", split KV" if hopper_combine else ""),
                          f"the Hopper kernel {h_what} {h:.1f} us < the mma.sync kernel {m_what} {m:.1f} us "
                          "(step 9's device time)"))
        return True
    steps.append(note("10 fwd path (device time)", "mma.sync" + (", split KV" if combine else ""),
                      f"the mma.sync kernel {m_what} {m:.1f} us <= the Hopper kernel {h_what} {h:.1f} us by step "
                      "9's device time (the throughput model above spreads the Hopper kernel's few blocks over every "
                      "SM)"))
    return False


# ---- the whole derivation ------------------------------------------------------------------------
DEVICE_TIME_FORMULA = "t_launch + max(resources, busiest SM: its steps x a step at one SM's pipes + its blocks' fixed costs)"


def device_time(p: AttentionProblem, gpu: GPUModel, role: str, kt: KernelTile, terms: dict) -> tuple[float, dict]:
    """Step 9: the kernel's predicted device time (``device_time.kernel_device_time``) from its
    throughput terms (``kernel_time``) and this kernel's figures: the pipes' achieved share, the cost
    per streamed tile, a TF32 Hopper forward's transposes per step; the target's calibrated DRAM
    efficiency and launch gap (``calibration.memory_constants``)."""
    from nova.hwmodel.calibration import memory_constants
    from nova.kernels.attention.device_time import kernel_device_time
    if kt.hopper:
        achieved = HOPPER_ACHIEVED if role == "fwd" else HOPPER_BWD_ACHIEVED
        tile_fixed = HOPPER_TILE_FIXED_US
    else:
        achieved, tile_fixed = mma_sync_achieved(p), TILE_FIXED_US
    transposes = 0
    if kt.hopper and role == "fwd" and p.dtype == "tf32":
        from nova.kernels.attention.build_hopper import TRANSPOSER_WARPS
        transposes = transpose_steps(p, kt, 1, TRANSPOSER_WARPS)
    return kernel_device_time(p, gpu, role, kt, terms, memory_constants(gpu), achieved=achieved,
                              tile_fixed_us=tile_fixed, block_fixed_us=BLOCK_FIXED_US, transposes=transposes)


def configure_attention(problem: AttentionProblem, target: "GPUModel | str" = "h200", *,
                        tiles: dict | None = None, options: Options | None = None,
                        splits: dict | None = None) -> AttentionConfig:
    """``options`` (None: ``nova.options.current()``): ``NOVA_ATTENTION_HOPPER``, ``NOVA_ATTENTION_HOPPER_BWD``,
    ``NOVA_ATTENTION_PERSISTENT`` and ``NOVA_ATTENTION_TILE_ORDER`` decide which kernels step 10 and 11 weigh,
    ``NOVA_ATTENTION_SPLIT_KV`` whether step 7 may split the keys.
    ``tiles`` (experiments only): {role: (block_rows, block_cols, stages, blocks_per_sm)} replaces
    the derived tile of that role (any entry None keeps the derived value); the derivation says so.
    A ``tiles`` entry for "fwd" keeps the forward on mma.sync.
    ``splits`` (experiments and replays): {role: count} replaces step 7's pick for that role (1: unsplit),
    priced like it; the derivation says so.  Roles: "fwd", "bwd_dq", "bwd_dkv"; counts 1..``MAX_SPLITS``."""
    t0 = time.perf_counter()
    gpu = get_target(target)
    opts = options if options is not None else current_options()
    p = problem
    steps: list[Step] = []
    mma, st = step1_instruction(p, gpu)
    steps.append(st)
    _, st = step2_exp_balance(p, gpu)
    steps.append(st)
    warps, st = step3_warps(gpu)
    steps.append(st)
    pad = 16 // p.elem_bytes
    steps.append(Step.note("3 smem padding", "-", f"+{pad} elements",
                      f"rows of D+{pad} elements: stride = 4 mod 8 words, so ldmatrix rows and the TF32 scalar reads "
                      "of rows (2t, 2t+1) hit 32 distinct banks; 16-byte multiple for cp.async"))
    kernels, visited, combines = {}, {}, {}
    unknown = set(splits or ()) - set(COMBINES)
    if unknown:
        raise ValueError(f"splits given for {', '.join(sorted(unknown))}: only {', '.join(COMBINES)} split")

    def split_step(role):
        """Step 7's splits of ``role`` (the caller's given count, else the derivation's unless an
        experiment's tile or ``NOVA_ATTENTION_SPLIT_KV=0`` keeps it whole), into kernels and combines."""
        if splits and role in splits:
            kernels[role], combines[role], sts = given_splits(p, gpu, role, kernels[role], splits[role])
        elif not (tiles and role in tiles) and opts.attention_split_kv:
            kernels[role], combines[role], sts = step7_splits(p, gpu, role, kernels[role], visited[role])
        else:
            return
        steps.extend(sts)
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        (mt, cols, regs, kw), sts = step4_tile(p, gpu, role, warps, pad)
        steps += sts
        rows = 16 * kw * mt
        stages, smem, sts = step5_stages(p, gpu, role, rows, cols, pad, kw, regs)
        steps += sts
        bps, sts = step6_occupancy(gpu, role, kw, regs, smem)
        steps += sts
        if tiles and role in tiles:
            br, bc, stg, bp = tiles[role]
            rows, cols = br or rows, bc or cols
            if stg is None or bp is None:
                stg2, smem, _ = step5_stages(p, gpu, role, rows, cols, pad, kw, regs)
            stages = stg or stg2
            from nova.kernels.attention.build import smem_plan
            smem = smem_plan(p, KernelTile(role, rows, cols, kw, stages, pad, 0, 0, 1, (1, 1, 1)))["total"]
            bps = bp or step6_occupancy(gpu, role, kw, regs, smem)[0]
            steps.append(Step.note(f"override {role}", "-", f"{rows}x{cols} s{stages} b{bps}", "experiment: tile given by the caller"))
        grid, st, vis, _ = step7_grid(p, gpu, role, rows, cols, bps)
        steps.append(st)
        kernels[role] = KernelTile(role, rows, cols, kw, stages, pad, int(smem), regs, bps, grid)
        visited[role] = vis
        if role == "fwd":
            split_step(role)
    rows_pre = 4 * 32 // 8
    pre_grid = (_cdiv(p.batch * p.heads * p.seq_q, rows_pre), 1, 1)
    kernels["bwd_pre"] = KernelTile("bwd_pre", rows_pre, 0, 4, 1, 0, 0, 32, 8, pre_grid)
    steps.append(Step.note("7 bwd_pre grid", "-", f"{pre_grid[0]}",
                      f"D = rowsum(dO*O): 8 lanes per row (16-byte loads, 3 shuffles), {rows_pre} rows per block"))
    mode, st = step8_dq_mode(p, gpu, kernels["bwd_dkv"].block_cols, visited["bwd_dkv"])
    steps.append(st)
    tma = False
    hmode = opts.attention_hopper
    if not (tiles and "fwd" in tiles) and hmode != "off" and "wgmma" in gpu.features:
        mma_fwd, _ = kernel_time(p, gpu, "fwd", kernels["fwd"], visited["fwd"])
        hkt, sts, _ = step10_hopper_forward(p, gpu, mma_fwd * 1e6, force=hmode == "force", opts=opts)
        steps += sts
        hcombine = None
        # the Hopper forward's own key splits (step 7 on its tile), derived only: a caller's forward
        # count is the mma.sync forward's (the kernels rows measured before this split existed replay so)
        if hkt is not None and not hkt.persistent and not p.causal and not (splits and "fwd" in splits) \
                and opts.attention_split_kv:
            hkt, hcombine, sts = step7_splits(p, gpu, "fwd", hkt, visited_pairs(p, "fwd", hkt.block_rows,
                                                                                hkt.block_cols))
            steps.extend(replace(st, step=st.step + " (Hopper)") for st in sts)
        if hkt is not None:
            mma_kernel, mma_combine = kernels["fwd"], combines.get("fwd")
            if hmode != "force" and (mma_combine is not None or hcombine is not None) and not \
                    step10_split_or_hopper(p, gpu, mma_kernel, mma_combine, hkt, hcombine, visited["fwd"], steps):
                hkt = None
        if hkt is not None:
            kernels["fwd"], tma, combines["fwd"] = hkt, True, hcombine
            visited["fwd"] = visited_pairs(p, "fwd", hkt.block_rows, hkt.block_cols)
    elif "wgmma" in gpu.features and not (tiles and "fwd" in tiles):
        steps.append(note("10 fwd path", "mma.sync", "NOVA_ATTENTION_HOPPER=off or an experiment's forward tile: "
                          "the forward stays on mma.sync"))
    if hmode != "off" and "wgmma" in gpu.features and not opts.attention_hopper_backward:
        for role in ("bwd_dkv", "bwd_dq"):
            steps.append(note(f"11 {role} path", "mma.sync", "NOVA_ATTENTION_HOPPER_BWD=0: the backward stays "
                              "on mma.sync"))
    elif hmode != "off" and "wgmma" in gpu.features:
        for role in ("bwd_dkv", "bwd_dq"):
            if tiles and role in tiles:
                steps.append(note(f"11 {role} path", "mma.sync", "an experiment's tile: stays on mma.sync"))
                continue
            mma_t, _ = kernel_time(p, gpu, role, kernels[role], visited[role])
            hkt, sts = step11_hopper_backward(p, gpu, role, mma_t * 1e6, force=hmode == "force")
            steps += sts
            if hkt is not None:
                kernels[role], combines[role] = hkt, None
                visited[role] = visited_pairs(p, role, hkt.block_rows, hkt.block_cols)
    for role in ("bwd_dkv", "bwd_dq"):         # the backward's splits: on the kernel step 11 chose
        split_step(role)
    sched = AttentionSchedule(gpu.arch if gpu.arch != SM90A else "sm_90", mma, kernels["fwd"], kernels["bwd_pre"],
                              kernels["bwd_dkv"], kernels["bwd_dq"], dq_mode=mode, tma=tma,
                              fwd_combine=combines.get("fwd"), bwd_dq_combine=combines.get("bwd_dq"),
                              bwd_dkv_combine=combines.get("bwd_dkv"))
    times, terms_all = {}, {}
    for role in sched.with_combines(("fwd", "bwd_pre", "bwd_dkv", "bwd_dq")):
        kt = sched.kernel(role)
        _, terms = kernel_time(p, gpu, role, kt, visited.get(role, 0))
        t, device = device_time(p, gpu, role, kt, terms)
        times[role] = t * 1e6
        bound = max((k for k in terms if k != "blocks"), key=terms.get)
        if "busiest SM" in device and device["busiest SM"] > device["resources"]:
            bound = "busiest SM"
        terms_all[role] = {"time_us": round(t * 1e6, 2), "bound": bound,
                           **{k: round(v * 1e6, 2) for k, v in {**terms, **device}.items()}}
        pipes = "busiest SM" in device          # a kernel of tiles (else a DRAM pass: bwd_pre, a combine)
        text = f"resources: {F.t_hopper.text if kt.hopper else F.t_kernel.text}; " if pipes else ""
        steps.append(Step.note(f"9 {role} time", DEVICE_TIME_FORMULA if pipes else
                               "max(dram bytes / (bandwidth x eta_dram), loaded latency) + launch",
                               f"{t * 1e6:.1f} us", f"{bound}-bound; {text}"
                               + ", ".join(f"{k} {v * 1e6:.1f}" for k, v in {**terms, **device}.items())))
    total = sum(times.values())
    flops = p.fwd_flops + p.bwd_flops
    peak = gpu.peak_flops(p.dtype, "mma.sync")
    floor = max(flops / peak, (p.fwd_bytes + p.bwd_bytes) / gpu.dram_bw)
    fwd_bound = terms_all["fwd"]["bound"]
    pred = Prediction(time_us=total, tflops=flops / (total * 1e-6) / 1e12, bound=fwd_bound, floor_us=floor * 1e6,
                      terms_us={f"{r}": times[r] for r in times})
    steps.append(Step.note("9 prediction", "-", f"{total:.1f} us",
                      f"forward {times['fwd'] + times.get('fwd_combine', 0):.1f} + backward "
                      f"{total - times['fwd'] - times.get('fwd_combine', 0):.1f} us; "
                      f"{pred.tflops:.1f} TFLOP/s of the algorithm's {flops / 1e9:.1f} GFLOP (7 matmuls' worth counted "
                      f"as 5: the dQ pass recomputes 2); floor {floor * 1e6:.1f} us"))
    return AttentionConfig(p, gpu, sched, pred, tuple(steps), terms_all, (time.perf_counter() - t0) * 1e3)


def check_attention_schedule(p: AttentionProblem, s: AttentionSchedule, gpu: GPUModel) -> list[str]:
    """Hardware limits every kernel of ``s`` must satisfy; returns the violations."""
    out = []
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        k = s.kernel(role)
        if k.smem_bytes > gpu.smem_per_block:
            out.append(f"{role}: smem {k.smem_bytes} > {gpu.smem_per_block:.0f}")
        if k.blocks_per_sm * (k.smem_bytes + gpu.smem_reserved_per_block) > gpu.smem_per_sm:
            out.append(f"{role}: {k.blocks_per_sm} blocks x smem > {gpu.smem_per_sm:.0f}")
        if k.regs_per_thread > gpu.max_regs_per_thread:
            out.append(f"{role}: registers {k.regs_per_thread}")
        if k.block_rows % (16 * k.warps) or k.block_cols % 16:
            out.append(f"{role}: tile {k.block_rows}x{k.block_cols} does not divide into {k.warps} warps of m16 tiles")
        if k.stages < 2:
            out.append(f"{role}: fewer than 2 stages")
        if k.hopper and 128 * (k.producer_regs + k.consumer_warpgroups * k.consumer_regs) > k.threads * k.regs_per_thread:
            out.append(f"{role}: setmaxnreg {k.producer_regs}/{k.consumer_regs} exceeds the {k.threads} x "
                       f"{k.regs_per_thread} registers the block holds (setmaxnreg.inc would wait forever)")
    return out
