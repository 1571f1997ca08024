"""The Analytic Configurator for fused pointwise kernels: closed form, one function per step.

 1. vector width   the 16-byte access (ld.global.v4.b32, [PTX] ISA "ld": .v2/.v4 vectors of up to
                   128 bits) over the widest contiguous operand (input or output; the widest operand
                   when none is), halved until it divides the innermost extent, every other stride of
                   each contiguous operand, its base alignment and the bounds of a window along the
                   innermost axis
 2. threads        8 warps: two per warp scheduler ([CC] 4 schedulers per SM), fewer for tiny problems
 3. registers      an estimate: 32 for addresses and the loop, one per 32-bit word of each operand's
                   elements in flight (ptxas reports the real count; tests check it never spills); a
                   kernel of many operands (a concat of many pieces) first halves its vector until
                   that fits the 255 registers a thread addresses ([CC])
 4. occupancy      CTAs per SM from threads, blocks and registers ([CC] per-SM limits)
 5. grid           at most one full wave (SMs x CTAs per SM); a grid-stride loop covers the rest
 6. prediction     memory time = the larger of bytes / (DRAM bandwidth x eta_dram) and the latency floor
                   (an output stored transposed counts its bytes / TRANSPOSED_STORE_EFFICIENCY)
                   (each loop trip waits one loaded DRAM latency, gpus.toml ``mem_latency_ns``), plus the
                   launch latency; eta_dram and
                   the launch latency are the target's calibrated constants (``nova/hwmodel/calibration``:
                   bench/l2_probe.py's DRAM efficiency, the CUDA-graph launch gap), else 1 and the
                   preset's launch overhead ([EST] 3 us); a kernel whose launch term dominates is
                   launch-bound and says so
"""
from __future__ import annotations

from nova.configurator.derivation import Derivation
from nova.configurator.step import Prediction
from nova.hwmodel import get_target
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import F as HW
from nova.kernels.pointwise.problem import ALIGN_MAX, PointwiseProblem
from nova.kernels.pointwise.schedule import PointwiseConfig, PointwiseSchedule
from nova.kernels.pointwise.types import ELEMENT_BYTES

WARPS_PER_SCHEDULER = 2          # two warps per scheduler per CTA: one issues while the other waits
REG_BASE = 32                    # [EST] addresses, loop counters, flat-index arithmetic (ptxas verifies)
TRANSPOSED_STORE_EFFICIENCY = 0.52   # [FIT] a transposed store's bytes stream at this share of a contiguous
                                     # store's rate: RoPE's backward writing [B, T, H, D] from a [B, H, T, D]
                                     # walk, 33.8 and 16.0 us for 100.8 and 50.4 MB (Llama-42M, one fit for
                                     # both: bench/results/h200-2026-12-04/run31); transposed reads run at the
                                     # contiguous rate (RoPE's forward reads q that way, within its band)

F = formulas("""
    vector = access_bytes / widest_bytes
    threads = Min(warps * 32, 32 * ceil(vectors / 32))
    regs = Min(reg_base + vector * words, max_regs)
    ctas_per_sm = Min(max_blocks_per_sm, floor(max_threads_per_sm / threads), bps_regs)
    grid = Min(ceil(vectors / threads), sm_count * ctas_per_sm)
    trips = ceil(vectors / (grid * threads))
    effective_bytes = bytes - transposed + transposed / efficiency
    t_bandwidth = 1e6 * bytes / (dram_bw * eta_dram)
    t_memory = Max(t_bandwidth, trips * mem_latency_ns * 1e-3)
    t_kernel = t_memory + t_launch
""")


def contiguous_operands(problem: PointwiseProblem) -> list[tuple[str, int, tuple, int]]:
    """``(name, itemsize, strides, align)`` of every operand read or written along the innermost
    axis with stride 1: the inputs and the outputs that are (an output written at another innermost
    stride is stored element by element, as a gathered input is read)."""
    out = [(f"in{k}", x.itemsize, x.strides, x.align) for k, x in enumerate(problem.inputs) if x.strides[-1] == 1]
    out += [(f"out{k}", x.itemsize, x.strides, x.align) for k, x in enumerate(problem.output_operands())
            if x.strides[-1] == 1]
    return out


def window_bounds(problem: PointwiseProblem) -> list[tuple[str, int, int]]:
    """``(name, start, extent)`` of each contiguous input windowed along the innermost axis: a vector
    must lie in its window or outside it whole."""
    last = len(problem.shape) - 1
    return [(f"in{k}", x.window.start, x.window.extent) for k, x in enumerate(problem.inputs)
            if x.strides[-1] == 1 and x.window is not None and x.window.axis == last]


def vector_width(problem: PointwiseProblem):
    """Step 1: the widest power of two ``vector`` with ``vector * itemsize <= 16`` for every contiguous
    operand that divides the innermost extent, each contiguous operand's other strides and its base
    alignment (so each vector is one aligned access and never crosses a row)."""
    ops = contiguous_operands(problem)
    widest = max(size for _, size, _, _ in ops or
                 [(None, x.itemsize, None, None) for x in problem.inputs + problem.output_operands()])
    d = Derivation()
    v = int(d.apply("vector", F.vector, f"16-byte accesses of the widest contiguous operand ({widest} B elements)",
                    access_bytes=ALIGN_MAX, widest_bytes=widest))
    limits = []
    inner = problem.shape[-1]
    while v > 1:
        why = ""
        if inner % v:
            why = f"the innermost extent {inner} is not a multiple of {v}"
        for name, size, strides, align in ops:
            if not why and any(s % v for s in strides[:-1]):
                why = f"{name}'s strides {list(strides)} are not multiples of {v}"
            if not why and align % (v * size):
                why = f"{name} starts {align}-byte aligned"
        for name, start, extent in window_bounds(problem):
            if not why and (start % v or extent % v):
                why = f"{name}'s window [{start}, {start + extent}) is not made of whole vectors of {v}"
        if not why:
            break
        limits.append(why)
        v //= 2
    if limits:
        d.note("vector (legal)", v, f"halved {len(limits)} time(s); the last because {limits[-1]}")
    return v, d.steps


def configure_pointwise(problem: PointwiseProblem, target="h200") -> PointwiseConfig:
    """Schedule, prediction and derivation of ``problem`` on ``target`` (steps in the module docstring)."""
    gpu = get_target(target)
    d = Derivation()
    vector = d.record(vector_width(problem))
    words = sum(max(1, x.itemsize // 4) for x in problem.inputs) + \
        sum(max(1, ELEMENT_BYTES[t] // 4) for t in problem.output_dtypes())
    fits = vector
    while fits > 1 and REG_BASE + fits * words > gpu.max_regs_per_thread:
        fits //= 2
    if fits < vector:                 # many operands (a concat of many pieces): a thread's registers first
        vector = d.note("vector", fits, f"halved until a thread's elements in flight fit the "
                        f"{gpu.max_regs_per_thread:.0f} registers a thread addresses ({words} words an element)")
    vectors = problem.numel // vector
    threads = int(d.apply("threads", F.threads, f"{WARPS_PER_SCHEDULER} warps per scheduler x "
                          f"{gpu.warp_schedulers_per_sm} schedulers, fewer for a problem of {vectors} vectors",
                          warps=WARPS_PER_SCHEDULER * int(gpu.warp_schedulers_per_sm), vectors=vectors))
    regs = int(d.apply("registers", F.regs, "estimate: addresses and loop, one register per 32-bit word of "
                       "the elements in flight (ptxas reports the count; past the per-thread maximum it spills)",
                       reg_base=REG_BASE, vector=vector, words=words, max_regs=gpu.max_regs_per_thread))
    bps_regs = HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=threads // 32, regs=regs,
                           reg_alloc_unit=gpu.reg_alloc_unit)
    ctas = int(d.apply("CTAs per SM", F.ctas_per_sm, "resident blocks, threads and registers per SM ([CC])",
                       max_blocks_per_sm=gpu.max_blocks_per_sm, max_threads_per_sm=gpu.max_threads_per_sm,
                       threads=threads, bps_regs=bps_regs))
    grid = int(d.apply("grid", F.grid, "one CTA per block of vectors, at most one full wave (grid-stride loop)",
                       vectors=vectors, threads=threads, sm_count=gpu.sm_count, ctas_per_sm=ctas))
    trips = int(d.apply("loop trips", F.trips, f"per thread: {vector} elements a trip", vectors=vectors,
                        grid=grid, threads=threads))
    prediction = predict(problem, gpu, trips, d)
    schedule = PointwiseSchedule(gpu.arch, vector, threads, grid)
    facts = {"vectors": vectors, "regs_estimate": regs, "ctas_per_sm": ctas, "trips": trips,
             "bytes": problem.bytes_moved()}
    return PointwiseConfig(problem, gpu, schedule, prediction, tuple(d.steps), facts)


def launch_constants(gpu) -> dict:
    """eta_dram and the launch latency (us) of the memory-bound families (``calibration.memory_constants``)."""
    from nova.hwmodel import calibration
    return calibration.memory_constants(gpu, streaming=True)


def predict(problem: PointwiseProblem, gpu, trips: int, d: Derivation) -> Prediction:
    """Step 6: time = Max(bytes / (DRAM bandwidth x eta_dram), trips x DRAM latency) + launch latency, an
    output stored transposed counting its bytes / TRANSPOSED_STORE_EFFICIENCY."""
    nbytes, why = problem.bytes_moved(), "distinct input bytes read once, outputs written once"
    transposed = problem.transposed_store_bytes()
    if transposed:
        nbytes = int(d.apply("bytes, transposed stores priced", F.effective_bytes,
                             f"{transposed} B stored transposed stream at {TRANSPOSED_STORE_EFFICIENCY} of a "
                             "contiguous store's rate", post=int, bytes=nbytes, transposed=transposed,
                             efficiency=TRANSPOSED_STORE_EFFICIENCY))
        why += f" ({transposed} B of them stored transposed, counted at 1/{TRANSPOSED_STORE_EFFICIENCY})"
    return memory_bound_prediction(gpu, nbytes, trips, why, "each loop trip waits at least one loaded DRAM "
                                   "latency", d)


def memory_bound_prediction(gpu, nbytes: int, trips: int, bytes_why: str, trip_why: str,
                            d: Derivation) -> Prediction:
    """The time of a kernel that streams ``nbytes`` from DRAM in ``trips`` dependent rounds (every
    memory-bound family's last step): Max(bytes / (DRAM bandwidth x eta_dram), trips x DRAM latency)
    + launch latency, the constants from the target's calibration (``launch_constants``)."""
    c = launch_constants(gpu)
    t_bw = d.apply("DRAM time (us)", F.t_bandwidth, f"{bytes_why}; eta_dram {c['eta_dram']:.3f} ({c['source']})",
                   bytes=nbytes, dram_bw=gpu.dram_bw, eta_dram=c["eta_dram"])
    t_mem = d.apply("memory time (us)", F.t_memory, trip_why,
                    t_bandwidth=t_bw, trips=trips, mem_latency_ns=gpu.mem_latency_ns)
    t = d.apply("time (us)", F.t_kernel, f"launch latency {c['t_launch_us']:.2f} us ({c['source']})",
                t_memory=t_mem, t_launch=c["t_launch_us"])
    bound = "dram" if t_mem >= c["t_launch_us"] else "launch"
    d.note("bound", bound, "launch-bound: the launch latency exceeds the memory time" if bound == "launch"
           else "DRAM-bound: the bytes take longer than the launch")
    return Prediction(time_us=t, tflops=0.0, bound=bound, floor_us=1e6 * nbytes / gpu.dram_bw,
                      terms_us={"memory": t_mem, "launch": c["t_launch_us"]})
