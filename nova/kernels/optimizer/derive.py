"""The Analytic Configurator for multi-tensor optimizer updates: closed form, one function per step.

The kernel (steps 1-6) depends on the update rule and the target only, never on the tensors: one
kernel serves every parameter group of its rule.  The prediction (steps 7-8) reads the sizes.

 1. vector width   the 16-byte access (ld.global.v4.b32, [PTX] ISA "ld": .v2/.v4 vectors of up to
                   128 bits): 16 / itemsize elements; every tensor is contiguous and 16-byte aligned
                   (checked when the plan is made and when the kernel is bound)
 2. threads        8 warps: two per warp scheduler ([CC] 4 schedulers per SM)
 3. unroll         a thread reads its tensor's table row (R words, the same for the whole CTA) once per
                   chunk; ``unroll`` vectors per thread per chunk make those loads at most as many as
                   its element loads: the power of two >= R / reads, at most MAX_LANES / vector (the
                   lanes a thread computes per chunk, unpacked into the compute type: [EST] 16 keeps
                   every rule at two CTAs of 256 threads per SM, ptxas counting 40-120 registers).  The
                   unrolled loads are all issued before the first store: unroll x reads 16-byte loads
                   in flight per thread
 4. registers      an estimate: 32 for addresses, the loop and the per-tensor scalars, one per 32-bit
                   word of each element value read, in the compute type (ptxas reports the real
                   count; tests check no spills)
 5. occupancy      CTAs per SM from threads, blocks and registers ([CC] per-SM limits)
 6. grid           one full wave (SMs x CTAs per SM) of persistent CTAs walking the chunks grid-stride
 7. chunks         sum over tensors of ceil(numel / chunk); trips = ceil(chunks / grid)
 8. prediction     memory time = the larger of bytes / (DRAM bandwidth x eta_dram) and the latency floor
                   (each trip waits one loaded DRAM latency, gpus.toml ``mem_latency_ns``), plus the launch
                   latency; eta_dram and the launch latency are the target's calibrated constants
                   (``nova/hwmodel/calibration``), else 1 and the preset's launch overhead ([EST] 3 us)
"""
from __future__ import annotations

from nova.configurator.derivation import Derivation
from nova.hwmodel import get_target
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import F as HW
from nova.kernels.optimizer.problem import MultiTensorProblem, UpdateRule
from nova.kernels.optimizer.schedule import MultiTensorConfig, MultiTensorSchedule
from nova.kernels.optimizer.table import row_words, table_bytes
from nova.kernels.pointwise.derive import memory_bound_prediction

ACCESS_BYTES = 16                # ld.global.v4.b32
WARPS_PER_SCHEDULER = 2          # two warps per scheduler per CTA: one issues while the other waits
REG_BASE = 32                    # [EST] addresses, loop counters, per-tensor scalars (ptxas verifies)
MAX_LANES = 16                   # [EST] elements a thread computes per chunk (ptxas: no spills, two CTAs per SM)

F = formulas("""
    vector = access_bytes / itemsize
    threads = warps * 32
    unroll = Min(2 ** ceil(log(ceil(row_words / reads)) / log(2)), max_lanes / vector)
    chunk = vector * threads * unroll
    regs = reg_base + unroll * vector * reads * words
    ctas_per_sm = Min(max_blocks_per_sm, floor(max_threads_per_sm / threads), bps_regs)
    grid = sm_count * ctas_per_sm
    trips = ceil(chunks / grid)
""")


def derive_schedule(rule: UpdateRule, gpu, d: Derivation) -> tuple[MultiTensorSchedule, dict]:
    """Steps 1-6: the kernel's schedule (independent of the tensors) and its derived figures."""
    vector = int(d.apply("vector", F.vector, f"16-byte accesses of {rule.dtype} elements",
                         access_bytes=ACCESS_BYTES, itemsize=rule.itemsize))
    warps = WARPS_PER_SCHEDULER * int(gpu.warp_schedulers_per_sm)
    threads = int(d.apply("threads", F.threads, f"{WARPS_PER_SCHEDULER} warps per scheduler x "
                          f"{gpu.warp_schedulers_per_sm} schedulers", warps=warps))
    reads = len(rule.reads())
    unroll = int(d.apply("unroll", F.unroll, f"the table row's {row_words(rule)} words per chunk amortized over "
                         f"{reads} element loads per vector, at most {MAX_LANES} lanes per thread",
                         row_words=row_words(rule), reads=reads, max_lanes=MAX_LANES, vector=vector))
    chunk = int(d.apply("chunk", F.chunk, "elements of one tensor per CTA at a time",
                        vector=vector, threads=threads, unroll=unroll))
    words = 2 if rule.dtype == "f64" else 1
    regs = int(d.apply("registers", F.regs, "estimate: addresses, loop and scalars, one register per 32-bit word "
                       "of each element value read, in the compute type (ptxas reports the count)",
                       reg_base=REG_BASE, unroll=unroll, vector=vector, reads=reads, words=words))
    bps_regs = HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=threads // 32, regs=regs,
                           reg_alloc_unit=gpu.reg_alloc_unit)
    ctas = int(d.apply("CTAs per SM", F.ctas_per_sm, "resident blocks, threads and registers per SM ([CC])",
                       max_blocks_per_sm=gpu.max_blocks_per_sm, max_threads_per_sm=gpu.max_threads_per_sm,
                       threads=threads, bps_regs=bps_regs))
    grid = int(d.apply("grid", F.grid, "one full wave of persistent CTAs; each walks the chunks grid-stride",
                       sm_count=gpu.sm_count, ctas_per_sm=ctas))
    return MultiTensorSchedule(gpu.arch, vector, threads, unroll, grid), {"regs_estimate": regs, "ctas_per_sm": ctas}


def configure_rule(rule: UpdateRule, target="h200") -> MultiTensorSchedule:
    """The schedule of ``rule``'s kernel on ``target`` (what the kernel cache is keyed by)."""
    return derive_schedule(rule, get_target(target), Derivation())[0]


def configure_multi_tensor(problem: MultiTensorProblem, target="h200") -> MultiTensorConfig:
    """Schedule, prediction and derivation of ``problem`` on ``target`` (steps in the module docstring)."""
    gpu = get_target(target)
    d = Derivation()
    schedule, facts = derive_schedule(problem.rule, gpu, d)
    chunks = sum(-(-n // schedule.chunk) for n in problem.sizes)
    d.note("chunks", chunks, f"sum over the {problem.tensors} tensor{'s' if problem.tensors != 1 else ''} of "
           f"ceil(numel / {schedule.chunk})")
    trips = int(d.apply("trips", F.trips, "chunks per CTA, the most any CTA walks", chunks=chunks, grid=schedule.grid))
    nbytes = problem.bytes_moved() + table_bytes(problem.rule, problem.tensors)
    prediction = memory_bound_prediction(
        gpu, nbytes, trips, f"{problem.rule.bytes_per_element} B per element ({', '.join(problem.rule.reads())} read; "
        f"{', '.join(problem.rule.writes())} written) and the argument table", "each trip waits at least one loaded "
        "DRAM latency", d)
    facts.update(chunks=chunks, trips=trips, bytes=nbytes, table_bytes=table_bytes(problem.rule, problem.tensors))
    return MultiTensorConfig(problem, gpu, schedule, prediction, tuple(d.steps), facts)
