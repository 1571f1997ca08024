"""Step 9's prediction: an attention kernel's device time, the larger of two bounds plus its launch.

    t_device = t_launch + Max(t_resources, t_busiest_sm)

* ``t_resources``: the kernel's pipes (tensor, MUFU/softmax, ALU, shared memory) over all SMs and its
  DRAM bytes, each over the share ``achieved`` of its peak, plus the per-block and per-tile costs
  spread over every SM's block slots: the throughput model the schedule steps (4-11) rank their
  candidates with (``derive.kernel_time``), with two corrections that do not change a ranking: DRAM
  counts each kernel's own reads and writes, the K/V rows a causal kernel reaches only
  (``dram_bytes``), and the persistent forward's per-step cost moves to the busiest SM's chain
  (below), where it is paid.
* ``t_busiest_sm``: no kernel ends before its busiest SM.  The blocks (work tiles of a persistent
  forward) go to the SMs as the hardware hands them out (``busiest_sm``: a non-persistent grid's
  blocks in launch order to the least-loaded SM; the persistent forward's tiles by its own order,
  ``persistent_tiles``); that SM's streamed steps at one SM's share of the pipes, plus its blocks'
  fixed costs, plus a lone block's latency chain: each streamed tile waits at least one loaded DRAM
  latency over the ring's slots in flight (``ring_step_s``, Little's law, as the GEMM model's ring
  term).  Where every SM holds several blocks (many waves) this equals the resource bound; where
  the grid leaves SMs idle (few blocks, a causal diagonal, decode shapes with one query tile) it is
  the time: the resource bound divides the work by 132 SMs when 8 do it.  A block's fixed cost (its
  prologue and epilogue) scales with the share of its kept tile the problem fills (``filled_share``:
  rows past the sequence's end are neither loaded nor stored), so a decode block of a few query rows
  pays little more than its launch and retirement.
* ``t_launch``: the calibrated gap between kernels in a CUDA graph (``nova/hwmodel/calibration``,
  1.05 us on the H200, 0.49 on the H100: graph replay minus the kernels' CUPTI time), as the GEMM,
  pointwise and rows families use.

bwd_pre (D = rowsum(dO * O)) and the split-KV combines are DRAM passes: their bytes at the calibrated
DRAM bandwidth, at least one loaded latency, plus their launch.  A split-KV kernel's blocks each walk
their split's key tiles (``block_steps``) and write FP32 partials (``dram_bytes``).  An mma.sync
block with no steps (a causal dK/dV block past the last query, an empty split) loads nothing (its
ring's prologue is guarded by the step count, ``build.pipeline``) and only writes zeros: the resource
bound charges it ``EMPTY_BLOCK_SHARE`` of the per-block cost (``block_fixed_us``, derive's).  The
Hopper dK/dV's producer loads the kept K/V tiles unconditionally: its empty blocks pay in full.

The schedule steps keep ranking candidates by ``kernel_time``; this module only prices the schedule
they chose (a decision left to the throughput model is not re-derived here).
"""
from __future__ import annotations

import heapq
import math

from nova.hwmodel import GPUModel
from nova.kernels.attention.problem import AttentionProblem
from nova.kernels.attention.schedule import COMBINES, KernelTile

# A lone block's fixed cost, in loaded DRAM latencies (kernel_device_time):
#   LONE_BLOCK_BASE_LATENCIES + LONE_BLOCK_LATENCIES x filled_share
LONE_BLOCK_LATENCIES = 4.5      # [FIT] its prologue and epilogue at a full kept tile (3.6 us at the H200's 800 ns),
                                # scaled by the share of the tile the problem fills (``filled_share``)
LONE_BLOCK_BASE_LATENCIES = 0.45  # [FIT] what does not shrink with the tile: the block's launch and retirement
EMPTY_BLOCK_SHARE = 0.45        # [FIT] the share of derive.BLOCK_FIXED_US an mma.sync block with no steps pays
                                # (it loads nothing, it writes zeros).
                                # The three: least squares of the relative (log) errors of the 80 kernels (40 problems x
                                # forward, backward) of bench/results/h200-2026-12-07/run110-h200/attention (CUDA-
                                # graph replays of 20 calls each, the graph's own launch spread): base 0.45,
                                # empty share 0.45, the full-tile figure held at 4.5 (the optimum is flat in it
                                # from 4.25 to 5: sum of squares within 1%).  Within 15%: 53 -> 66 of 80 (decode
                                # 2 -> 14 of 16), rms log error 0.24 -> 0.12.  The 4.5 was fitted alone on
                                # bench/results/h200-2026-12-03/run8/heldout, CUDA-graph replays of ONE call each:
                                # the graph's launch (~3 us on a decode forward: 5.7-6.4 us there against 2.5-3.1
                                # in run110's 20-call graphs) sat in every lone block's figure, which a constant
                                # per block then charged to decode blocks of a few query rows: their forwards
                                # at 1.4-2.3x, their backwards (the causal dK/dV's empty blocks at the full
                                # per-block cost) at 1.2-1.5x of run110's times
PERSISTENT_CTA_US = 5.7         # [FIT] the persistent forward, per CTA: barrier initialisation, setmaxnreg, the
PERSISTENT_TILE_US = 1.23       # first Q and K/V at DRAM latency, the last tile's O/LSE drain (CTA); per work
PERSISTENT_STEP_US = 0.127      # tile: Q's load and O's epilogue not hidden behind the ring; per K/V step: the
TRANSPOSE_CYCLES = 87.5         # barriers and the S -> softmax -> P V hand-off; per TF32 transposer loop
                                # iteration (V^T, ``derive.transpose_steps``) of a step.  Least squares of the
                                # relative errors, the pipes held at derive's figures (0.81 of their peak), on
                                # the 19 persistent forwards of run8/heldout (graph replay minus the launch)
                                # and the six of bench/results/h200-2026-12-01/g (CUPTI: BF16 39.7/84.8/257.4,
                                # TF32 66.5/155.9/704 us at 32x8x512x64, 16x12x1024x64, 8x16x2048x128
                                # causal): all 25 within 15%.  They replace derive.HOPPER_PERSISTENT_STEP_US
                                # (0.52 per step, fitted on the six alone as an SM average) in the prediction.
                                # The non-persistent TF32 forward's producers transpose V every step too: its
                                # steps pay the same cycles (its forwards ran 0.65-0.80 of their price without
                                # them, bench/results/h100-2026-12-06/run70, h200-2026-12-06/run66)


def block_steps(p: AttentionProblem, role: str, rows: int, cols: int, splits: int = 1) -> list[int]:
    """Streamed tiles each block of one (batch, head) visits, by block index along the grid's x (and
    z): query tiles (fwd, bwd_dq; causal: the key tiles up to the tile's last row; split KV: each
    split's share of the key tiles) or key tiles (bwd_dkv; causal: the query tiles from the diagonal
    on, over the group's query heads; split Q: each split's share of that walk, ``build.split_range``).
    Their sum times rows x cols is ``derive.visited_pairs``."""
    tq, tk = p.seq_q, p.seq_k
    if role in ("fwd", "bwd_dq"):
        walks = [-(-(min(tk, (qt + 1) * rows) if p.causal else tk) // cols) for qt in range(-(-tq // rows))]
        if splits == 1:
            return walks
        per = -(-(-(-tk // cols)) // splits)           # split KV: each split's share of the longest walk
        return [max(0, min(per, w - z * per)) for w in walks for z in range(splits)]
    query_tiles = -(-tq // cols)
    walks = [p.group * max(0, query_tiles - ((kt * rows) // cols if p.causal else 0)) for kt in range(-(-tk // rows))]
    if splits == 1:
        return walks
    per = -(-p.group * query_tiles // splits)          # split Q: each split's share of the longest walk
    return [max(0, min(per, w - z * per)) for w in walks for z in range(splits)]


def grid_rows(p: AttentionProblem, role: str) -> int:
    """Blocks along the grid's y: batch x heads (bwd_dkv: x K/V heads)."""
    return p.batch * (p.kv_heads if role == "bwd_dkv" else p.heads)


def busiest_sm(steps: list[int], rows: int, sm_count: int) -> tuple[int, int, int]:
    """(streamed steps, blocks with steps, longest block's steps) of the SM that ends last when the
    ``rows`` x len(steps) blocks of a grid (x fastest) go, in launch order, each to the least-loaded
    SM (fewest steps, then fewest blocks: a causal grid's empty blocks, which only write zeros,
    spread and are not counted)."""
    if len(steps) * rows <= sm_count:              # one block per SM: the longest block
        return max(steps), 1, max(steps)
    heap = [(0, 0, sm, 0, 0) for sm in range(sm_count)]    # (steps, blocks, SM, longest, blocks with steps)
    for _ in range(rows):
        for s in steps:
            work, blocks, sm, longest, busy = heapq.heappop(heap)
            heapq.heappush(heap, (work + s, blocks + 1, sm, max(longest, s), busy + (s > 0)))
    work, _, _, longest, busy = max(heap)
    return work, busy, longest


def persistent_tiles(steps: list[int], rows: int, grid: int) -> tuple[int, int]:
    """(streamed steps, work tiles) of the busiest CTA of the persistent forward's head order
    (``build_hopper``: round i of ``grid`` tiles, CTA bx takes position bx, or grid - 1 - bx in odd
    rounds; tile o is query tile n - 1 - o % n of head o // n)."""
    n, total = len(steps), len(steps) * rows
    best = (0, 0)
    for bx in range(grid):
        work = tiles = 0
        for i in range(-(-total // grid)):
            o = i * grid + (grid - 1 - bx if i % 2 else bx)
            if o < total:
                work, tiles = work + steps[n - 1 - o % n], tiles + 1
        best = max(best, (work, tiles))
    return best


def visited_kv_rows(p: AttentionProblem, role: str, block_rows: int) -> int:
    """K/V rows a kernel reads: all of them, except that a causal kernel (queries i see keys j <= i)
    stops at the last query tile's end: the forward and dQ walk no key past it, and dK/dV's key
    blocks past it (``block_rows`` keys each) only write zeros."""
    if p.causal:
        return min(p.seq_k, -(-p.seq_q // block_rows) * block_rows)
    return p.seq_k


def dram_bytes(p: AttentionProblem, role: str, block_rows: int, splits: int = 1) -> float:
    """Compulsory DRAM bytes of a kernel, its own reads and writes (q, out, dO, dQ: ``q_bytes`` each;
    K and V, dK and dV: ``kv_bytes`` a pair; lse and D: ``row_bytes`` each), the K/V reads cut to
    ``visited_kv_rows``: the forward reads q and K/V and writes out and lse; dQ reads q, dO, K/V, lse
    and D and writes dQ; dK/dV reads q, dO, lse, D and K/V and writes dK and dV (all of them: a
    causal kernel's empty key blocks write zeros).  Split (``splits`` > 1): the kernel writes FP32
    slabs, ``splits`` of each output (``slab`` = its outputs' bytes x 4 / element bytes), and the
    combine reads them back and writes the outputs (``fwd_combine``, ``bwd_dq_combine``,
    ``bwd_dkv_combine``)."""
    q, rows = p.q_bytes, p.row_bytes
    out = p.kv_bytes if role in ("bwd_dkv", "bwd_dkv_combine") else q      # the kernel's output(s) in the dtype
    slab = splits * out * 4 // p.elem_bytes if splits > 1 else out
    lse = splits * rows
    if role == "fwd_combine":
        return slab + lse + q + rows
    if role in ("bwd_dq_combine", "bwd_dkv_combine"):
        return slab + out
    read_kv = p.kv_bytes * visited_kv_rows(p, role, block_rows) / p.seq_k
    return {"fwd": q + slab + read_kv + lse, "bwd_dq": 2 * q + slab + read_kv + 2 * rows,
            "bwd_dkv": 2 * q + read_kv + slab + 2 * rows}[role]


def filled_share(p: AttentionProblem, role: str, block_rows: int) -> float:
    """The share of the kept tiles' rows the problem fills: Tq (fwd, bwd_dq; Tk for bwd_dkv) over the
    rows of the grid's query (key) tiles.  A block neither loads nor stores the rows past the end
    (zero-filled loads, predicated stores): a decode forward's 64-row query tile of 2 queries is 3% full.
    The grid's average, though the busiest SM may hold a full tile where there are several: priced so
    (share 1 above one tile) the replays of seven held-out draws score 80, 79, 62, 76, 78, 81, 86% of
    their kernels within 15% against 82, 80, 64, 79, 76, 81, 86% with the average (nova.bench.heldout_replay
    of h200-2026-12-07/run110, h100-2026-12-07/run114, run105, run98, h100-2026-12-06/run84, run70,
    h200-2026-12-06/run66)."""
    n = p.seq_k if role == "bwd_dkv" else p.seq_q
    return n / (-(-n // block_rows) * block_rows)


def ring_step_s(gpu: GPUModel, kt: KernelTile) -> float:
    """The least time per streamed tile of a lone block: a loaded DRAM latency over the ring's
    slots in flight (one is being computed on)."""
    return gpu.mem_latency_ns * 1e-9 / max(kt.stages - 1, 1)


def kernel_device_time(p: AttentionProblem, gpu: GPUModel, role: str, kt: KernelTile, terms: dict,
                       constants: dict, *, achieved: float, tile_fixed_us: float, block_fixed_us: float,
                       transposes: int = 0) -> tuple[float, dict]:
    """(seconds, terms in seconds) of one kernel's device time (module docstring).  ``terms``: the
    kernel's throughput terms in seconds (``derive.kernel_time``: its pipes, "dram" and "blocks");
    ``constants``: the target's ``eta_dram`` and ``t_launch_us``; ``achieved``, ``tile_fixed_us``:
    the throughput model's figures for this kernel (its pipes' share, its cost per streamed tile);
    ``block_fixed_us``: its cost per block (``derive.BLOCK_FIXED_US``, in ``terms["blocks"]``);
    ``transposes``: a TF32 Hopper forward's transposer loop iterations per step (V^T written by its
    producer warps every step, persistent or not)."""
    launch = constants["t_launch_us"] * 1e-6
    if role == "bwd_pre" or role in COMBINES.values():
        t = max(terms["dram"] / constants["eta_dram"], gpu.mem_latency_ns * 1e-9)
        return t + launch, {"dram": t, "launch": launch}
    pipes = max(v for k, v in terms.items() if k not in ("dram", "blocks"))
    dram = dram_bytes(p, role, kt.block_rows, kt.splits) / gpu.dram_bw
    steps, rows = block_steps(p, role, kt.block_rows, kt.block_cols, kt.splits), grid_rows(p, role)
    total = sum(steps) * rows
    step_s = pipes * gpu.sm_count / total / achieved if total else 0.0     # one step at one SM's pipes
    transpose_s = transposes * TRANSPOSE_CYCLES / gpu.clock_hz           # V^T written, every step
    if kt.persistent:
        resources = max(pipes, dram) / achieved
        work, tiles = persistent_tiles(steps, rows, kt.grid[0])
        per_step = step_s + PERSISTENT_STEP_US * 1e-6 + transpose_s
        busiest = (PERSISTENT_CTA_US + tiles * PERSISTENT_TILE_US) * 1e-6 + work * per_step
    else:
        blocks_s = terms["blocks"]
        empty = sum(s == 0 for s in steps) * rows
        if empty and not kt.hopper:   # an mma.sync block without steps: no prologue, its zeros written
            blocks_s -= (1 - EMPTY_BLOCK_SHARE) * block_fixed_us * 1e-6 * empty / (gpu.sm_count * kt.blocks_per_sm)
        resources = max(pipes, dram) / achieved + blocks_s
        if kt.splits > 1:         # launch order: x fastest, then y, then the splits (z)
            n = len(steps) // kt.splits
            steps, rows = [steps[x * kt.splits + z] for z in range(kt.splits) for _ in range(rows) for x in range(n)], 1
        work, blocks, longest = busiest_sm(steps, rows, int(gpu.sm_count))
        resident = max(1, min(kt.blocks_per_sm, blocks))
        lone = LONE_BLOCK_BASE_LATENCIES + LONE_BLOCK_LATENCIES * filled_share(p, role, kt.block_rows)
        fixed = lone * gpu.mem_latency_ns * 1e-9 * max(1, math.ceil(blocks / kt.blocks_per_sm))
        busiest = fixed + max(work * (step_s + tile_fixed_us * 1e-6 / resident + transpose_s),
                              longest * (ring_step_s(gpu, kt) + tile_fixed_us * 1e-6 + transpose_s))
    return launch + max(resources, busiest), {"resources": resources, "busiest SM": busiest, "launch": launch}
