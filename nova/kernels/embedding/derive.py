"""The Analytic Configurator for embedding kernels: one function per numbered step, each returning its
value and the ``Step`` (formula with this GPU's numbers, value, reason) that ``nova-config explain
embedding`` prints.  Closed form: no search over schedules, no measurement.

 1. vector width      16-byte accesses ([CC] ld.global.v4.b32), halved until the row length, the row
                      stride and the base alignment allow it
 2. threads per row   lanes until each holds one vector of the row, at most a warp (a longer row is
                      walked in ``chunks`` vector steps: no reduction needs the lanes together)
 3. rows per CTA      CTAs of 4 warps (one per scheduler); fewer threads for few rows
 4. occupancy, grid   CTAs per SM from threads and registers; one CTA per group of rows, and its waves
 5. sort (backward)   determinism: a stable LSD radix sort of the indices, then each table row's
                      gradients added in index order by the row's owner; digit bits from the cost of
                      the passes (each pass: three launches, its keys read and written, the one-CTA scan
                      of the [digit, tile] counts), under the shared memory of the per-warp digit counts
 6. accumulate        a table row's segment found by a (lanes + 1)-ary search: each of the row's lanes
                      probes one key a round, a warp ballot counts the probes below the row, both bounds
                      at once; dy's rows loaded ``tokens_per_trip`` at a time (32 registers of loads)
 7. prediction        per kernel: DRAM bytes / (DRAM bandwidth x eta) + launch; the scan at one SM's
                      share of the L2 bandwidth; the accumulate's search rounds once at the DRAM latency

Why sort rather than float atomics: atomics add a row's gradients in the order the threads arrive,
so two runs differ in the last bits; the sort fixes the order (ascending index position) whatever the
scheduling, and its integer counts are exact.  Why a sort rather than a per-row scan of all indices:
that reads count x vocab index words; the sort reads each key 2 x passes times.
"""
from __future__ import annotations

import math
import time
from dataclasses import replace

from nova.configurator.derivation import Derivation, note
from nova.configurator.step import Prediction
from nova.hwmodel import GPUModel, get_target
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import F as HW
from nova.kernels.embedding.problem import FLOAT_DTYPES, EmbeddingProblem
from nova.kernels.embedding.schedule import MAX_UNROLL, EmbeddingConfig, EmbeddingSchedule, RowTile, SortPlan
from nova.kernels.rows.derive import TRANSACTION_BYTES, memory_constants

REGS_ESTIMATE = 40           # [EST] addresses, the row's index, loop state; plus one per 32-bit word in flight
SORT_TILE = 512              # [EST] keys per sort CTA, one a thread: 16 warps, four per scheduler
SORT_SMEM_LIMIT = 48 * 1024  # [CC] static shared memory of a CTA without the opt-in attribute
SCAN_THREADS = 1024          # [CC] the largest CTA: the one-CTA scan
LOAD_WORDS = 32              # [EST] registers of dy loads in flight a lane (the accumulate's cap is 64)
MAX_TOKENS_PER_TRIP = 8      # [EST] beyond it, the loads of a trip outnumber the segments that long

F = formulas("""
    vec_max = transaction_bytes / elem_bytes
    slots = ceil(dim / vec)
    threads_per_row = Min(32, 2 ** ceil(log(slots, 2)))
    chunks = ceil(slots / threads_per_row)
    cta_threads = Max(32 * schedulers, max_threads_per_sm / max_blocks_per_sm)
    regs = reg_estimate + vec * elem_bytes / 4
    bps = Min(max_blocks_per_sm, floor(max_threads_per_sm / threads), bps_regs)
    grid = ceil(rows / rows_per_cta)
    waves = grid / (sm_count * blocks_per_sm)
    tiles = ceil(count / tile)
    passes = ceil(key_bits / digit_bits)
    digit_bits = ceil(key_bits / passes)
    sort_smem = (tile / 32) * 2 ** digit_bits * 4
    t_sort = passes * (3 * t_launch + 4 * count * 4 / (dram_bw * eta_dram) + 2 * 2 ** digit_bits * tiles * 4 / (l2_bw / sm_count))
    search_steps = ceil(log(count + 1, lanes + 1))
    tokens_per_trip = Min(max_tokens, Max(1, floor(load_words / (chunks_per_walk * vec))))
    t_kernel = dram_bytes / (dram_bw * eta_dram) + t_launch
    t_scan = table_bytes / (l2_bw / sm_count) + t_launch
    t_accumulate = dram_bytes / (dram_bw * eta_dram) + search_steps * mem_latency_ns * 1e-3 + t_launch
""")


def _pow2ceil(x: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, x))))


# ---- 1 -----------------------------------------------------------------------------------------
def step1_vector(p: EmbeddingProblem) -> tuple[int, list]:
    """vec = 16 / elem_bytes, halved while the row length, the row stride or the base alignment is not a
    multiple of it ([CC]: a vector access must be aligned to its size)."""
    d = Derivation()
    vec = d.apply("vector width", F.vec_max, f"one 16-byte access per lane and step ({p.elem_bytes}-byte elements)",
                  post=int, transaction_bytes=TRANSACTION_BYTES, elem_bytes=p.elem_bytes)
    limits = []
    while vec > 1:
        why = ("row length" if p.dim % vec else "row stride" if p.stride % vec else
               "base alignment" if p.align % (vec * p.elem_bytes) else "")
        if not why:
            break
        limits.append(f"{vec}: {why}")
        vec //= 2
    if limits:
        d.note("vector width (alignment)", vec, f"the row length {p.dim}, row stride {p.stride} or base alignment "
               f"{p.align} B is not a multiple of the wider vectors ({'; '.join(limits)})")
    return vec, d.steps


# ---- 2, 3, 4 -----------------------------------------------------------------------------------
def row_tile(p: EmbeddingProblem, rows: int, what: str, vec: int, gpu: GPUModel, d: Derivation) -> RowTile:
    slots = d.apply("vectors per row", F.slots, "the row in vector steps", post=int, dim=p.dim, vec=vec)
    tpr = d.apply("threads per row", F.threads_per_row, "lanes until each holds one vector, at most a warp "
                  "(nothing is reduced across a row's lanes)", post=int, slots=slots)
    chunks = d.apply("chunks", F.chunks, "vector steps a lane takes along its row", post=int, slots=slots,
                     threads_per_row=tpr)
    cta = d.apply("CTA threads", F.cta_threads, "a warp per scheduler, and enough threads that the SM's CTA "
                  "limit does not cap its threads", post=int, schedulers=gpu.warp_schedulers_per_sm,
                  max_threads_per_sm=gpu.max_threads_per_sm, max_blocks_per_sm=gpu.max_blocks_per_sm)
    threads = max(32, min(cta, tpr * _pow2ceil(rows)))
    rows_per_cta = d.note("rows per CTA", threads // tpr, f"{threads} threads / {tpr} threads per row")
    regs = d.apply("registers", F.regs, "estimate: addresses, the index and loop state, and the vector in flight "
                   "(ptxas reports the count)", post=int, reg_estimate=REGS_ESTIMATE, vec=vec,
                   elem_bytes=p.elem_bytes)
    bps_regs = HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=threads // 32, regs=regs,
                           reg_alloc_unit=gpu.reg_alloc_unit)
    bps = d.apply("CTAs per SM", F.bps, "resident CTAs from threads and registers", post=int,
                  max_blocks_per_sm=gpu.max_blocks_per_sm, max_threads_per_sm=gpu.max_threads_per_sm,
                  threads=threads, bps_regs=bps_regs)
    grid = d.apply("grid", F.grid, f"one CTA per group of {what}", post=int, rows=rows, rows_per_cta=rows_per_cta)
    d.apply("waves", F.waves, "CTAs over the SMs' resident CTAs", grid=grid, sm_count=gpu.sm_count,
            blocks_per_sm=bps)
    return RowTile(rows, vec, tpr, rows_per_cta, threads, chunks, grid, bps)


# ---- 5 -----------------------------------------------------------------------------------------
def step5_sort(p: EmbeddingProblem, gpu: GPUModel, mc: dict, d: Derivation) -> SortPlan:
    tiles = d.apply("sort tiles", F.tiles, f"{SORT_TILE} keys a CTA, one a thread", post=int, count=p.count,
                    tile=SORT_TILE)
    candidates = []
    for passes in range(1, p.key_bits + 1):
        bits = F.digit_bits(key_bits=p.key_bits, passes=passes)
        bits = int(bits)
        if F.passes(key_bits=p.key_bits, digit_bits=bits) != passes:
            continue                              # the same digit width as fewer passes
        smem = int(F.sort_smem(tile=SORT_TILE, digit_bits=bits))
        t = float(F.t_sort(passes=passes, t_launch=mc["t_launch_us"], count=p.count, dram_bw=gpu.dram_bw / 1e6,
                           eta_dram=mc["eta_dram"], digit_bits=bits, tiles=tiles, l2_bw=gpu.l2_bw / 1e6,
                           sm_count=gpu.sm_count))
        candidates.append((passes, bits, smem, t))
    feasible = [c for c in candidates if c[2] <= SORT_SMEM_LIMIT]
    passes, bits, smem, t = min(feasible, key=lambda c: (c[3], c[0]))
    shown = "; ".join(f"{c[0]} x {c[1]} bits {c[3]:.1f} us" + ("" if c[2] <= SORT_SMEM_LIMIT else
                                                               f" (counts {c[2] // 1024} KiB: too large)")
                      for c in candidates[:4])
    d.record((bits, note("digit bits", bits, f"{p.key_bits}-bit keys (table rows < {p.vocab}): {passes} pass(es) of "
                         f"{bits} bits, the cheapest of {shown}; the per-warp digit counts take {smem} B of shared "
                         f"memory (at most {SORT_SMEM_LIMIT})", F.t_sort.symbolic())))
    per_thread = math.ceil((1 << bits) * tiles / SCAN_THREADS)
    d.note("scan", f"{SCAN_THREADS} x {per_thread}", f"one CTA of {SCAN_THREADS} threads, {per_thread} consecutive "
           f"counts each, warp shuffles then shared memory for the block's prefix")
    return SortPlan(bits, passes, SORT_TILE, tiles, SCAN_THREADS, per_thread)


# ---- 6 -----------------------------------------------------------------------------------------
def search_rounds(count: int, lanes: int) -> int:
    """Rounds of the (lanes + 1)-ary search that leave an empty interval of the ``count`` sorted keys: the
    least s with (lanes + 1)^s > count (each round cuts the interval to at most 1 / (lanes + 1) of it)."""
    rounds, reach = 0, 1
    while reach <= count:
        reach *= lanes + 1
        rounds += 1
    return rounds


def step6_accumulate(p: EmbeddingProblem, rows: RowTile, d: Derivation) -> RowTile:
    """The accumulate's segment search and its loads of dy: ``search_steps`` = ceil(log_(L+1)(count + 1))
    rounds with L = threads_per_row probes a round (a binary search takes ceil(log2(count + 1)) dependent
    loads: 15 at 16384 keys, against 3 here; with it the accumulate streamed at 0.73 of the copy ceiling,
    bench/results/h200-2026-12-06/run66); ``tokens_per_trip`` = Min(MAX_TOKENS_PER_TRIP, LOAD_WORDS /
    (chunks walked at once x vec)) dy rows loaded before they are added in index order."""
    lanes = rows.threads_per_row
    rounds = search_rounds(p.count, lanes)
    d.record((rounds, note("search rounds", rounds, f"{lanes} lane(s) of a table row each probe one of the "
                           f"{p.count} sorted keys a round and a warp ballot counts those below the row: "
                           f"(lanes + 1)^rounds > count; both ends of the segment at once",
                           F.search_steps.symbolic())))
    walk = rows.chunks if rows.chunks <= MAX_UNROLL else 1
    trip = d.apply("tokens per trip", F.tokens_per_trip, f"dy rows a lane loads before adding them in index order: "
                   f"{LOAD_WORDS} registers of loads over the {walk} chunk(s) of {rows.vec} a lane walks at once",
                   post=int, max_tokens=MAX_TOKENS_PER_TRIP, load_words=LOAD_WORDS, chunks_per_walk=walk,
                   vec=rows.vec)
    return replace(rows, search_steps=rounds, tokens_per_trip=trip)


# ---- 7 -----------------------------------------------------------------------------------------
def _term(role: str, t: float, nbytes: int, mc: dict, latency_us: float = 0.0) -> dict:
    """A kernel's term, bound by the largest of its parts: the launch, ``latency_us`` of dependent waits,
    and the rest (its bytes)."""
    parts = {"dram": t - mc["t_launch_us"] - latency_us, "latency": latency_us, "launch": mc["t_launch_us"]}
    return {"time_us": round(t, 3), "bytes": nbytes, "bound": max(parts, key=parts.get)}


def predict(p: EmbeddingProblem, s: EmbeddingSchedule, gpu: GPUModel, mc: dict, d: Derivation) -> dict:
    """Per kernel: ``{role: {time_us, bytes, bound}}``, each time a recorded step."""
    common = dict(dram_bw=gpu.dram_bw / 1e6, eta_dram=mc["eta_dram"], t_launch=mc["t_launch_us"])
    why = f"bytes at the DRAM bandwidth x eta {mc['eta_dram']:.3f} and launch {mc['t_launch_us']:.2f} us ({mc['source']})"
    terms = {}
    row_bytes = p.count * p.dim * p.elem_bytes
    if p.direction == "forward":
        nbytes = p.count * p.index_bytes + 2 * row_bytes
        t = d.apply("time gather", F.t_kernel, why + ": the indices, the rows read and written once",
                    dram_bytes=nbytes, **common)
        terms["gather"] = _term("gather", t, nbytes, mc)
        return terms
    sp = s.sort
    for k in range(sp.passes):
        key_bytes = p.count * (p.index_bytes if k == 0 else 4)
        perm_bytes = 0 if k == 0 else 4 * p.count
        table = 4 * sp.entries
        hist = key_bytes + table
        t = d.apply(f"time histogram{k}", F.t_kernel, why, dram_bytes=hist, **common)
        terms[f"histogram{k}"] = _term("histogram", t, hist, mc)
        t = d.apply(f"time scan{k}", F.t_scan, "the counts read and written by one CTA at one SM's share of the L2 "
                    "bandwidth", table_bytes=2 * table, l2_bw=gpu.l2_bw / 1e6, sm_count=gpu.sm_count,
                    t_launch=mc["t_launch_us"])
        terms[f"scan{k}"] = _term("scan", t, 2 * table, mc)
        scatter = key_bytes + perm_bytes + table + 8 * p.count
        t = d.apply(f"time scatter{k}", F.t_kernel, why, dram_bytes=scatter, **common)
        terms[f"scatter{k}"] = _term("scatter", t, scatter, mc)
    base = p.vocab * p.dim * FLOAT_DTYPES[p.base] if p.base else 0
    nbytes = row_bytes + 8 * p.count + p.vocab * p.dim * p.elem_bytes + base
    steps = s.rows.search_steps
    t = d.apply("time accumulate", F.t_accumulate, why + f"; dy's rows read once, every table row written once"
                f"{' (its base read once)' if p.base else ''}, "
                f"the {steps} rounds of a row's segment search once at the DRAM latency ([EST]: later waves "
                "overlap them with streaming)", dram_bytes=nbytes, search_steps=steps,
                mem_latency_ns=gpu.mem_latency_ns, **common)
    terms["accumulate"] = _term("accumulate", t, nbytes, mc, latency_us=steps * gpu.mem_latency_ns * 1e-3)
    return terms


def configure_embedding(p: EmbeddingProblem, target="h200") -> EmbeddingConfig:
    t0 = time.perf_counter()
    gpu = get_target(target) if isinstance(target, str) else target
    d = Derivation()
    mc = memory_constants(gpu)
    vec = d.record(step1_vector(p))
    if p.direction == "forward":
        rows = row_tile(p, p.count, "output rows", vec, gpu, d)
        schedule = EmbeddingSchedule(gpu.arch, ("gather",), rows)
    else:
        rows = step6_accumulate(p, row_tile(p, p.vocab, "table rows", vec, gpu, d), d)
        sort = step5_sort(p, gpu, mc, d)
        roles = tuple(f"{r}{k}" for k in range(sort.passes) for r in ("histogram", "scan", "scatter"))
        schedule = EmbeddingSchedule(gpu.arch, roles + ("accumulate",), rows, sort)
    terms = predict(p, schedule, gpu, mc, d)
    total = sum(v["time_us"] for v in terms.values())
    launches = len(terms) * mc["t_launch_us"]
    moved = sum(v["bytes"] for v in terms.values())
    dram = moved / (gpu.dram_bw * mc["eta_dram"]) * 1e6
    latency = max(total - launches - dram, 0.0)       # the rest of the terms: searches and waits at DRAM latency
    bound = max((("dram", dram), ("launch", launches), ("latency", latency)), key=lambda kv: kv[1])[0]
    prediction = Prediction(total, 0.0, bound, p.bytes_moved / gpu.dram_bw * 1e6,
                            {"dram_us": round(dram, 3), "launch_us": round(launches, 3),
                             "latency_us": round(latency, 3)})
    return EmbeddingConfig(p, gpu, schedule, prediction, tuple(d.steps), terms,
                           config_time_ms=(time.perf_counter() - t0) * 1e3)
