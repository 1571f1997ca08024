"""The skinny GEMM with lanes along N (B row-major [K, N]) at each width of threads along N: does a
CTA that reads longer runs of each row of B stream closer to the DRAM roofline?

    python3 bench/probes/skinny_width.py --build     # host: every variant into $NOVA_CACHE_DIR (h200, h100)
    python3 bench/probes/skinny_width.py             # GPU: each variant timed, against cuBLAS
    ... --half-vector                                # with: half the vector width at 16, 32, 64 along N
    ncu --clock-control none -k regex:nova_gemm_skinny --section SpeedOfLight ... \
        python3 bench/probes/skinny_width.py --only 7:32,6:8   # problem index : width, one launch each

The held-out draw of bench/results/h200-2026-12-06/run66 measured the lanes-along-N kernel at 1.5-2.3x its prediction
(0.2-0.6 of the roofline for B's bytes) where the lanes-along-K kernel (B stored [N, K]) ran at its
prediction.  A variant is the configurator's own steps 5-9 (``skinny._configure_width``) at another
``threads_n`` (8 .. 256 of the CTA's 256 threads; the rest stacked along K), so each is a consistent
schedule, keyed, built and launched as any other (``nova.runtime.matmul.configure_schedule`` replaced
by one returning the variant).  Timing: 20 launches queued behind a ``torch.cuda._sleep``, CUDA events
around them, the best of 7; every variant's C checked against float64 (fresh random data, C NaN-poisoned).
"""
import math
import sys

from nova.configurator.derivation import Derivation
from nova.hwmodel import get_target
from nova.kernels.gemm import skinny
from nova.kernels.gemm.problem import GemmProblem
from nova.runtime import matmul

PROBLEMS = [GemmProblem(5, 13504, 9344, "bf16", trans_a=True), GemmProblem(3, 12928, 2816, "bf16"),
            GemmProblem(10, 1920, 6336, "bf16", trans_a=True), GemmProblem(6, 7652, 6292, "tf32"),
            GemmProblem(5, 2560, 12608, "tf32", trans_a=True), GemmProblem(12, 12864, 13184, "tf32"),
            GemmProblem(1, 4096, 4096, "bf16"), GemmProblem(8, 14336, 4096, "bf16")]
WIDTHS = (8, 16, 32, 64, 128, 256)


def variants(p: GemmProblem, gpu) -> dict:
    """{threads_n (or (threads_n, vec) at half the vector): (schedule, prediction)} of the lanes-along-N
    kernel, the configured schedule under key "pick"."""
    (lanes, vec, _), _ = skinny.layout_and_vector(p)
    out = {}
    if "--half-vector" in sys.argv and vec > 1:      # half the sums a thread keeps: more CTAs an SM
        half = vec // 2
        (threads, _, rows), _ = skinny.threads_step(p, gpu, lanes, half)
        for width in (16, 32, 64):
            got = skinny._configure_width(p, gpu, lanes, half, threads, width, rows, Derivation())
            if got is not None:
                out[(width, half)] = got
    (threads, _, rows), _ = skinny.threads_step(p, gpu, lanes, vec)
    for width in WIDTHS:
        if width > threads or width * vec > 2 * p.N or width * vec * p.in_bytes < skinny.LINE_BYTES // 2:
            continue
        got = skinny._configure_width(p, gpu, lanes, vec, threads, width, rows, Derivation())
        if got is not None:
            out[width] = got
    picked = matmul.configure_schedule.__wrapped__(p, gpu) if hasattr(matmul.configure_schedule, "__wrapped__") \
        else matmul.configure_schedule(p, gpu)
    out["pick"] = picked
    return out


CHOSEN: dict = {}
_configured = matmul.configure_schedule


def configure_variant(problem, target):
    return CHOSEN.get(problem) or _configured(problem, target)


configure_variant.__wrapped__ = _configured
matmul.configure_schedule = configure_variant


def build():
    from nova.runtime.cache import KernelCache
    cache = KernelCache()
    for target in ("h200", "h100"):
        gpu = get_target(target)
        for p in PROBLEMS:
            for width, got in variants(p, gpu).items():
                if width == "pick":
                    continue
                CHOSEN[p] = got[0]
                matmul.precompile_gemms([p], gpu, cache, log=lambda line: None)
                print(target, p.describe(), got[0].label(), f"{got[1].time_us:.1f} us predicted")
            CHOSEN.pop(p, None)


def run(only: dict | None = None):
    """``only``: {problem index: [widths]} launched once each, untimed (for a profiler)."""
    import torch
    name = torch.cuda.get_device_name()
    gpu = get_target("h100" if "H100" in name else "h200")
    print(name, "plans for", gpu.name)
    gen = torch.Generator(device="cuda").manual_seed(20261206)
    dt = {"tf32": torch.float32, "bf16": torch.bfloat16}
    for index, p in enumerate(PROBLEMS):
        if only is not None and index not in only:
            continue
        a_stored = torch.randn(*((p.K, p.M) if p.trans_a else (p.M, p.K)), device="cuda", generator=gen).to(dt[p.dtype])
        b = torch.randn(p.K, p.N, device="cuda", generator=gen).to(dt[p.dtype])
        a = a_stored.t() if p.trans_a else a_stored
        ref = a.double() @ b.double()
        c = torch.empty(p.M, p.N, device="cuda", dtype=dt[p.dtype] if p.dtype == "bf16" else torch.float32)
        b_bytes = p.K * p.N * p.in_bytes

        def timed(launch) -> float:
            for _ in range(3):
                launch()
            best = math.inf
            for _ in range(7):
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(int(3e7))
                start.record()
                for _ in range(20):
                    launch()
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) * 1e3 / 20)
            return best
        torch.backends.cuda.matmul.allow_tf32 = True
        t_cublas = timed(lambda: torch.matmul(a, b)) if only is None else math.nan
        found = variants(p, gpu)
        pick = found.pop("pick")
        print(f"{p.describe()}: B {b_bytes / 1e6:.1f} MB; cuBLAS {t_cublas:.1f} us "
              f"({b_bytes / t_cublas / 1e6:.2f} TB/s); configured: "
              f"{pick.label() if hasattr(pick, 'label') else type(pick).__name__}")
        for width, (schedule, prediction) in found.items():
            if only is not None and width not in only[index]:
                continue
            CHOSEN[p] = schedule
            matmul.reset()
            try:
                kernel = matmul.resolve_kernel(p, gpu)
            except Exception as e:
                print(f"   {schedule.label():<28} not built: {str(e).splitlines()[0][:90]}")
                continue
            c.fill_(float("nan"))
            run_one = (lambda: kernel.run(a_stored.data_ptr(), b.data_ptr(), c.data_ptr()))
            run_one()
            torch.cuda.synchronize()
            err = float((c.double() - ref).norm() / ref.norm())
            if only is not None:
                print(f"   {schedule.label():<28} launched once, error {err:.1e}")
                continue
            t = timed(run_one)
            print(f"   {schedule.label():<28} {t:8.1f} us  {b_bytes / t / 1e6:5.2f} TB/s  predicted "
                  f"{prediction.time_us:7.1f}  vs cuBLAS {t_cublas / t:5.2f}x  error {err:.1e}")
        CHOSEN.pop(p, None)


if __name__ == "__main__":
    if "--build" in sys.argv:
        build()
    elif "--only" in sys.argv:
        pairs = [item.split(":") for item in sys.argv[sys.argv.index("--only") + 1].split(",")]
        wanted: dict = {}
        for index, width in pairs:
            wanted.setdefault(int(index), []).append(int(width))
        run(wanted)
    else:
        run()
