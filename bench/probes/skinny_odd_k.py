"""Odd-K decode GEMMs with B stored [N, K] (the skinny kernel's shifted rows) against cuBLAS: each
timed with CUDA events over 20 back-to-back calls after a warm-up, L2 not flushed (B is 15-600 MB),
the result checked against float64.  ``python3 bench/probes/skinny_odd_k.py`` on a GPU with the
kernels in ``NOVA_CACHE_DIR`` (``--build`` on a host with MLIR puts them there)."""
import sys

SHAPES = [(8, 14759, 10323, "tf32"), (14, 14759, 10323, "tf32"), (13, 7603, 270, "bf16"), (1, 1381, 746, "bf16"),
          (11, 702, 1659, "tf32")]


def main() -> int:
    import torch
    from nova.kernels.gemm.problem import GemmProblem
    if "--build" in sys.argv:
        from nova.hwmodel import get_target
        from nova.runtime.cache import KernelCache
        from nova.runtime.matmul import precompile_gemms
        for target in ("h200", "h100"):
            precompile_gemms([GemmProblem(m, n, k, dt, False, True) for m, n, k, dt in SHAPES], get_target(target),
                             KernelCache())
        return 0
    from nova.runtime.matmul import matmul, resolve_kernel
    from nova.kernels.gemm.space import label
    torch.backends.cuda.matmul.allow_tf32 = True
    for m, n, k, dt in SHAPES:
        ty = torch.float32 if dt == "tf32" else torch.bfloat16
        a = torch.randn(m, k, device="cuda", dtype=ty)
        b = torch.randn(n, k, device="cuda", dtype=ty)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=ty)
        matmul(a, b.t(), out=out)
        ref = a.double() @ b.double().t()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        times = {}
        for name, fn in (("nova", lambda: matmul(a, b.t(), out=out)), ("cublas", lambda: torch.matmul(a, b.t()))):
            for _ in range(5):
                fn()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                fn()
            end.record()
            torch.cuda.synchronize()
            times[name] = start.elapsed_time(end) / 20 * 1e3
        kernel = label(resolve_kernel(GemmProblem(m, n, k, dt, False, True), eager=True).schedule)
        print(f"{m}x{n}x{k} {dt} NT: nova {times['nova']:.1f} us ({kernel}), cuBLAS {times['cublas']:.1f} us "
              f"({times['cublas'] / times['nova']:.2f}x), error {err:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
