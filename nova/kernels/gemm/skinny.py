"""The skinny GEMM's derivation: a GEMM of a few rows (a decode step's tokens against a weight) as a
memory-bound stream of B on the CUDA cores, and the rule that picks it over the tensor-core tiles.

A tensor-core tile has at least 16 (mma.sync) or 64 (wgmma) rows; a GEMM of a few rows wastes most
of them and still reads all of B once: it is bound by B's bytes, not by FLOPs.  The skinny kernel
(``emit_skinny.py``; layouts in ``skinny_schedule.py``) reads B once with 16-byte vector loads, keeps
A's rows in shared memory and adds FP32 FMAs (exact FP32 products: better than TF32 for a tf32
problem); it splits K over CTAs when N alone gives too few CTAs to keep enough bytes in flight, and the
last CTA of each column block adds the slices in order (deterministic, one launch).

Steps, one function each, closed form (no search, no measurement):

 1. applicability   unbatched, and M at most the FP32 balance point ``m_max``: each element of B read
                    costs M FMAs (and a conversion for 16-bit storage), so the CUDA cores keep up with
                    the DRAM while M + converts <= elem_bytes x FMA rate / DRAM bandwidth; and at most
                    ACC_VALUES (a thread keeps at least one FP32 sum per row of A)
 2. layout          lanes along N (B row-major [K, N]) or along K (B stored [N, K]): a warp's lanes
                    always read consecutive addresses
 3. vector width    16 bytes / element; lanes along N halve it while M x vec sums exceed ACC_VALUES or
                    it does not divide N (with ``SHIFTED_COLUMNS`` they keep it and read each row as the
                    two aligned vectors around a thread's columns); lanes along K keep it and, where it does not divide K, read
                    each row as the aligned vectors from its start less (n K mod vec), the elements
                    outside the row masked, the loop over K + vec - 1 rounded up to whole vectors
                    (``row_shift``: one-element loads ran at half cuBLAS's speed at odd K)
 4. threads         8 warps (2 per scheduler); along N: 32 lanes side by side (fewer for a narrower N),
                    the rest stacked along K, or a half or a quarter of them where that predicts lower
                    (more column blocks: fewer K slices fill the wave, a shorter step 9 tail) and they
                    still read whole 128-byte lines of B's row; along K: each warp owns ``rows``
                    columns of C, enough that its shared-memory reads of A per byte of B stay within
                    the shared-memory bandwidth per byte of DRAM bandwidth of an SM (``rows_smem``)
 5. occupancy       registers (sums, loads in flight, A's values, addresses) and shared memory -> CTAs per SM
 6. loads in flight Little's law: an SM needs DRAM bandwidth x loaded latency / SMs bytes in flight;
                    ``unroll`` independent vector loads a thread issues per trip, from the CTAs resident
                    with that unroll's registers (re-derived while they drop)
 7. K split         one wave of CTAs: splits = floor(SM slots / CTAs along N) (a CTA more than the slots
                    is a second wave: its CTAs do a whole CTA's trips after the first's), each slice at least one
                    trip; or as many slices as the last CTA adds in one run of loads; or one slice:
                    the lowest prediction of the three (each with the last CTA's sum of the slices)
 8. A staging       A's columns of a slice staged in equal chunks of whole trips, STAGE_BYTES of FP32 at most;
                    a chunk's first loads of B issued before its staging (B does not depend on A: its first
                    round waits with them) where that makes fewer dependent trips, its rounds smaller
                    (the sums and those loads stay live across it); with lanes along K, 16-byte vectors
                    of A's rows a load where its storage and the chunks allow (``staging_vector``)
 9. prediction      max(bytes / (DRAM bandwidth x eta_dram), latency, FMA time) + the FMA phase the
                    scheduler's other warps do not cover + launch.  The latency: trips x loaded latency
                    per SM slot, and each chunk's first FMA phase (``trip_phase``: a trip's FMAs,
                    conversions and reads of A in shared memory on one SM) on top, which no load of the
                    CTA covers -- its warps leave the staging barrier together -- and the SM's other
                    CTAs only while their own phases leave room in the latency.  When K is split, the
                    last CTA of a column block adding the slices' partials after it (its fence and
                    ticket, then a thread's loads of all its outputs' partials, REDUCE_UNROLL in
                    flight: one loaded latency a run)

``choose_kernel`` is the one rule between this kernel and the tensor-core tiles: the lower prediction.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from nova.configurator.derivation import Derivation, formula_step, note
from nova.configurator.step import Prediction, Step
from nova.hwmodel import GPUModel
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import F as HW
from nova.kernels.gemm.problem import GemmProblem
from nova.kernels.gemm.skinny_schedule import FLAG_WORDS, WARP, SkinnySchedule, cdiv, loop_extent, shift_halo

TRANSACTION_BYTES = 16    # [CC] the widest global load a thread issues (ld.global.v4.b32)
ACC_VALUES = 64           # [EST] FP32 sums a thread keeps across K (as the rows family's): with loads in
                          # flight, A's values and addresses a thread stays under ~128 registers (ptxas checks)
WARPS_PER_SCHEDULER = 2   # [EST] two warps per scheduler: one issues while the other waits
REG_BASE = 32             # [EST] addresses, loop state, predicates (ptxas reports the real count)
A_AHEAD = 48              # [EST] lanes along K: A's values ptxas reads ahead of their FMAs at most (fitted, ``registers``)
FLIGHT_BYTES_MAX = 128    # [EST] bytes of B a thread keeps in flight at most (8 16-byte vectors; more of
                          # narrower ones: 32 registers either way)
FLIGHT_LOADS_MAX = 16     # [EST] and at most 16 loads (narrow ones cost an address and a predicate each)
STAGE_BYTES = 16384       # [EST] FP32 bytes of A staged at a time: at most 16 loads a thread of 256 per chunk
STAGE_LOADS_MIN = 4       # [EST] A's loads a thread issues at least per staging round (more where the FMA
                          # loop's registers leave room: value and index each)
SPLITS_MAX = 128          # [EST] K slices at most: the last CTA's sum of a column's slices stays a few trips
LINE_BYTES = 128          # [CC] a cache line: fewer threads along N than a warp only while they still read
                          # whole lines of B's row a step (8 x 16-byte vectors; never with 2- or 4-byte loads)
FMA_EXPOSED_WARPS = 4     # [FIT] the FMA phase a trip spends between its loads shows in the time as
                          # t_fma x FMA_EXPOSED_WARPS / (warps a scheduler holds): a scheduler of two warps
                          # (one 256-thread CTA an SM, M >= 6 at ~170-200 registers) cannot cover one warp's
                          # FMAs with the other's loads.  Fitted (1, 2 or 3 x 2/warps tried) on the 77
                          # skinny kernels of three H100 held-out draws (bench/results/h100-2026-12-06/
                          # run86-h100, run88-h100, run89-h100/fresh): mean |log error| 0.269 -> 0.226;
                          # one CTA an SM ran 1.1-2.4x the model without it, three or more 0.55-1.1
SHIFTED_ROWS = False      # [MEASURED] off: rows read shifted (``row_shift``) ran 2.4-2.8x a shared-memory bound of
                          # their A reads (one FP32 value at a time, a stride of vec words: vec-way bank conflicts)
                          # and slower than one element a load: 8x14759x10323 tf32 NT 767-1647 us, 14x... 1539,
                          # 1x1381x746 bf16 3.2 against 2.4 (bench/results/h100-2026-12-06/run96-h100): the
                          # emitter keeps them (tests/test_skinny.py) until A is read as aligned vectors
SHIFTED_COLUMNS = True    # [MEASURED] on: lanes along N at an N off the vector read each row as two aligned
                          # vectors and select their columns (``row_shift``) instead of halving the vector to
                          # 1-element loads.  H100, bench/results/h100-2026-12-07/run99-h100: four odd-N tf32
                          # shapes, none slower, three faster (12x11557x8406 336 -> 240 us, 14x3383x3614
                          # 70.6 -> 38.8, 12x1479x8262 51.7 -> 47.5; 3x7559x3130 level), errors unchanged;
                          # 16-bit odd N takes it too, unmeasured for speed (the GPU tests check it: run102-h100)
DEEP_UNROLL = ("n",)      # [MEASURED] the lane arrangements whose widths are also derived with the unroll at
                          # its cap (fewer dependent trips), kept where it predicts DEEP_UNROLL_MARGIN lower.
                          # H100, bench/results/h100-2026-12-07/run98-h100/noshift: lanes along N where the
                          # model priced the cap lower by > 3%, all three faster (3x7559x3130 tf32 58.4 ->
                          # 38.4 us, 2x13760x512 bf16 4.5 -> 4.2, 3x3264x320 tf32 4.5 -> 2.6); where it
                          # priced them level, slower (10x1088x1088 bf16 6.9 -> 8.1, 7x960x1728 7.0 -> 7.4);
                          # along K one faster (3x4608x8128 bf16 NT 75.0 -> 64.2), one twice slower
                          # (10x4928x10240 tf32 NT 87.2 -> 170.7): off there
DEEP_UNROLL_MARGIN = 0.03
REDUCE_UNROLL = 32        # [EST] partials a thread of the last CTA loads before adding them (its other
                          # values are dead by then: 32 loads and their addresses fit the caps, ptxas checks)

F = formulas("""
    fma_rate = clock_hz * fp32_lanes_per_sm * sm_count
    m_max = Min(acc_values, -converts + floor(elem_bytes * fma_rate / dram_bw))
    vec_max = transaction_bytes / elem_bytes
    rows_smem = ceil(4 * dram_bw * m / (clock_hz * elem_bytes * sm_count * smem_bytes_per_clk_sm))
    regs = acc + a_regs + base + flight_regs
    bps = Min(bps_regs, bps_smem, max_blocks_per_sm, floor(max_threads_per_sm / threads))
    bytes_in_flight = 1.0e-9 * dram_bw * mem_latency_ns / sm_count
    unroll = Max(1, Min(unroll_max, ceil(bytes_in_flight / (load_bytes * resident))))
    blocks_n = ceil(N / columns)
    splits = Max(1, Min(splits_max, floor(blocks_per_sm * sm_count / blocks_n), floor(K / span)))
    k_slice = span * ceil(K / (span * splits))
    chunks = ceil(k_slice / (span * Max(1, floor(stage_bytes / (4 * m_pad * span)))))
    a_chunk = span * ceil(k_slice / (chunks * span))
    trips = staging_waits + ceil(k_slice / span)
    t_bandwidth = 1000000.0 * bytes / (dram_bw * eta_dram)
    t_latency = 0.001 * mem_latency_ns * trips * ceil(grid / (blocks_per_sm * sm_count))
    lds_k = m * ceil(vec / 4) / (rows * vec)
    lds_n = ceil(m_pad / 4) / vec
    smem_k = 4 * m / rows
    smem_n = 4 * ceil(m_pad / 4) / vec
    t_phase = 1000000.0 * columns * span * (smem / smem_bytes_per_clk_sm + (converts + lds + m) / fp32_lanes_per_sm) / clock_hz
    ctas_sm = Min(blocks_per_sm, ceil(grid / sm_count))
    t_chunks = (0.001 * chunks * Max(1000 * t_phase, 1000 * ctas_sm * t_phase - mem_latency_ns) + 0.001 * mem_latency_ns * trips) * ceil(grid / (blocks_per_sm * sm_count))
    t_fma = 1000000.0 * K * N * (converts + m) / fma_rate
    warps_per_scheduler = blocks_per_sm * threads / (32 * warp_schedulers_per_sm)
    t_exposed = fma_exposed_warps * t_fma / warps_per_scheduler
    t_kernel = t_exposed + t_launch + Max(t_bandwidth, t_fma, t_chunks)
    reduce_groups = Max(1, Min(splits, floor(threads / (columns * m))))
    splits_tail = Max(1, Min(wave, floor(reduce_unroll * Max(1, floor(threads / (columns * m)))
                                         / ceil(m * columns / threads))))
    tail_outputs = ceil(m * columns * reduce_groups / threads)
    tail_trips = 2 + ceil(tail_outputs * ceil(splits / reduce_groups) / reduce_unroll)
""")


def _pow2ceil(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


def _pow2floor(x: int) -> int:
    return 1 << max(0, int(math.floor(math.log2(max(1, x)))))


def converts(p: GemmProblem) -> int:
    """Instructions per element of B besides the FMAs: a conversion to FP32 for 16-bit storage."""
    return 0 if p.storage == "f32" else 1


# ---- 1 -----------------------------------------------------------------------------------------
def m_max(p: GemmProblem, gpu: GPUModel) -> tuple[int, list[Step]]:
    """The most rows of A the kernel takes: the FP32 balance point in FMAs per element of B, less the
    conversion a 16-bit element costs, and at most ACC_VALUES (one FP32 sum a row per thread)."""
    rate, s1 = formula_step("FP32 FMA rate", F.fma_rate, "CUDA-core lanes x SMs x clock: one FMA per lane and clock "
                            "([CC] arithmetic throughput)", clock_hz=gpu.clock_hz,
                            fp32_lanes_per_sm=gpu.fp32_lanes_per_sm, sm_count=gpu.sm_count)
    bound, s2 = formula_step("skinny: rows of A at most", F.m_max,
                             f"the kernel stays DRAM-bound while an element of B ({p.in_bytes} B) costs no more FMA "
                             f"time than its DRAM time: M FMAs{' + 1 conversion' if converts(p) else ''} per element; "
                             f"at most {ACC_VALUES} FP32 sums a thread", post=int, acc_values=ACC_VALUES,
                             converts=converts(p), elem_bytes=p.in_bytes, fma_rate=rate, dram_bw=gpu.dram_bw)
    return bound, [s1, s2]


def applies(p: GemmProblem, gpu: GPUModel) -> tuple[bool, str]:
    """(whether the skinny kernel computes ``p`` on ``gpu``, why not)."""
    bound = m_max(p, gpu)[0]
    if p.M > bound:
        return False, f"M = {p.M} > {bound} rows (the FP32 balance point)"
    if p.batch > 1:
        return False, f"a batch of {p.batch} GEMMs (the skinny kernel takes one)"
    if p.residual or p.preactivation:
        return False, "its epilogue adds no residual and writes no pre-activation"
    if p.activation == "gelu_erf":
        return False, "its epilogue computes relu, gelu (tanh) and silu, not the exact GELU"
    if p.round_through:
        return False, f"its epilogue does not round through {p.round_through} (a cast epilogue)"
    return True, ""


# ---- 2, 3 --------------------------------------------------------------------------------------
def layout_and_vector(p: GemmProblem) -> tuple[tuple[str, int, bool], list[Step]]:
    """(lanes, vec, row_shift): lanes along N halve the vector until it divides N (a thread's vector is
    its own columns); lanes along K keep the 16-byte vector and, where it does not divide K, read each
    row shifted to the aligned vector before it, the elements outside the row masked (``row_shift``)."""
    lanes = "k" if p.trans_b else "n"
    row = p.K if p.trans_b else p.N
    s1 = note("skinny: lanes along", lanes, "B is stored [N, K] (K contiguous): a warp's lanes read along K, "
              "each warp owns columns of C" if p.trans_b else "B is row-major [K, N] (N contiguous): a warp's lanes "
              "read one row's consecutive columns, the CTA's other threads further rows")
    vec, s2 = formula_step("skinny: vector width", F.vec_max, f"one {TRANSACTION_BYTES}-byte load of B per thread and "
                           f"step ({p.in_bytes}-byte elements)", post=int, transaction_bytes=TRANSACTION_BYTES,
                           elem_bytes=p.in_bytes)
    why = []
    shifted = SHIFTED_ROWS if lanes == "k" else SHIFTED_COLUMNS
    while vec > 1 and ((row % vec and not shifted) or (lanes == "n" and p.M * vec > ACC_VALUES)):
        why.append(f"B's rows of {row} elements are not a multiple of {vec}"
                   + (" (rows read shifted are off: SHIFTED_ROWS)" if lanes == "k" else
                      " (rows read shifted are off: SHIFTED_COLUMNS)") if row % vec else
                   f"{p.M} rows x {vec} columns > {ACC_VALUES} sums a thread")
        vec //= 2
    steps = [s1, s2]
    if why:
        steps.append(note("skinny: vector width (legal)", vec, f"halved {len(why)} time(s); the last because {why[-1]}"))
    row_shift = row % vec != 0
    if row_shift and lanes == "k":
        steps.append(note("skinny: rows shifted", f"{vec}-element vectors", f"K = {row} is not a multiple of {vec}: "
                          f"row n is read as the aligned vectors from n K - (n K mod {vec}), the elements outside it "
                          f"masked ({vec - 1} more at most a row); a warp's rows are congruent mod {vec} (one shift)"))
    elif row_shift:
        steps.append(note("skinny: rows shifted", f"{vec}-element vectors", f"N = {row} is not a multiple of {vec}: "
                          f"row k is read as the two aligned vectors from k N + c - (k N mod {vec}) and a thread's "
                          f"{vec} columns taken out of them by {vec.bit_length() - 1} selects on the shift's bits; a "
                          "thread's rows step by the threads along K (one shift a chunk of K)"))
    return (lanes, vec, row_shift), steps


# ---- 4 -----------------------------------------------------------------------------------------
def threads_step(p: GemmProblem, gpu: GPUModel, lanes: str, vec: int) -> tuple[tuple[int, int, int], list[Step]]:
    """(threads, threads_n, rows)."""
    threads = WARP * WARPS_PER_SCHEDULER * int(gpu.warp_schedulers_per_sm)
    if lanes == "n":
        vectors = cdiv(p.N, vec)
        threads_n = WARP if vectors >= WARP else _pow2ceil(vectors)
        return (threads, threads_n, 1), [note("skinny: threads", f"{threads_n} x {threads // threads_n}",
                                              f"{threads} a CTA ({WARPS_PER_SCHEDULER} warps per scheduler): "
                                              f"{threads_n} along N ({threads_n * vec} columns: "
                                              f"{'a warp reads one row' if threads_n == WARP else 'all of N'}), "
                                              f"{threads // threads_n} along K, their sums met in shared memory")]
    warps = threads // WARP
    need, s1 = formula_step("skinny: rows a warp (shared memory)", F.rows_smem,
                            f"a lane reads {p.M} FP32 values of A per element of B it loads; over `rows` rows of B "
                            "they stay within the SM's shared-memory bytes per byte of its DRAM share",
                            post=lambda v: _pow2ceil(int(v)), dram_bw=gpu.dram_bw, m=p.M, clock_hz=gpu.clock_hz,
                            elem_bytes=p.in_bytes, sm_count=gpu.sm_count,
                            smem_bytes_per_clk_sm=gpu.smem_bytes_per_clk_sm)
    rows = max(1, min(need, _pow2floor(ACC_VALUES // p.M)))
    s2 = note("skinny: threads", f"{warps} warps x {rows} rows", f"{threads} a CTA ({WARPS_PER_SCHEDULER} warps per "
              f"scheduler), each warp {rows} column(s) of C ({p.M} x {rows} sums a lane, at most {ACC_VALUES}), its "
              "lanes along K")
    return (threads, warps, rows), [s1, s2]


# ---- 5, 6 --------------------------------------------------------------------------------------
def m_pad_of(p: GemmProblem, lanes: str) -> int:
    """A's rows in shared memory: lanes along N read a k's M values as vectors (1, 2, or a multiple of 4)."""
    return (p.M if p.M <= 2 else 4 * cdiv(p.M, 4)) if lanes == "n" else p.M


def register_parts(p: GemmProblem, lanes: str, vec: int, rows: int, unroll: int, m_pad: int,
                   shifted: bool = False) -> dict:
    """The FMA loop's registers by use: ``acc`` sums, ``a_regs`` A's values read ahead, ``base``
    addresses and loop state, ``flight_regs`` B's loads in flight (FP32 after conversion).  Fitted to
    ptxas 13.0 on this kernel (sm_90, the trip loop not unrolled; tests/test_skinny.py checks the
    kernels assemble without spills under the cap ``registers`` gives): lanes along N, two rows of A
    read ahead (2 x m_pad) and per unrolled row about 3 more (its address, the tail trip's predicate
    and select); lanes along K, up to A_AHEAD of A's values read ahead and each row's 64-bit pointer.
    A's staging holds its loads where the FMA loop holds A's values (the sums and a chunk's first
    loads of B are live across it): ``stage_loads`` fit ``a_regs``."""
    if lanes == "n":       # rows shifted along N: two vectors a row in flight and the second's address
        flight = unroll * (2 * vec + 2 if shifted else vec)
        return dict(acc=p.M * vec, a_regs=2 * m_pad, base=REG_BASE + 3 * unroll, flight_regs=flight)
    return dict(acc=p.M * rows, a_regs=min(p.M * vec * unroll, A_AHEAD), base=REG_BASE + 2 * rows,
                flight_regs=rows * unroll * vec)


def registers(p: GemmProblem, lanes: str, vec: int, rows: int, unroll: int, m_pad: int, shifted: bool = False) -> int:
    """A thread's registers: the sum of ``register_parts``."""
    return int(F.regs(**register_parts(p, lanes, vec, rows, unroll, m_pad, shifted)))


def occupancy(gpu: GPUModel, threads: int, regs: int, smem: int) -> tuple[int, Step]:
    bps_regs = HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=threads // WARP, regs=regs,
                           reg_alloc_unit=gpu.reg_alloc_unit)
    bps_smem = int(gpu.max_blocks_per_sm) if not smem else int(gpu.smem_per_sm // (smem + gpu.smem_reserved_per_block))
    return formula_step("skinny: CTAs per SM", F.bps, f"threads, registers (~{regs} a thread) and shared memory "
                        f"({smem} B)", post=int, bps_regs=bps_regs, bps_smem=bps_smem,
                        max_blocks_per_sm=gpu.max_blocks_per_sm, max_threads_per_sm=gpu.max_threads_per_sm,
                        threads=threads)


def smem_bytes(p: GemmProblem, lanes: str, threads: int, threads_n: int, vec: int, a_chunk: int, m_pad: int,
               last_cta: int, halo: int = 0) -> int:
    """A's staged chunk (FP32, ``halo`` columns more with shifted rows), (lanes along N, threads stacked
    along K) the partial sums met after the K loop, or ``last_cta`` bytes for the last CTA's sum of a
    split's slices, whichever is largest: they never live at once."""
    staged = 4 * (a_chunk + halo) * m_pad
    met = 4 * threads * p.M * vec if lanes == "n" and threads > threads_n else 0
    return max(staged, met, last_cta)


def loads_in_flight(p: GemmProblem, gpu: GPUModel, lanes: str, vec: int, rows: int, threads: int, threads_n: int,
                    bps: int, shifted: bool = False, deep: bool = False) -> tuple[int, list[Step]]:
    """Step 6: the loads a thread keeps in flight per trip.  Little's law's unroll (enough bytes in flight
    per SM for the DRAM bandwidth), or with ``deep`` the cap (registers, FLIGHT_BYTES_MAX,
    FLIGHT_LOADS_MAX, one trip's K and A's staging): fewer dependent trips where the CTAs are few
    enough that the registers it costs take none of their residency.  ``shifted``: rows read shifted
    along N (two vectors a row in flight)."""
    need, s1 = formula_step("skinny: bytes in flight per SM", F.bytes_in_flight,
                            f"Little's law: DRAM bandwidth x loaded latency ({gpu.mem_latency_ns:.0f} ns) over the "
                            f"{int(gpu.sm_count)} SMs", dram_bw=gpu.dram_bw, mem_latency_ns=gpu.mem_latency_ns,
                            sm_count=gpu.sm_count)
    load = vec * p.in_bytes * (rows if lanes == "k" else 1)
    step = threads // threads_n if lanes == "n" else WARP * vec          # K one unrolled load covers
    staged = step * 4 * (m_pad_of(p, lanes) if lanes == "n" else p.M)    # FP32 bytes of A per unrolled step
    fit = min(int(gpu.max_regs_per_thread), int(gpu.regs_per_sm) // threads)
    m_pad = m_pad_of(p, lanes)
    per_unroll = registers(p, lanes, vec, rows, 1, m_pad, shifted) - registers(p, lanes, vec, rows, 0, m_pad, shifted)
    room = (fit - registers(p, lanes, vec, rows, 0, m_pad, shifted)) // per_unroll
    most = max(1, min(FLIGHT_BYTES_MAX // load, FLIGHT_LOADS_MAX // (rows if lanes == "k" else 1), p.K // step,
                      STAGE_BYTES // staged, room))
    if deep:
        return most, [s1, note("skinny: unroll", most, f"the cap: at most {FLIGHT_BYTES_MAX} B and {FLIGHT_LOADS_MAX} "
                               f"loads a thread, one trip in K = {p.K}, a trip's A in {STAGE_BYTES} B and the "
                               "registers of one CTA (the fewest dependent trips)")]
    unroll, s2 = formula_step("skinny: unroll", F.unroll, f"{bps * threads} resident threads x {load} B "
                              f"({'rows x ' if lanes == 'k' else ''}one vector) per unrolled load; at most "
                              f"{FLIGHT_BYTES_MAX} B and {FLIGHT_LOADS_MAX} loads a thread, one trip in K = {p.K}, a "
                              f"trip's A in {STAGE_BYTES} B "
                              "and the registers of one CTA", post=int, unroll_max=most, bytes_in_flight=need,
                              load_bytes=load, resident=bps * threads)
    return unroll, [s1, s2]


# ---- 7, 8, 9 -----------------------------------------------------------------------------------
def launch_constants(gpu: GPUModel) -> dict:
    """eta_dram and the launch latency: the GEMM calibration's linear stream (``calibration.memory_constants``;
    not the memory-bound families' fit: this kernel competes with the GEMM's predictions)."""
    from nova.hwmodel import calibration
    return calibration.memory_constants(gpu)


def staging_vector(p: GemmProblem, lanes: str, k_slice: int, a_chunk: int, halo: int) -> int:
    """A's elements one staging load reads (``SkinnySchedule.a_vec``): with lanes along K (A staged as
    its rows, ``[M, a_chunk]``: a load's elements land side by side and are stored as shared vectors) a
    16-byte vector along a row of A where A is stored ``[M, K]``, its rows start on vectors (K a
    multiple), every chunk and slice starts and ends on one (``a_chunk``, ``k_slice`` multiples; the last
    ends at K) and no halo is staged; else 1.  Element by element, a load costs its address, bound
    check, select and conversion: Nsight Compute found the K-lane kernels issue-bound on that staging
    (bench/results/h100-2026-12-07/run115-h100).  Never with lanes along N: A is staged transposed there
    (``[a_chunk, m_pad]``), so a vector's elements go ``m_pad`` words apart and a warp's stores of one
    element fall ``a_vec`` times deeper into one bank: on an H100's held-out draw four lanes-along-N
    problems ran 4-39% slower by vectors (6x5760x5120 tf32 48.1 -> 67.0 us replayed), the K-lane ones
    0-7% faster (bench/results/h100-2026-12-07/run117-h100 against run113-h100); stored as shared
    vectors, 4-9% faster along K (run118-h100/probe_time.txt)."""
    v = TRANSACTION_BYTES // p.in_bytes
    if lanes != "k" or p.trans_a or halo or p.batch > 1 or p.K % v or a_chunk % v or k_slice % v:
        return 1
    return v


class Slices(NamedTuple):
    """``slices``' decisions: K's slices, A's chunks and staging rounds, and the dependent trips they make."""
    splits: int
    k_slice: int
    a_chunk: int
    stage_loads: int
    b_first: bool
    trips: int
    a_vec: int
    chunks: int               # A's chunks a slice: each starts at a staging barrier (``t_chunks``)


def slices(p: GemmProblem, lanes: str, span: int, splits: int, m_pad: int, threads: int, regs: int, a_regs: int,
           halo: int = 0) -> Slices:
    """(splits, k_slice, a_chunk, stage_loads, b_first, trips, a_vec) of ``splits`` slices of whole trips
    of ``span``: A staged in equal chunks, ``stage_loads`` elements a thread per round (whole vectors of
    ``a_vec``, ``staging_vector``); a dependent trip per staging round and per trip of B.  Two orders
    (``emit_skinny.chunk``), the one of fewer trips (staged first where level):

    * staged first: a round's loads (a value and its index each) in the registers the FMA loop holds
      but its base, every round a trip;
    * ``b_first``: a chunk's first loads of B issued before its staging, so its first round waits with
      them; the sums and those loads stay live across the staging, whose loads (a value, its index
      and predicate each) fit the ``a_regs`` the FMA loop gives A's values read ahead."""
    k_slice = int(F.k_slice(span=span, K=p.K, splits=splits))
    splits = cdiv(p.K, k_slice)
    chunks = int(F.chunks(k_slice=k_slice, span=span, stage_bytes=STAGE_BYTES, m_pad=m_pad))
    a_chunk = int(F.a_chunk(span=span, k_slice=k_slice, chunks=chunks))
    a_vec = staging_vector(p, lanes, k_slice, a_chunk, halo)
    per_thread = cdiv(p.M * a_chunk // a_vec, threads) * a_vec       # elements, in whole vectors

    def whole(loads: int) -> int:                                    # a round's elements in whole vectors
        return max(a_vec, loads // a_vec * a_vec)
    staged_loads = whole(min(per_thread, max(STAGE_LOADS_MIN, (regs - REG_BASE) // 2)))
    staged_trips = int(F.trips(staging_waits=chunks * cdiv(per_thread, staged_loads), k_slice=k_slice, span=span))
    first_loads = whole(min(per_thread, max(STAGE_LOADS_MIN, a_regs // 3)))
    first_trips = int(F.trips(staging_waits=chunks * (cdiv(per_thread, first_loads) - 1), k_slice=k_slice,
                              span=span))
    if first_trips < staged_trips:
        return Slices(splits, k_slice, a_chunk, first_loads, True, first_trips, a_vec, chunks)
    return Slices(splits, k_slice, a_chunk, staged_loads, False, staged_trips, a_vec, chunks)


def main_bytes(p: GemmProblem, splits: int) -> int:
    """B and A read once, C written (or the FP32 partials), the bias read."""
    out = 4 * splits * p.M * p.N if splits > 1 else p.M * p.N * p.out_bytes
    bias = p.N * (4 if p.dtype == "tf32" else p.out_bytes) if p.bias else 0
    return (p.K * p.N + p.M * p.K) * p.in_bytes + out + bias


def trip_phase(p: GemmProblem, gpu: GPUModel, lanes: str, vec: int, rows: int, columns: int, span: int,
               m_pad: int, d: Derivation | None = None) -> float:
    """A CTA's FMA phase of one trip (us): its ``columns x span`` elements of B, each M FMAs, a conversion
    (16-bit B) and its share of A's shared-memory reads, issued at one warp instruction a clock per
    scheduler (``fp32_lanes_per_sm`` lanes), plus A's shared-memory wavefronts at ``smem_bytes_per_clk_sm``.
    Lanes along K: a lane reads its ``vec`` FP32 values of each row of A in 16-byte loads, shared by the
    warp's ``rows`` columns (4 M / rows bytes an element); lanes along N: a warp reads a k's ``m_pad``
    values as 16-byte broadcasts (one wavefront each), shared by a thread's ``vec`` columns."""
    if lanes == "k":
        lds, smem = F.lds_k(m=p.M, vec=vec, rows=rows), F.smem_k(m=p.M, rows=rows)
    else:
        lds, smem = F.lds_n(m_pad=m_pad, vec=vec), F.smem_n(m_pad=m_pad, vec=vec)
    rec = d if d is not None else Derivation()
    return float(rec.apply("skinny: a trip's FMA phase (us)", F.t_phase,
                           f"a CTA's {columns} columns x {span} of K: {p.M} FMAs, {converts(p)} conversion(s) and "
                           f"{float(lds):.3g} shared load(s) an element of B at one warp instruction a clock a "
                           f"scheduler, and {float(smem):.3g} bytes of A read from shared memory an element",
                           columns=columns, span=span, m=p.M, converts=converts(p), lds=lds, smem=smem,
                           fp32_lanes_per_sm=gpu.fp32_lanes_per_sm, smem_bytes_per_clk_sm=gpu.smem_bytes_per_clk_sm,
                           clock_hz=gpu.clock_hz))


def predict(p: GemmProblem, gpu: GPUModel, splits: int, trips: int, grid: int, bps: int, groups: int,
            threads: int, columns: int, chunks: int, phase_us: float, d: Derivation | None = None
            ) -> tuple[Prediction, dict]:
    """Step 9: max(DRAM, latency, FMA) + launch, the latency with each of a slice's ``chunks`` chunks'
    first FMA phase (``phase_us``, ``trip_phase``) exposed (``t_chunks``); with K split, the last CTA's tail after it (the fence
    of its partials, its ticket, then each thread's loads of its outputs' partials, REDUCE_UNROLL at a
    time: a thread with several outputs loads the partials of all of them): two dependent trips before
    the loads, the ``membar.gl`` draining the CTA's stores and the ``atom.global.add`` of the ticket
    (``emit_skinny.last_adds_slices``; ~1.5 us above the one-trip count on the H100's split kernels,
    bench/results/h100-2026-12-06/run74)."""
    rec = d if d is not None else Derivation()
    c = launch_constants(gpu)
    fma_rate = F.fma_rate(clock_hz=gpu.clock_hz, fp32_lanes_per_sm=gpu.fp32_lanes_per_sm, sm_count=gpu.sm_count)
    nbytes = main_bytes(p, splits)
    t_bw = rec.apply("skinny: DRAM time (us)", F.t_bandwidth, f"B and A read once, "
                     f"{'the FP32 partials' if splits > 1 else 'C'} written; eta_dram {c['eta_dram']:.3f} "
                     f"({c['source']})", bytes=nbytes, dram_bw=gpu.dram_bw, eta_dram=c["eta_dram"])
    ctas = int(F.ctas_sm(blocks_per_sm=bps, grid=grid, sm_count=gpu.sm_count))
    t_lat = rec.apply("skinny: latency time (us)", F.t_chunks, f"{trips} dependent trips a CTA (A's staging rounds and "
                      f"B's trips), over the {grid} CTAs per SM slot; and each of the slice's {chunks} chunk(s) "
                      f"starts with a trip's FMA phase ({phase_us:.3f} us) that no load of the CTA covers: its "
                      f"warps leave the staging barrier together; "
                      + ("no other CTA shares its SM" if ctas == 1 else
                         f"the SM's {ctas - 1} other CTA(s) cover it only while their own phases leave room "
                         f"in the latency"),
                      mem_latency_ns=gpu.mem_latency_ns, trips=trips, grid=grid, blocks_per_sm=bps,
                      sm_count=gpu.sm_count, chunks=chunks, t_phase=phase_us, ctas_sm=ctas)
    t_fma = rec.apply("skinny: FMA time (us)", F.t_fma, "M FMAs (and a conversion for 16-bit B) per element of B",
                      K=p.K, N=p.N, converts=converts(p), m=p.M, fma_rate=fma_rate)
    warps = F.warps_per_scheduler(threads=threads, blocks_per_sm=bps, warp_schedulers_per_sm=gpu.warp_schedulers_per_sm)
    t_exposed = rec.apply("skinny: FMA phase not overlapped (us)", F.t_exposed,
                          f"the FMAs between a trip's loads, covered by the other warps of a scheduler: "
                          f"{threads * bps // 32} warps an SM on {gpu.warp_schedulers_per_sm:g} schedulers",
                          fma_exposed_warps=FMA_EXPOSED_WARPS, t_fma=t_fma, warps_per_scheduler=warps)
    t_main = rec.apply("skinny: kernel time (us)", F.t_kernel, f"launch {c['t_launch_us']:.2f} us",
                       t_launch=c["t_launch_us"], t_bandwidth=t_bw, t_fma=t_fma, t_chunks=t_lat,
                       t_exposed=t_exposed)
    terms = {"dram": t_bw, "latency": t_lat, "fma": t_fma, "fma_exposed": t_exposed, "launch": c["t_launch_us"]}
    total, bound = t_main, max(("dram", t_bw), ("latency", t_lat), ("fma", t_fma), key=lambda kv: kv[1])[0]
    if splits > 1:
        outputs = int(F.tail_outputs(m=p.M, columns=columns, reduce_groups=groups, threads=threads))
        tail = int(F.tail_trips(splits=splits, reduce_groups=groups, reduce_unroll=REDUCE_UNROLL,
                                tail_outputs=outputs))
        t_tail = rec.apply("skinny: last CTA's slices (us)", F.t_latency, f"{tail} dependent trips after the last "
                           f"slice: its fence and ticket, then {groups} group(s) of threads, each thread loading the {splits} "
                           f"partials of its {outputs} output(s) {REDUCE_UNROLL} at a time",
                           mem_latency_ns=gpu.mem_latency_ns, trips=tail, grid=1, blocks_per_sm=1, sm_count=1)
        terms["last_cta"] = t_tail
        total += t_tail
    if c["t_launch_us"] > total / 2:
        bound = "launch"
    floor = 1e6 * p.min_bytes / gpu.dram_bw
    return Prediction(total, p.flops / total / 1e6, bound, floor, terms), c


def reduce_groups(p: GemmProblem, threads: int, columns: int, splits: int) -> int:
    """The last CTA's thread groups: as many as its threads hold for the CTA's M x columns outputs, at
    most one a slice."""
    return int(F.reduce_groups(splits=splits, threads=threads, columns=columns, m=p.M))


def layout_steps(p: GemmProblem, gpu: GPUModel, d: Derivation) -> tuple:
    """Steps 2-4 into ``d``: ``(p, lanes, vec, row_shift, threads, threads_n, rows)``, ``p`` with K the
    loop's extent where rows are shifted along K (the loop runs over K plus the largest shift: the steps
    after these see that K)."""
    lanes, vec, row_shift = d.record(layout_and_vector(p))
    threads, threads_n, rows = d.record(threads_step(p, gpu, lanes, vec))
    halo = shift_halo(lanes, vec, row_shift)
    if halo:
        p = dataclasses.replace(p, K=loop_extent(p.K, vec, halo))
    return p, lanes, vec, row_shift, threads, threads_n, rows


def configure_skinny(p: GemmProblem, gpu: GPUModel, d: Derivation) -> tuple[SkinnySchedule, Prediction] | None:
    """Steps 2-9 (the caller checked step 1, ``applies``): the schedule and its prediction; None when
    not one CTA fits an SM (its shared memory or registers).  Lanes along N: the threads along N of
    step 4, or a half or a quarter of them while they read whole lines of B (LINE_BYTES), whichever
    predicts lowest (fewer columns a CTA: more column blocks, so fewer K slices fill the wave and the
    last CTA of a block adds fewer partials)."""
    p, lanes, vec, row_shift, threads, threads_n, rows = layout_steps(p, gpu, d)
    widths = [threads_n] + ([w for w in (threads_n // 2, threads_n // 4) if w * vec * p.in_bytes >= LINE_BYTES]
                            if lanes == "n" else [])
    derived = {}
    for width, deep in ((w, deep) for w in widths for deep in ((False, True) if lanes in DEEP_UNROLL else (False,))):
        sub = Derivation()
        result = _configure_width(p, gpu, lanes, vec, threads, width, rows, sub, row_shift, deep)
        if result is not None and not (deep and (width, False) in derived
                                       and result[0] == derived[width, False][0][0]):
            derived[width, deep] = (result, sub)
    if not derived:
        return None
    time = {c: derived[c][0][1].time_us for c in derived}
    best = min((c for c in derived if not c[1]), key=time.get, default=None)
    deep = min((c for c in derived if c[1]), key=time.get, default=None)
    if best is None or (deep is not None and time[deep] < (1 - DEEP_UNROLL_MARGIN) * time[best]):
        best = deep
    if len(derived) > 1:
        d.note("skinny: threads along N", f"{best[0]} x {threads // best[0]}, "
               f"u{derived[best][0][0].unroll}", ", ".join(
                   f"{w} ({w * vec} columns a CTA) u{derived[w, deep][0][0].unroll} "
                   f"({'the cap' if deep else 'Little'}) {derived[w, deep][0][1].time_us:.2f} us"
                   for w, deep in derived) + f": the lowest (the cap's only where {DEEP_UNROLL_MARGIN:.0%} lower)")
    d.steps.extend(derived[best][1].steps)
    return derived[best][0]


def priced_label(p: GemmProblem, gpu: GPUModel, label: str) -> tuple[SkinnySchedule, Prediction] | None:
    """The skinny schedule a results row measured (``SkinnySchedule.label``: lanes, vector, threads,
    unroll, splits) derived and priced by today's model: steps 2-4 as ``configure_skinny``, the row's
    threads along N and K slices, the unroll of Little's law or its cap, whichever the label holds
    (the cap is tried for either layout, the threads along N at any width that divides the CTA: a
    schedule an older derivation may have picked).  None where steps 2-4 today give another layout,
    vector or row count, or no unroll gives the label."""
    parts = label.split()
    if len(parts) != 6 or parts[0] != "skinny" or not applies(p, gpu)[0]:
        return None
    p, lanes, vec, row_shift, threads, threads_n, rows = layout_steps(p, gpu, Derivation())
    width, splits = threads_n, parts[5][1:]
    if lanes == "n" and parts[1] == "n":
        width = parts[3].split("x")[0]
        if not width.isdigit() or int(width) == 0:
            return None
        width = int(width)
    shape = f"{width}x{threads // width}" if lanes == "n" else f"w{threads_n}r{rows}"
    if parts[1:4] != [lanes, f"v{vec}", shape] or threads % width or not splits.isdigit():
        return None
    for deep in (False, True):
        result = _configure_width(p, gpu, lanes, vec, threads, width, rows, Derivation(), row_shift, deep,
                                  splits=int(splits))
        if result is not None and result[0].label() == label:
            return result
    return None


def _configure_width(p: GemmProblem, gpu: GPUModel, lanes: str, vec: int, threads: int, threads_n: int, rows: int,
                     d: Derivation, row_shift: bool = False, deep: bool = False, splits: int | None = None
                     ) -> tuple[SkinnySchedule, Prediction] | None:
    """Steps 5-9 for ``threads_n`` threads along N (lanes along K: the warps); ``row_shift``: ``p.K`` is
    the loop's extent, and A's chunks are staged with ``vec`` columns more (lanes along K), or each row
    is read as two vectors (lanes along N); ``deep``: the unroll at its cap (``loads_in_flight``);
    ``splits``: that many K slices instead of step 7's choice (``priced_label``)."""
    m_pad = m_pad_of(p, lanes)
    halo = shift_halo(lanes, vec, row_shift)
    shifted = row_shift and lanes == "n"
    # occupancy and loads in flight together: the unroll from the CTAs resident with one load a thread,
    # then again from those resident with its registers, until the CTAs per SM no longer drop (a few
    # rounds: each round can only lower them)
    staged = (STAGE_BYTES if p.K * m_pad * 4 > STAGE_BYTES else p.K * m_pad * 4) + 4 * halo * m_pad
    smem0 = max(staged, 4 * threads * p.M * vec if lanes == "n" and threads > threads_n else 0)

    def resident(unroll: int) -> int:
        return int(F.bps(bps_regs=HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=threads // WARP,
                                              regs=registers(p, lanes, vec, rows, unroll, m_pad, shifted),
                                              reg_alloc_unit=gpu.reg_alloc_unit),
                         bps_smem=int(gpu.smem_per_sm // (smem0 + gpu.smem_reserved_per_block)),
                         max_blocks_per_sm=gpu.max_blocks_per_sm, max_threads_per_sm=gpu.max_threads_per_sm,
                         threads=threads))
    bps0 = max(1, resident(1))
    while True:
        unroll, steps = loads_in_flight(p, gpu, lanes, vec, rows, threads, threads_n, bps0, shifted, deep)
        bps1 = max(1, resident(unroll))
        if bps1 >= bps0:
            break
        bps0 = bps1
    d.steps.extend(steps)
    parts = register_parts(p, lanes, vec, rows, unroll, m_pad, shifted)
    regs = int(F.regs(**parts))
    span = (threads // threads_n) * unroll if lanes == "n" else WARP * vec * unroll
    columns = threads_n * (vec if lanes == "n" else rows)
    phase = trip_phase(p, gpu, lanes, vec, rows, columns, span, m_pad, d)
    blocks_n = d.apply("skinny: CTAs along N", F.blocks_n, f"{columns} columns of C a CTA", post=int, N=p.N,
                       columns=columns)
    # K split: one wave of CTAs, or one slice when the last CTA's sum of the slices costs more than it saves
    one = slices(p, lanes, span, 1, m_pad, threads, regs, parts["a_regs"], halo)
    most_last = 4 * (FLAG_WORDS + threads)          # the last CTA's sums of a split: at most one word a thread
    bps = d.record(occupancy(gpu, threads, regs, smem_bytes(p, lanes, threads, threads_n, vec, one.a_chunk, m_pad,
                                                            most_last, halo)))
    if bps < 1:
        return None
    wave, s_wave = formula_step("skinny: K splits (one wave)", F.splits,
                                f"CTAs along N x splits fill the {int(gpu.sm_count)} SMs x {bps} CTAs; a slice at "
                                f"least one trip of {span}; at most {SPLITS_MAX}", post=int, splits_max=SPLITS_MAX,
                                blocks_per_sm=bps, sm_count=gpu.sm_count, blocks_n=blocks_n, K=p.K, span=span)
    d.steps.append(s_wave)
    choice = one
    if splits is not None:
        choice = slices(p, lanes, span, splits, m_pad, threads, regs, parts["a_regs"], halo)
    elif wave > 1:
        # one wave of slices; or as many as the last CTA adds in one run of loads (its groups x
        # REDUCE_UNROLL, over a thread's outputs); or one slice: the lowest prediction of the three
        bal = int(F.splits_tail(wave=wave, threads=threads, columns=columns, m=p.M, reduce_unroll=REDUCE_UNROLL))
        times = {}
        for n_splits in dict.fromkeys((wave, bal, 1)):
            cand = slices(p, lanes, span, n_splits, m_pad, threads, regs, parts["a_regs"], halo)
            groups = reduce_groups(p, threads, columns, cand.splits) if cand.splits > 1 else 1
            times[n_splits] = (predict(p, gpu, cand.splits, cand.trips, blocks_n * cand.splits, bps, groups, threads,
                                       columns, cand.chunks, phase)[0].time_us, cand)
        best = min(times, key=lambda k: times[k][0])
        choice = times[best][1]
        d.note("skinny: K split", choice.splits, ", ".join(f"{times[k][1].splits} slice(s) {times[k][0]:.2f} us"
                                                          for k in times)
               + " (with the last CTA's sum of the slices): the lowest")
    splits, k_slice, a_chunk, stage_loads, b_first, trips, a_vec, chunks = choice
    d.note("skinny: slices", f"{splits} x {k_slice}", f"K = {p.K} in slices of whole trips of {span}; A staged "
           f"{a_chunk} columns at a time ({4 * a_chunk * m_pad} B of FP32, at most {STAGE_BYTES}), {stage_loads} "
           f"element(s) a thread per round" + (f" in vectors of {a_vec}" if a_vec > 1 else "") + ("; a chunk's first loads of B before its staging" if b_first else "")
           + f"; {trips} trips a CTA")
    groups = reduce_groups(p, threads, columns, splits) if splits > 1 else 1
    cap = min(int(gpu.max_regs_per_thread), int(gpu.regs_per_sm) // (threads * bps) // 8 * 8)
    schedule = SkinnySchedule(arch=gpu.arch, lanes_along=lanes, vec=vec, threads=threads, threads_n=threads_n,
                              rows=rows, unroll=unroll, splits=splits, k_slice=k_slice, a_chunk=a_chunk,
                              stage_loads=stage_loads, b_first=b_first, a_vec=a_vec, m_pad=m_pad, smem_bytes=0, regs_per_thread=regs, max_regs=cap,
                              blocks_per_sm=bps, reduce_groups=groups, row_shift=row_shift)
    smem = smem_bytes(p, lanes, threads, threads_n, vec, a_chunk, m_pad, schedule.reduction_smem_bytes(p.M), halo)
    schedule = dataclasses.replace(schedule, smem_bytes=smem)
    prediction, _ = predict(p, gpu, splits, trips, blocks_n * splits, bps, groups, threads, columns, chunks,
                            phase, d)
    return schedule, prediction


def choose_kernel(p: GemmProblem, gpu: GPUModel, tiles: tuple, d: Derivation, forced: bool = False) -> tuple:
    """The one rule between the skinny kernel and the tensor-core tiles (``tiles``: their schedule and
    prediction): the lower prediction, recorded with both; the tiles where the skinny kernel does
    not apply (step 1; nothing recorded for M above the bound, the common case).  ``forced``: the
    skinny kernel, or a ``ValueError`` naming why it does not apply."""
    bound, steps = m_max(p, gpu)
    ok, why = applies(p, gpu)
    if not ok:
        if forced:
            raise ValueError(f"the skinny kernel does not apply to {p.describe()} on {gpu.name}: {why}")
        if p.M <= bound:
            d.steps.extend(steps)
            d.note("kernel", "tiles", f"the skinny kernel does not apply: {why}")
        return tiles
    d.steps.extend(steps)
    derived = configure_skinny(p, gpu, d)
    if derived is None:
        if forced:
            raise ValueError(f"the skinny kernel does not fit {gpu.name} for {p.describe()}: not one CTA per SM")
        d.note("kernel", "tiles", "the skinny kernel does not fit: not one CTA per SM")
        return tiles
    schedule, prediction = derived
    t_tiles = tiles[1].time_us
    if forced or prediction.time_us < t_tiles:
        d.note("kernel", "skinny", f"skinny {prediction.time_us:.2f} us vs tensor-core tiles {t_tiles:.2f} us: "
               + ("forced" if forced else "the lower prediction"))
        return schedule, prediction
    d.note("kernel", "tiles", f"tensor-core tiles {t_tiles:.2f} us vs skinny {prediction.time_us:.2f} us: the lower "
           "prediction")
    return tiles
