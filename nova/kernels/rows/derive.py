"""The Analytic Configurator for rows kernels: one function per numbered step, each returning its value
and the ``Step`` (formula with this GPU's numbers, value, reason) that ``nova-config explain`` prints.
Closed form: no search, no measurement.

 1. vector width      16-byte accesses, narrowed to what every operand's row length, stride and base allow
 2. threads per row   lanes until each holds one vector; a warp per row up to LANE_VECTORS vectors a lane
                      (fewer where a norm backward's column sums, vec x gradients a vector, would pass
                      ACC_VALUES: more lanes then keep them in the row pass); beyond, a CTA per row of as
                      many warps as that needs (at most a CTA's 1024 threads)
 3. rows per CTA      CTAs of 4 warps (one per scheduler) for short rows; one row per CTA for long ones
 4. passes            the row held in registers (read once) when the values a thread keeps fit the
                      registers of MIN_RESIDENT CTAs an SM (a lone CTA runs its loads, reductions,
                      exponentials and stores back to back), else walked once per pass (the re-reads hit
                      L2 when the rows in flight fit it); online max-sum for softmax and cross-entropy
                      (one pass for both)
 5. occupancy, grid   CTAs per SM from threads, registers and shared memory; the grid and its waves
 6. column sums      the norms' weight/bias gradients summed in the row kernel's own pass when their
                      per-thread accumulators (chunks x vec x gradients) fit next to the kept row: the row
                      kernel's grid becomes one wave of resident CTAs, each walking every partials-th
                      row group and writing one partial row per gradient; ``partials_final`` adds each
                      column's partials in CTA order (dy and x read once, no float atomics).  Otherwise
                      (and for sums over rows of other kernels' values: bias gradients of GEMMs) the
                      column stage: threads along the columns, a deterministic two-stage sum (per-split
                      partials in a workspace, then each column's partials in order; the split fills one
                      wave of CTAs)
    early loads       row operands only the writing sweep reads (a norm backward's residual gradient) loaded
                      with the row's first sweep when the row is in registers and they fit the registers of
                      MIN_RESIDENT CTAs an SM (a resident CTA fewer is the cheaper side)
 7. split             a row reduction whose rows fill less than one wave of CTAs (one CTA per row: few long
                      rows, a parameter's sum of squares) splits each row over ``splits`` CTAs, enough for
                      one wave, each thread still walking at least MIN_SPLIT_CHUNKS vectors; each CTA writes
                      its part's reduction to a workspace slot and ``row_final`` adds a row's parts in
                      split order (one warp a row: deterministic, no float atomics)
 8. prediction        per kernel: the largest of DRAM bytes / (DRAM bandwidth x eta), every byte through L2
                      (DRAM bytes and L2 re-reads) / L2 bandwidth and the busiest SM's bytes at one SM's
                      streaming rate, plus the launch (a pass re-reading rows from L2 overlaps the other
                      SMs' DRAM streams: the fused cross-entropy kernel moves 2.15 GB of DRAM traffic and
                      re-reads 1.07 GB from L2 in 538 us, 3.99 TB/s, bench/results/h200-2026-12-04/run29);
                      one SM streams at most its share of the L2 bandwidth (the rate measured with every
                      SM loading), so a kernel of few CTAs (one long row, a one-CTA loss sum) is predicted
                      by its CTAs' bytes, not by the whole GPU's bandwidth
"""
from __future__ import annotations

import math
import time

from nova.configurator.derivation import Derivation, formula_step, note
from nova.configurator.step import Prediction
from nova.hwmodel import GPUModel, get_target
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import F as HW
from nova.kernels.rows.abi import LOSS_ROLES
from nova.kernels.rows.kinds import column_problem
from nova.kernels.rows.operands import LOSSES
from nova.kernels.rows.problem import RowsProblem
from nova.kernels.rows.schedule import ColumnTile, PartialsTile, RowsConfig, RowsSchedule, RowTile

TRANSACTION_BYTES = 16       # [CC] the widest global load/store a thread issues (ld.global.v4.b32: 16 bytes)
LANE_VECTORS = 8             # [EST] vectors a lane keeps before another warp joins the row: 8 x 16 B = 32 f32
                             # registers per operand, 128 bytes in flight per lane per pass
REG_VALUES = 64              # [EST] f32 values a thread may keep for the whole row (one-pass budget): with the
                             # ~40 registers of addresses and statistics the kernel stays under 128 registers,
                             # two 1024-thread CTAs or sixteen 128-thread CTAs per SM (ptxas checks: no spills)
REG_OVERHEAD = 40            # [EST] registers besides the kept values: indices, statistics, loop state
REG_PER_CHUNK = 4            # [FIT] and this many more per vector step past OVERHEAD_CHUNKS: ptxas kept a 1024-wide
OVERHEAD_CHUNKS = 4          # norm backward (8 steps) at 64-88 beside its values, and spilled 84-256 B when held to
                             # 40 by the register cap of its planned residency (16384 x 512: 57-64, 0 B at the cap)
LOOP_VECTOR_REGS = 4         # [CC] a 16-byte vector load: four 32-bit registers (per row input of a looped row)
LOOP_INPUTS_IN_OVERHEAD = 3  # [FIT] row inputs a looped row's REG_OVERHEAD already holds (ptxas, sm_90, cap 40)
LOOP_FUSED_LOSS_REGS = 24    # [FIT] more for the f32 fused loss's looped row: its second pass (exponential, label
                             # compare, dlogits stored beside the loads) unrolled over 8 ragged vector steps
                             # spilled 16-36 B at 40-56 registers, none at 64 (vocabularies 12000-30000; ptxas
                             # sm_80 and sm_90)
MIN_RESIDENT = 2             # [EST] CTAs an SM that the row kept in registers (and the loads and sums kept with it)
                             # must leave room for
MIN_ROWS_PER_THREAD = 16     # [EST] column stage: rows a thread adds at least per split (amortises its partial)
MAX_COLUMN_UNROLL = 8        # [EST] rows a column-stage thread loads before adding (registers: unroll x vec words
                             # per row operand, at most 32; 8 rows run as fast as 4:
                             # bench/results/h200-2026-12-04/run30)
COLUMN_THREADS = 256         # [EST] column-stage CTA: 8 warps, two per scheduler
TOTAL_THREADS = 256          # [EST] the single-CTA loss kernels: 8 warps stream the [rows] vectors once
ACC_VALUES = 64              # [EST] f32 column sums a thread may keep across its rows (as REG_VALUES: with the
                             # kept row and the overhead a 128-thread CTA stays under 255 registers, no spills)
FINAL_THREADS = 512          # [EST] partials_final: threads a CTA (columns x partials), 128 registers each
FINAL_PARTIALS_PER_THREAD = 16   # [EST] partials a partials_final thread adds at most where the CTA has room
FINAL_MIN_LANES = 8          # [EST] final sums: lanes along the columns at least (8 x 16 B: whole 128-byte lines)
FINAL_UNROLL = 8             # [EST] final sums: partials a thread loads before adding them (loads in flight)
MIN_SPLIT_CHUNKS = 8         # [EST] vector steps a thread walks at least in one split of a row (LANE_VECTORS: what
                             # an unsplit CTA-per-row thread keeps); fewer would spend the split's CTAs on launch and
                             # the row_final read rather than on streaming
FINAL_ROW_THREADS = 128      # [EST] row_final: 4 warps a CTA, one warp per split row
# passes over the row when it is not kept in registers (step 4), and the row operands a thread keeps
PASSES = {"layer_norm": 3, "layer_norm_backward": 2, "rms_norm": 2, "rms_norm_backward": 2, "softmax": 2,
          "log_softmax": 2, "softmax_backward": 2, "log_softmax_backward": 2, "cross_entropy": 1,
          "cross_entropy_backward": 1, "cross_entropy_forward_backward": 2, "row_reduce": 1}
HELD = {"layer_norm": ("x",), "layer_norm_backward": ("dy", "x"), "rms_norm": ("x",),
        "rms_norm_backward": ("dy", "x"), "softmax": ("x",), "log_softmax": ("x",),
        "softmax_backward": ("dy", "y"), "log_softmax_backward": ("dy", "y"), "cross_entropy": ("logits",),
        "cross_entropy_backward": ("logits",), "cross_entropy_forward_backward": ("logits",)}
# row operands that only the final (writing) sweep reads: a norm backward's residual gradient (dx + residual)
LATE = {"layer_norm_backward": ("residual",), "rms_norm_backward": ("residual",), "log_softmax_backward": ("y",)}



def reg_overhead(p: RowsProblem, chunks: int, vec: int, in_registers: bool = True) -> int:
    """Registers a row-kernel thread needs besides the values it keeps and the column sums: REG_OVERHEAD; a
    looped row, LOOP_VECTOR_REGS more per row input past LOOP_INPUTS_IN_OVERHEAD (held to 40, the norm
    backwards reading dy in three parts, 4-5 row inputs, spilled 8-12 B on sm_90; 1-3 inputs assemble at
    40 with none) and LOOP_FUSED_LOSS_REGS more for the f32 fused loss; with the row unrolled in
    registers, REG_PER_CHUNK more for every vector step past OVERHEAD_CHUNKS (each step's addresses and
    predicates), and chunks x vec more for a 16-bit row written beside the kept f32 values: a norm
    backward's copy of dx (``dx_cast``, rounded beside the f32 dx it writes and sums; sm_80 spilled 16 B
    at 128 registers without them) and the fused loss's 16-bit dlogits (ptxas took 168 where 120 were
    counted: 16 B spilled at 128, 228 B at 136 for 160-thread CTAs, sm_90).  A looped row's steps are one
    loop body."""
    dlogits = p.operand("dlogits").elem_bytes if p.kind == "cross_entropy_forward_backward" else None
    if not in_registers:                # a loop trip keeps a 16-byte vector of every row input in flight
        inputs = sum(1 for o in p.inputs if o.layout == "row")
        return (REG_OVERHEAD + LOOP_VECTOR_REGS * max(0, inputs - LOOP_INPUTS_IN_OVERHEAD)
                + (LOOP_FUSED_LOSS_REGS if dlogits == 4 else 0))
    narrow = p.has("dx_cast") or dlogits == 2
    return REG_OVERHEAD + REG_PER_CHUNK * max(0, chunks - OVERHEAD_CHUNKS) + (chunks * vec if narrow else 0)


def regs_per_thread(threads: int, gpu: GPUModel, ctas: int = 1) -> int:
    """The registers a thread may take so that ``ctas`` CTAs of ``threads`` fit the register file, in
    the allocation unit's steps (a warp's registers come in units of ``reg_alloc_unit``)."""
    step = int(gpu.reg_alloc_unit) // 32
    return min(int(gpu.max_regs_per_thread), int(gpu.regs_per_sm) // (threads * ctas) // step * step)


def held(p: RowsProblem) -> tuple[str, ...]:
    """The row operands a thread keeps to read the row once: the kind's (``HELD``), with dy's parts
    beside dy where the gradient arrives in parts (each loaded and kept in its own type)."""
    names = HELD.get(p.kind, ())
    if "dy" in names:
        at = names.index("dy") + 1
        names = names[:at] + tuple(n for n in ("dy_1", "dy_2") if p.has(n)) + names[at:]
    return names


F = formulas("""
    vec_max = transaction_bytes / elem_bytes
    slots = ceil(n / vec)
    warps_per_row = Min(max_warps, ceil(slots / (32 * lane_vectors)))
    chunks = ceil(slots / threads_per_row)
    kept = chunks * vec * held
    cta_threads = Max(32 * schedulers, max_threads_per_sm / max_blocks_per_sm)
    bps = Min(max_blocks_per_sm, floor(max_threads_per_sm / threads), bps_regs, bps_smem)
    grid = ceil(rows / rows_per_cta)
    waves = grid / (sm_count * blocks_per_sm)
    working_set = sm_count * blocks_per_sm * rows_per_cta * row_bytes
    col_blocks = ceil(n / (threads_cols * vec))
    splits = Max(1, Min(ceil(sm_count * blocks_per_sm / col_blocks), floor(rows / (threads_rows * min_rows))))
    accumulators = chunks * vec * gradients
    partials = Min(row_groups, sm_count * blocks_per_sm)
    groups_per_cta = ceil(row_groups / partials)
    final_threads_rows = Min(max_threads / threads_cols, ceil(partials / per_thread))
    partial_bytes = 4 * gradients * partials * n
    row_splits = Max(1, Min(ceil(sm_count * blocks_per_sm / row_groups), floor(chunks / min_chunks)))
    sm_bw = l2_bw / sm_count
    busiest_sm_bytes = ceil(ctas / sm_count) * (dram_bytes + l2_reread_bytes) / ctas
    t_kernel = Max(dram_bytes / (dram_bw * eta_dram), (dram_bytes + l2_reread_bytes) / l2_bw, \
                   busiest_sm_bytes / sm_bw) + t_launch
""")


def loads_per_trip(iters: int, most: int) -> int:
    """The largest power of two at most ``most`` that divides ``iters``: the loads a loop trip issues
    before adding them (the column stage's rows, the final sums' partials), no remainder trip."""
    unroll = 1
    while unroll * 2 <= most and iters % (unroll * 2) == 0:
        unroll *= 2
    return unroll


def _pow2ceil(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


def memory_constants(gpu: GPUModel) -> dict:
    """eta_dram and the launch latency of the memory-bound families (``calibration.memory_constants``)."""
    from nova.hwmodel import calibration
    return calibration.memory_constants(gpu, streaming=True)


# ---- 1 -----------------------------------------------------------------------------------------
def step1_vector(p: RowsProblem, operands) -> tuple[int, list]:
    """vec = 16 / elem_bytes of the widest element, halved while some operand's row length, row stride
    or base address is not a multiple of it ([CC]: a vector access must be aligned to its size)."""
    widest = max((o.elem_bytes for o in operands or p.operands))      # no streamed operand: a constant's rows
    vec, steps = F.vec_max(transaction_bytes=TRANSACTION_BYTES, elem_bytes=widest), []
    value, step = formula_step("vector width", F.vec_max, "one 16-byte access per thread and step "
                               f"({TRANSACTION_BYTES} B transactions, {widest}-byte elements)",
                               post=int, transaction_bytes=TRANSACTION_BYTES, elem_bytes=widest)
    steps.append(step)
    vec = value
    limits = []
    while vec > 1:
        bad = [o.name for o in operands if p.n % vec or (o.layout == "row" and o.stride % vec)
               or o.align % (vec * o.elem_bytes)]
        if not bad:
            break
        limits.append(f"{vec}: {', '.join(bad)}")
        vec //= 2
    if limits:
        steps.append(note("vector width (alignment)", vec, f"row length {p.n}, row strides or base addresses are not "
                          f"multiples of the wider vectors ({'; '.join(limits)})"))
    return vec, steps


# ---- 2, 3 --------------------------------------------------------------------------------------
def lane_vectors(p: RowsProblem, vec: int) -> int:
    """Vectors a lane keeps: LANE_VECTORS, fewer where the kept operands would pass REG_VALUES or a
    norm backward's column sums (one per gradient and column the lane touches) would pass ACC_VALUES:
    more lanes share the row, so the sums stay in the row pass (step 6)."""
    held_values = len(held(p)) if PASSES.get(p.kind, 1) > 1 else 0
    lanes = max(1, min(LANE_VECTORS, REG_VALUES // (vec * held_values))) if held_values else LANE_VECTORS
    grads = summed_gradients(p)
    return max(1, min(lanes, ACC_VALUES // (vec * grads))) if grads else lanes


def step2_threads_per_row(p: RowsProblem, vec: int, gpu: GPUModel) -> tuple[int, list]:
    slots, s1 = formula_step("vectors per row", F.slots, "the row in vector steps", n=p.n, vec=vec)
    lanes = lane_vectors(p, vec)
    if slots <= 32 * lanes:
        tpr = min(32, _pow2ceil(slots))
        why = (f"{slots} vectors: a warp per row" if tpr == 32 else
               f"{slots} vectors: {tpr} lanes of a warp per row, one vector each ({32 // tpr} rows per warp)")
        return tpr, [s1, note("threads per row", tpr, why + f" (at most {lanes} vectors a lane; warp "
                                                              "shuffles reduce the row)")]
    max_warps = int(gpu.max_threads_per_block) // 32
    warps, s2 = formula_step("warps per row", F.warps_per_row, f"more than {32 * lanes} vectors: a CTA per row, "
                             f"warps until a lane keeps at most {lanes} vectors (at most {max_warps} warps; "
                             f"{LANE_VECTORS}, or fewer where the kept values would pass {REG_VALUES} registers); "
                             "warp shuffles, then shared memory, reduce the row",
                             post=int, max_warps=max_warps, slots=slots, lane_vectors=lanes)
    return 32 * warps, [s1, s2]


def step3_rows_per_cta(p: RowsProblem, tpr: int, gpu: GPUModel) -> tuple[tuple[int, int], list]:
    if tpr > 32:
        return (tpr, 1), [note("rows per CTA", 1, f"a CTA of {tpr} threads per row")]
    threads, st = formula_step("CTA threads", F.cta_threads, "a warp per scheduler, and enough threads that the "
                               "SM's CTA limit does not cap its threads", post=int,
                               schedulers=gpu.warp_schedulers_per_sm, max_threads_per_sm=gpu.max_threads_per_sm,
                               max_blocks_per_sm=gpu.max_blocks_per_sm)
    threads = max(32, min(threads, tpr * _pow2ceil(p.rows)))        # few rows: a smaller CTA, at least a warp
    return (threads, threads // tpr), [st, note("rows per CTA", threads // tpr,
                                                f"{threads} threads / {tpr} threads per row")]


# ---- 4 -----------------------------------------------------------------------------------------
def summed_gradients(p: RowsProblem) -> int:
    """Weight/bias gradients a norm backward sums over its rows (0: none, or not a norm backward)."""
    if p.kind not in ("layer_norm_backward", "rms_norm_backward"):
        return 0
    return sum(1 for o in p.outputs if o.layout == "col")


def step4_passes(p: RowsProblem, vec: int, tpr: int, threads: int, gpu: GPUModel,
                 min_resident: int = MIN_RESIDENT) -> tuple[tuple[int, bool], list]:
    """The row kept in registers (one read) when the values a thread keeps fit beside its overhead in the
    registers of ``min_resident`` CTAs an SM; else ``PASSES`` passes, each re-reading the row."""
    chunks, s1 = formula_step("chunks", F.chunks, "vector steps a thread takes along its row", post=int,
                              slots=math.ceil(p.n / vec), threads_per_row=tpr)
    passes = PASSES.get(p.kind, 1)
    if passes == 1:
        return (chunks, False), [s1, note("passes", 1, "one pass streams the row (nothing is read twice)")]
    kept, s2 = formula_step("kept values", F.kept, f"f32 values a thread keeps to read the row once "
                            f"({', '.join(held(p))})", post=int, chunks=chunks, vec=vec, held=len(held(p)))
    per_thread = regs_per_thread(threads, gpu, min_resident)
    overhead = reg_overhead(p, chunks, vec)
    budget = min(REG_VALUES, per_thread - overhead)           # min_resident CTAs must fit the register file
    acc = fused_accumulators(p, chunks, vec)
    if acc and kept + acc <= per_thread - overhead:
        budget = min(REG_VALUES, per_thread - overhead - acc)
    if kept <= budget:
        return (chunks, True), [s1, s2, note("passes", "registers", f"{kept} <= {budget} values (at most {REG_VALUES}, "
                                             f"and {per_thread} registers a thread for {_ctas(min_resident)}of "
                                             f"{threads} threads less {overhead}): the row is read once and kept in "
                                             f"registers for the {passes} passes")]
    return (chunks, False), [s1, s2, note("passes", passes, f"{kept} > {budget} values ({per_thread} registers a "
                                          f"thread for {_ctas(min_resident)}of {threads} threads less {overhead}): "
                                          f"{passes} passes each re-read the row" +
                                          (" (max and sum together: online softmax)"
                                           if p.kind in ("softmax", "log_softmax") else ""))]


def _ctas(n: int) -> str:
    """'a CTA ' or 'N CTAs an SM ' (the residency a register budget is for, in the derivation's words)."""
    return "a CTA " if n == 1 else f"{n} CTAs an SM "


def fused_accumulators(p: RowsProblem, chunks: int, vec: int) -> int:
    """f32 column sums a row-kernel thread keeps when the weight/bias gradients are summed in its pass
    (0 when they are not: no gradients, or more than ACC_VALUES)."""
    grads = summed_gradients(p)
    acc = chunks * vec * grads
    return acc if grads and acc <= ACC_VALUES else 0


def step6_fused_sums(p: RowsProblem, chunks: int, vec: int, in_registers: bool, threads: int,
                     gpu: GPUModel, min_resident: int = MIN_RESIDENT) -> tuple[int, list]:
    """The per-thread accumulators of the weight/bias gradients when the row kernel sums them in its pass
    (0: the column stage sums them).  They must fit next to the row kept in registers: the fused sum
    needs the row read once (a looped row would keep chunks x vec x gradients sums per thread)."""
    grads = summed_gradients(p)
    if not grads:
        return 0, []
    acc, st = formula_step("column sums a thread keeps", F.accumulators,
                           f"dy * xhat{' and dy' if grads > 1 else ''} per column the thread touches, kept across "
                           "its rows", post=int, chunks=chunks, vec=vec, gradients=grads)
    per_thread = regs_per_thread(threads, gpu, min_resident)
    kept = chunks * vec * len(held(p)) if in_registers else 0
    overhead = reg_overhead(p, chunks, vec, in_registers)
    fits = kept + acc + overhead <= per_thread
    if in_registers and acc <= ACC_VALUES and fits:
        return acc, [st, note("weight/bias gradients", "row pass",
                              f"{acc} <= {ACC_VALUES} sums and the row in registers: summed while the row kernel "
                              "reads dy and x (read once), one partial row per CTA")]
    why = (f"{acc} > {ACC_VALUES} sums a thread" if acc > ACC_VALUES else "the row is not kept in registers"
           if not in_registers else f"{kept} kept + {acc} sums + {overhead} > {per_thread} registers a thread")
    return 0, [st, note("weight/bias gradients", "column stage", f"{why}: a separate column sum re-reads dy and x")]


def step6_partials(p: RowsProblem, rows_per_cta: int, bps: int, gpu: GPUModel) -> tuple[tuple[int, int], list]:
    """partials = min(row groups, SMs x resident CTAs): one wave of CTAs that each walk every
    partials-th row group (the fewest partial rows that keep every SM's CTA slots busy)."""
    groups = math.ceil(p.rows / rows_per_cta)
    partials, s1 = formula_step("partials", F.partials, "one wave of resident CTAs, each walking every partials-th "
                                "row group and adding its columns in registers (fixed order: deterministic)",
                                post=int, row_groups=groups, sm_count=gpu.sm_count, blocks_per_sm=bps)
    per_cta, s2 = formula_step("row groups a CTA", F.groups_per_cta, f"{rows_per_cta} rows a group", post=int,
                               row_groups=groups, partials=partials)
    return (partials, per_cta), [s1, s2]


def final_sum_tile(p: RowsProblem, partials: int, d: Derivation, gpu: GPUModel) -> tuple[int, int, int, int, int]:
    """(vec, threads along the columns, threads along the partials, grid, unroll) of a kernel adding
    ``partials`` partial rows of ``p``'s column outputs (``partials_final``, ``column_final``): lanes along
    the columns (up to a warp's 32, vec f32 each: coalesced), threads along the partials until each adds
    at most FINAL_PARTIALS_PER_THREAD (at most FINAL_THREADS a CTA: where that caps them, fewer lanes along
    the columns, down to FINAL_MIN_LANES, make room for more partial threads and more CTAs), met in shared
    memory in order; one CTA per column block; a thread loads ``unroll`` partials before adding them.
    The vector width: 4, 2 or 1 f32 as the row length and the outputs' base addresses allow, the widest
    whose column blocks give as many CTAs as any narrower one, up to one per SM: the partials were just
    written and are read from L2, each SM at its share of the L2 bandwidth, so the busiest SM's bytes set
    the time (LayerNorm's backward at 16384 x 512: 528 partial rows, 16 CTAs of 16-byte lanes read them
    in 2.49 us, 64 CTAs of 4-byte lanes in 1.96, bench/results/h200-2026-12-04/run40)."""
    outs = [o for o in p.outputs if o.layout == "col"]
    widths = [v for v in (4, 2, 1) if p.n % v == 0 and all(o.align % (v * o.elem_bytes) == 0 for o in outs)]
    wanted = _pow2ceil(math.ceil(partials / FINAL_PARTIALS_PER_THREAD))

    def lanes(vec: int) -> int:
        tc = min(32, _pow2ceil(math.ceil(p.n / vec)))
        while tc > FINAL_MIN_LANES and tc * wanted > FINAL_THREADS:
            tc //= 2
        return tc

    def ctas(vec: int) -> int:
        return min(gpu.sm_count, math.ceil(p.n / (lanes(vec) * vec)))
    vec = next(v for v in widths if ctas(v) == max(ctas(w) for w in widths))
    tc = lanes(vec)
    if vec < widths[0]:
        d.note("final vector width", vec, f"{vec} f32 a lane: {math.ceil(p.n / (tc * vec))} column blocks where "
               f"{widths[0]} f32 give {math.ceil(p.n / (lanes(widths[0]) * widths[0]))} (the partials are read from "
               f"L2, each SM at its share of the L2 bandwidth: more CTAs, more SMs reading; at most one per SM)")
    tr = d.apply("final threads along the partials", F.final_threads_rows,
                 f"{tc} lanes along the columns ({vec} f32 each); at most {FINAL_PARTIALS_PER_THREAD} partials a "
                 f"thread, at most {FINAL_THREADS} threads a CTA; rounded up to a power of two",
                 post=lambda v: _pow2ceil(int(v)), max_threads=FINAL_THREADS,
                 threads_cols=tc, partials=partials, per_thread=FINAL_PARTIALS_PER_THREAD)
    tr = max(1, tr)
    grid = math.ceil(p.n / (tc * vec))
    iters = math.ceil(partials / tr)
    unroll = loads_per_trip(iters, FINAL_UNROLL)
    d.note("final grid", grid, f"one CTA per {tc * vec} columns; {tc} x {tr} threads, the {tr} sums of a column "
           f"added in order through shared memory; {unroll} of a thread's {iters} partials loaded before adding")
    return vec, tc, tr, grid, unroll


def partials_tile(p: RowsProblem, partials: int, per_cta: int, d: Derivation, gpu: GPUModel) -> PartialsTile:
    """partials_final (``final_sum_tile``) of the norms' weight/bias gradients."""
    vec, tc, tr, grid, unroll = final_sum_tile(p, partials, d, gpu)
    return PartialsTile(partials, per_cta, summed_gradients(p), vec, tc, tr, grid, unroll)


def step6_early_loads(p: RowsProblem, chunks: int, vec: int, in_registers: bool, acc: int, threads: int,
                      gpu: GPUModel, min_resident: int = MIN_RESIDENT) -> tuple[tuple[str, ...], list]:
    """Row operands only the writing sweep reads (``LATE``: a norm backward's residual gradient) are
    loaded with the row's first sweep when the row is kept in registers and the values they add
    (chunks x vec each, ``held`` ones already counted) fit the registers of ``min_resident`` CTAs an
    SM: their DRAM latency then overlaps the row's own loads instead of following its reductions, and
    that is worth a resident CTA.  Loaded in the writing sweep, the residual is a second round trip per
    row group: on the H100 at 16384 x 512 f32, LayerNorm's backward with the residual and the dx sum ran
    53.98 us late at 4 CTAs an SM and 49.15 early at 3; RMSNorm's with the residual 51.92 late at 5 and
    47.94 early at 4 (bench/results/h100-2026-12-05/run60)."""
    late = tuple(n for n in LATE.get(p.kind, ()) if p.has(n))
    if not late:
        return (), []
    if not in_registers:
        return (), [note("early loads", "none", f"{', '.join(late)} read in the writing pass: the row is not kept "
                         "in registers, so every pass loads what it reads")]
    kept = chunks * vec * len(held(p))
    extra = chunks * vec * sum(1 for n in late if n not in held(p))
    per_thread = regs_per_thread(threads, gpu, min_resident)
    overhead = reg_overhead(p, chunks, vec)

    def resident(values: int) -> int:
        return int(HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=threads // 32, regs=values + overhead,
                               reg_alloc_unit=gpu.reg_alloc_unit))
    before, after = resident(kept + acc), resident(kept + extra + acc)
    if kept + extra + acc + overhead <= per_thread:
        cost = f"{_ctas(after)}as without them" if after >= before else f"{before} -> {after} CTAs an SM"
        return late, [note("early loads", ", ".join(late),
                           f"{kept} kept + {extra} more + {acc} sums + {overhead} <= {per_thread} registers ({cost}): "
                           "loaded with the row, their latency overlaps the row's reductions instead of following "
                           "them (worth a resident CTA)")]
    return (), [note("early loads", "none", f"{', '.join(late)} read in the writing pass: {extra} more values would "
                     f"pass {per_thread} registers a thread ({_ctas(min_resident)}of {threads} threads)")]


# ---- 5 -----------------------------------------------------------------------------------------
def step5_register_cap(threads: int, bps: int, regs: int, gpu: GPUModel) -> tuple[int, list]:
    """The register cap (``nvvm.maxnreg``) that makes the planned residency the real one: the register
    file's share of each of ``bps`` CTAs, in the allocation unit's steps.  Without it ptxas takes what
    it likes, and a norm backward estimated at 120 registers took 139: 3 CTAs an SM where the grid of
    its weight gradients' partials is one wave of 4 (1.33 waves; bench/results/h100-2026-12-05/run59);
    held to 128 it assembles at 128 with no spill."""
    cap = regs_per_thread(threads, gpu, bps)
    return cap, [note("register cap", cap, f"{int(gpu.regs_per_sm)} registers / ({bps} CTAs x {threads} threads), "
                      f"in steps of {int(gpu.reg_alloc_unit) // 32}: ptxas holds the kernel (~{regs} estimated) to "
                      "the residency planned")]


def step5_grid(p: RowsProblem, threads: int, rows_per_cta: int, regs: int, smem: int,
               gpu: GPUModel) -> tuple[tuple[int, int], list]:
    warps = threads // 32
    bps_regs = HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=warps, regs=regs, reg_alloc_unit=gpu.reg_alloc_unit)
    bps_smem = int(gpu.max_blocks_per_sm) if not smem else \
        int(gpu.smem_per_sm // (smem + gpu.smem_reserved_per_block))
    bps, s1 = formula_step("CTAs per SM", F.bps, f"threads, registers (~{regs} a thread) and shared memory "
                           f"({smem} B)", post=int, max_blocks_per_sm=gpu.max_blocks_per_sm,
                           max_threads_per_sm=gpu.max_threads_per_sm, threads=threads, bps_regs=bps_regs,
                           bps_smem=bps_smem)
    grid, s2 = formula_step("grid", F.grid, "one CTA per group of rows", post=int, rows=p.rows,
                            rows_per_cta=rows_per_cta)
    _, s3 = formula_step("waves", F.waves, "CTAs over the SMs' resident CTAs", grid=grid, sm_count=gpu.sm_count,
                         blocks_per_sm=bps)
    return (grid, bps), [s1, s2, s3]


def row_tile(p: RowsProblem, gpu: GPUModel, d: Derivation,
             min_resident: int = MIN_RESIDENT) -> tuple[RowTile, PartialsTile | None]:
    """The row kernel's tile, and the partials of the weight/bias gradients it sums in its pass (or None)."""
    operands = [o for o in p.operands if o.layout in ("row", "col")]
    vec = d.record(step1_vector(p, operands))
    tpr = d.record(step2_threads_per_row(p, vec, gpu))
    threads, rows_per_cta = d.record(step3_rows_per_cta(p, tpr, gpu))
    chunks, in_registers = d.record(step4_passes(p, vec, tpr, threads, gpu, min_resident))
    acc = d.record(step6_fused_sums(p, chunks, vec, in_registers, threads, gpu, min_resident))
    early = d.record(step6_early_loads(p, chunks, vec, in_registers, acc, threads, gpu, min_resident))
    kept = chunks * vec * len(held(p) + tuple(n for n in early if n not in held(p))) if in_registers else 0
    regs = kept + acc + reg_overhead(p, chunks, vec, in_registers)
    smem = 4 * (tpr // 32) * 3 * 2 if tpr > 32 else 0     # per phase (up to 3) two values per warp
    if acc and rows_per_cta > 1:                          # the CTA's rows' sums meet in shared memory
        smem = max(smem, 4 * rows_per_cta * acc * tpr)
    grid, bps = d.record(step5_grid(p, threads, rows_per_cta, regs, smem, gpu))
    max_regs = d.record(step5_register_cap(threads, bps, regs, gpu))
    partials = None
    if acc:
        grid, per_cta = d.record(step6_partials(p, rows_per_cta, bps, gpu))
        partials = partials_tile(p, grid, per_cta, d, gpu)
    splits, chunks = d.record(step7_split(p, chunks, rows_per_cta, bps, gpu))
    if splits > 1:
        warps = min(FINAL_ROW_THREADS // 32, p.rows)
        final_grid = math.ceil(p.rows / warps)
        d.note("row_final", f"{final_grid} x {32 * warps}", f"one warp per row adds its {splits} parts in split order "
               "(lanes along the parts, then a fixed shuffle tree)")
        return RowTile(threads, tpr, rows_per_cta, vec, chunks, in_registers, grid * splits, smem, bps, regs, max_regs,
                       splits, 32 * warps, final_grid, early), partials
    return RowTile(threads, tpr, rows_per_cta, vec, chunks, in_registers, grid, smem, bps, regs, max_regs,
                   early=early), partials


# ---- 7 -----------------------------------------------------------------------------------------
def step7_split(p: RowsProblem, chunks: int, rows_per_cta: int, bps: int, gpu: GPUModel) -> tuple[tuple[int, int], list]:
    """A row reduction with one CTA per row whose rows fill less than one wave of resident CTAs splits each
    row: splits = Max(1, Min(ceil(SMs x CTAs per SM / rows), floor(chunks / MIN_SPLIT_CHUNKS))), the CTAs
    of one wave, each thread walking at least MIN_SPLIT_CHUNKS vector steps; returns (splits, vector steps
    a thread walks in one split).  Other kinds keep one CTA per row (their later passes need the whole
    row's statistic)."""
    if p.kind != "row_reduce" or rows_per_cta != 1:
        return (1, chunks), []
    capacity = int(gpu.sm_count) * bps
    if p.rows >= capacity:
        return (1, chunks), [note("split", 1, f"{p.rows} rows, a CTA each, fill {p.rows / capacity:.2f} waves of "
                                  f"{capacity} resident CTAs: rows are not split")]
    splits, st = formula_step("row splits", F.row_splits, f"{p.rows} row{'s' if p.rows > 1 else ''} of one CTA fill "
                              f"{p.rows} of {capacity} resident CTAs; a split walks at least {MIN_SPLIT_CHUNKS} "
                              "vector steps a thread", post=int, sm_count=gpu.sm_count, blocks_per_sm=bps,
                              row_groups=p.rows, chunks=chunks, min_chunks=MIN_SPLIT_CHUNKS)
    if splits <= 1:
        return (1, chunks), [st, note("split", 1, f"{chunks} vector steps a thread: too short a row to split")]
    per = math.ceil(chunks / splits)
    splits = math.ceil(chunks / per)
    row_bytes = p.n * sum(o.elem_bytes for o in p.operands if o.layout == "row")
    alone = row_bytes / float(F.sm_bw(l2_bw=gpu.l2_bw / 1e6, sm_count=gpu.sm_count))
    return (splits, per), [st, note("split", splits, f"each row over {splits} CTAs of {per} vector steps a thread "
                                    f"({p.rows * splits} CTAs; one CTA would stream a row's {row_bytes} B alone, "
                                    f"{alone:.1f} us at one SM's rate); each writes its part's reduction to a workspace "
                                    "slot, row_final adds a row's parts in split order (deterministic, no float atomics)")]


# ---- 6 (column stage) --------------------------------------------------------------------------
def column_tile(p: RowsProblem, gpu: GPUModel, d: Derivation) -> ColumnTile:
    vec = d.record(step1_vector(p, [o for o in p.operands if o.layout in ("row", "col")]))
    slots = math.ceil(p.n / vec)
    tc = min(COLUMN_THREADS, max(32, _pow2ceil(slots)))
    tr = COLUMN_THREADS // tc
    d.note("column threads", f"{tc} x {tr}", f"{COLUMN_THREADS} threads: {tc} along the {slots} column vectors "
           f"(coalesced rows), {tr} rows side by side, added through shared memory")
    blocks = d.apply("column blocks", F.col_blocks, "CTAs along the columns", post=int, n=p.n, threads_cols=tc, vec=vec)
    bps = max(1, int(gpu.max_threads_per_sm) // COLUMN_THREADS)
    splits = d.apply("splits", F.splits, f"enough row slabs for one wave of CTAs, each thread adding at least "
                     f"{MIN_ROWS_PER_THREAD} rows; partials in a workspace, added in order by a second kernel "
                     "(deterministic, no float atomics)", post=int, sm_count=gpu.sm_count, blocks_per_sm=bps,
                     col_blocks=blocks, rows=p.rows, threads_rows=tr, min_rows=MIN_ROWS_PER_THREAD)
    rows_per_split = math.ceil(p.rows / splits)
    splits = math.ceil(p.rows / rows_per_split)
    smem = 4 * tr * tc * vec * len(p.prologue.reduce) if tr > 1 else 0
    *final, final_unroll = final_sum_tile(p, splits, d, gpu) if splits > 1 else (1, 1, 1, 1, 1)
    unroll = column_unroll(p, vec, math.ceil(rows_per_split / tr), d)
    return ColumnTile(tc, tr, vec, splits, rows_per_split, (blocks, splits), *final, smem,
                      outputs=len(p.prologue.reduce), unroll=unroll, final_unroll=final_unroll)


def column_unroll(p: RowsProblem, vec: int, iters: int, d: Derivation) -> int:
    """Rows a column-stage thread loads before adding them: as many as its registers hold (32 words of
    loads, at most ``MAX_COLUMN_UNROLL``), a power of two dividing the thread's rows.  A thread that
    loads one row a trip waits a whole load latency per row, however many threads the SM holds:
    GELU's backward with its bias gradient (16384 x 2048 f32) runs 114, 107, 104, 104 us at 1, 2, 4, 8
    rows a trip and the read-only sums run the same at every unroll
    (bench/results/h200-2026-12-04/run30)."""
    words = vec * sum(max(1, o.elem_bytes // 4) for o in p.inputs if o.layout == "row")
    most = min(MAX_COLUMN_UNROLL, max(1, 32 // max(words, 1)))
    unroll = loads_per_trip(iters, most)
    d.note("column unroll", unroll, f"rows a thread loads before adding them: a power of two dividing the {iters} "
           f"rows it adds, at most {most} ({MAX_COLUMN_UNROLL}, and 32 registers of loads: {words} words a row)")
    return unroll


# ---- 8 -----------------------------------------------------------------------------------------
def kernel_time(role: str, dram_bytes: int, l2_bytes: int, gpu: GPUModel, mc: dict, ctas: int) -> tuple[dict, object]:
    """Time of kernel ``role`` of ``ctas`` CTAs: the largest of the bytes at the GPU's DRAM bandwidth, every
    byte (re-reads too) at its L2 bandwidth, and the busiest SM's bytes at one SM's streaming rate (its
    share of the L2 bandwidth, [EST]: what an SM pulls when all stream; a lone CTA pulls no more), plus
    the launch."""
    sm_bw = F.sm_bw(l2_bw=gpu.l2_bw / 1e6, sm_count=gpu.sm_count)
    busiest = F.busiest_sm_bytes(ctas=ctas, sm_count=gpu.sm_count, dram_bytes=dram_bytes, l2_reread_bytes=l2_bytes)
    t, step = formula_step(f"time {role}", F.t_kernel, f"bytes at the DRAM bandwidth x eta {mc['eta_dram']:.3f}, or "
                           f"the busiest SM's {float(busiest):.0f} B ({ctas} CTA{'s' if ctas != 1 else ''}) at one "
                           f"SM's {float(sm_bw) / 1e3:.1f} GB/s (its share of the L2 bandwidth), and launch "
                           f"{mc['t_launch_us']:.2f} us ({mc['source']})",
                           dram_bytes=dram_bytes, dram_bw=gpu.dram_bw / 1e6, eta_dram=mc["eta_dram"],
                           l2_reread_bytes=l2_bytes, l2_bw=gpu.l2_bw / 1e6, busiest_sm_bytes=busiest, sm_bw=sm_bw,
                           t_launch=mc["t_launch_us"])
    launch_share = mc["t_launch_us"] / t if t else 1.0
    streaming = float(busiest) / float(sm_bw) > max(dram_bytes / (gpu.dram_bw / 1e6 * mc["eta_dram"]),
                                                     (dram_bytes + l2_bytes) / (gpu.l2_bw / 1e6))
    bound = "launch" if launch_share > 0.5 else "sm" if streaming else "dram"
    return {"time_us": round(t, 3), "bytes": dram_bytes, "l2_bytes": l2_bytes, "bound": bound}, step


def row_kernel_bytes(p: RowsProblem, tile: RowTile, gpu: GPUModel, partial_bytes: int = 0) -> tuple[int, int]:
    """(DRAM bytes, L2 re-read bytes) of the row kernel: its operands once (and the partial rows of the
    gradients it sums); a looped kernel re-reads the kept operands once per extra pass, from L2 when the
    rows in flight fit it (else from DRAM)."""
    operands = [o for o in p.operands if o.layout != "col" or o.name in ("weight", "bias")]
    if tile.splits > 1:                 # the per-row results are row_final's; the parts go to the workspace
        operands = [o for o in operands if o.layout != "per_row" or o in p.inputs]
        partial_bytes += 4 * p.rows * tile.splits
    dram = sum(p.nbytes(o) for o in operands) + partial_bytes
    if tile.in_registers or PASSES.get(p.kind, 1) == 1:
        return dram, 0
    kept = [p.operand(n) for n in held(p)]
    again = (PASSES[p.kind] - 1) * sum(p.nbytes(o) for o in kept)
    working = tile.rows_per_cta * tile.blocks_per_sm * gpu.sm_count * p.n * sum(o.elem_bytes for o in kept)
    return (dram, again) if working <= gpu.l2_bytes else (dram + again, 0)


def configure_rows(p: RowsProblem, target="h200", min_resident: int = MIN_RESIDENT) -> RowsConfig:
    """The rows kernels' schedule and prediction for ``p`` on ``target``; ``min_resident``: the CTAs an
    SM the row kept in registers leaves room for (``MIN_RESIDENT``; the probes time the other side)."""
    t0 = time.perf_counter()
    gpu = get_target(target) if isinstance(target, str) else target
    d = Derivation()
    mc = memory_constants(gpu)
    terms = {}
    row = column = None
    roles = []
    colp = column_problem(p)
    partials = None
    if p.kind != "column_reduce":
        row, partials = row_tile(p, gpu, d, min_resident)
        partial_bytes = 0
        if partials is not None:
            partial_bytes = d.apply("partial bytes", F.partial_bytes, "the partial rows, written by the row kernel and "
                                    "read by partials_final", post=int, gradients=partials.outputs,
                                    partials=partials.partials, n=p.n)
        terms["row"], st = kernel_time("row", *row_kernel_bytes(p, row, gpu, partial_bytes), gpu, mc, row.grid)
        d.steps.append(st)
        roles.append("row")
        if row.splits > 1:
            written = sum(p.nbytes(o) for o in p.outputs if o.layout == "per_row")
            terms["row_final"], st = kernel_time("row_final", 4 * p.rows * row.splits + written, 0, gpu, mc,
                                                 row.final_grid)
            d.steps.append(st)
            roles.append("row_final")
        if partials is not None:
            written = sum(p.nbytes(o) for o in p.outputs if o.layout == "col")
            terms["partials_final"], st = kernel_time("partials_final", partial_bytes + written, 0, gpu, mc,
                                                      partials.final_grid)
            d.steps.append(st)
            roles.append("partials_final")
            colp = None
    if colp is not None:
        column = column_tile(colp, gpu, d)
        partial = 4 * column.splits * colp.n * len(colp.prologue.reduce)
        sums = sum(colp.nbytes(o) for o in colp.outputs if o.layout == "col")
        stored = sum(colp.nbytes(o) for o in colp.outputs if o.layout != "col")   # the prologue's stored values
        first = sum(colp.nbytes(o) for o in colp.inputs) + stored + (partial if column.splits > 1 else sums)
        terms["column"], st = kernel_time("column", first, 0, gpu, mc, column.grid[0] * column.grid[1])
        d.steps.append(st)
        roles.append("column")
        if column.splits > 1:
            terms["column_final"], st = kernel_time("column_final", partial + sums, 0, gpu, mc, column.final_grid)
            d.steps.append(st)
            roles.append("column_final")
    total = 0
    if p.kind in LOSSES:
        total = TOTAL_THREADS
        target_bytes = p.rows * p.operand("target").elem_bytes
        for role in LOSS_ROLES[p.kind]:
            terms[role], st = kernel_time(role, target_bytes + (4 * p.rows if role == "total" else 0), 0, gpu, mc, 1)
            d.steps.append(note(role, TOTAL_THREADS, "one CTA adds the per-row losses and counts the kept targets in "
                                "row order (deterministic)" if role == "total" else
                                "one CTA counts the kept targets: the per-row scale dloss / count the row kernel reads"))
            d.steps.append(st)
            roles = roles + ["total"] if role == "total" else ["total_pre"] + roles
    schedule = RowsSchedule(gpu.arch, tuple(roles), row, column, total, partials)
    t = sum(v["time_us"] for v in terms.values())
    moved = sum(v["bytes"] for v in terms.values())
    launches = len(terms) * mc["t_launch_us"]
    slowest = max(terms.values(), key=lambda v: v["time_us"])
    bound = "launch" if launches > t / 2 else "sm" if slowest["bound"] == "sm" else "dram"
    floor = p.bytes_moved / gpu.dram_bw * 1e6
    prediction = Prediction(t, 0.0, bound, floor,
                            {"dram_us": round(moved / (gpu.dram_bw * mc["eta_dram"]) * 1e6, 3),
                             "launch_us": round(launches, 3)})
    return RowsConfig(p, gpu, schedule, prediction, tuple(d.steps), terms,
                      config_time_ms=(time.perf_counter() - t0) * 1e3)
