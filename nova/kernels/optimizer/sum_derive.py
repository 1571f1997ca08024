"""The Analytic Configurator for multi-tensor sums: closed form, one function per step.

The kernel (steps 1-5) depends on the rule and the target only, never on the tensors: one kernel
serves every group of tensors summed with those entries.  The prediction (steps 6-7) reads the sizes.

 1. vector width   16-byte accesses of the widest element any entry reads or writes (ld.global.v4.b32 for
                   f32); narrower operands are read as as many elements (a bf16 gradient beside f32 ones:
                   8-byte loads); every tensor is contiguous and 16-byte aligned (checked at plan and bind)
 2. threads        8 warps: two per warp scheduler ([CC] 4 schedulers per SM), as the update kernels
 3. unroll         MAX_LANES / vector vectors a thread per chunk, all loads issued before the first add:
                   16 elements a thread in flight per operand ([EST], the update kernels' budget)
 4. occupancy      CTAs per SM from threads, blocks and the register estimate ([CC] per-SM limits)
 5. grid           one full wave (SMs x CTAs per SM); the chunk order is cut into ``grid`` equal contiguous
                   ranges, so a CTA meets few tensors and writes one partial sum per tensor it meets
 6. chunks         sum over tensors of ceil(numel / chunk); per CTA ceil(chunks / grid)
 7. prediction     the pass: the larger of bytes / (DRAM bandwidth x eta_dram) and the latency floor (each
                   chunk a CTA walks waits one loaded DRAM latency), plus the launch; then the last CTA to
                   finish adds each tensor's partials (a warp per tensor, warps in turn: ceil(tensors /
                   warps) rounds of at least one loaded latency each) and applies the epilogue
"""
from __future__ import annotations

from nova.configurator.derivation import Derivation
from nova.configurator.step import Prediction
from nova.hwmodel import get_target
from nova.hwmodel.formula import formulas
from nova.hwmodel.model import F as HW
from nova.kernels.optimizer.schedule import MultiTensorConfig, MultiTensorSchedule
from nova.kernels.optimizer.sum_problem import MultiTensorSumProblem, SumRule, chunk_counts, slots, table_bytes
from nova.kernels.pointwise.derive import memory_bound_prediction

ACCESS_BYTES = 16                # ld.global.v4.b32
WARPS_PER_SCHEDULER = 2          # two warps per scheduler per CTA
REG_BASE = 48                    # [EST] addresses, the walk, the accumulator, the final pass (ptxas verifies)
MAX_LANES = 16                   # [EST] elements a thread loads per operand and chunk (the update kernels' budget)

F = formulas("""
    vector = access_bytes / widest
    threads = warps * 32
    unroll = Max(1, max_lanes / vector)
    chunk = vector * threads * unroll
    regs = reg_base + unroll * vector * (operands + stores)
    ctas_per_sm = Min(max_blocks_per_sm, floor(max_threads_per_sm / threads), bps_regs)
    grid = sm_count * ctas_per_sm
    max_regs = Min(max_regs_per_thread, floor(regs_per_sm / (threads * ctas_per_sm) / 8) * 8)
    per_cta = ceil(chunks / grid)
    final_rounds = ceil(tensors / warps)
    t_final = final_rounds * mem_latency_ns * 1e-3
""")


def derive_schedule(rule: SumRule, gpu, d: Derivation) -> tuple[MultiTensorSchedule, dict]:
    """Steps 1-5: the kernel's schedule (independent of the tensors) and its derived figures."""
    vector = int(d.apply("vector", F.vector, f"16-byte accesses of the widest element ({rule.widest} B)",
                         access_bytes=ACCESS_BYTES, widest=rule.widest))
    warps = WARPS_PER_SCHEDULER * int(gpu.warp_schedulers_per_sm)
    threads = int(d.apply("threads", F.threads, f"{WARPS_PER_SCHEDULER} warps per scheduler x "
                          f"{gpu.warp_schedulers_per_sm} schedulers", warps=warps))
    unroll = int(d.apply("unroll", F.unroll, f"{MAX_LANES} elements a thread per operand and chunk, loads issued "
                         "before the first add", max_lanes=MAX_LANES, vector=vector))
    chunk = int(d.apply("chunk", F.chunk, "elements of one tensor per CTA at a time", vector=vector, threads=threads,
                        unroll=unroll))
    regs = int(d.apply("registers", F.regs, "estimate: addresses, the walk, the accumulator and one register per "
                       "loaded element of each operand and per stored element (ptxas reports the count)",
                       reg_base=REG_BASE, unroll=unroll, vector=vector, operands=rule.operands,
                       stores=int(rule.stores)))
    bps_regs = HW.bps_regs(regs_per_sm=gpu.regs_per_sm, warps=threads // 32, regs=regs,
                           reg_alloc_unit=gpu.reg_alloc_unit)
    ctas = int(d.apply("CTAs per SM", F.ctas_per_sm, "resident blocks, threads and registers per SM ([CC])",
                       max_blocks_per_sm=gpu.max_blocks_per_sm, max_threads_per_sm=gpu.max_threads_per_sm,
                       threads=threads, bps_regs=bps_regs))
    grid = int(d.apply("grid", F.grid, "one full wave; the chunk order cut into one contiguous range a CTA, one "
                       "partial sum per tensor a CTA meets (fixed order: deterministic, no float atomics); the last "
                       "CTA to finish (an integer completion counter) adds each tensor's partials in order",
                       sm_count=gpu.sm_count, ctas_per_sm=ctas))
    cap = int(d.apply("register cap", F.max_regs, "the CTAs per SM resident together (nvvm.maxnreg: ptxas may "
                      "otherwise take more and leave part of the wave waiting)", regs_per_sm=gpu.regs_per_sm,
                      threads=threads, ctas_per_sm=ctas, max_regs_per_thread=gpu.max_regs_per_thread))
    return MultiTensorSchedule(gpu.arch, vector, threads, unroll, grid, cap), {"regs_estimate": regs, "ctas_per_sm": ctas}


def configure_sum_rule(rule: SumRule, target="h200") -> MultiTensorSchedule:
    """The schedule of ``rule``'s kernel on ``target`` (what the kernel cache is keyed by)."""
    return derive_schedule(rule, get_target(target) if isinstance(target, str) else target, Derivation())[0]


def configure_multi_tensor_sum(problem: MultiTensorSumProblem, target="h200") -> MultiTensorConfig:
    """Schedule, prediction and derivation of ``problem`` on ``target`` (steps in the module docstring)."""
    gpu = get_target(target) if isinstance(target, str) else target
    d = Derivation()
    schedule, facts = derive_schedule(problem.rule, gpu, d)
    chunks = sum(chunk_counts(problem.sizes, schedule.chunk))
    d.note("chunks", chunks, f"sum over the {problem.tensors} tensor{'s' if problem.tensors != 1 else ''} of "
           f"ceil(numel / {schedule.chunk})")
    walk = int(d.apply("chunks a CTA", F.per_cta, "the chunk order cut into one contiguous range a CTA",
                       chunks=chunks, grid=schedule.grid))
    partials = slots(problem.tensors, schedule.grid) if problem.rule.reduces else 0
    nbytes = problem.bytes_moved() + table_bytes(problem.rule, problem.tensors, schedule.grid) + 2 * 4 * partials
    pass_ = memory_bound_prediction(gpu, nbytes, max(1, walk), "each tensor's operands read once, its stored value "
                                    "written once, the partial sums written and read, the argument table",
                                    "each chunk a CTA walks waits at least one loaded DRAM latency", d)
    warps = schedule.threads // 32
    if problem.rule.reduces:
        rounds = int(d.apply("final rounds", F.final_rounds, f"the last CTA: a warp per tensor, {warps} warps in turn",
                             tensors=problem.tensors, warps=warps))
        t_final = float(d.apply("final (us)", F.t_final, "each round at least one loaded latency (the partials' "
                                "loads)", final_rounds=rounds, mem_latency_ns=gpu.mem_latency_ns))
    else:
        t_final = float(d.note("final (us)", 0.0, "every entry store-only (a multi-tensor map): no partials, no "
                               "last CTA"))
    t = pass_.time_us + t_final
    prediction = Prediction(time_us=t, tflops=0.0, bound=pass_.bound, floor_us=pass_.floor_us,
                            terms_us={**pass_.terms_us, "final": t_final})
    facts.update(chunks=chunks, per_cta=walk, slots=partials, bytes=nbytes, final_us=round(t_final, 3),
                 table_bytes=table_bytes(problem.rule, problem.tensors, schedule.grid))
    return MultiTensorConfig(problem, gpu, schedule, prediction, tuple(d.steps), facts)
