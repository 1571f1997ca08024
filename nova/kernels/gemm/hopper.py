"""Hopper rules: the wgmma schedule in closed form, each decision explained.

Used by ``configure()`` when the target has wgmma (unless ``NOVA_HOPPER=0``).
The kernel it configures is ``nova/kernels/gemm/emit_hopper.py``: one producer warpgroup (TMA), C
consumer warpgroups each owning a 64 x N slab (wgmma m64nNk), a ring of S stages of 128-byte
swizzled K panels, a persistent grid.  Every decision the kernel and its launch need is made here
and stored in the ``Schedule`` (``Schedule.hopper``: operand roles, TMA boxes, setmaxnreg targets,
the shared-memory ring, the grid); codegen and the runtime only read it.  One function per step,
each returning its decision and the derivation row(s) that explain it:

 1. instruction          wgmma.m64nNk{8,16}, FP32 accumulate; TF32 rounding by the TMA unit (TFLOAT32 maps)
 2. operand roles        which operand is the wgmma A (registers for 32-bit MN-major data: C^T = B^T A^T),
                         which needs a prep pass, the tensor maps' element type (``operand_plan``)
 2b. line pads           a K-major operand TMA reads in place with rows off the 128-byte line: in place
                         (most of its box rows fill from two L2 lines) or through a pad pass, by the model
                         (shown only where an operand is off the line)
 3. consumer registers   the producer keeps 56 registers/thread (setmaxnreg.dec); as many consumer
                         warpgroups as the rest lets hold the widest wgmma N
 4. warpgroup tile       largest N <= 256 whose N/2 accumulators + overhead fit the consumers' share
 5. smem traffic         bytes/clock the wgmma operand reads + TMA writes need at the tensor peak vs 128 B/clk:
                         the reason N = 256 (80 + 48 = 128 B/clk for TF32) beats N = 128 (96 + 64 = 160)
 6. smem-bound fraction  the fraction of the tensor peak shared memory can feed
 7. clamp N              no wgmma N wider than the next power of two of its extent (shown when it clamps)
 8. tile and split       of the few tile shapes (1-2 WGs, or 3 at N <= 192, x N, 3N/4, N/2, N/4), K splits
                         and ways to add the slices (FP32 atomics into C, or a workspace + a reduction kernel:
                         any output, deterministic), each with the epilogue it would use, the one the prediction's
                         model (step 16) predicts fastest; rows: output tiles, (batched) work units,
                         split-K (never with a batch: the batch elements fill the SMs instead)
 9. epilogue             registers (predicated stores from the accumulators, between tiles) or the TMA
                         store (each consumer warpgroup stages its slab in 2 x 8 KB swizzled boxes and
                         TMA-stores them: they drain while the next tile's K loop runs), by the model
    consumers            cooperative (the warpgroups split each tile: steps 8-9) or ping-pong (each
                         warpgroup computes whole 64- or 128-row tiles up to 64x256 / 128x192, the CTA's
                         units alternately, one's epilogue under the other's K loop: ``pingpong_terms``), by
                         the model (``AUTO_PINGPONG``; close K-loop limits weighed by ``contention`` on both
                         sides) or ``NOVA_PINGPONG``; not with split-K, stream-K, clusters or
                         one CTA per unit (``pingpong_blocker``).  Recorded where ping-pong is picked or
                         NOVA_PINGPONG is set (``EXPLAIN_PINGPONG_ALWAYS``), so cooperative derivations
                         keep their rows
10. stages               as many as fit the per-block shared memory beside the staging boxes (a deeper
                         ring only hides more latency)
11. TMA boxes            [BK = 128 B of K] x [block_m] and x [block_n], 128-byte swizzle = the wgmma descriptor layout
12. cluster              1x1, or 2x1 / 1x2 CTAs along M / N that share one operand's tile (B's along M, A's
                         along N): each CTA TMA-loads 1/extent of it with .multicast::cluster into every CTA of
                         the cluster, so that operand's L2 -> SM fill bytes divide by the extent; chosen where
                         the model (step 16: ``fill_share``, ``cluster_pacing``, ``CLUSTER_SYNC_S``) predicts
                         it faster than 1x1, 1x1 on a tie; ``NOVA_CLUSTER=MxN`` forces a shape (tests, experiments);
                         1x1 for a batched problem (``cluster_blocker``)
13. grid                 persistent: min(tiles x K slices (x batch), SMs) CTAs walk the work units (with a cluster:
                         min(cluster units, SMs / cluster size) clusters, a multiple of the cluster size)
14. group-M              rasterization, as for the mma.sync path (shown when there are tile rows to group)
15. operand prep         which operands go through a transpose/pad pass (TMA needs 16-byte aligned rows; the
                         pass pads K to whole 128-byte lines)
16. prediction           max(tensor x smem cap, L2 fills (+ TMA stores) at each SM's port, DRAM + the wait of its
                         loads' latency (``dram_wait_time``), the ring's latency bound) + first fill + epilogues +
                         prep + split-K + launches
                         (``time_terms``, ``total_time``; recorded by ``configure``)
Explain prints the rows it records in this order, numbered as printed (steps 7 and 14 may be absent).

Batched GEMMs (``problem.batch`` > 1): a work unit is (batch element, output tile); the model's
per-SM counts, DRAM bytes and prep passes scale with the batch (``batch_units``, ``min_bytes``,
``prep_bytes``); group-M rasterises within a batch element; K is never split.  Each operand's tensor
map is 3-D (batch outermost, its batch stride) or, broadcast, the 2-D map of one matrix
(``operand_plan``).
"""
from __future__ import annotations

import functools
import itertools
import math

from nova.codegen.nvgpu import SM90A, SWIZZLE_ATOM_BYTES, SWIZZLE_BYTES, WARPGROUP_THREADS
from nova.options import DEFAULTS, Options
from nova.kernels.gemm.cost import cdiv
from nova.configurator.derivation import Derivation, NullDerivation, formula_step, note
from nova.kernels.gemm.problem import GemmProblem, ProblemError
from nova.configurator.step import MmaInstr, Prediction, Step
from nova.kernels.gemm.schedule import (HopperPlan, OperandPlan, OperandPrep, OperandRole, Schedule, SmemRing,
                                        StreamKPlan, TmaBox)
from nova.hwmodel.formula import formulas

ARCH = SM90A                   # wgmma and setmaxnreg need the architecture-specific target
WG_THREADS = WARPGROUP_THREADS
WARPS_PER_WARPGROUP = WG_THREADS // 32
WGMMA_M = 64                   # wgmma rows per consumer warpgroup
PRODUCER_WARPS = WARPS_PER_WARPGROUP   # the producer is one warpgroup
PRODUCER_REGS = 56             # producer warpgroup after setmaxnreg.dec: one thread issues the TMA loads (at 40
                               # ptxas spilled the producer's address math on some shapes, e.g. 8192x1536x512 bf16)
SETMAXNREG_MAX = 232           # registers a thread may hold after setmaxnreg.inc (less than 255: PTX ISA)
SETMAXNREG_GRANULE = 8         # setmaxnreg counts are multiples of 8 (PTX ISA)
CONSUMER_OVERHEAD_REGS = 40    # descriptors, ring counters, epilogue addresses; ptxas: 168 regs at N=256 (128 acc)
MAX_CONSUMER_WARPGROUPS = 2    # 3 would leave too few registers for N = 256 (step 4)
WIDE_CONSUMER_WARPGROUPS = 3   # step 8 also tries 3 consumer warpgroups (192 wgmma rows) at the N whose accumulators
                               # fit their 152 registers (192 and narrower): the 192x192 tiles cuBLAS and XLA run on
                               # the deep-K weight gradients (bench/results/h200-2026-12-01/e/call1), half the K slices
                               # and partial bytes of 128x192 where the tiles are few.  Not with a register-fed
                               # wgmma A (32-bit MN-major): its fragments of two K tiles beside 96 accumulators
                               # overflow 152 registers and ptxas serialises every wgmma (C7512)
STREAM_K_REGS_FEED_MAX_N = 192   # stream-K with a register-fed wgmma A: the widest N whose consumers do not spill
MIN_WGMMA_N = 64               # the narrowest tile N the rules consider
SWIZZLE = SWIZZLE_BYTES        # bytes of K per smem row = TMA box inner extent = 128B swizzle span
RING_ALIGN = SWIZZLE_ATOM_BYTES  # the ring starts on a 1024-byte boundary (128B-swizzle atom): that much slack
MIN_STAGES, MAX_STAGES = 2, 8  # one slot landing while one computes; deeper rings gain nothing measurable
PINGPONG_MIN_STAGES = 4        # the shallowest ping-pong ring measured right (``pingpong_ring_cap`` says why)
REDUCE_CHAIN_LATENCIES = 2     # [CC] the split-K reduction kernel's threads wait one load round (their partials) and
                               # one store round (C) at the loaded memory latency (emit_hopper._SplitReduce)
MIN_SLICE_K_TILES = 8          # a K slice streams >= 8 K tiles: the ring fill and the atomic epilogue amortise
LAUNCH_S = 5e-6                # per kernel launch (the memset of split-K, each prep pass)
# The operand-prep pass (``emit_hopper.build_prep_module``): a PREP_TILE x PREP_TILE tile per block of
# PREP_THREADS threads, each thread PREP_TILE / (PREP_THREADS / PREP_TILE) = 4 elements with scalar
# loads and stores.  Its time (``prep_time``) is the larger of its DRAM bytes and its latency chain: a
# thread issues its four loads before its first store (a padding copy into registers, a transpose into
# shared memory), so a wave of blocks waits one loaded latency.  Measured when a padding copy stored each
# element before loading the next (four latencies a wave): 1x13647x1389 NT TF32's copy (19.0M elements, 18
# waves of 1056 blocks) ~57 us by graph replay minus the calibrated main kernel (bench/results/
# h200-2026-12-03/run8/heldout), 56 us at four latencies; GPT-42M's 8.4M-element TF32 transposes 16.1 us
# each, 4.2 TB/s: DRAM-bound (bench/results/h200-2026-12-03/run7/profile-gpt42m, nova_prep)
PREP_TILE = 32
PREP_THREADS = 256
# The TMA-store epilogue (step 9): each consumer warpgroup writes its 64 x N slab into shared memory one
# 8 KB step at a time (a 64 x 128 B box of C, or two 32 x 128 B boxes swapped), 128-byte swizzled,
# double-buffered: one step is written while the TMA store of the previous one reads its buffer.
STAGING_BUFFERS = 2
STAGING_STEP_BYTES = WGMMA_M * SWIZZLE
STAGING_STEP_CLK = 64          # [EST] per step and warpgroup: the proxy fence, two 128-thread named barriers,
                               # the elected thread's TMA issue, commit and wait
# A register-epilogue store instruction that writes part of a 32-byte sector (``store_sectors``: single
# stores, 16-bit pairs, quads off the sector) costs the SM's L2 port this many clocks on top of its bytes.
PARTIAL_SECTOR_CLK = 3.9       # [FIT] on run 87's one same-tile pair: 7614x7959 against 7616x8000 NT bf16, both
                               # 192x192, main kernels 1297.0 and 1006.6 us; the calibrated difference set to the
                               # measured 290.4 us (bench/results/h100-2026-12-06/run87-h100)
# The epilogue's arithmetic (``arith_time``): each element's activation (or the activation's backward at R),
# computed by the consumers' 8 warps an SM, whose dependent chains (ex2, div.full, FMAs) issue well under an
# instruction a cycle a scheduler.  Exposed under either consumer schedule: ping-pong and
# cooperative GELU GEMMs measured the same (H100, bench/NOTES.md 2026-12-05, run 57), so the term is the same for
# every schedule of a problem and moves no pick.
EPILOGUE_OPS_PER_CLK = 48      # [FIT] FP32 operations an SM's consumers retire a clock in the epilogue.  Nsight Compute
                               # on TF32 16384x2048x512 gelu'(R) (H200): 0.29 warp-instructions issued a cycle a
                               # scheduler.  Fitted on the GELU GEMMs that ran 1.35-1.85x the model without it (H200
                               # run 61: bf16 gelu'(R) and +bias+gelu+P; H100 run 60: TF32 both; the events of
                               # epilogue_ncu.py): all within 15% with it (bench/NOTES.md, 2026-12-06)
ACTIVATION_OPS = {"none": 0, "relu": 1, "silu": 4, "gelu": 9, "gelu_erf": 4}   # GemmKernel.activation's ops (erf: one)
ACTIVATION_GRAD_OPS = {"gelu": 22}    # activations.gelu_tanh_backward over the kernel's tanh (ex2 and div.full)
# Thread-block clusters (step 12): the CTAs of a cluster along M (cluster_m) compute tiles of the same N
# range and share B's tile, along N (cluster_n) A's; each loads 1/extent of the shared tile and multicasts
# it into every CTA of the cluster (emit_hopper's module docstring).
CLUSTER_SHAPES = ((2, 1), (1, 2))   # (cluster_m, cluster_n) step 12 prices beside 1x1
SLACK_TERMS = ("mma", "l2", "dram", "dram_wait")  # a tie on the predicted time goes to the least of these in all (as in step 8)
AUTO_CLUSTERS = False          # [MEASURED] the configurator picks no cluster on its own: where the model predicts
                               # gains, cluster kernels measure 7-11% slower than 1x1 with CTA-scope releases
                               # (H200, bench/results/h200-2026-12-01/a/call7-ncu; 1.7-3.2x without them: .../call4)
CLUSTER_SYNC_S = 1e-6          # [EST] per kernel: the cluster-wide barriers after the mbarrier init and before
                               # exit, and the launch placing each cluster's CTAs on one GPC
# Ping-pong consumers (``pingpong_step``): the two consumer warpgroups compute different tiles, the
# CTA's units alternately, their K loops ordered by two named barriers (emit_hopper's module docstring),
# so one warpgroup's epilogue runs while the other's K loop feeds the tensor cores.
AUTO_PINGPONG = True           # the model may pick ping-pong on its own (True) or only NOVA_PINGPONG=1 does (False);
                               # measured on the H200 without ptxas's serialisation (C7520): bench/results/h200-2026-12-01/d/call5
COOPERATIVE_KLOOP_TENSOR = 0.81  # [MEAS] the tensor pipe's busy fraction in a cooperative K loop (two warpgroups on one
                               # tile, each slot released when both are done): Nsight Compute, TF32 16384x3072x768
                               # 128x256 (bench/results/h200-2026-12-01/d/call4-ncu): 74.5% over the kernel, whose epilogue is ~8.5% of it ->
                               # 0.81 in the K loop, where the model's smem cap says 1.0.  A ping-pong warpgroup tile
                               # runs at its smem cap (cuBLAS's 128x128 ping-pong: 82.9%, the model's cap 0.8).  Used
                               # where the consumers step compares the two (``cooperative_compared``)
PINGPONG_KLOOP_TENSOR = 0.80   # [MEAS] the same for a ping-pong warpgroup's K loop (one warpgroup's 2 x m64 wgmma chain
                               # at a time) relative to the cooperative one: the deep-K dX, whose cooperative epilogue
                               # is negligible, run ping-pong at 0.983-0.985 of their cooperative rate (16384x768x50304,
                               # 16384x512x32768 BF16, bench/results/h200-2026-12-01/i/call1): 0.984 x 0.81.  0.80 alone
                               # moves 28 picks (bench/results/h200-2026-12-01/i/call2): 22 run 1-8% faster, the ragged-N
                               # squares and 6144^3 NN 4-15% slower; with CONTENTION_NORM those stay cooperative
CONTENTION_NORM = 8            # [FIT] the consumers step weighs a K loop's overlapped limits (tensor, L2 fills, ring) by
                               # their 8-norm, not their max: limits within ~20% of each other queue behind one another.
                               # Fitted on the ping-pong 128x192 vs 128x128 pairs of bench/results/h200-2026-12-01/i/call1 (measured
                               # 128x192 / 128x128: 0.95-0.97 on five short-K shapes; the max says 1.00-1.03, the
                               # 8-norm 0.95-0.99); the deep-K 16384x768x50304 pair it misses (0.968 vs 1.000) is
                               # cooperative either way
L2_PORT_B_PER_CLK = 68.0       # [FIT] TMA bytes an SM's port takes from L2 a clock when fewer SMs share the L2 than it
                               # has: the tiles' L2 term divides the L2's TMA bandwidth over the active SMs (min(units,
                               # SMs)), each at most this.  H100, bench/results/h100-2026-12-07/run105-h100 (the register-
                               # fed chain probe): 64x128 and 64x256 tiles on 32-64 CTAs filled 61-69 B/clk a K tile
                               # (24-40 KB in 204-325 ns, at 1.98-1.83 GHz), where 1/132 of the 14.2 TB/s is 54.3; 128 CTAs 49
DRAM_WAIT_LATENCY = 0.625     # [FIT] the share of the loaded latency (``mem_latency_ns``) a K tile streamed from DRAM
                               # waits beyond its bytes' transfer: the ~500 ns idle load-to-use of 800 ns loaded
                               # (presets.LOADED_LATENCY_HBM).  The per-K-tile time of 64-256-wide tiles at one tile an
                               # SM, B streaming from DRAM (bench/probes/register_fed_chain.py, H100,
                               # bench/results/h100-2026-12-07/run105-h100): bytes / DRAM bandwidth + 0.5 us / (stages - 2),
                               # not their max (M = 8, 64x64: 129-132 us measured at K = 16384, the max 90-96, the sum
                               # 129-135); ``dram_wait_time``
EXPLAIN_PINGPONG_ALWAYS = False  # record the ping-pong row in every derivation (False: only where it is picked
                               # or NOVA_PINGPONG is set, so the derivations of cooperative picks stay as they were)
PINGPONG_SLABS = (1, 2)        # 64-row wgmma slabs of one warpgroup's tile (64xN: one wgmma per k-step; 128xN: two)
PINGPONG_OVERHEAD_REGS = 32    # [MEASURED, ptxas 13.0] a ping-pong consumer's registers beside its accumulators with
                               # a plain TMA-store epilogue: 128x192 tiles (192 accumulators) assemble with no spill at
                               # the 224 of two consumer warpgroups (BF16/FP16/TF32, X in shared memory); with a bias or an
                               # activation they spilled 24-108 B (16-bit TMA store), with a register-fed A (TF32 NN)
                               # 128 B, with the register epilogue of 1001-wide C rows 4 B, batched (the unit's batch
                               # decode) 4-160 B on 3 of 5 shapes: those keep CONSUMER_OVERHEAD_REGS.  Swept over the
                               # suites' shapes in every layout and dtype (920 kernels, bench/results/h200-2026-12-01/i): the one other
                               # spill is TF32 4096x4096x128 NT (56 B; K = 96 and 256 clean), which no pick takes
RAGGED_RESIDUAL_SLABS = 1      # [MEASURED, ptxas 13.0] slabs of a ping-pong tile with R where M or N leaves ragged
                               # tiles: two slabs spilled 32-168 B (4095x4104x1000 +bias+R, register epilogue, TF32
                               # and BF16; 2000x3000x512 BF16 +bias+gelu+P+R, TMA store), one slab of 128-256 assembles clean
PINGPONG_HANDOFF_CLK = 32      # [EST] per unit: the ordering barrier's bar.arrive -> bar.sync wake-up of the other
                               # warpgroup (its first wgmma issues while the last ones of the previous unit run)
PINGPONG_ORDER_BARRIER = 3     # named barriers 3 and 4 order the K loops (0: the CTA barrier, 1-2: TMA-store staging)
SWIZZLE_ATOM_ROWS = 8          # a 128-byte-swizzled box spans whole 8-row (1024-byte) atoms: a K-major slice too
MAX_PORTABLE_CLUSTER = 8       # CTAs per cluster every sm_90 GPU launches (CUDA: more needs a non-portable opt-in)

# Formulas, with this module's constants written in (``F.stages`` is "stages = ...").
F = formulas(f"""
    consumer_regs = floor((regs_per_sm - {WG_THREADS} * producer_regs) / ({WG_THREADS} * wgs)
        / {SETMAXNREG_GRANULE}) * {SETMAXNREG_GRANULE}
    smem_traffic = rate * elem_bytes * ((64 + N) / (128 * N) + (block_m + N) / (2 * block_m * N))
    smem_cap = Min(1, smem_bytes_per_clk / smem_traffic)
    stages = floor((smem_per_block - {RING_ALIGN} - staging) / ((block_m + N) * {SWIZZLE}))
    group_m = sqrt(Min(sm_count, tiles) * block_n / block_m)
    fill_share = (block_i / cluster_j + N / cluster_i) / (block_i + N)
    clusters = floor(sm_count / cluster_size)
""")


# ---- registers ---------------------------------------------------------------------------------
def consumer_regs(regs_per_sm: int, wgs: int) -> int:
    """setmaxnreg target of each consumer thread: what the producer gives back, shared by ``wgs``
    consumer warpgroups, a multiple of 8, at most SETMAXNREG_MAX."""
    return min(SETMAXNREG_MAX, int(F.consumer_regs(regs_per_sm=regs_per_sm, producer_regs=PRODUCER_REGS, wgs=wgs)))


def entry_regs(regs_per_sm: int, wgs: int) -> int:
    """Registers per thread at launch (the kernel's maxnreg; setmaxnreg then moves them from the
    producer to the consumers): the register file shared by the largest block (a producer and
    MAX_CONSUMER_WARPGROUPS consumers, or ``wgs`` where more: 512 threads at 128), a multiple of 8,
    and no more than the consumers' target (or setmaxnreg.inc would lower it)."""
    largest_block = WG_THREADS * (1 + max(wgs, MAX_CONSUMER_WARPGROUPS))
    return min(consumer_regs(regs_per_sm, wgs), regs_per_sm // largest_block // SETMAXNREG_GRANULE * SETMAXNREG_GRANULE)


def accumulators_fit(regs_per_sm: int, wgs: int, n: int) -> bool:
    """The register rule of steps 3-4: a wgmma N's N/2 FP32 accumulators + CONSUMER_OVERHEAD_REGS fit
    the setmaxnreg target of ``wgs`` consumer warpgroups (``consumer_regs``)."""
    return n // 2 + CONSUMER_OVERHEAD_REGS <= consumer_regs(regs_per_sm, wgs)


def wide_consumers_fit(operands: OperandPlan) -> bool:
    """Whether WIDE_CONSUMER_WARPGROUPS consumers may run this operand plan: only with the wgmma A in
    shared memory (a register-fed A's fragments of two K tiles do not fit beside the accumulators)."""
    return operands.role(operands.x).feed != "regs"


def widest_n(regs: int, n_max: int) -> int:
    """The largest wgmma N (halving from ``n_max``, at least 8) whose N/2 FP32 accumulators plus
    CONSUMER_OVERHEAD_REGS fit ``regs`` registers."""
    n = n_max
    while n > 8 and n // 2 + CONSUMER_OVERHEAD_REGS > regs:
        n //= 2
    return n


# ---- the model (step 16) -------------------------------------------------------------------------
def smem_cap(p: GemmProblem, gpu, block_i: int, n: int) -> float:
    """Fraction of the tensor peak shared memory can feed a block_i x n tile (steps 5 and 6's formulas)."""
    return _smem_cap(gpu.tc_flops_per_clk_sm("wgmma", p.dtype), p.in_bytes, gpu.smem_bytes_per_clk_sm, block_i, n)


@functools.lru_cache(maxsize=1024)
def _smem_cap(rate: float, elem_bytes: int, smem_bytes_per_clk: float, block_i: int, n: int) -> float:
    """``smem_cap`` on plain numbers, memoised: step 8 prices the same few tiles for every split."""
    traffic = F.smem_traffic(rate=rate, elem_bytes=elem_bytes, N=n, block_m=block_i)
    return float(F.smem_cap(smem_bytes_per_clk=smem_bytes_per_clk, smem_traffic=traffic))


def l2_port_bw(gpu, active: int) -> float:
    """Bytes a second of TMA loads one SM takes from L2 when ``active`` CTAs (one an SM) share it: an
    idle SM's share goes to the active ones, each at most its port's L2_PORT_B_PER_CLK,
    min(l2_tma_bw / min(active, SMs), L2_PORT_B_PER_CLK x clock)."""
    return min(gpu.l2_tma_bw / max(1, min(active, gpu.sm_count)), L2_PORT_B_PER_CLK * gpu.clock_hz)


def mainloop_time(p: GemmProblem, gpu, block_i: int, n: int, units: int, ktiles: int, split: int = 1,
                  terms: bool = False, crossings: tuple[float, float] = (1, 1), active: int | None = None):
    """Seconds for ``units`` work units (tile x K slice) on a persistent grid.  The busiest SM runs
    ceil(units / SMs) of them, each 2 x block_i x n x (its K) FLOP *as the tile computes them*
    (a 64-wide tile on N = 7 still does 64 columns of work), at the SM's share of the tensor peak
    times the smem cap; every unit also fills its tiles from L2, K x (block_i + n) bytes at the SM's
    share of the L2 bandwidth of TMA loads among the active SMs (min(units, SMs)), at most
    L2_PORT_B_PER_CLK a clock (an SM's port to L2 is its own limit); an operand whose rows are off the 128-byte line fills
    most box rows from two lines (``crossings``, ``line_crossings``).  Returns max(tensor, L2), or both
    terms with ``terms``."""
    cap = smem_cap(p, gpu, block_i, n)
    k_unit = min(p.K, cdiv(ktiles, split) * (SWIZZLE // p.in_bytes))   # K one unit streams
    per_sm = math.ceil(units / gpu.sm_count)
    t_mma = per_sm * 2 * block_i * n * k_unit / (gpu.peak_flops(p.dtype, "wgmma") / gpu.sm_count * cap)
    fill_rows = block_i * crossings[0] + n * crossings[1]
    t_l2 = per_sm * (ktiles / split) * fill_rows * SWIZZLE / l2_port_bw(gpu, active or units)
    if terms:
        return {"mma": t_mma, "l2": t_l2, "smem_cap": cap}
    return max(t_mma, t_l2)


def output_vector(p: GemmProblem, swap: bool, split: int, reduction: str = "atomic", epilogue: str = "registers") -> int:
    """Elements per store into C: 1 under atomic split-K (scalar atomics); under a split-K
    workspace the reduction kernel's, 4 when N % 4 == 0, else 2 when N is even (a thread adds
    that many adjacent partials of one row); the TMA store's 16 bytes (its tensor map needs C's
    base 16-byte aligned); else, registers, 4 (8 bytes, after a lane exchange) for 16-bit outputs
    with N % 4 == 0, else a pair when N is even (along N: swapped, the two wgmma rows of a lane are
    adjacent n); batched, halved until it divides C's batch stride (every batch element's C is then
    as aligned as the first).  The runtime checks C's alignment against it."""
    v = _output_vector(p, swap, split, reduction, epilogue)
    while p.batch_stride("c") % v:
        v //= 2
    return v


def _output_vector(p: GemmProblem, swap: bool, split: int, reduction: str, epilogue: str) -> int:
    """``output_vector`` of one C matrix."""
    if split > 1:
        if reduction == "atomic":
            return 1
        return 4 if p.N % 4 == 0 else (2 if p.N % 2 == 0 else 1)
    if epilogue == "tma_store":
        return 16 // p.out_bytes
    if p.out_bytes == 2 and not swap and p.N % 4 == 0 and not (p.residual or p.preactivation):
        return 4               # the lane exchange carries C's values alone: with R or P, pairs
    return 2 if p.N % 2 == 0 else 1


@functools.lru_cache(maxsize=None)
def store_sectors(out_bytes: int, pitch: int, swap: bool, vector: int) -> tuple[float, float]:
    """(whole, partial) 32-byte sectors the register epilogue writes per element of C: one store
    instruction writes, per row of C it touches, a run of ``span`` elements (4 lanes x 2 columns not
    swapped, 16 with quads; 8 lanes x 2 rows swapped), all of it with pairs and quads, every other
    element with single stores (two instructions a run).  A sector is whole when one instruction
    writes all its 32 bytes, else partial.  Counted exactly over the rows' byte offsets mod 32 (row r
    starts at r x ``pitch`` elements) and the runs' origins (multiples of ``span``): single stores
    write only partial sectors, 16-bit pairs half sectors, quads whole ones where the row's bytes sit
    on the sector."""
    span = 16 if swap or vector == 4 else 8
    step = 1 if vector >= 2 else 2
    whole = partial = elements = 0
    for row in range(32):
        for run in range(32 // math.gcd(32, span * out_bytes)):
            origin = out_bytes * (row * pitch + run * span)
            for first in range(step):                      # one instruction each
                written: dict[int, int] = {}
                for e in range(first, span, step):
                    for b in range(out_bytes):
                        sector = (origin + out_bytes * e + b) // 32
                        written[sector] = written.get(sector, 0) + 1
                whole += sum(1 for n in written.values() if n == 32)
                partial += sum(1 for n in written.values() if n < 32)
                elements += len(range(first, span, step))
    return whole / elements, partial / elements


def partial_store_time(gpu, stored: int, out_bytes: int, pitch: int, swap: bool, vector: int) -> float:
    """Seconds an SM's L2 port spends on the partial sectors of ``stored`` register-epilogue elements:
    ``store_sectors``' partial writes per element x PARTIAL_SECTOR_CLK.  Their bytes count with the
    whole sectors' in ``epilogue_time``'s bandwidth term."""
    return stored * store_sectors(out_bytes, pitch, swap, vector)[1] * PARTIAL_SECTOR_CLK / gpu.clock_hz


def workspace_vector(p: GemmProblem, swap: bool) -> int:
    """Elements per store of a split-K slice's FP32 partials into its workspace (rows of N): 4 after a
    lane exchange when N % 4 == 0 not swapped (``store_partial_quads``), else a pair when N is even."""
    return 4 if not swap and p.N % 4 == 0 else (2 if p.N % 2 == 0 else 1)


def register_stores(p: GemmProblem, swap: bool, split: int, reduction: str) -> tuple[str, int, int] | None:
    """What the register epilogue stores into rows of N and how: ``(what, element bytes, elements a
    store)``: C (and P beside it) at ``output_vector`` without split-K, the FP32 partials at
    ``workspace_vector`` into a split-K workspace; None under atomic split-K (its atomics are priced
    as such).  ``epilogue_time`` prices its partial sectors, the epilogue step states them."""
    if split == 1:
        return "C", p.out_bytes, output_vector(p, swap, split)
    if reduction == "workspace":
        return "the FP32 partials", 4, workspace_vector(p, swap)
    return None


def epilogue_time(p: GemmProblem, gpu, block_m: int, block_n: int, units: int, split: int = 1, *,
                  rows: int, cols: int, reduction: str = "atomic", swap: bool = False) -> float:
    """Seconds the busiest SM spends storing its tiles from registers, not overlapped with the main
    loop (the consumers run the epilogue between tiles): ceil(units / SMs) x the tile's stored
    elements (block_m x block_n, clipped to the ``rows`` x ``cols`` of C in the tile's coordinates)
    x out_bytes at the SM's share of the L2 bandwidth of the load/store path.  Under atomic split-K
    each element is a 4-byte atomic read-modify-write instead of half of an 8-byte store: 2 x the L2
    traffic in 2 x the accesses; into a split-K workspace each element is a plain 4-byte FP32 store.
    A residual R is read and a pre-activation P written beside C (``c_like_operands`` matrices a
    tile); under atomic split-K only slice 0 reads R (1/split of a read per element and slice); through
    a workspace the reduction kernel reads R and writes P (``split_time``).  The stores that write part
    of a sector cost ``partial_store_time`` on top: C's (and P's) without split-K, the partials' into
    a workspace (``swap``: the tile's rows are C's columns)."""
    per_sm_bw = gpu.l2_bw / gpu.sm_count
    element_bytes, factor = p.out_bytes, p.c_like_operands
    if split > 1:
        element_bytes, factor = 4, (4 + p.residual / split if reduction == "atomic" else 1)
    stored = min(block_m, rows) * min(block_n, cols)          # a tile wider than C stores only C's part
    t_tile = stored * element_bytes * factor / per_sm_bw
    stores = register_stores(p, swap, split, reduction)
    if stores:
        _, size, vector = stores
        matrices = stored_outputs(p) if split == 1 else 1                   # C and P, or the partials
        t_tile += matrices * partial_store_time(gpu, stored, size, p.N, swap, vector)
    return math.ceil(units / gpu.sm_count) * t_tile


def epilogue_ops(p: GemmProblem) -> int:
    """FP32 operations per element of the epilogue's activation, as ``GemmKernel.finish`` emits them (a
    test counts them there): ``ACTIVATION_OPS``, or ``ACTIVATION_GRAD_OPS`` for the activation's
    backward at R.  A bias or residual add and the conversions are one independent op each beside a
    load or a store, which the calibrated store terms already hold (the suites' +bias kernels sit
    within 15% without this term): they count none."""
    return ACTIVATION_GRAD_OPS[p.activation] if p.activation_grad else ACTIVATION_OPS[p.activation]


def arith_time(p: GemmProblem, gpu) -> float:
    """Seconds an SM spends on the epilogue's arithmetic: C's elements over the SMs x ``epilogue_ops`` /
    (EPILOGUE_OPS_PER_CLK x the SM clock); added to the time, not overlapped.  The same for every
    schedule of the problem (split-K's reduction kernel computes it there), so it moves no pick: the
    tiles' waves are the other terms' business."""
    return (math.ceil(p.M * p.N * p.batch / gpu.sm_count) * epilogue_ops(p)
            / (EPILOGUE_OPS_PER_CLK * gpu.clock_hz))


def staging_bytes(wgs: int, epilogue: str) -> int:
    """Shared memory of the TMA-store epilogue's staging boxes (0 for the register epilogue)."""
    return wgs * STAGING_BUFFERS * STAGING_STEP_BYTES if epilogue == "tma_store" else 0


def c_box(p: GemmProblem, swap: bool) -> TmaBox:
    """C's TMA box of the TMA-store epilogue: 128-byte rows (the swizzle span), one 8 KB staging
    step per box set.  Not swapped: [64 slab rows x 128 B]; swapped (the slab's 64 wgmma rows run
    along N): ``count`` boxes side by side along N, each [8 KB / (64 x out_bytes) rows of M x 128 B]."""
    per_row = SWIZZLE // p.out_bytes
    if not swap:
        return TmaBox(per_row, WGMMA_M, 1)
    return TmaBox(per_row, STAGING_STEP_BYTES // (WGMMA_M * p.out_bytes), WGMMA_M // per_row)


def tma_store_blocker(p: GemmProblem, swap: bool, split: int, n: int) -> str | None:
    """Why C cannot be written by the TMA-store epilogue (None if it can); C's base alignment is the
    runtime's check (``output_vector``: 16 bytes)."""
    if split > 1:
        return "split-K keeps its epilogue (FP32 atomics into C, or partials into the workspace)"
    if p.residual and not p.preactivation and not p.activation_grad:
        return ("a residual add reads R beside C: the register epilogue, which loads R four column blocks "
                "ahead of its stores (through the TMA store each staging step's R loads hold its barriers: "
                "measured 1.05-1.2x slower on the H100, bench/NOTES.md 2026-12-05)")
    if p.N * p.out_bytes % 16:
        return (f"C's rows ({p.N} x {p.out_bytes} B = {p.N * p.out_bytes} B) are not a multiple of 16 bytes: "
                "a tensor map cannot describe C")
    if p.batch_stride("c") * p.out_bytes % 16:
        return (f"C's batch stride ({p.batch_stride('c')} x {p.out_bytes} B) is not a multiple of 16 bytes: "
                "a tensor map cannot describe C")
    box = c_box(p, swap)
    step = box.rows if swap else box.cols
    if n % step:
        return f"wgmma N = {n} is not a whole number of {step}-wide staging steps"
    return None


def tma_store_time(p: GemmProblem, gpu, block_i: int, n: int, units: int, *, rows: int, cols: int,
                   bw: float | None = None) -> tuple[float, float]:
    """(not overlapped, overlapped) seconds of the busiest SM's TMA-store epilogues.  Per tile the
    consumers write the whole block_i x n tile into the staging boxes (shared memory at its
    bandwidth: the writes are bank-conflict-free by construction, emit_hopper's lane rotation)
    while the TMA reads what it stores, and cannot finish before all but the staged bytes have
    left (the stored tile, clipped to C, less the 2 x 8 KB per warpgroup, at the SM's share of the
    TMA unit's L2 bandwidth), plus STAGING_STEP_CLK per 8 KB step.  The staged remainder drains
    while the next tile's K loop runs (overlapped: the caller adds it to the L2 term), except the
    last tile's, which the kernel waits for before it exits.  ``bw``: the drain rate (default the TMA
    unit's L2 bandwidth; ``cooperative_compared`` passes DRAM's).  A pre-activation output P is staged
    and stored as C (``stored_outputs``: twice the bytes and steps); a residual R is read by the
    threads at the SM's share of the load/store path's L2 bandwidth, beside the staging and the drain."""
    per_sm = math.ceil(units / gpu.sm_count)
    wgs = block_i // WGMMA_M
    outputs = stored_outputs(p)
    clipped = min(block_i, rows) * min(n, cols) * p.out_bytes  # one matrix's part of the tile inside C
    tile = outputs * block_i * n * p.out_bytes                 # written to shared memory, ragged parts too
    stored = outputs * clipped                                 # what reaches C (and P)
    staged = min(stored, staging_bytes(wgs, "tma_store"))
    waited = stored - staged
    bw = (bw or gpu.l2_tma_bw) / gpu.sm_count
    smem = (tile + waited) / (gpu.smem_bytes_per_clk_sm * gpu.clock_hz)
    read = p.residual * clipped / (gpu.l2_bw / gpu.sm_count)   # R, by the threads
    steps = tile // (wgs * STAGING_STEP_BYTES)                  # per warpgroup; the two run side by side
    per_tile = max(smem, waited / bw, read) + steps * STAGING_STEP_CLK / gpu.clock_hz
    return per_sm * per_tile + staged / bw, per_sm * staged / bw


def stored_outputs(p: GemmProblem) -> int:
    """Matrices the epilogue writes: C, and the pre-activation P where the problem keeps it."""
    return 1 + p.preactivation


def k_tiles(p: GemmProblem) -> int:
    """K tiles a work unit streams unsplit: ceil(K / BK), BK = one 128-byte swizzled row of the input."""
    return cdiv(p.K, SWIZZLE // p.in_bytes)


def ring_depth(gpu, block_i: int, n: int, staging: int = 0) -> int:
    """Ring stages (step 10): what the per-block shared memory holds beside ``staging`` bytes of
    epilogue staging, within [MIN_STAGES, MAX_STAGES]."""
    return _ring_depth(gpu.smem_per_block, block_i, n, staging)


@functools.lru_cache(maxsize=1024)
def _ring_depth(smem_per_block: float, block_i: int, n: int, staging: int) -> int:
    """``ring_depth`` on plain numbers, memoised: step 8 prices the same few tiles for every split."""
    fit = int(F.stages(smem_per_block=smem_per_block, block_m=block_i, N=n, staging=staging))
    return max(MIN_STAGES, min(fit, MAX_STAGES))


def ring_time(p: GemmProblem, gpu, units: int, ktiles: int, split: int, stages: int) -> float:
    """Seconds the ring's depth allows the busiest SM's K tiles: the consumers hold two slots (one
    computing, one retiring: a wgmma group stays in flight), so max(stages - 2, 1) TMA loads run
    ahead of the tensor cores, each taking the loaded memory latency (Little's law: a ring deep
    enough for the L2 bandwidth never binds).  The wgmma oracle (h200-oracle-wgmma-v0.5c-48): 128x256
    tiles at 3 stages run 0.72-0.79 us per K tile (this bound: 0.80), at 4 stages compute-bound."""
    per_sm = math.ceil(units / gpu.sm_count)
    return per_sm * cdiv(ktiles, split) * gpu.mem_latency_ns * 1e-9 / max(stages - 2, 1)


def dram_wait_time(p: GemmProblem, gpu, block_i: int, n: int, swap: bool, t_ring: float) -> float:
    """Seconds the busiest SM's K loop waits on DRAM beyond the transfer of its bytes, added to the DRAM
    term (``total_time``): a ring slot's load from DRAM takes the memory latency before its bytes flow,
    and with max(stages - 2, 1) loads ahead (``ring_time``, ``t_ring``) the K loop's streamed bytes
    arrive at min(DRAM bandwidth, bytes in flight / latency) -- by Little's law the two add,
    t = bytes / bw + K tiles x latency / (stages - 2).  Only the share of the fetched bytes that is
    DRAM's counts, the rest hits L2:

        wait  = t_ring x DRAM_WAIT_LATENCY x share
        share = min(1, (A + B bytes, each distinct matrix once) / (bytes the tiles fetch)),
        fetched = K x elem_bytes x batch x (ceil(J / n) x I + ceil(I / block_i) x J)

    (I, J: the tile's row and column extents, C^T's when swapped).  A decode GEMM's weight streams
    once (share ~1: the wait is the ring term's 0.625); a large GEMM refetches its operands from L2
    (4096^3 at 128x256: share 0.04), where the wait is nothing beside the tensor term."""
    I, J = (p.N, p.M) if swap else (p.M, p.N)
    fetched = p.K * p.in_bytes * p.batch * (cdiv(J, n) * I + cdiv(I, block_i) * J)
    inputs = (p.matrices("a") * p.M * p.K + p.matrices("b") * p.K * p.N) * p.in_bytes
    return t_ring * DRAM_WAIT_LATENCY * min(1.0, inputs / fetched)


def fill_time(p: GemmProblem, gpu, block_i: int, n: int, units: int, dram_bound: bool = False) -> float:
    """Seconds before the first wgmma: the ring's first stage of every CTA comes from DRAM, one
    loaded latency plus min(units, SMs) x (block_i + n) x 128 B at the DRAM bandwidth (only the
    latency when the kernel is DRAM-bound: those bytes are already in its DRAM time).  Once per
    kernel: the persistent producer loads each later tile while the consumers finish the previous one."""
    transfer = 0.0 if dram_bound else min(units, gpu.sm_count) * (block_i + n) * SWIZZLE / gpu.dram_bw
    return gpu.mem_latency_ns * 1e-9 + transfer


def atomic_split_blocker(p: GemmProblem) -> str | None:
    """Why K slices cannot add with FP32 atomics into C (None if they can): ``GemmProblem.atomic_split_reason``."""
    return p.atomic_split_reason or None


def split_reductions(p: GemmProblem) -> tuple[str, ...]:
    """How K slices may add up for ``p``: through a workspace and a reduction kernel always (any
    output, any epilogue, a fixed order); with FP32 atomics into C when ``atomic_split_blocker`` allows."""
    return ("workspace",) if atomic_split_blocker(p) else ("atomic", "workspace")


def slices_fit(ktiles: int, split: int) -> bool:
    """Each of ``split`` K slices holds >= MIN_SLICE_K_TILES of the ``ktiles`` K tiles, none empty."""
    per = cdiv(ktiles, split)
    return per >= MIN_SLICE_K_TILES and (split - 1) * per < ktiles


def max_split(ktiles: int, limit: int) -> int:
    """Largest split <= limit whose slices fit (``slices_fit``)."""
    for s in range(max(1, limit), 1, -1):
        if slices_fit(ktiles, s):
            return s
    return 1


# ---- stream-K (step 8) ------------------------------------------------------------------------------
def stream_k_region(tiles: int, sm_count: int) -> int:
    """Tiles the stream-K walk splits (as CUTLASS's hybrid): all of them when they make less than
    two waves, else the last partial wave plus one full wave, tiles % SMs + SMs (the tiles before
    them make whole waves, walked whole); 0 when the tiles make whole waves."""
    if tiles % sm_count == 0:
        return 0
    return tiles if tiles < 2 * sm_count else tiles % sm_count + sm_count


def stream_k_ctas(tiles: int, sk_tiles: int, ktiles: int, sm_count: int) -> int:
    """The persistent grid G of a stream-K walk: every SM; with no data-parallel tiles and fewer than
    SMs x MIN_SLICE_K_TILES iterations, one CTA per MIN_SLICE_K_TILES of them (each CTA streams at least that)."""
    if sk_tiles < tiles:
        return sm_count
    return max(1, min(sm_count, sk_tiles * ktiles // MIN_SLICE_K_TILES))


def stream_k_plan(tiles: int, ktiles: int, sm_count: int) -> StreamKPlan | None:
    """The stream-K walk of ``tiles`` tiles of ``ktiles`` K tiles (``stream_k_region``,
    ``stream_k_ctas``); None when no tile would split."""
    sk = stream_k_region(tiles, sm_count)
    if sk == 0:
        return None
    return StreamKPlan(tiles, sk, ktiles, stream_k_ctas(tiles, sk, ktiles, sm_count))


def schedule_stream_k_plan(p: GemmProblem, s: Schedule) -> StreamKPlan:
    """The stream-K walk of schedule ``s`` (``s.stream_k``): ``Schedule.stream_k_plan``."""
    return s.stream_k_plan(p.M, p.N, p.K)


def stream_k_blocker(p: GemmProblem, tiles: int, ktiles: int, sm_count: int) -> str | None:
    """Why the Hopper kernel cannot walk ``tiles`` tiles stream-K (None if it can): unbatched only (a
    batch's elements fill the SMs), tiles not in whole waves, and at least one tile split in two."""
    if p.batch > 1:
        return f"not with a batch ({p.batch} elements: the batched walk covers whole tiles)"
    if p.residual or p.preactivation:
        return "not with a residual or a pre-activation output (the segments' epilogues store C alone)"
    plan = stream_k_plan(tiles, ktiles, sm_count)
    if plan is None:
        return f"{tiles} tiles make whole waves on {sm_count} SMs: nothing to balance"
    if plan.slots < 2:
        return f"{plan.iters} K-tile iterations on {plan.ctas} CTAs leave every tile in one CTA"
    return None


def stream_k_registers_fit(operands: OperandPlan, n: int) -> bool:
    """Whether a stream-K walk's consumers fit their registers at wgmma N = ``n``: with a register-fed
    wgmma A (32-bit MN-major data) the A fragments and the walk's segment state beside N/2 accumulators
    overflow the consumers' 168 registers at N = 256 (ptxas: 8 bytes spilled, 1000x1000x3000 TF32 NN);
    N <= ``STREAM_K_REGS_FEED_MAX_N`` fits."""
    return operands.role(operands.x).feed != "regs" or n <= STREAM_K_REGS_FEED_MAX_N


def stream_k_terms(p: GemmProblem, gpu, block_i: int, n: int, operands: OperandPlan | None = None,
                   stages: int | None = None, plan: StreamKPlan | None = None) -> dict:
    """``time_terms`` of a stream-K walk of ``block_i`` x ``n`` tiles (``stream_k_plan``): the busiest
    CTA runs ``busiest_iters`` = ceil(dp/G) x ktiles + ceil(I/G) K tiles (tensor and L2 terms as
    ``mainloop_time``, the ring's bound as ``ring_time``); its epilogue stores ceil(dp/G) C tiles and
    up to ``max_cta_segments`` segments, each a C tile or an FP32 partial tile (priced as partials);
    an operand off the 128-byte line fills most box rows from two lines (``line_crossings``);
    the reduction reads the partial segments' FP32 tiles (from L2 when they fit in half of it, else
    DRAM) and writes the split tiles' part of C to DRAM; launches: the GEMM, the preps, the reduction."""
    operands = operands or operand_plan(p)
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    tiles = cdiv(I, block_i) * cdiv(J, n)
    ktiles = k_tiles(p)
    plan = plan or stream_k_plan(tiles, ktiles, gpu.sm_count)
    cap = smem_cap(p, gpu, block_i, n)
    busiest = plan.busiest_iters
    k_iter = min(p.K, SWIZZLE // p.in_bytes)
    t_mma = busiest * 2 * block_i * n * k_iter / (gpu.peak_flops(p.dtype, "wgmma") / gpu.sm_count * cap)
    crossings = line_crossings(p, operands)
    t_l2 = busiest * (block_i * crossings[0] + n * crossings[1]) * SWIZZLE / l2_port_bw(gpu, plan.ctas)
    stored = min(block_i, I) * min(n, J)
    per_sm_bw = gpu.l2_bw / gpu.sm_count
    t_epilogue = (cdiv(plan.dp_tiles, plan.ctas) * stored * p.out_bytes + plan.max_cta_segments * stored * 4) / per_sm_bw
    t_epilogue += (cdiv(plan.dp_tiles, plan.ctas) * partial_store_time(gpu, stored, p.out_bytes, p.N, operands.swap,
                                                                       output_vector(p, operands.swap, 1))
                   + plan.max_cta_segments * partial_store_time(gpu, stored, 4, p.N, operands.swap,
                                                                workspace_vector(p, operands.swap)))
    tile_elems = p.M * p.N / tiles                          # C's elements per tile, ragged ones averaged
    partials = plan.partial_segments * tile_elems * 4
    t_split = (partials / (gpu.l2_bw if partials <= gpu.l2_bytes / 2 else gpu.dram_bw)
               + plan.split_tiles * tile_elems * p.out_bytes / gpu.dram_bw + reduction_chain(gpu))
    depth = stages or ring_depth(gpu, block_i, n)
    t_ring = busiest * gpu.mem_latency_ns * 1e-9 / max(depth - 2, 1)
    t_dram = stream_k_dram_bytes(p, gpu, block_i, n, plan) / gpu.dram_bw
    t_wait = dram_wait_time(p, gpu, block_i, n, operands.swap, t_ring)
    t_fill = fill_time(p, gpu, block_i, n, plan.ctas, dram_bound=t_dram + t_wait >= max(t_mma, t_l2, t_ring))
    return {"mma": t_mma, "l2": t_l2, "dram": t_dram, "dram_wait": t_wait, "smem_cap": cap, "ring": t_ring,
            "fill": t_fill,
            "epilogue": t_epilogue, "arith": arith_time(p, gpu), "prep": prep_time(p, gpu, operands),
            "split": t_split,
            "launches": 2 + sum(1 for role in (operands.a, operands.b) if role.prep)}


def stream_k_dram_bytes(p: GemmProblem, gpu, block_i: int, n: int, plan: StreamKPlan) -> float:
    """DRAM bytes of a stream-K walk.  CTA c starts at iteration floor(c*I/G), so the CTAs running
    together sit at different K offsets and share no K tile: when A and B do not fit in half of L2,
    every stream-K iteration streams its (block_i + n) x 64-element K tile from DRAM,
    ``iters x (block_i + n) x 128 B``, beside the data-parallel tiles' operands (read once, as in
    ``p.min_bytes``).  Measured on the H200 (bench/results/h200-2026-12-01/b/call1): BF16 768x3072x16384 dW 191 us vs
    906 MB / 4.8 TB/s = 189 us; 2304x768 166 vs 141; 1536x512 73 vs 63 (the split-K walk,
    slice-major, keeps concurrent CTAs on the same K: 171, 115, 63 us)."""
    operands = (p.M + p.N) * p.K * p.in_bytes
    if operands <= gpu.l2_bytes / 2:
        return p.min_bytes
    return p.min_bytes - operands * plan.sk_tiles / plan.tiles + plan.iters * (block_i + n) * SWIZZLE


def split_overhead(p: GemmProblem, gpu, split: int, reduction: str = "atomic") -> float:
    """What adding the K slices costs beyond the epilogue's stores (their launch, the memset's or
    the reduction kernel's, is counted with the other launches).  Atomic: zeroing C (M*N*4 bytes of
    DRAM) and the slices' atomic read-modify-writes in L2.  Workspace: the reduction kernel reads
    split*M*N*4 bytes of partials (from L2 when they fit in half of it, else DRAM) and writes C, reads
    R and writes P (``c_like_operands`` x M*N*out_bytes) to DRAM, after its own dependent chain
    (``reduction_chain``)."""
    if reduction == "atomic":
        return p.M * p.N * 4 / gpu.dram_bw + split * p.M * p.N * 4 * 2 / gpu.l2_bw
    partials = split * p.M * p.N * 4
    return (partials / (gpu.l2_bw if partials <= gpu.l2_bytes / 2 else gpu.dram_bw)
            + p.c_like_operands * p.M * p.N * p.out_bytes / gpu.dram_bw + reduction_chain(gpu))


def reduction_chain(gpu) -> float:
    """Seconds of the split-K reduction kernel's dependent chain: its threads load their partials,
    then store C, ``REDUCE_CHAIN_LATENCIES`` loaded memory latencies however few bytes it moves (a
    split kernel of the H100's held-out draw ran 10-27% above its price without it, the small ones
    most: bench/results/h100-2026-12-06/run74)."""
    return REDUCE_CHAIN_LATENCIES * gpu.mem_latency_ns * 1e-9


def prep_bytes(p: GemmProblem, operands: OperandPlan) -> int:
    """DRAM bytes of the operand-prep passes: each reads and writes its operand (every matrix of a
    batched one) once."""
    return sum(2 * role.rows * role.cols * role.prep.batch * p.in_bytes
               for role in (operands.a, operands.b) if role.prep)


def prep_pass_time(p: GemmProblem, gpu, prep: OperandPrep) -> float:
    """Seconds of one prep pass: the larger of its bytes (read + write) at the DRAM bandwidth and its
    latency chain, waves x one loaded memory latency (a thread's loads issue together), a wave being
    every SM's blocks of PREP_THREADS threads (max_threads_per_sm / PREP_THREADS each)."""
    rows, cols = prep.dst
    elements = rows * cols * prep.batch
    blocks = cdiv(rows, PREP_TILE) * cdiv(cols, PREP_TILE) * prep.batch
    waves = cdiv(blocks, gpu.sm_count * max(1, gpu.max_threads_per_sm // PREP_THREADS))
    chain = waves * gpu.mem_latency_ns * 1e-9
    return max(2 * elements * p.in_bytes / gpu.dram_bw, chain)


def prep_time(p: GemmProblem, gpu, operands: OperandPlan) -> float:
    """Seconds of the operand-prep passes (``prep_pass_time`` each; they run one after another)."""
    return sum(prep_pass_time(p, gpu, role.prep) for role in (operands.a, operands.b) if role.prep)


def time_terms(p: GemmProblem, gpu, block_i: int, n: int, split: int, operands: OperandPlan | None = None,
               reduction: str = "atomic", epilogue: str = "registers", stages: int | None = None,
               cluster: tuple[int, int] = (1, 1)) -> dict:
    """The model's terms in seconds for a tile of ``block_i`` wgmma rows x wgmma N = ``n``, ``split``
    K slices added by ``reduction``, C written by ``epilogue`` and a ``stages``-deep ring (None: as
    deep as step 10 makes it beside the epilogue's staging; raster and grid do not enter): mma,
    l2, dram, ring (overlapped: the total takes their max), fill, epilogue, prep, split, launches.
    The TMA store's overlapped stores count in the L2 term (the SM's TMA unit moves them beside
    the tile fills); its writes to shared memory and the waits for its drain are the epilogue.
    ``cluster`` (cluster_m, cluster_n): as ``cluster_pacing`` and ``fill_share`` say."""
    return epilogue_terms(p, gpu, block_i, n, split, operands, reduction, (epilogue,), stages, cluster)[epilogue]


def epilogue_terms(p: GemmProblem, gpu, block_i: int, n: int, split: int, operands: OperandPlan | None = None,
                   reduction: str = "atomic", epilogues: tuple[str, ...] = ("registers",),
                   stages: int | None = None, cluster: tuple[int, int] = (1, 1)) -> dict[str, dict]:
    """``time_terms`` of one tile for each of ``epilogues``, the rest of the model computed once."""
    operands = operands or operand_plan(p)
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    units = cdiv(I, block_i) * cdiv(J, n) * split * p.batch
    ktiles = k_tiles(p)
    paced = units                           # the unit count whose ceil(/ SMs) is the busiest SM's share
    if cluster != (1, 1):
        paced = cluster_pacing(gpu, I, J, block_i, n, split, cluster_extents(cluster, operands.swap))
    main = mainloop_time(p, gpu, block_i, n, paced, ktiles, split, terms=True,
                         crossings=line_crossings(p, operands), active=units)
    if cluster != (1, 1):
        main["l2"] *= fill_share(block_i, n, cluster_extents(cluster, operands.swap))
    shared = {"mma": main["mma"], "dram": p.min_bytes / gpu.dram_bw, "smem_cap": main["smem_cap"],
              "prep": prep_time(p, gpu, operands),
              "split": split_overhead(p, gpu, split, reduction) if split > 1 else 0.0,
              "launches": 1 + sum(1 for role in (operands.a, operands.b) if role.prep) + (split > 1)}
    out = {}
    for epilogue in epilogues:
        depth = stages or ring_depth(gpu, block_i, n, staging_bytes(block_i // WGMMA_M, epilogue))
        t_l2 = main["l2"]
        if epilogue == "tma_store":
            t_epilogue, overlapped = tma_store_time(p, gpu, block_i, n, paced, rows=I, cols=J)
            t_l2 += overlapped
        else:
            t_epilogue = epilogue_time(p, gpu, block_i, n, paced, split, rows=I, cols=J, reduction=reduction,
                                       swap=operands.swap)
        t_ring = ring_time(p, gpu, paced, ktiles, split, depth)
        t_wait = dram_wait_time(p, gpu, block_i, n, operands.swap, t_ring)
        dram_bound = shared["dram"] + t_wait >= max(main["mma"], t_l2, t_ring)
        t_fill = fill_time(p, gpu, block_i, n, units, dram_bound=dram_bound)
        if cluster != (1, 1):
            t_fill += CLUSTER_SYNC_S
        out[epilogue] = {**shared, "l2": t_l2, "ring": t_ring, "dram_wait": t_wait, "epilogue": t_epilogue,
                         "fill": t_fill, "arith": arith_time(p, gpu)}
    return out


# ---- ping-pong consumers (the consumers step) -------------------------------------------------------
pingpong_reasons = {
    "split": ("not with split-K: the last K slice's units stream fewer K tiles, and each warpgroup finds its "
              "units' ring positions as unit j x K tiles (every unit streams all of K)"),
    "stream_k": ("not with stream-K: its units are K-tile ranges of varying length (the ring positions are "
                 "unit j x K tiles) and its CTAs balance K iterations, not tiles"),
    "cluster": ("not with a thread-block cluster: the cluster's CTAs release each other's ring slots every K "
                "tile, written for the cooperative walk (one consumer set per slot)"),
    "persistent": "not with one CTA per work unit: the second warpgroup would have no tile to overlap",
    "warpgroups": "needs 2 consumer warpgroups (one computes while the other stores)",
    "short_k": (f"not with fewer than {PINGPONG_MIN_STAGES} K tiles a unit: ping-pong rings shallower than "
                f"{PINGPONG_MIN_STAGES} stages or deeper than the K tiles computed wrong results on the H100 "
                "(hopper.pingpong_ring_cap says why)"),
    "shallow": (f"not where the shared memory holds fewer than {PINGPONG_MIN_STAGES} ring stages beside the "
                "staging (hopper.pingpong_ring_cap)"),
    "partial": ("not with C's rows off the 32-byte sector and no TMA store: one warpgroup's partial-sector "
                "stores do not leave under the other's K loop (measured 1.2-2.1x the model)"),
}


def pingpong_ring_cap(p: GemmProblem) -> int:
    """The deepest ring a ping-pong kernel is built with: a unit's K tiles.  Measured on the H100:
    ping-pong kernels with 8 stages for 4 K tiles (TMA store; every tile wrong, batched or not, or an
    illegal address: bench/results/h100-2026-12-07/run124-h100, run126-h100, the oracle's 1024x1024x256
    in h100-2026-12-08/run128-h100) and 2 stages for 1 K tile (the register epilogue: 4000x4004x64
    wrong, 1023x1025x40 an illegal address, run128-h100) came out wrong, while every one with
    ``PINGPONG_MIN_STAGES`` up to its K tiles stages was right (4 for 4, 8 for 8, 9, 32).  The cause,
    found in their SASS afterwards: LLVM hoisted the ring slot of a unit's K tile out of the unit loop
    (a warpgroup's slots repeat from unit to unit for those rings), and ptxas 13.0 then left the
    wgmma descriptors' high word unwritten (``nova/codegen/sass.py``); ``compile_hopper`` now reads
    every kernel's SASS back and builds such a kernel's descriptors as masked fields, and built so the
    rings above ran right (``bench/probes/batched_pingpong.py``'s RINGS, h100-2026-12-08/run130-h100).
    The bounds stay until the GPU tests run on rings outside them."""
    return k_tiles(p)


def pingpong_depth(p: GemmProblem, gpu, block_i: int, n: int, epilogue: str) -> int:
    """A ping-pong kernel's ring: what the shared memory holds beside both warpgroups' staging
    (``ring_depth``), at most ``pingpong_ring_cap``."""
    return min(ring_depth(gpu, block_i, n, staging_bytes(2, epilogue)), pingpong_ring_cap(p))


def pingpong_blocker(p: GemmProblem, wgs: int, split: int = 1, reduction: str = "atomic",
                     cluster: tuple[int, int] = (1, 1), persistent: bool = True) -> str | None:
    """Why the kernel cannot run ping-pong consumers for these decisions (None if it can).  A batch is
    fine: every (batch element, tile) unit streams all of K."""
    if wgs != 2:
        return pingpong_reasons["warpgroups"]
    if k_tiles(p) < PINGPONG_MIN_STAGES:
        return pingpong_reasons["short_k"]
    if split > 1:
        return pingpong_reasons["split"]
    if reduction == "stream_k":
        return pingpong_reasons["stream_k"]
    if cluster != (1, 1):
        return pingpong_reasons["cluster"]
    if not persistent:
        return pingpong_reasons["persistent"]
    return None


def forced_pingpong(opts: Options) -> bool | tuple[int, int] | None:
    """``NOVA_PINGPONG`` as the consumers step reads it: True (force ping-pong consumers: the fastest
    ping-pong tile by the model; an error where none can run), ``(slabs, N)`` (force that warpgroup tile,
    ROWS = slabs x WGMMA_M; experiments), False (never) or None (the model decides: ``AUTO_PINGPONG``)."""
    forced = opts.pingpong
    if not isinstance(forced, tuple):
        return forced
    rows, n = forced
    if rows % WGMMA_M == 0 and rows // WGMMA_M in PINGPONG_SLABS:
        return rows // WGMMA_M, n
    raise ProblemError(f"NOVA_PINGPONG={rows}x{n}: expected a warpgroup tile ROWSxN with ROWS one of "
                       f"{', '.join(str(WGMMA_M * k) for k in PINGPONG_SLABS)}")


def pingpong_regs(p: GemmProblem, operands: OperandPlan, slabs: int, n: int) -> int:
    """Registers a ping-pong consumer thread needs: its tile's slabs x N/2 FP32 accumulators,
    PINGPONG_OVERHEAD_REGS with a plain TMA-store epilogue (C alone: no R read, no P), X in shared
    memory and no batch (else CONSUMER_OVERHEAD_REGS: a bias, an activation, R's loads, the register
    epilogue of a C the TMA cannot store, a register-fed X or a batch made ptxas spill at 128x192),
    and with a register-fed X (32-bit MN-major) the fragments of two K tiles per slab (the loop holds
    two K tiles: 2 x BK/k k-steps x 4 registers)."""
    frags = 0
    if operands.role(operands.x).feed == "regs":
        frags = slabs * 2 * (SWIZZLE // p.in_bytes // 8) * 4
    plain = (not frags and not p.bias and p.activation == "none" and p.batch == 1 and p.c_like_operands == 1
             and pingpong_epilogues(p, operands, n) == ("tma_store",))
    return slabs * n // 2 + (PINGPONG_OVERHEAD_REGS if plain else CONSUMER_OVERHEAD_REGS) + frags


def pingpong_tiles(p: GemmProblem, gpu, operands: OperandPlan, n_max: int) -> list[tuple[int, int]]:
    """(slabs, N) of the warpgroup tiles ping-pong may use: ``PINGPONG_SLABS`` x N in step 8's
    ``tile_widths(n_max)`` (n_max, 3n_max/4, n_max/2, n_max/4; at least MIN_WGMMA_N), no wider than the
    next power of two of their extents (as step 7), whose registers (``pingpong_regs``) fit two consumer
    warpgroups' share; with R on a ragged tile one slab only (RAGGED_RESIDUAL_SLABS)."""
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    regs = consumer_regs(gpu.regs_per_sm, 2)
    out = []
    for slabs in PINGPONG_SLABS:
        if slabs > 1 and WGMMA_M * slabs > max(WGMMA_M, 1 << (I - 1).bit_length()):
            continue
        for n in tile_widths(n_max):
            if n < MIN_WGMMA_N or n > max(MIN_WGMMA_N, 1 << (J - 1).bit_length()):
                continue
            if p.residual and slabs > RAGGED_RESIDUAL_SLABS and (I % (WGMMA_M * slabs) or J % n):
                continue
            if pingpong_regs(p, operands, slabs, n) <= regs:
                out.append((slabs, n))
    return out


def pingpong_terms(p: GemmProblem, gpu, slabs: int, n: int, operands: OperandPlan | None = None,
                   epilogues: tuple[str, ...] = ("registers",), stages: int | None = None) -> dict[str, dict]:
    """``time_terms`` of ping-pong consumers on warpgroup tiles of ``slabs`` x 64 rows x ``n``, for each of
    ``epilogues``.  The units are these tiles (x batch); the busiest CTA runs U = ceil(units / SMs) of
    them, alternately on its two warpgroups, the K loops one after the other (the ordering barrier): the
    tensor, L2-fill and ring terms are ``mainloop_time`` / ``ring_time`` of the warpgroup tile (its smem
    cap: a smaller tile needs more TMA writes per FLOP; its fills more L2 bytes per FLOP; its ring more K
    tiles per FLOP).  A warpgroup's epilogue e runs under the other's K loop m (per unit), so the CTA runs
    two units every max(2m, m + e): exposed per unit max(0, (e - m)/2), then the last unit's whole e:
    epilogue = (U - 1) x max(0, (e - m)/2) + e + U x PINGPONG_HANDOFF_CLK.  All of C leaves during the
    K loops: its bytes join the L2 term (the TMA store's at the TMA unit's rate, the register stores'
    at the load/store path's), and where the K loop is smem-bound the TMA store's staging writes take
    shared-memory time from it (added to the tensor term).  One warpgroup's wgmma chain at a time keeps
    the tensor pipe at most PINGPONG_KLOOP_TENSOR busy: t_mma x cap / min(cap, 0.80)."""
    operands = operands or operand_plan(p)
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    block_i = WGMMA_M * slabs
    units = cdiv(I, block_i) * cdiv(J, n) * p.batch
    per_sm = math.ceil(units / gpu.sm_count)
    ktiles = k_tiles(p)
    main = mainloop_time(p, gpu, block_i, n, units, ktiles, terms=True, crossings=line_crossings(p, operands))
    shared = {"dram": p.min_bytes / gpu.dram_bw, "smem_cap": main["smem_cap"],
              "prep": prep_time(p, gpu, operands), "split": 0.0,
              "launches": 1 + sum(1 for role in (operands.a, operands.b) if role.prep)}
    clock = gpu.clock_hz
    out = {}
    for epilogue in epilogues:
        depth = stages or pingpong_depth(p, gpu, block_i, n, epilogue)
        t_mma, t_l2 = main["mma"], main["l2"]
        if epilogue == "tma_store":
            whole, staged = tma_store_time(p, gpu, block_i, n, gpu.sm_count, rows=I, cols=J)
            e_unit = whole - staged                         # one tile: its writes, waits and steps
            clipped = min(block_i, I) * min(n, J) * p.out_bytes
            t_l2 += per_sm * clipped * (stored_outputs(p) / l2_port_bw(gpu, units)
                                        + p.residual / (gpu.l2_bw / gpu.sm_count))     # C (P) out, R in
            if main["smem_cap"] < 1:
                t_mma += per_sm * stored_outputs(p) * block_i * n * p.out_bytes / (gpu.smem_bytes_per_clk_sm * clock)
        else:                                               # the stores leave through the SM's L2 port too
            e_unit = epilogue_time(p, gpu, block_i, n, gpu.sm_count, rows=I, cols=J, swap=operands.swap)
            t_l2 += per_sm * min(block_i, I) * min(n, J) * p.out_bytes * p.c_like_operands / (gpu.l2_bw / gpu.sm_count)
        t_mma *= main["smem_cap"] / min(main["smem_cap"], PINGPONG_KLOOP_TENSOR)   # one warpgroup's chain at a time
        t_ring = ring_time(p, gpu, units, ktiles, 1, depth)
        m_unit = max(t_mma, t_l2, t_ring) / per_sm
        t_epilogue = ((per_sm - 1) * max(0.0, (e_unit - m_unit) / 2) + e_unit
                      + per_sm * PINGPONG_HANDOFF_CLK / clock)
        t_wait = dram_wait_time(p, gpu, block_i, n, operands.swap, t_ring)
        dram_bound = shared["dram"] + t_wait >= max(t_mma, t_l2, t_ring)
        out[epilogue] = {**shared, "mma": t_mma, "l2": t_l2, "ring": t_ring, "dram_wait": t_wait, "epilogue": t_epilogue,
                         "fill": fill_time(p, gpu, block_i, n, units, dram_bound=dram_bound),
                         "arith": arith_time(p, gpu),
                         "unit_mainloop": m_unit, "unit_epilogue": e_unit, "units_per_sm": per_sm, "stages": depth}
    return out


def pingpong_candidates(p: GemmProblem, gpu, operands: OperandPlan, n_max: int, min_units: int = 2,
                        forced: bool = False) -> list[tuple]:
    """Every ping-pong (slabs, N, epilogue) with its terms: ``(predicted s + contention, mma + L2 + DRAM s,
    -slabs, -N, epilogue, terms)``, fastest first (then the most slack, the larger tile); only tiles that give the
    busiest CTA at least ``min_units`` units (with one, the second warpgroup has nothing to overlap:
    the kernel is a one-warpgroup tile, which the cooperative candidates already price).  The TMA store
    where C admits it (``pingpong_epilogues``; ``forced``: NOVA_PINGPONG asks, so partial stores too)."""
    out = []
    for slabs, n in pingpong_tiles(p, gpu, operands, n_max):
        kinds = pingpong_epilogues(p, operands, n, forced)
        for epilogue, t in pingpong_terms(p, gpu, slabs, n, operands, kinds).items():
            if t["units_per_sm"] < min_units or t["stages"] < PINGPONG_MIN_STAGES:
                continue
            out.append((round(total_time(t) + contention(t), 12), slack(t), -slabs, -n, epilogue, t))
    return sorted(out, key=lambda c: c[:5])


def pingpong_epilogues(p: GemmProblem, operands: OperandPlan, n: int, forced: bool = False) -> tuple[str, ...]:
    """A ping-pong tile's epilogue: the TMA store unless C cannot take it (then the registers).  Measured
    (bench/results/h200-2026-12-01/d/call6 and call7, the same 128x128 tiles): with the register epilogue the short-K forwards run
    at 0.72-0.90 of their TMA-store speed (TF32 16384x1536x512 211 vs 293 TFLOP/s), though the model,
    seeing both hidden under the other warpgroup's K loop, prefers the registers' deeper ring (7
    stages vs 5): a warpgroup's 64 KB of st.global per unit evidently does not leave in its shadow.
    Nor do partial-sector stores (``store_sectors``): with the register epilogue on rows of C that
    force them, the ping-pong tiles ran 1.2-2.1x their model and 1.3-1.9x the cooperative tile
    (bench/results/h100-2026-12-06/run88-h100, odd_large.txt): no ping-pong epilogue then, unless
    ``forced`` (NOVA_PINGPONG asks for ping-pong consumers: the registers)."""
    kinds = epilogues(p, operands, 1, n)
    if "tma_store" in kinds:
        return ("tma_store",)
    return () if registers_store_partial(p, operands.swap) and not forced else kinds


def registers_store_partial(p: GemmProblem, swap: bool) -> bool:
    """Whether the register epilogue (no split-K) writes part of some 32-byte sector of C."""
    _, size, vector = register_stores(p, swap, 1, "atomic")
    return store_sectors(size, p.N, swap, vector)[1] > 0


def pingpong_step(p: GemmProblem, gpu, operands: OperandPlan, n_max: int, s: Schedule,
                  opts: Options = DEFAULTS) -> tuple[Schedule, Step | None]:
    """The consumers step: cooperative (schedule ``s``: steps 8-10 decided it) or ping-pong consumers
    (``pingpong_terms``: the fastest warpgroup tile and epilogue), whichever the model predicts faster
    (cooperative on a tie; ping-pong only with ``AUTO_PINGPONG``); ``NOVA_PINGPONG`` forces or excludes
    it.  The row is recorded where ping-pong is picked or NOVA_PINGPONG is set (``EXPLAIN_PINGPONG_ALWAYS``:
    always), so the derivations of cooperative picks stay as they were."""
    forced = forced_pingpong(opts)
    if forced is False:
        return s, note("consumers", "cooperative", "NOVA_PINGPONG=0: ping-pong consumers are not considered; "
                       f"the {s.consumer_warpgroups} consumer warpgroup(s) split each tile")
    if forced and opts.cluster not in (None, (1, 1)):
        blocker = pingpong_reasons["cluster"] + " (NOVA_CLUSTER forces one)"
    elif forced and opts.stream_k:
        blocker = pingpong_reasons["stream_k"] + " (NOVA_STREAM_K=1 forces it)"
    elif why := pingpong_blocker(p, 2):                 # ping-pong's own tiles: 2 warpgroups, unsplit
        blocker = why
    elif forced:
        blocker = None                                  # forced: ping-pong's own (unsplit) tiles replace the pick
    elif opts.cluster not in (None, (1, 1)) or opts.stream_k:
        blocker = "not considered while NOVA_CLUSTER or NOVA_STREAM_K=1 forces a walk of its own"
    else:
        blocker = None
    candidates = [] if blocker else pingpong_candidates(p, gpu, operands, n_max, 1 if forced else 2, bool(forced))
    if isinstance(forced, tuple) and not blocker:       # NOVA_PINGPONG=ROWSxN: that warpgroup tile only
        candidates = [c for c in candidates if (-c[2], -c[3]) == forced]
        if not candidates:
            blocker = (f"not possible on a {WGMMA_M * forced[0]}x{forced[1]} warpgroup tile: the tiles its registers "
                       f"and extents allow are " + (", ".join(f"{WGMMA_M * k}x{n}" for k, n in
                                                              pingpong_tiles(p, gpu, operands, n_max)) or "none"))
    tiles = pingpong_tiles(p, gpu, operands, n_max)
    if not candidates and not blocker and not any(pingpong_epilogues(p, operands, n) for _, n in tiles):
        blocker = pingpong_reasons["partial"]
    if not candidates and not blocker and tiles and all(
            pingpong_depth(p, gpu, WGMMA_M * k, n, e) < PINGPONG_MIN_STAGES
            for k, n in tiles for e in pingpong_epilogues(p, operands, n, bool(forced))):
        blocker = pingpong_reasons["shallow"]
    if not candidates and not blocker:
        blocker = ("not possible: no warpgroup tile both fits the registers and gives a CTA two units to "
                   "alternate" if tiles else
                   f"not possible: no warpgroup tile's accumulators fit {consumer_regs(gpu.regs_per_sm, 2)} registers")
    if forced and blocker:
        setting = "1" if forced is True else f"{WGMMA_M * forced[0]}x{forced[1]}"
        raise ProblemError(f"NOVA_PINGPONG={setting}: {p.describe()} cannot run ping-pong consumers on {gpu.name}: "
                           f"{blocker}")
    if blocker:
        step = note("consumers", "cooperative", f"cooperative: ping-pong is {blocker}")
        return s, (step if EXPLAIN_PINGPONG_ALWAYS else None)
    terms = schedule_terms(p, gpu, s)
    t_base, t_coop = total_time(terms), cooperative_compared(p, gpu, s, terms)
    t_pp, _, slabs_neg, n_neg, epilogue, t = candidates[0]
    slabs, n = -slabs_neg, -n_neg
    pick = bool(forced) or (AUTO_PINGPONG and round(t_pp * 1e6, 6) < round(t_coop * 1e6, 6))
    best = {}
    for c in candidates:                                # each warpgroup tile with its faster epilogue
        best.setdefault((c[2], c[3]), c)
    table = ", ".join(f"{WGMMA_M * -c[2]}x{-c[3]}{' tma' if c[4] == 'tma_store' else ''} {c[0] * 1e6:.1f}"
                      for c in best.values())
    split = (f" split {s.split_k}" if s.split_k > 1 else "") + (" stream-K" if s.stream_k else "")
    coop = (f"cooperative {s.mma.m * s.tile_slabs}x{s.mma.n}{split}{' tma' if s.hopper.tma_store else ''} "
            f"{t_coop * 1e6:.1f} (its K loop at most {COOPERATIVE_KLOOP_TENSOR:g} of the tensor peak, measured; "
            f"{t_base * 1e6:.1f} at its smem cap; its epilogue {terms['epilogue'] * 1e6:.1f} us not overlapped)")
    formula = (f"t = max(mma, L2, ring) + (U - 1) x max(0, (e - m)/2) + e + U x {PINGPONG_HANDOFF_CLK} clk + fill "
               f"+ launches + contention: U = {t['units_per_sm']} units per SM, m = {t['unit_mainloop'] * 1e6:.3f} us per "
               f"unit (tensor {t['mma'] * 1e6:.1f} us at smem cap {t['smem_cap']:.3g} and one chain at "
               f"{PINGPONG_KLOOP_TENSOR:g}, L2 {t['l2'] * 1e6:.1f}, ring {t['ring'] * 1e6:.1f}), e = "
               f"{t['unit_epilogue'] * 1e6:.3f} us per unit, contention ||(mma, L2, ring)||_{CONTENTION_NORM} - max = "
               f"{contention(t) * 1e6:.1f} us -> {t_pp * 1e6:.1f} us")
    why = (f"each consumer warpgroup computes whole {WGMMA_M * slabs}x{n} tiles ({slabs} wgmma m64n{n} per k-step, "
           f"{slabs * n // 2} accumulators), the CTA's units alternately; named barriers order their K loops, so "
           f"one's epilogue runs under the other's K loop and only the last unit's shows; the smaller tile costs "
           f"more TMA writes, L2 fills and ring slots per FLOP, and limits that lie close queue (contention, both "
           f"sides); predicted us: ping-pong {table} vs {coop}")
    if forced:
        why = (f"NOVA_PINGPONG={WGMMA_M * slabs}x{n} forces ping-pong on that tile. " if isinstance(forced, tuple)
               else "NOVA_PINGPONG=1 forces ping-pong. ") + why
    elif not pick:
        why = "cooperative: " + ("AUTO_PINGPONG is off. " if not AUTO_PINGPONG
                                 else "ping-pong is not predicted faster. ") + why
    if not pick:
        step = note("consumers", "cooperative", why, formula)
        return s, (step if EXPLAIN_PINGPONG_ALWAYS else None)
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    block_i = WGMMA_M * slabs
    fit, depth = ring_depth(gpu, block_i, n, staging_bytes(2, epilogue)), pingpong_depth(p, gpu, block_i, n, epilogue)
    if depth < fit:
        why += (f"; the ring keeps {depth} stages, the K tiles of a unit, of the {fit} that fit "
                "(pingpong_ring_cap: deeper ping-pong rings computed wrong results on the H100)")
    group_m = raster_groups(gpu, cdiv(I, block_i), cdiv(I, block_i) * cdiv(J, n), block_i, n)[0]
    pp = wgmma_schedule(p, gpu, operands, 2, n, 1, depth, group_m, epilogue=epilogue, pingpong=slabs)
    return pp, note("consumers", f"ping-pong, {block_i}x{n} per warpgroup" + (", TMA store" if epilogue == "tma_store"
                                                                               else ""), why, formula)


# ---- thread-block clusters (step 12) ----------------------------------------------------------------
def cluster_extents(cluster: tuple[int, int], swap: bool) -> tuple[int, int]:
    """(cluster_i, cluster_j): the cluster's CTAs along the wgmma rows and along wgmma N, from
    (cluster_m, cluster_n) (swapped, the wgmma rows run along N)."""
    return (cluster[1], cluster[0]) if swap else cluster


def cluster_units(tiles_i: int, tiles_j: int, split: int, extents: tuple[int, int]) -> int:
    """Work units of a clustered grid: cluster tiles (extents[0] x extents[1] tiles, the ragged last
    ones padded with tiles wholly outside C, which load and compute but store nothing) x K slices."""
    return cdiv(tiles_i, extents[0]) * cdiv(tiles_j, extents[1]) * split


def cluster_slots(gpu, size: int) -> int:
    """Clusters of ``size`` CTAs (one CTA per SM) the GPU holds at once: floor(SMs / size) [EST]; a
    cluster runs on one GPC, so GPCs whose SM count ``size`` does not divide hold fewer (exact for
    size 2: an H100/H200 GPC is whole TPCs of 2 SMs)."""
    return int(F.clusters(sm_count=gpu.sm_count, cluster_size=size))


def cluster_pacing(gpu, I: int, J: int, block_i: int, n: int, split: int, extents: tuple[int, int]) -> int:
    """The 1x1 unit count with the same busiest-SM share as a clustered grid: every CTA of a
    cluster runs ceil(cluster units / ``cluster_slots``) units (the clusters walk the cluster units as
    the CTAs walk the units without one), so the model's per-SM terms take that many x SMs."""
    units = cluster_units(cdiv(I, block_i), cdiv(J, n), split, extents)
    return math.ceil(units / cluster_slots(gpu, extents[0] * extents[1])) * gpu.sm_count


def fill_share(block_i: int, n: int, extents: tuple[int, int]) -> float:
    """The fraction of a unit's L2 -> SM fill bytes each CTA of a cluster loads: the wgmma A operand's
    tile (block_i rows) is shared by the cluster_j CTAs along N, the B operand's (n rows) by the
    cluster_i CTAs along the rows, and each loads 1/extent of a shared tile (TMA multicast delivers
    the rest from its peers' loads): (block_i/cluster_j + n/cluster_i) / (block_i + n)."""
    return float(F.fill_share(block_i=block_i, N=n, cluster_i=extents[0], cluster_j=extents[1]))


def total_time(t: dict) -> float:
    """Seconds from ``time_terms``: max(mma, l2, dram + dram_wait, ring) + fill + epilogue + arith + prep +
    split + launches."""
    return (max(t["mma"], t["l2"], dram_with_wait(t), t["ring"]) + t["fill"] + t["epilogue"] + t["arith"] + t["prep"]
            + t["split"] + LAUNCH_S * t["launches"])


def dram_with_wait(t: dict) -> float:
    """The K loop's DRAM bound: the DRAM term plus its loads' wait (``dram_wait_time``)."""
    return t["dram"] + t.get("dram_wait", 0.0)


def slack(t: dict) -> float:
    """The tie-break of two candidates predicted alike (step 8, the consumers and cluster steps): the
    least sum of the K loop's limits, ``SLACK_TERMS``."""
    return sum(t.get(k, 0.0) for k in SLACK_TERMS)


def contention(t: dict) -> float:
    """Seconds the consumers step adds to a schedule's ``total_time`` where its K loop's overlapped limits
    (tensor, L2 fills, ring) are close: ||(mma, l2, ring)||_p - max(mma, l2, ring), p = CONTENTION_NORM (a
    tile whose L2 term is 99% of its tensor term runs slower than one at 80%, where the max sees a tie).
    0 where one limit dominates.  Used to rank ping-pong tiles and to weigh them against the cooperative
    pick (both sides); the predictions (step 16) keep the max."""
    limits = [t["mma"], t["l2"], t["ring"]]
    top = max(limits)
    if top <= 0 or not CONTENTION_NORM:            # CONTENTION_NORM = 0: the max alone (A/B runs)
        return 0.0
    return top * sum((x / top) ** CONTENTION_NORM for x in limits) ** (1 / CONTENTION_NORM) - top


def schedule_terms(p: GemmProblem, gpu, s: Schedule) -> dict:
    """The model's terms (seconds) of any wgmma schedule: stream-K, ping-pong or cooperative."""
    if s.stream_k:
        return stream_k_terms(p, gpu, s.mma.m * s.consumer_warpgroups, s.mma.n, s.hopper.operands, s.stages,
                              schedule_stream_k_plan(p, s))
    if s.pingpong:
        return pingpong_terms(p, gpu, s.tile_slabs, s.mma.n, s.hopper.operands, (s.hopper.epilogue,),
                              s.stages)[s.hopper.epilogue]
    return time_terms(p, gpu, s.mma.m * s.consumer_warpgroups, s.mma.n, s.split_k, s.hopper.operands,
                      s.split_reduction, s.hopper.epilogue, s.stages, (s.cluster_m, s.cluster_n))


def cooperative_compared(p: GemmProblem, gpu, s: Schedule, terms: dict) -> float:
    """Seconds of the cooperative schedule ``s`` (its ``schedule_terms``: ``terms``) as the consumers step
    weighs it against ping-pong, with two corrections measured on the device (bench/results/h200-2026-12-01/d/call4-ncu to call6)
    that the cooperative tile choice (steps 7-10: their derivations and keys stay as they were) does
    not need, as they scale its candidates alike: its K loop's tensor term at min(smem cap,
    COOPERATIVE_KLOOP_TENSOR) of the peak, t_mma x cap / min(cap, 0.81); and its TMA-store epilogue
    waiting for C's bytes beyond the staging at the DRAM bandwidth instead of the TMA unit's L2 rate
    (C's lines are written back to DRAM by the time the next kernel's stores arrive: in a training
    step's or a benchmark's stream of GEMMs the write rate is DRAM's).  With both, the exposed
    epilogue of the short-K forwards is ~20% of their time, as their ping-pong speed-ups say (call
    5), where the model had 8-12%.  Plus its ``contention``, as the ping-pong side has."""
    t = dict(terms)
    cap = t["smem_cap"]
    t["mma"] *= cap / min(cap, COOPERATIVE_KLOOP_TENSOR)
    if s.hopper.tma_store and not s.stream_k and s.split_k == 1:
        I, J = (p.N, p.M) if s.hopper.operands.swap else (p.M, p.N)
        block_i = s.mma.m * s.consumer_warpgroups
        units = cdiv(I, block_i) * cdiv(J, s.mma.n) * p.batch
        t["epilogue"] = tma_store_time(p, gpu, block_i, s.mma.n, units, rows=I, cols=J, bw=gpu.dram_bw)[0]
    return total_time(t) + contention(t)


def predict_hopper(p: GemmProblem, gpu, s: Schedule) -> Prediction:
    """Step 16 for any wgmma schedule: max(tensor peak x smem cap x SM utilisation, L2 fills (+ the
    TMA store's overlapped stores), DRAM (+ its wait: ``dram_wait_time``), the ring's latency bound) + the ring's first fill + the
    epilogues (not overlapped) + the activation's arithmetic (``arith_time``) + the operand-prep passes
    (``prep_time``) + adding the split-K slices (zeroing and atomics, or the reduction kernel) + the
    launches."""
    t = schedule_terms(p, gpu, s)
    total = total_time(t)
    bound = max((t["mma"], "tensor-core"), (t["l2"], "l2"), (dram_with_wait(t), "dram"), (t["ring"], "ring latency"))[1]
    if t["smem_cap"] < 1 and bound == "tensor-core":
        bound = "smem"
    return Prediction(time_us=total * 1e6, tflops=p.flops / total / 1e12, bound=bound,
                      floor_us=max(p.flops / gpu.peak_flops(p.dtype, "wgmma"), t["dram"]) * 1e6,
                      terms_us={k: t.get(k, 0.0) * 1e6 for k in ("mma", "l2", "dram", "dram_wait", "ring", "fill",
                                                                   "epilogue", "arith", "prep", "split")})


def hopper_supported(problem: GemmProblem, gpu) -> tuple[bool, str]:
    """Whether the Hopper kernel covers ``problem`` on ``gpu`` (else configure() uses mma.sync)."""
    if "wgmma" not in gpu.features or "tma" not in gpu.features:
        return False, f"{gpu.name} has no wgmma/TMA"
    if not gpu.supports("wgmma", problem.dtype):
        return False, f"no wgmma path for {problem.dtype}"
    return True, "wgmma + TMA available"


# ---- the operand plan (step 2) ---------------------------------------------------------------------
def k_pad(problem: GemmProblem) -> int:
    """K of a prep pass's K-major workspace: K rounded up to whole 128-byte lines (the swizzle span, one
    K tile of the TMA box).  TMA's stride rule asks only 16 bytes, but a map whose rows are off the
    128-byte line fills most box rows from two lines (``line_crossings``): the main kernel ran 1.26-1.52x
    slower with K padded to 16 bytes than to 128 (bench/results/h100-2026-12-06/run83-h100/odd_alignment.txt;
    run85-h100: the padded kernels at their K-rounded neighbours' times); the padded columns are zeros,
    the K loop's tiles the same."""
    q = SWIZZLE // problem.in_bytes
    return cdiv(problem.K, q) * q


def line_crossings(problem: GemmProblem, operands: OperandPlan) -> tuple[float, float]:
    """L2 lines a box row of the wgmma A operand (``operands.x``) and of its B operand (``y``) fills
    from, on average over the map's rows: a 128-byte box row starting on a line fills from one line,
    any other from two; with a row pitch of P bytes (the map's ``cols`` x the element size) the rows
    start at multiples of gcd(P, 128) within a line, so a fraction gcd(P, 128) / 128 of them start on
    one: lines = 2 - gcd(P, 128) / 128 (1 for rows of whole lines, 1.875 for a pitch of 16 bytes past
    one).  Measured with the rows off the line and on it, everything else the same
    (bench/results/h100-2026-12-06/run83-h100/odd_alignment.txt): 1207x714x25836 NT TF32, both operands
    at 1.875, 209.4 us against 137.8 on the line (the model's L2 term 99.9 us -> 187.3; calibrated 217.8
    against 220.4 measured in run85-h100); 1863x406x63541 TN BF16 254.5 against 184.3 (L2 122.7 -> 230)."""
    def lines(op: str) -> float:
        return 2 - math.gcd(operands.role(op).cols * problem.in_bytes, SWIZZLE) / SWIZZLE
    return lines(operands.x), lines(operands.y)


def tensor_map_type(problem: GemmProblem) -> str:
    """Element type of the TMA tensor maps: 'tf32' (TMA rounds FP32 to nearest) for TF32 with
    round-to-nearest, else the storage type ('f32' truncates in the tensor core)."""
    if problem.dtype == "tf32" and problem.tf32_rounding == "rna":
        return "tf32"
    return problem.storage


def operand_plan(problem: GemmProblem, prep_rounds: bool = False, transpose_in_kernel: bool = True,
                 pad: frozenset[str] = frozenset()) -> OperandPlan:
    """Where each operand comes from and how the wgmma reads it (codegen and runtime follow it).

    For A and B: ``major`` ("k" or "mn": which index is contiguous in memory), the row-major
    ``[rows, cols]`` tensor the TMA map describes (K-major ``[M|N, K]``, MN-major ``[K, M|N]``),
    ``feed`` (how the wgmma reads the shared tile) and ``prep`` (None, or the pass that writes a
    K-major, K-padded copy first).  ``swap``: the kernel computes C^T = B^T A^T, so wgmma rows run
    along N (then B is the wgmma A operand, ``x``, and A is ``y``).

    Feeds: "smem" (K-major, descriptor), "smem_t" (MN-major, descriptor with the transpose bit:
    16-bit types only), "regs" (MN-major, loaded to registers: the wgmma A operand may come from
    registers, which is how 32-bit MN-major data gets in: TF32 wgmma has no transpose bit).
    A prep pass runs only when TMA cannot read the tensor (contiguous rows not a multiple of 16 B;
    batched, a batch stride that is not a multiple of 16 B or that overlaps the matrices:
    ``tma_batch_stride``), when TF32 has two MN-major operands (only one can go through registers:
    the smaller is transposed, A on a tie; batched, counting a broadcast operand's one matrix), or
    when asked
    (``prep_rounds``: the v0.2 experiment, whose prep pass rounds to TF32, so the tensor maps are
    plain FP32; ``transpose_in_kernel=False``: the v0.4 layout; ``pad``: K-major operands TMA could
    read in place whose rows are off the 128-byte line, copied with K padded to whole lines: the
    line-pad step, ``line_pads``, decides)."""
    p = problem
    q = 16 // p.in_bytes                               # elements per 16 bytes (TMA stride rule)
    kp = k_pad(p)
    wide = p.dtype == "tf32"
    rna = prep_rounds and wide and p.tf32_rounding == "rna"
    ops = {}
    for op, dim, kmajor in (("a", p.M, not p.trans_a), ("b", p.N, p.trans_b)):
        readable = (p.K % q == 0) if kmajor else (dim % q == 0 and transpose_in_kernel)
        readable = readable and tma_batch_stride(p, op)
        ops[op] = {"dim": dim, "kmajor": kmajor, "prep": rna or not readable or (kmajor and op in pad),
                   "line": readable and not rna and kmajor and op in pad}
    if wide and not any(o["kmajor"] or o["prep"] for o in ops.values()):
        # two MN-major TF32 operands: one goes through registers, the other is transposed; the
        # smaller one (M x K vs N x K elements), e.g. X, not the logits' gradient, of an LM head's dW
        ops["a" if p.matrices("a") * p.M <= p.matrices("b") * p.N else "b"]["prep"] = True
    major = {op: "k" if (o["kmajor"] or o["prep"]) else "mn" for op, o in ops.items()}
    swap = wide and major["b"] == "mn"
    x, y = ("b", "a") if swap else ("a", "b")
    feed = {x: "smem" if major[x] == "k" else ("regs" if wide else "smem_t"),
            y: "smem" if major[y] == "k" else "smem_t"}
    roles = {}
    for op, o in ops.items():
        prep = None
        batch = p.matrices(op)                         # 1: unbatched or broadcast (one 2-D map)
        if o["prep"]:
            prep = OperandPrep(transpose=not o["kmajor"], round=rna,
                               src=(o["dim"], p.K) if o["kmajor"] else (p.K, o["dim"]), dst=(o["dim"], kp),
                               batch=batch, src_stride=p.batch_stride(op) if batch > 1 else 0, line=o["line"])
        rows, cols = ((o["dim"], kp if o["prep"] else p.K) if major[op] == "k" else (p.K, o["dim"]))
        stride = 0 if batch == 1 else (rows * cols if o["prep"] else p.batch_stride(op))   # a workspace is packed
        roles[op] = OperandRole(major[op], rows, cols, feed[op], prep, batch, stride)
    return OperandPlan(roles["a"], roles["b"], swap, "f32" if rna else tensor_map_type(p))


def tma_batch_stride(p: GemmProblem, op: str) -> bool:
    """Whether a 3-D tensor map can step operand ``op`` ("a" or "b") from one batch element to the
    next: its batch stride is a multiple of 16 bytes (cuTensorMapEncodeTiled's rule for every
    stride) and no smaller than one matrix (the map's dimensions then never overlap).  Trivially
    true without a batch dimension (unbatched or broadcast: a 2-D map)."""
    if p.matrices(op) == 1:
        return True
    stride = p.batch_stride(op)
    return stride * p.in_bytes % 16 == 0 and stride >= p.packed_stride(op)


def tma_box(problem: GemmProblem, major: str, tile_rows: int, slices: int = 1) -> TmaBox:
    """One operand's boxes per stage: the inner extent is always the 128-byte swizzle span.
    K-major: one [tile_rows x BK] box; MN-major: tile_rows / (128 B) boxes of [BK x 128 B], side by
    side along M/N (each 1024-byte aligned: BK rows of 128 B).  A tile multicast in a cluster is
    loaded in ``slices`` equal parts, one per CTA (step 12): K-major, ``slices`` boxes of
    [tile_rows / slices x BK] (stacked they are the one box's bytes: the swizzle follows the shared
    address); MN-major, the same boxes, count / slices per CTA (``multicast_blocker`` checks both)."""
    per_row = SWIZZLE // problem.in_bytes
    if major == "k":
        return TmaBox(per_row, tile_rows // slices, slices)
    return TmaBox(per_row, per_row, cdiv(tile_rows, per_row))


# ---- the schedule --------------------------------------------------------------------------------
def wgmma_schedule(p: GemmProblem, gpu, operands: OperandPlan, wgs: int, n: int, split: int, stages: int,
                   group_m: int, persistent: bool = True, reduction: str = "atomic",
                   epilogue: str = "registers", cluster: tuple[int, int] = (1, 1), pingpong: int = 0) -> Schedule:
    """The Hopper schedule of ``wgs`` consumer warpgroups x wgmma N = ``n``, ``split`` K slices,
    a ``stages``-deep ring, C written by ``epilogue`` (the slices added by ``reduction``) and CTAs
    in clusters of ``cluster`` = (cluster_m, cluster_n) (step 12; ``group_m`` then counts cluster-tile
    rows): the tile in the problem's coordinates (swapped, the wgmma rows run along N), the TMA
    boxes, the setmaxnreg targets, the shared-memory ring (and staging) and the grid follow from
    these.  ``reduction`` "stream_k" (``split`` 1): the stream-K walk of ``stream_k_plan`` (its tiles
    and grid; ``Schedule.stream_k_tiles``).  Used by ``configure_hopper`` and by the schedule space
    (``space.py``).  ``pingpong`` > 0: ping-pong consumers (``Schedule.consumers``), each of the ``wgs``
    (2) warpgroups computing whole tiles of ``pingpong`` 64-row slabs x ``n`` (``pingpong_blocker``
    says where not)."""
    k = gpu.mma_shapes["wgmma"][p.dtype][2]
    if pingpong:
        why = pingpong_blocker(p, wgs, split, reduction, cluster, persistent)
        if why:
            raise ProblemError(f"{p.describe()}: no ping-pong consumers: {why}")
    block_i = WGMMA_M * (pingpong or wgs)                       # wgmma rows: along M, or N when swapped
    rows, cols = (p.N, p.M) if operands.swap else (p.M, p.N)
    units = cdiv(rows, block_i) * cdiv(cols, n) * split * p.batch
    extent = {operands.x: block_i, operands.y: n}
    slices = {"a": cluster[1], "b": cluster[0]}                 # along M the CTAs share B's tile, along N A's
    ctas = min(units, gpu.sm_count) if persistent else units
    sk_tiles = 0
    if reduction == "stream_k":             # split 1; the last tiles' K iterations spread over the CTAs
        walk = stream_k_plan(units, k_tiles(p), gpu.sm_count)
        if walk is None or split != 1 or p.batch > 1 or cluster != (1, 1) or not persistent or epilogue != "registers":
            raise ProblemError(f"{p.describe()}: no stream-K walk of {units} tiles of {block_i}x{n} (one per K tile "
                               "split, unbatched, persistent, 1x1, register epilogue)")
        sk_tiles, ctas, reduction = walk.sk_tiles, walk.ctas, "atomic"
    if cluster != (1, 1):
        size = cluster[0] * cluster[1]
        per_cluster = cluster_units(cdiv(rows, block_i), cdiv(cols, n), split, cluster_extents(cluster, operands.swap))
        ctas = min(per_cluster, cluster_slots(gpu, size)) * size
    ring = SmemRing(RING_ALIGN, block_i * SWIZZLE, n * SWIZZLE, staging_bytes(wgs, epilogue))
    plan = HopperPlan(operands, tma_box(p, operands.a.major, extent["a"], slices["a"]),
                      tma_box(p, operands.b.major, extent["b"], slices["b"]),
                      producer_regs=PRODUCER_REGS, consumer_regs=consumer_regs(gpu.regs_per_sm, wgs), ring=ring,
                      ctas=ctas, epilogue=epilogue,
                      box_c=c_box(p, operands.swap) if epilogue == "tma_store" else None)
    mma = MmaInstr("wgmma", WGMMA_M, n, k, "f16" if p.dtype == "fp16" else p.dtype)
    warps = WARPS_PER_WARPGROUP * wgs                           # along the wgmma rows
    tile_m, tile_n, warps_m, warps_n = (n, block_i, 1, warps) if operands.swap else (block_i, n, warps, 1)
    return Schedule(arch=ARCH, mma=mma, block_m=tile_m, block_n=tile_n, block_k=SWIZZLE // p.in_bytes,
                    warps_m=warps_m, warps_n=warps_n, stages=stages, smem_layout="swizzle128", smem_pad_a=0,
                    smem_pad_b=0, smem_bytes=ring.size(stages), vector_a=1, vector_b=1,   # TMA checks A/B bases
                    vector_c=output_vector(p, operands.swap, split, reduction, epilogue), split_k=split,
                    group_m=group_m, regs_per_thread=entry_regs(gpu.regs_per_sm, wgs), blocks_per_sm=1,
                    cluster_m=cluster[0], cluster_n=cluster[1], consumer_warpgroups=wgs, producer_warps=PRODUCER_WARPS,
                    persistent=persistent, hopper=plan, split_reduction=reduction, stream_k_tiles=sk_tiles,
                    consumers="pingpong" if pingpong else "cooperative")


def best_epilogue(p: GemmProblem, gpu, operands: OperandPlan, wgs: int, n: int, split: int,
                  reduction: str = "atomic") -> tuple[str, dict]:
    """The epilogue the model predicts faster for this tile (registers on a tie or where the TMA
    store cannot write C: ``tma_store_blocker``) and each candidate's ``time_terms``."""
    terms = epilogue_terms(p, gpu, WGMMA_M * wgs, n, split, operands, reduction, epilogues(p, operands, split, n))
    return min(terms, key=lambda e: (round(total_time(terms[e]), 12), e)), terms


def epilogues(p: GemmProblem, operands: OperandPlan, split: int, n: int) -> tuple[str, ...]:
    """The epilogues a tile may use: registers always, the TMA store unless ``tma_store_blocker``."""
    return ("registers",) if tma_store_blocker(p, operands.swap, split, n) else ("registers", "tma_store")


# ---- the steps -----------------------------------------------------------------------------------
def instruction(p: GemmProblem, gpu) -> tuple[tuple[int, int], Step]:
    """Step 1: wgmma with FP32 accumulation; (widest N, k) of the target's wgmma shape for the dtype."""
    _, n_max, k = gpu.mma_shapes["wgmma"][p.dtype]
    rounding = ("the TMA unit rounds FP32 to nearest TF32 while it copies (tensor maps of type TFLOAT32: "
                "2.94e-4 error on the H200, as cvt.rna/cuBLAS), free" if p.dtype == "tf32" and p.tf32_rounding == "rna"
                else "tf32_fast: raw FP32, the tensor core truncates" if p.dtype == "tf32" else "16-bit inputs")
    return (n_max, k), note("instruction", f"wgmma.m64nNk{k}.f32.{p.dtype}",
                            f"{p.dtype} on {gpu.arch}a: warpgroup MMA from shared memory, FP32 accumulate; {rounding}")


def operand_roles(p: GemmProblem) -> tuple[OperandPlan, Step]:
    """Step 2: ``operand_plan``."""
    plan = operand_plan(p)
    feeds = ", ".join(f"{op.upper()} {plan.role(op).major.upper()}-major -> {plan.role(op).feed}" for op in ("a", "b"))
    if plan.swap:
        roles, why = "C^T = B^T A^T", (f"{feeds}: TF32 wgmma reads shared memory only K-major, and only its A operand "
                                       "may come from registers, so row-major B (N-major) becomes the wgmma A operand, "
                                       "loaded from its TMA tile into registers; wgmma rows run along N, the tile's N "
                                       "side is 64 per warpgroup")
    else:
        roles, why = "C = A B", f"{feeds}" + (": the transpose bit of the descriptor reads MN-major 16-bit tiles in "
                                              "place" if "smem_t" in feeds else "")
    return plan, note("operand roles", roles, why)


def off_line_operands(p: GemmProblem, operands: OperandPlan) -> tuple[str, ...]:
    """The K-major operands read in place (no prep pass) whose rows are off the 128-byte line."""
    return tuple(op for op in ("a", "b") if operands.role(op).major == "k" and operands.role(op).prep is None
                 and operands.role(op).cols * p.in_bytes % SWIZZLE)


def line_pads(p: GemmProblem, gpu, operands: OperandPlan, n_max: int,
              opts: Options = DEFAULTS) -> tuple[OperandPlan, Step | None]:
    """Step 2b: K-major operands read in place whose rows are off the 128-byte line (K x element size
    not a multiple of 128 B) fill most box rows from two L2 lines (``line_crossings``); a pad pass copies
    such an operand with K padded to whole lines (``k_pad``: its bytes read and written once, one
    launch).  Each choice (in place, or any of them padded) is configured through steps 3-15 and the
    fastest prediction (step 16) kept, in place on a tie.  Not shown where no operand is off the line."""
    off = off_line_operands(p, operands)
    if not off:
        return operands, None
    choices = [frozenset(c) for r in range(len(off) + 1) for c in itertools.combinations(off, r)]
    timed = []
    for pad in choices:
        plan = operand_plan(p, pad=pad) if pad else operands
        prediction = configure_tiles(p, gpu, NullDerivation(), n_max, plan, opts)[1]
        timed.append((prediction.time_us, len(pad), pad, plan))
    _, _, pad, plan = min(timed, key=lambda c: (c[0], c[1]))
    priced = "; ".join(f"{'pad ' + '+'.join(sorted(o.upper() for o in c)) if c else 'in place'} {u:.1f} us"
                       for u, _, c, _ in timed)
    name = "pad " + "+".join(sorted(o.upper() for o in pad)) if pad else "in place"
    rows = ", ".join(f"{op.upper()} {operands.role(op).cols * p.in_bytes:,} B" for op in off)
    return plan, note("line pads", name, f"K-major rows off the 128-byte line ({rows}): read in place, most box rows "
                      f"fill from two L2 lines; a pad pass copies an operand with K padded to whole lines; "
                      f"predicted {priced}")


def consumer_registers(gpu, n_max: int) -> tuple[tuple[int, int], Step]:
    """Step 3: (consumer warpgroups, their setmaxnreg target): of 1..MAX_CONSUMER_WARPGROUPS, the
    count whose registers hold the most wgmma columns in all (warpgroups x widest N), more
    warpgroups on a tie."""
    best = max(range(MAX_CONSUMER_WARPGROUPS, 0, -1),
               key=lambda w: w * widest_n(consumer_regs(gpu.regs_per_sm, w), n_max))
    regs = consumer_regs(gpu.regs_per_sm, best)
    _, step = formula_step("consumer registers", F.consumer_regs,
                           f"setmaxnreg: the producer warpgroup keeps {PRODUCER_REGS}, {best} consumer warpgroups share "
                           f"the rest (multiple of {SETMAXNREG_GRANULE}, at most {SETMAXNREG_MAX})",
                           post=lambda v: regs, regs_per_sm=gpu.regs_per_sm, producer_regs=PRODUCER_REGS, wgs=best)
    return (best, regs), step


def warpgroup_tile(gpu, n_max: int, wgs: int, regs: int) -> tuple[int, Step]:
    """Step 4: the widest wgmma N whose accumulators fit the consumers' registers."""
    n = widest_n(regs, n_max)
    one_more = MAX_CONSUMER_WARPGROUPS + 1
    left = int(F.consumer_regs(regs_per_sm=gpu.regs_per_sm, producer_regs=PRODUCER_REGS, wgs=one_more))
    return n, note("warpgroup tile", f"{WGMMA_M}x{n}",
                   f"largest wgmma N <= {n_max} whose N/2 FP32 accumulators + {CONSUMER_OVERHEAD_REGS} registers fit "
                   f"{regs}; {wgs} consumer warpgroups -> block {WGMMA_M * wgs}x{n} ({one_more} would leave {left} "
                   f"registers: N={n_max} does not fit)")


def smem_traffic(p: GemmProblem, gpu, block_i: int, n: int) -> tuple[float, Step]:
    """Step 5: shared-memory bytes per clock a block_i x n tile needs at the tensor peak (why N = 256)."""
    rate = gpu.tc_flops_per_clk_sm("wgmma", p.dtype)
    half = F.smem_traffic(rate=rate, elem_bytes=p.in_bytes, N=n // 2, block_m=block_i)
    return formula_step("smem traffic", F.smem_traffic,
                        f"B/clk per SM the wgmma operand reads (A 64xk, B Nxk per 2*64*N*k FLOP) plus the TMA writes of "
                        f"a {block_i}x{n} tile need at the tensor peak; N={n // 2} would need {half:.0f}",
                        rate=rate, elem_bytes=p.in_bytes, N=n, block_m=block_i)


def smem_bound_fraction(gpu, traffic: float) -> tuple[float, Step]:
    """Step 6: the fraction of the tensor peak shared memory can feed."""
    return formula_step("smem-bound fraction", F.smem_cap, "the fraction of the tensor peak shared memory can feed",
                        smem_bytes_per_clk=gpu.smem_bytes_per_clk_sm, smem_traffic=traffic)


def clamp_n(p: GemmProblem, operands: OperandPlan, n: int) -> tuple[int, Step | None]:
    """Step 7: no wgmma N wider than the next power of two of its extent (at least MIN_WGMMA_N)."""
    name, extent = ("M", p.M) if operands.swap else ("N", p.N)
    fit = max(MIN_WGMMA_N, 1 << (extent - 1).bit_length())
    if fit >= n:
        return n, None
    return fit, note("clamp N", fit, f"{name}={extent}: a wgmma N no wider than the next power of two of {name} "
                     f"(min {MIN_WGMMA_N}) wastes no MMA work")


SPLIT_TRIES = (2, 3, 4, 5, 6, 8, 10, 12, 16)   # splits step 8 prices besides the one that fills the SMs


def splits_may_pay(tiles: int, sm_count: int) -> bool:
    """Whether splitting K can help ``tiles`` output tiles: they make less than two waves."""
    return tiles < 2 * sm_count


def split_candidates(ktiles: int, tiles: int, sm_count: int) -> list[int]:
    """K splits step 8 considers for ``tiles`` output tiles: none, and when the tiles make less
    than two waves (some SMs idle in the last one) ``SPLIT_TRIES`` and the largest split that fills
    the SMs (``max_split``), each leaving every slice >= MIN_SLICE_K_TILES K tiles: a split that
    evens out the last wave can pay even where the tiles alone fill more than half the SMs
    (measured: 768x3072x16384 TF32, 72 tiles, split 8 ran 13% faster than none)."""
    if not splits_may_pay(tiles, sm_count):
        return [1]
    splits = {1, max_split(ktiles, sm_count // tiles)}
    splits.update(s for s in SPLIT_TRIES if slices_fit(ktiles, s))
    return sorted(splits)


def tile_widths(n: int) -> tuple[int, ...]:
    """The wgmma N step 8 tries below the widest N = ``n``: n, 3n/4 where that is whole 64-column
    TMA boxes (256 -> 192: cuBLAS's and XLA's 128x192 / 192x192 tiles on the deep-K weight
    gradients, bench/results/h200-2026-12-01/e/call1), n/2, n/4."""
    three_quarters = 3 * n // 4
    return (n,) + ((three_quarters,) if three_quarters % 64 == 0 else ()) + (n // 2, n // 4)


def tile_candidates(p: GemmProblem, gpu, operands: OperandPlan, wgs: int, n: int,
                    opts: Options = DEFAULTS) -> list[tuple]:
    """Step 8's candidates, each ``(predicted s, mma + L2 + DRAM s, -warpgroups, -N, split,
    reduction, tiles, epilogue)``: 1..wgs warpgroups (and WIDE_CONSUMER_WARPGROUPS at the widths their
    registers hold, where the wgmma A comes from shared memory) x ``tile_widths(N)`` (at least
    MIN_WGMMA_N; a narrower N only where it makes more tiles) x the ``split_candidates`` (none with a
    batch), each split added by every reduction ``split_reductions`` allows, each written by every epilogue ``epilogues`` allows; and
    the tile walked stream-K (``stream_k_terms``, split 1, registers) where ``stream_k_blocker`` allows
    it and the tiles make less than two waves.  ``NOVA_STREAM_K`` (``opts.stream_k``): 1, only
    stream-K candidates, at any tile count; 0 none; unset, none either while ``NOVA_CLUSTER`` forces a
    cluster (clusters walk whole tiles)."""
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    ktiles = k_tiles(p)
    forced = opts.stream_k
    if forced is None and opts.cluster not in (None, (1, 1)):
        forced = False                  # NOVA_CLUSTER forces clusters, which walk whole tiles: no stream-K
    out = []
    wide = wgs == MAX_CONSUMER_WARPGROUPS and wide_consumers_fit(operands) and opts.wide_consumers
    for w in sorted({wgs, 1} | ({WIDE_CONSUMER_WARPGROUPS} if wide else set()), reverse=True):
        widths = [nn for nn in tile_widths(n) if accumulators_fit(gpu.regs_per_sm, w, nn)]
        for nn in widths:
            wider = n if nn == 3 * n // 4 else 2 * nn
            if nn < MIN_WGMMA_N or (nn < widths[0] and cdiv(J, nn) == cdiv(J, wider)):
                continue                                     # narrower N without more tiles: no gain
            tiles = cdiv(I, WGMMA_M * w) * cdiv(J, nn)
            if forced is not False and (forced or splits_may_pay(tiles, gpu.sm_count)) and \
                    not stream_k_blocker(p, tiles, ktiles, gpu.sm_count) and stream_k_registers_fit(operands, nn):
                t = stream_k_terms(p, gpu, WGMMA_M * w, nn, operands)
                out.append((round(total_time(t), 12), slack(t), -w, -nn, 1, "stream_k", tiles, "registers"))
            if forced:
                continue
            for sp in split_candidates(ktiles, tiles, gpu.sm_count) if p.batch == 1 else [1]:
                for reduction in (split_reductions(p) if sp > 1 else ("atomic",)):
                    terms = epilogue_terms(p, gpu, WGMMA_M * w, nn, sp, operands, reduction, epilogues(p, operands, sp, nn))
                    for epilogue, t in terms.items():
                        out.append((round(total_time(t), 12), slack(t), -w, -nn, sp, reduction, tiles, epilogue))
    cluster = opts.cluster
    if cluster not in (None, (1, 1)) and min(cluster) == 1:        # a 1-D shape
        # NOVA_CLUSTER forces a shape: the tiles whose shared operand it can slice, where there are any
        # (else all, and step 12 says why the cluster is not possible)
        def admits(c):
            rows, cols = WGMMA_M * -c[2], -c[3]
            bm, bn = (cols, rows) if operands.swap else (rows, cols)
            return shared_tile_blocker(p, operands, bm, bn, cluster) is None
        out = [c for c in out if admits(c)] or out
    return out


def describe_split(p: GemmProblem, split: int, reduction: str, ktiles: int) -> str:
    """The split-K row's explanation."""
    if split == 1 and p.batch > 1:
        return (f"not with a batch: its {p.batch} elements multiply the work units instead (split-K is not "
                "supported for batched GEMMs)")
    if split == 1:
        return "the model prefers whole-K tiles"
    slices = f"{split} K slices of {cdiv(ktiles, split)} K tiles"
    if reduction == "atomic":
        return f"{slices} add into the zeroed FP32 output with atomics (cheaper than a workspace here)"
    why = atomic_split_blocker(p) or "cheaper than atomics here"
    return (f"{slices} store FP32 partials in a {split}x{p.M}x{p.N} workspace ({split * p.M * p.N * 4 / 1e6:.1f} MB); "
            f"a reduction kernel adds them in slice order, then the epilogue ({why})")


def describe_stream_k(p: GemmProblem, gpu, operands: OperandPlan, block_i: int, n: int, candidates: list,
                      opts: Options = DEFAULTS) -> str:
    """The split-K row's explanation of a stream-K pick: the walk's closed forms with their numbers,
    and the best split-K and no-split candidates beside it."""
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    tiles = cdiv(I, block_i) * cdiv(J, n)
    plan = stream_k_plan(tiles, k_tiles(p), gpu.sm_count)
    t = stream_k_terms(p, gpu, block_i, n, operands, plan=plan)
    others = []
    for what, keep in (("best split-K", lambda c: c[4] > 1), ("no split", lambda c: c[4] == 1 and c[5] != "stream_k")):
        rest = sorted(c for c in candidates if keep(c))
        if rest:
            c = rest[0]
            others.append(f"{what} {WGMMA_M * -c[2]}x{-c[3]}{f' split {c[4]}' if c[4] > 1 else ''} {c[0] * 1e6:.1f} us")
    dp = (f"the first {plan.dp_tiles} tiles walked whole ({cdiv(plan.dp_tiles, plan.ctas)} per CTA), then "
          if plan.dp_tiles else "")
    forced = "NOVA_STREAM_K=1 forces stream-K. " if opts.stream_k else ""
    return (f"{forced}{dp}the last {plan.sk_tiles} tiles' I = {plan.sk_tiles} x {plan.ktiles} = {plan.iters} K-tile "
            f"iterations split evenly over G = {plan.ctas} CTAs: CTA c runs [floor(c*I/G), floor((c+1)*I/G)), "
            f"ceil(I/G) = {cdiv(plan.iters, plan.ctas)} (I/G = {plan.per_cta:.1f}) each, vs whole tiles or equal K "
            f"slices that leave SMs idle in the last wave; a tile's segments run from owner(first) to owner(last), "
            f"owner(i) = floor(((i+1)*G - 1)/I): {plan.split_tiles} tiles split into up to {plan.slots} segments "
            f"store {plan.partial_segments} FP32 partial tiles ({plan.partial_segments * p.M * p.N / tiles * 4 / 1e6:.1f} MB, "
            f"a {plan.slots}x{p.M}x{p.N} workspace) that a reduction kernel adds in segment order, then the epilogue "
            f"(deterministic); a tile in one segment stores C directly; predicted {total_time(t) * 1e6:.1f} us (busiest "
            f"CTA {plan.busiest_iters} K tiles, reduction {t['split'] * 1e6:.1f} us)"
            + (f" vs {', '.join(others)}" if others else ""))


def batch_units(p: GemmProblem, tiles: int) -> list[Step]:
    """The work-units row of a batched problem (none unbatched): tiles x batch."""
    if p.batch == 1:
        return []
    return [note("work units", tiles * p.batch, f"{tiles} output tiles x batch {p.batch}: a unit is (batch element, "
                 "tile); group-M orders the tiles within an element")]


def tile_and_split(p: GemmProblem, gpu, operands: OperandPlan, wgs: int, n: int,
                   opts: Options = DEFAULTS) -> tuple[tuple, list[Step]]:
    """Step 8: of ``tile_candidates`` the one the prediction's model ranks fastest (then more
    warpgroups, wider N, no split, atomics, registers): (warpgroups, N, split, reduction, output
    tiles, epilogue)."""
    candidates = tile_candidates(p, gpu, operands, wgs, n, opts)
    if not candidates:                                       # NOVA_STREAM_K=1 where no tile allows it
        I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
        tiles = cdiv(I, WGMMA_M * wgs) * cdiv(J, n)
        why = stream_k_blocker(p, tiles, k_tiles(p), gpu.sm_count)
        raise ProblemError(f"NOVA_STREAM_K=1: {p.describe()} cannot run stream-K on {gpu.name}: {why}")
    _, _, w_neg, n_neg, split, reduction, tiles, epilogue = min(candidates)
    wgs, n = -w_neg, -n_neg
    block_i = WGMMA_M * wgs
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    ktiles = k_tiles(p)
    best = {}                                                # each tile and split with its faster epilogue
    for c in sorted(candidates):
        best.setdefault(c[2:6], c)
    table = ", ".join(f"{WGMMA_M * -c[2]}x{-c[3]}{f' split {c[4]} {c[5]}' if c[4] > 1 else ''}"
                      f"{' stream-K' if c[5] == 'stream_k' else ''}"
                      f"{' tma' if c[7] == 'tma_store' else ''} {c[0] * 1e6:.1f}" for c in sorted(best.values()))
    tma = any(c[7] == "tma_store" for c in candidates)
    wide = ""
    if wgs > MAX_CONSUMER_WARPGROUPS:          # steps 3-4 sized two warpgroups: say what three hold
        regs = consumer_regs(gpu.regs_per_sm, wgs)
        wide = (f"; {block_i} rows are {wgs} consumer warpgroups: {WG_THREADS * (1 + wgs)} threads launched at "
                f"{entry_regs(gpu.regs_per_sm, wgs)} registers, setmaxnreg {PRODUCER_REGS} for the producer and {regs} "
                f"for each consumer, which hold N/2 = {n // 2} FP32 accumulators + {CONSUMER_OVERHEAD_REGS} "
                f"(they hold N <= {2 * (regs - CONSUMER_OVERHEAD_REGS) // 64 * 64} in whole 64-column boxes)")
    steps = [
        note("tile and split", f"{block_i}x{n}" + (f", split-K {split} ({reduction})" if split > 1 else "")
             + (", stream-K" if reduction == "stream_k" else ""),
             f"tiles are (wgmma rows) x (wgmma N); predicted us (the prediction's model: max(the busiest SM's units "
             f"of padded tile work at the smem-bound rate, the L2 fills, DRAM plus its loads' latency wait, the ring's "
             f"latency bound) + the ring's "
             f"first fill + epilogues + prep{' + adding the K slices' if any(c[4] > 1 or c[5] == 'stream_k' for c in candidates) else ''} + "
             f"launches{', each with its faster epilogue (tma: the TMA store)' if tma else ''}; on a tie, the "
             f"candidate with the least mma + L2 + DRAM (+ wait) time): {table}{wide}"),
        note("output tiles", tiles, f"ceil({I}/{block_i}) * ceil({J}/{n})"),
        *batch_units(p, tiles),
        note("split-K", "stream-K" if reduction == "stream_k" else split if split == 1 else f"{split}, {reduction}",
             describe_stream_k(p, gpu, operands, block_i, n, candidates, opts) if reduction == "stream_k"
             else describe_split(p, split, reduction, ktiles)),
    ]
    return (wgs, n, split, reduction, tiles, epilogue), steps


def partial_sectors_text(p: GemmProblem, swap: bool, split: int, reduction: str) -> str:
    """The register epilogue's partial sector writes per element (``register_stores``), as the epilogue
    step states them."""
    stores = register_stores(p, swap, split, reduction)
    if not stores:
        return ""
    what, size, vector = stores
    partial = store_sectors(size, p.N, swap, vector)[1]
    if not partial:
        return ""
    return (f" ({what} {vector} element(s) a store on rows of {p.N}: {partial:.3f} partial 32-byte sectors "
            f"an element, {PARTIAL_SECTOR_CLK:g} clocks each on the SM's L2 port)")


def epilogue_step(p: GemmProblem, gpu, operands: OperandPlan, wgs: int, n: int, split: int,
                  reduction: str) -> tuple[str, Step]:
    """Step 9: registers or the TMA store, whichever the model predicts faster for the chosen tile
    (``best_epilogue``; step 8 ranked the tiles with it)."""
    blocker = tma_store_blocker(p, operands.swap, split, n)
    if reduction == "stream_k":
        blocker = "stream-K keeps the register epilogue (a segment stores C or an FP32 partial tile)"
    if blocker:
        return "registers", note("epilogue", "registers", f"predicated stores from the accumulators between tiles"
                                 f"{partial_sectors_text(p, operands.swap, split, reduction)}; no TMA store: {blocker}")
    epilogue, terms = best_epilogue(p, gpu, operands, wgs, n, split, reduction)
    reg, tma = terms["registers"], terms["tma_store"]
    box = c_box(p, operands.swap)
    boxes = f"{box.count} x [{box.rows}x{box.cols}]" if box.count > 1 else f"[{box.rows}x{box.cols}]"
    stages = {e: ring_depth(gpu, WGMMA_M * wgs, n, staging_bytes(wgs, e)) for e in terms}
    why = (f"TMA store: each consumer warpgroup writes its {WGMMA_M}x{n} slab into {STAGING_BUFFERS} staging "
           f"buffers of {boxes} {p.out_dtype} (128-byte swizzle, {STAGING_STEP_BYTES // 1024} KB each: "
           f"{staging_bytes(wgs, 'tma_store') // 1024} KB per CTA) and TMA-stores them: the last two steps' stores "
           f"drain while the next tile's K loop runs (the rest must leave first); predicted {total_time(tma) * 1e6:.1f} us (epilogue "
           f"{tma['epilogue'] * 1e6:.1f} us not overlapped, L2 {tma['l2'] * 1e6:.1f} us with the stores, "
           f"{stages['tma_store']} stages: ring bound {tma['ring'] * 1e6:.1f} us) vs registers "
           f"{total_time(reg) * 1e6:.1f} us (epilogue {reg['epilogue'] * 1e6:.1f} us, {stages['registers']} stages)")
    if epilogue == "registers":
        why = ("registers: the TMA store does not pay here"
               f"{partial_sectors_text(p, operands.swap, split, reduction)}. " + why)
    return epilogue, note("epilogue", "TMA store" if epilogue == "tma_store" else "registers", why)


def ring_stages(gpu, block_i: int, n: int, staging: int = 0) -> tuple[int, Step]:
    """Step 10: as many ring stages as the per-block shared memory holds beside the epilogue's
    staging boxes, within [MIN_STAGES, MAX_STAGES]."""
    sizes = {"smem_per_block": gpu.smem_per_block, "block_m": block_i, "N": n, "staging": staging}
    fit = int(F.stages(**sizes))
    cap = f" (at most {MAX_STAGES})" if fit > MAX_STAGES else ""
    beside = f" and {staging // 1024} KB of epilogue staging" if staging else ""
    return formula_step("stages", F.stages, f"every stage the per-block shared memory holds after 1 KB of alignment "
                        f"slack{beside}: one landing, one computing, the rest hide DRAM/L2 latency{cap}",
                        post=lambda v: max(MIN_STAGES, min(int(v), MAX_STAGES)), **sizes)


def tma_boxes(p: GemmProblem, plan: HopperPlan, multicast: tuple[str, int] | None = None) -> tuple[tuple[TmaBox, TmaBox], Step]:
    """Step 11: each operand's TMA boxes (``tma_box`` of its tile, decided in ``wgmma_schedule``;
    ``multicast``: the operand a cluster shares and its extent, ``Schedule.multicast``)."""
    bk = per_row = SWIZZLE // p.in_bytes
    boxes = ", ".join(f"{op.upper()} {plan.box(op).count} x [{plan.box(op).rows}x{plan.box(op).cols}]" for op in ("a", "b"))
    shared = ""
    if multicast:
        shared = (f"; {multicast[0].upper()}'s tile, which the cluster shares, in {multicast[1]} equal slices, one "
                  f"per CTA (a K-major tile as {multicast[1]} boxes)")
    return (plan.box_a, plan.box_b), note(
        "TMA boxes", boxes, f"128-byte swizzled boxes (inner extent 128 B, the span the wgmma descriptors and the "
        f"register loads address): a K-major tile is one box [tile rows x {bk} of K], an MN-major tile is "
        f"tile/{per_row} boxes [{bk} of K x {per_row}]{shared}; out-of-bounds rows and the K tail read as zero")


def target_cluster_blocker(gpu, cluster: tuple[int, int]) -> str | None:
    """Why ``gpu`` cannot launch clusters of ``cluster`` = (cluster_m, cluster_n) CTAs (None if it can)."""
    if cluster == (1, 1):
        return None
    if "clusters" not in gpu.features:
        return f"{gpu.name} has no thread-block clusters"
    if cluster[0] * cluster[1] > gpu.max_cluster_size:
        return f"{cluster[0] * cluster[1]} CTAs per cluster: {gpu.name} allows {gpu.max_cluster_size}"
    return None


def cluster_blocker(p: GemmProblem, s: Schedule, cluster: tuple[int, int]) -> str | None:
    """Why the kernel cannot run schedule ``s``'s tile in clusters of ``cluster`` = (cluster_m,
    cluster_n) on any target (None if it can; ``target_cluster_blocker`` adds the target's limits):
    one operand multicast per cluster (1-D clusters), a portable size (PTX's
    ``.reqnctapercluster`` beyond MAX_PORTABLE_CLUSTER needs a launch attribute), a persistent grid,
    no wider than the problem's tiles along the cluster, and the shared tile split into equal
    slices of whole TMA boxes (``tma_box``)."""
    cm, cn = cluster
    if cluster == (1, 1):
        return None
    if p.batch > 1:
        return "not with a batch (the clustered tile walk covers one GEMM)"
    if cm < 1 or cn < 1:
        return f"cluster {cm}x{cn}: extents are >= 1"
    if cm > 1 and cn > 1:
        return f"a {cm}x{cn} cluster would multicast both operands (the kernel multicasts one: 1-D clusters)"
    if cm * cn > MAX_PORTABLE_CLUSTER:
        return f"{cm * cn} CTAs per cluster: more than the portable {MAX_PORTABLE_CLUSTER}"
    if not s.persistent:
        return "the clusters walk a persistent grid's units"
    if s.stream_k:
        return "not with stream-K (its CTAs walk K-tile ranges of their own)"
    if s.pingpong:
        return pingpong_reasons["cluster"]
    dim, extent, tile, size = ("M", cm, s.block_m, p.M) if cm > 1 else ("N", cn, s.block_n, p.N)
    if cdiv(size, tile) < extent:
        return f"{cdiv(size, tile)} tile(s) of {tile} along {dim}={size}: no cluster wider than the problem"
    return shared_tile_blocker(p, s.hopper.operands, s.block_m, s.block_n, cluster)


def shared_tile_blocker(p: GemmProblem, operands: OperandPlan, block_m: int, block_n: int,
                        cluster: tuple[int, int]) -> str | None:
    """Why a 1-D ``cluster``'s CTAs cannot share the block_m x block_n tile's operand (None if they
    can): along M they share B's tile, along N A's, each CTA loading an equal slice of whole TMA boxes
    (K-major: whole swizzle atoms of rows; MN-major: whole 128-byte boxes)."""
    cm, cn = cluster
    extent = cm if cm > 1 else cn
    op = "b" if cm > 1 else "a"                      # along M the CTAs share B's tile, along N A's
    rows = block_n if op == "b" else block_m
    per_row = SWIZZLE // p.in_bytes
    if operands.role(op).major == "k":
        if rows % (extent * SWIZZLE_ATOM_ROWS):
            return (f"{op.upper()}'s {rows}-row tile does not split into {extent} slices of whole "
                    f"{SWIZZLE_ATOM_ROWS}-row swizzle atoms")
    elif cdiv(rows, per_row) % extent:
        return f"{op.upper()}'s {rows}-wide tile is {cdiv(rows, per_row)} boxes of 128 B: not {extent} equal slices"
    return None


def cluster_schedule(p: GemmProblem, gpu, s: Schedule, cluster: tuple[int, int]) -> Schedule:
    """Schedule ``s`` (1x1) with its CTAs in clusters of ``cluster``: the sliced TMA box of the shared
    operand, the grid in whole clusters and the raster groups over cluster tiles (``raster_groups``)."""
    if cluster == (1, 1):
        return s
    wgs, n, ops = s.consumer_warpgroups, s.mma.n, s.hopper.operands
    group_m = cluster_raster(p, gpu, ops, WGMMA_M * wgs, n, cluster)[0]
    return wgmma_schedule(p, gpu, ops, wgs, n, s.split_k, s.stages, group_m, s.persistent, s.split_reduction,
                          s.hopper.epilogue, cluster)


def cluster_raster(p: GemmProblem, gpu, operands: OperandPlan, block_i: int, n: int,
                   cluster: tuple[int, int]) -> tuple[int, Step | None]:
    """Step 14 for a clustered grid: ``raster_groups`` over cluster tiles (cluster_i x block_i by
    cluster_j x n), ``cluster_slots`` of them per wave."""
    I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
    ci, cj = cluster_extents(cluster, operands.swap)
    ctiles_i, ctiles_j = cdiv(cdiv(I, block_i), ci), cdiv(cdiv(J, n), cj)
    return raster_groups(gpu, ctiles_i, ctiles_i * ctiles_j, ci * block_i, cj * n, slots=cluster_slots(gpu, ci * cj))


def cluster(p: GemmProblem, gpu, s: Schedule, opts: Options = DEFAULTS) -> tuple[Schedule, Step]:
    """Step 12: schedule ``s`` (tile, split, epilogue and ring decided) in thread-block clusters where
    the model predicts them faster.  Candidates: 1x1 and ``CLUSTER_SHAPES`` that ``cluster_blocker``
    allows; each priced by the prediction's model (``predict_hopper``): the CTAs of a cluster share
    one operand's tile, so each fills ``fill_share`` of a unit's bytes from L2 (multicast), and the
    clusters walk the cluster units (``cluster_pacing``: ``cluster_slots`` clusters at a time, ragged
    cluster tiles padded), plus ``CLUSTER_SYNC_S``.  The fastest; 1x1 on a tie.  ``NOVA_CLUSTER``
    forces a shape (``opts.cluster``)."""
    forced = opts.cluster
    if forced is None and not AUTO_CLUSTERS:       # not priced: no time spent on a choice that is not made
        return s, note("cluster", "1x1", "1x1: the configurator picks no cluster on its own (AUTO_CLUSTERS): "
                       "where the model predicted clusters faster, they measured slower than 1x1 on the H200 "
                       "(7-11% with CTA-scope releases, bench/results/h200-2026-12-01/a/call7-ncu); "
                       "NOVA_CLUSTER=MxN forces one")
    shapes = [forced] if forced not in (None, (1, 1)) else ([] if forced else list(CLUSTER_SHAPES))
    base = predict_hopper(p, gpu, s)
    priced, blocked = [], []
    for shape in shapes:
        blocker = target_cluster_blocker(gpu, shape) or cluster_blocker(p, s, shape)
        if blocker:
            blocked.append(f"{shape[0]}x{shape[1]}: {blocker}")
            continue
        c = cluster_schedule(p, gpu, s, shape)
        priced.append((predict_hopper(p, gpu, c), c))
    pick = s
    if priced:                              # the fastest, then the most slack in the other limits (as step 8)
        pred, c = min(priced, key=lambda pc: (round(pc[0].time_us, 6), slack(pc[0].terms_us)))
        if forced or (AUTO_CLUSTERS and round(pred.time_us, 6) < round(base.time_us, 6)):
            pick = c
    table = "; ".join([f"1x1 {base.time_us:.1f} (L2 fills {base.terms_us['l2']:.1f})"]
                      + [f"{c.cluster_m}x{c.cluster_n} {pr.time_us:.1f} (L2 fills {pr.terms_us['l2']:.1f}, "
                         f"{c.hopper.ctas // (c.cluster_m * c.cluster_n)} clusters)" for pr, c in priced])
    ops = s.hopper.operands
    block_i = WGMMA_M * s.consumer_warpgroups
    why = (f"CTAs along M share B's tile, along N A's: each TMA-loads 1/extent of the shared tile and multicasts "
           f"it into every CTA of the cluster, so its L2 -> SM fill bytes divide by the extent; the clusters walk "
           f"cluster tiles, floor(SMs / cluster size) at a time, and cost {CLUSTER_SYNC_S * 1e6:.0f} us of "
           f"cluster barriers; predicted us: {table}")
    if blocked:
        why += "; not possible: " + "; ".join(blocked)
    if forced:
        why = f"NOVA_CLUSTER={forced[0]}x{forced[1]} forces the shape. " + why
    elif pick is s:
        why = "1x1: no cluster shape is predicted faster. " + why
    shape = (pick.cluster_m, pick.cluster_n)
    ci, cj = cluster_extents(shape, ops.swap)
    formula = (f"fill share = (block_i/cluster_j + N/cluster_i)/(block_i + N) = ({block_i}/{cj} + {s.mma.n}/{ci})/"
               f"({block_i} + {s.mma.n}) = {fill_share(block_i, s.mma.n, (ci, cj)):.4g}")
    return pick, note("cluster", f"{shape[0]}x{shape[1]}", why, formula)


def persistent_grid(s: Schedule, batched: bool = False) -> tuple[int, Step]:
    """Step 13: a persistent grid of min(work units, SMs) CTAs, with a cluster min(cluster units,
    ``cluster_slots``) clusters (decided in ``wgmma_schedule``); ``batched``: the units are (batch
    element, tile)."""
    plan, size = s.hopper, s.cluster_m * s.cluster_n
    walk = f"min(tiles x {'batch' if batched else 'K slices'}, SMs) CTAs walk the work units"
    if s.stream_k:
        walk = ("stream-K: every SM's CTA walks its data-parallel tiles, then its balanced range of the stream-K "
                "tiles' K-tile iterations")
    if size > 1:
        walk = (f"min(cluster tiles x K slices, floor(SMs / {size})) clusters of {s.cluster_m}x{s.cluster_n} CTAs "
                f"({plan.ctas // size}) walk the cluster units, each CTA its own tile of the cluster tile")
    return plan.ctas, note("grid", f"persistent, {plan.ctas} CTAs",
                           f"{walk}; the ring runs on across them, so the producer loads the next tile while the "
                           "consumers store this one")


def raster_groups(gpu, tiles_i: int, tiles: int, block_i: int, n: int,
                  slots: int | None = None) -> tuple[int, Step | None]:
    """Step 14: tile rows per raster group (1, not shown, without tile rows to group); with a
    cluster, cluster-tile rows of cluster tiles, ``slots`` (``cluster_slots``) of them per wave."""
    if tiles_i <= 1 or tiles <= 1:
        return 1, None
    rows = "tile rows" if slots is None else f"cluster-tile rows (W: {slots} clusters at a time)"
    return formula_step("group-M", F.group_m, f"{rows} per raster group: a wave's A and B panels have the smallest "
                        "L2 footprint when G*block_m = (W/G)*block_n", post=lambda v: int(min(tiles_i, max(1, round(v)))),
                        sm_count=gpu.sm_count if slots is None else slots, tiles=tiles, block_n=n, block_m=block_i)


def operand_prep(p: GemmProblem, operands: OperandPlan) -> tuple[list[str], Step]:
    """Step 15: the operands that go through a transpose/pad pass (decided in ``operand_plan``)."""
    preps = [op.upper() + (" (transpose)" if operands.role(op).prep.transpose else " (pad K)")
             for op in ("a", "b") if operands.role(op).prep]
    return preps, note("operand prep", ", ".join(preps) or "none",
                       "TMA cannot transpose and needs 16-byte aligned rows: an operand whose rows are not (or a second "
                       "MN-major TF32 operand, which neither registers nor the descriptor can take, or one step 2b pads) "
                       "goes through one transpose/pad pass into a workspace, K padded to whole 128-byte lines "
                       f"({prep_bytes(p, operands) / 1e6:.1f} MB of DRAM traffic)")


def configure_hopper(p: GemmProblem, gpu, d: Derivation, opts: Options = DEFAULTS) -> tuple[Schedule, Prediction]:
    """Steps 1-15 above, recorded in ``d`` in that order; returns (schedule, prediction).  ``opts``: the
    options that force or exclude a choice (``NOVA_STREAM_K``, ``NOVA_PINGPONG``, ``NOVA_CLUSTER``,
    ``NOVA_WIDE_CONSUMERS``)."""
    n_max, _ = d.record(instruction(p, gpu))
    operands = d.record(operand_roles(p))
    operands = d.record(line_pads(p, gpu, operands, n_max, opts))
    return configure_tiles(p, gpu, d, n_max, operands, opts)


def configure_tiles(p: GemmProblem, gpu, d: Derivation, n_max: int, operands: OperandPlan,
                    opts: Options = DEFAULTS) -> tuple[Schedule, Prediction]:
    """Steps 3-16 for the operand plan steps 2 and 2b decided."""
    wgs, regs = d.record(consumer_registers(gpu, n_max))
    n = d.record(warpgroup_tile(gpu, n_max, wgs, regs))
    traffic = d.record(smem_traffic(p, gpu, WGMMA_M * wgs, n))
    d.record(smem_bound_fraction(gpu, traffic))
    n = d.record(clamp_n(p, operands, n))
    wgs, n, split, reduction, tiles, _ = d.record(tile_and_split(p, gpu, operands, wgs, n, opts))
    epilogue = d.record(epilogue_step(p, gpu, operands, wgs, n, split, reduction))
    depth = ring_depth(gpu, WGMMA_M * wgs, n, staging_bytes(wgs, epilogue))
    raster = raster_groups(gpu, cdiv(p.N if operands.swap else p.M, WGMMA_M * wgs), tiles, WGMMA_M * wgs, n)
    s = wgmma_schedule(p, gpu, operands, wgs, n, split, depth, group_m=raster[0], reduction=reduction,
                       epilogue=epilogue)
    s = d.record(pingpong_step(p, gpu, operands, n_max, s, opts))
    if s.pingpong:                                   # the consumers step replaced the tile and its epilogue
        wgs, n = s.tile_slabs, s.mma.n               # the ring and the raster follow one warpgroup's tile
        I, J = (p.N, p.M) if operands.swap else (p.M, p.N)
        raster = raster_groups(gpu, cdiv(I, WGMMA_M * wgs), cdiv(I, WGMMA_M * wgs) * cdiv(J, n), WGMMA_M * wgs, n)
    d.record(ring_stages(gpu, WGMMA_M * wgs, n, s.hopper.ring.staging))
    s, cluster_row = cluster(p, gpu, s, opts)
    if s.cluster_m * s.cluster_n > 1:
        raster = cluster_raster(p, gpu, operands, WGMMA_M * wgs, n, (s.cluster_m, s.cluster_n))
    d.record(tma_boxes(p, s.hopper, s.multicast))
    d.record((s, cluster_row))
    d.record(persistent_grid(s, p.batch > 1))
    d.record(raster)
    d.record(operand_prep(p, operands))
    return s, predict_hopper(p, gpu, s)
