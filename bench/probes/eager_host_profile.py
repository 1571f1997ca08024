"""Where an eager ``nova.matmul`` call's host time goes, on the held-out draws' bottom problems (small
GEMMs whose call waits for the host, not the device: bench/results/h100-2026-12-07/run118-h100).

    NOVA_CACHE_DIR=... python3 bench/probes/eager_host_profile.py build     # host: h100 and h200 kernels
    python3 bench/probes/eager_host_profile.py                              # GPU

Per problem: the call back to back (nova and torch.matmul, same operands, best of 5 bursts of 200
calls, per call), the kernel launches a nova call makes, and cProfile's 12 costliest functions (own
time) over 2,000 nova calls.
"""
import cProfile
import io
import pstats
import sys
import time

from nova.kernels.gemm.problem import GemmProblem

PROBLEMS = [GemmProblem(320, 320, 320, "tf32", trans_a=True), GemmProblem(52, 858, 378, "tf32"),
            GemmProblem(275, 393, 340, "tf32", trans_a=True), GemmProblem(540, 579, 519, "bf16", trans_b=True),
            GemmProblem(1, 4096, 576, "tf32", trans_b=True), GemmProblem(46, 8325, 566, "tf32", trans_a=True),
            GemmProblem(448, 448, 448, "tf32", trans_b=True)]


def operands(torch, p: GemmProblem):
    dtype = torch.float32 if p.dtype == "tf32" else torch.bfloat16
    a = torch.randn(p.K, p.M, device="cuda", dtype=dtype).T if p.trans_a else torch.randn(p.M, p.K, device="cuda", dtype=dtype)
    b = torch.randn(p.N, p.K, device="cuda", dtype=dtype).T if p.trans_b else torch.randn(p.K, p.N, device="cuda", dtype=dtype)
    return a, b, torch.empty(p.M, p.N, device="cuda", dtype=dtype)


def per_call_us(torch, call, calls: int = 200) -> float:
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1e6 / calls)
    return best


def main(mode: str) -> None:
    if mode == "build":
        from nova.hwmodel import get_target
        from nova.runtime.cache import KernelCache
        from nova.runtime.matmul import precompile_gemms
        for target in ("h100", "h200"):
            precompile_gemms(PROBLEMS, get_target(target), KernelCache())
        return
    import torch
    import nova
    from nova.runtime import driver
    torch.backends.cuda.matmul.allow_tf32 = True
    for p in PROBLEMS:
        a, b, c = operands(torch, p)
        nova.matmul(a, b, out=c)
        torch.cuda.synchronize()
        launches = []
        hot = driver._hot
        real = hot.launch_ex
        if real is not None:
            def counting(*args, real=real):
                launches.append(1)
                return real(*args)
            hot.launch_ex = counting
            try:
                nova.matmul(a, b, out=c)
            finally:
                hot.launch_ex = real
        t_nova = per_call_us(torch, lambda: nova.matmul(a, b, out=c))
        t_torch = per_call_us(torch, lambda: torch.matmul(a, b, out=c))
        count = len(launches) if real is not None else "n/a"
        print(f"{p.describe():40s} nova {t_nova:6.1f} us a call ({count} launches), torch.matmul {t_torch:6.1f}",
              flush=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            nova.matmul(a, b, out=c)
        prof.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
        print("\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "time")
