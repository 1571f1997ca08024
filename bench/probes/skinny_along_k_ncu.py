"""The skinny GEMM with lanes along K (B stored [N, K]) under Nsight Compute: where does its time go?
The held-out draws time it at 1.3-2.4x its model (11x640x14144 tf32 NT 30.3 us against 18.4 predicted,
4x704x1728 bf16 NT 6.5 against 3.1, 15x2199x574 bf16 NT 11.9 against 4.2 on the H100) where the lanes-
along-N kernel runs at its model; a lanes-along-N problem of the same draw is profiled beside them.

    NOVA_CACHE_DIR=... python3 bench/probes/skinny_along_k_ncu.py build      # host: h100 and h200 kernels
    python3 bench/probes/skinny_along_k_ncu.py time                          # GPU: events, model beside
    ncu --clock-control none -k regex:nova_gemm_skinny --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        python3 bench/probes/skinny_along_k_ncu.py run                       # one launch of each

Each problem runs its device pick (``eager=False``) where that is the skinny kernel.  ``time`` also
times, in the same process, the pick's variants (``variants``): staging A element by element where the
pick stages vectors (``a_vec`` = 1), and A's whole K slice staged as one chunk where the pick stages
several (``a_chunk`` = ``k_slice``: one staging, no chunk barriers; a first trip known whole where K
is not split).  A lanes-along-N problem or two are timed beside the K-lane ones.
"""
import dataclasses
import sys

from nova.kernels.gemm.problem import GemmProblem

PROBLEMS = [GemmProblem(11, 640, 14144, "tf32", trans_b=True), GemmProblem(4, 704, 1728, "bf16", trans_b=True),
            GemmProblem(15, 2199, 574, "bf16", trans_b=True), GemmProblem(3, 3200, 11776, "tf32", trans_b=True),
            GemmProblem(10, 1408, 3328, "bf16", trans_b=True), GemmProblem(6, 5760, 5120, "tf32"),
            GemmProblem(11, 2688, 1408, "bf16"),
            # the K-lane kernels still 1.3-1.6x their model after the chunk fix (seed 20261218, run 118)
            GemmProblem(4, 1751, 3579, "bf16", trans_b=True), GemmProblem(9, 320, 832, "tf32", trans_b=True),
            GemmProblem(5, 320, 9728, "bf16", trans_b=True)]
ONE_CHUNK_BYTES = 120 * 1024      # the one-chunk variant only where A's slice fits this much shared memory


def variants(p: GemmProblem, s) -> dict:
    """The pick ``s``'s variants timed beside it: "by elements" (``a_vec`` = 1) where it stages vectors;
    "one chunk" (``a_chunk`` = ``k_slice``, its staging vector and shared memory again) where it stages
    several chunks a slice and A's slice fits ONE_CHUNK_BYTES."""
    from nova.kernels.gemm import skinny
    out = {}
    if s.a_vec > 1:
        out["by elements"] = dataclasses.replace(s, a_vec=1)
    if s.a_chunk < s.k_slice and 4 * (s.k_slice + s.halo) * s.m_pad <= ONE_CHUNK_BYTES:
        a_vec = skinny.staging_vector(p, s.lanes_along, s.k_slice, s.k_slice, s.halo)
        one = dataclasses.replace(s, a_chunk=s.k_slice, a_vec=a_vec, stage_loads=max(a_vec, s.stage_loads // a_vec * a_vec))
        out["one chunk"] = dataclasses.replace(one, smem_bytes=skinny.smem_bytes(
            p, s.lanes_along, s.threads, s.threads_n, s.vec, s.k_slice, s.m_pad, s.reduction_smem_bytes(p.M), s.halo))
    return out


def build() -> None:
    from nova.configurator import configure
    from nova.hwmodel import get_target
    from nova.kernels.gemm.family import get_or_compile
    from nova.runtime.cache import KernelCache
    from nova.runtime.matmul import precompile_gemms
    for target in ("h100", "h200"):
        precompile_gemms(PROBLEMS, get_target(target), KernelCache(), eager=False)
        for p in PROBLEMS:
            cfg = configure(p, target)
            if cfg.skinny:
                for schedule in variants(p, cfg.schedule).values():
                    get_or_compile(p, schedule, get_target(target), KernelCache(), offline=False)


def timed_us(torch, call) -> float:
    """The best of 7 bursts of 20 calls queued behind a sleep, per call."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(7):
        torch.cuda._sleep(2_000_000)
        start.record()
        for _ in range(20):
            call()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / 20)
    return best


def operands(torch, p: GemmProblem):
    dtype = torch.float32 if p.dtype == "tf32" else torch.bfloat16
    a = torch.randn(p.M, p.K, device="cuda", dtype=dtype)
    b = torch.randn(p.N, p.K, device="cuda", dtype=dtype).T if p.trans_b else \
        torch.randn(p.K, p.N, device="cuda", dtype=dtype)
    return a, b, torch.full((p.M, p.N), float("nan"), device="cuda", dtype=dtype)


def main(mode: str) -> None:
    if mode == "build":
        return build()
    import torch
    import nova
    from nova.configurator import configure
    from nova.kernels.gemm.space import label
    from nova.runtime import matmul
    from nova.runtime.matmul import resolve_target
    target = resolve_target()
    for p in PROBLEMS:
        cfg = configure(p, target)
        if not cfg.skinny:
            print(f"{p.describe():36s} {label(cfg.schedule)}: not the skinny kernel on {target.name}, left out")
            continue
        a, b, c = operands(torch, p)
        nova.matmul(a, b, out=c, eager=False)
        torch.cuda.synchronize()
        ref = (a.double() @ b.double())
        err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
        line = f"{p.describe():36s} {label(cfg.schedule)} predicted {cfg.time_us:6.1f} us"
        if mode == "time":
            line += f", measured {timed_us(torch, lambda: nova.matmul(a, b, out=c, eager=False)):6.1f} us"
            for name, schedule in variants(p, cfg.schedule).items():
                configured = matmul.configure_schedule
                matmul.configure_schedule = lambda problem, target, eager=False, schedule=schedule: schedule
                try:
                    matmul.reset()
                    c.fill_(float("nan"))
                    nova.matmul(a, b, out=c, eager=False)
                    torch.cuda.synchronize()
                    err_v = ((c.double() - ref).abs().max() / ref.abs().max()).item()
                    line += (f"; {name} {timed_us(torch, lambda: nova.matmul(a, b, out=c, eager=False)):6.1f} us"
                             f" (error {err_v:.1e})")
                finally:
                    matmul.configure_schedule = configured
                    matmul.reset()
        print(line + f", error {err:.1e}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "time")
