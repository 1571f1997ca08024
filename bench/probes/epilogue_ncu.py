"""GPT-42M's 16384x2048x512 TF32 GEMMs with and without their epilogue matrices, one launch each for
Nsight Compute: the plain NN product, the forward's NT +bias+gelu+P (writes C and P) and the backward's NN
gelu'(R) (reads R, writes C); and HF GPT-2's bf16 twins (the backward NT), timed with CUDA events.  Run
under ``NOVA_PINGPONG=0|1`` (build and run alike) for the other consumer schedule.  gelu'(R) measured
189 us on the H100 against 147 for the forward with two outputs (run 60): whether R's loads stall the
consumers (long-scoreboard stalls in the epilogue, DRAM reads at the epilogue's rate) or something else
holds it.

    python3 bench/probes/epilogue_ncu.py build [TARGET]          # host: the kernels into $NOVA_CACHE_DIR
    python3 bench/probes/epilogue_ncu.py time                    # events only, f32 and bf16
    ncu --clock-control none -k regex:nova -c 3 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats python3 bench/probes/epilogue_ncu.py run
"""
import sys

M, N, K = 16384, 2048, 512


def problems():
    from nova.kernels.gemm.problem import GemmProblem
    return [q for dtype, back_t in (("tf32", False), ("bf16", True)) for q in (
            GemmProblem(M, N, K, dtype, trans_b=back_t),
            GemmProblem(M, N, K, dtype, trans_b=not back_t, bias=True, activation="gelu", preactivation=True),
            GemmProblem(M, N, K, dtype, trans_b=back_t, activation="gelu", residual=True, activation_grad=True))]


def build(target: str) -> None:
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    from nova.runtime.matmul import precompile_gemms
    print(precompile_gemms(problems(), get_target(target), KernelCache()))


def calls(dtype: str):
    """The three launches of ``dtype`` (tf32 data is float32), on fresh random operands."""
    import torch
    import nova
    t = torch.float32 if dtype == "tf32" else torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(20261206)
    rand = lambda *shape: torch.randn(*shape, device="cuda", generator=gen).to(t)   # noqa: E731
    a, b, w, bias, pre = rand(M, K), rand(K, N), rand(N, K), rand(N), rand(M, N) * 3
    back = w.T if dtype == "bf16" else b              # HF GPT-2's backward is NT, GPT-42M's NN
    out, p = torch.empty(M, N, device="cuda", dtype=t), torch.empty(M, N, device="cuda", dtype=t)
    return [("plain", lambda: nova.matmul(a, back, out=out)),
            ("+bias+gelu+P", lambda: nova.matmul(a, w.T if dtype == "tf32" else b, out=out, bias=bias,
                                                 activation="gelu", preactivation=p)),
            ("gelu'(R)", lambda: nova.matmul(a, back, out=out, activation="gelu", residual=pre,
                                             activation_grad=True))]


def time_calls(dtype: str) -> None:
    import torch
    launches = calls(dtype)
    for _ in range(3):                        # kernel loads outside the timing
        for _, call in launches:
            call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for name, call in launches:
        torch.cuda.synchronize()
        start.record()
        for _ in range(20):
            call()
        end.record()
        torch.cuda.synchronize()
        print(f"{dtype} {name:14s} {start.elapsed_time(end) / 20 * 1000:8.1f} us (events, 20 back to back)")


def run() -> None:
    import torch
    time_calls("tf32")
    launches = calls("tf32")
    torch.cuda.cudart().cudaProfilerStart()
    for _, call in launches:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2] if len(sys.argv) > 2 else "h200")
    elif sys.argv[1] == "time":
        time_calls("tf32")
        time_calls("bf16")
    else:
        run()
