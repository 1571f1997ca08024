"""GPT-42M's 16384x2048x512 TF32 GEMMs with and without their epilogue matrices, one launch each for
Nsight Compute: the plain NN product, the forward's NT +bias+gelu+P (writes C and P) and the backward's NN
gelu'(R) (reads R, writes C).  gelu'(R) measured 189 us on the H100 against 147 for the forward with two
outputs (run 60): whether R's loads stall the consumers (long-scoreboard stalls in the epilogue, DRAM
reads at the epilogue's rate) or something else holds it.

    python3 bench/probes/epilogue_ncu.py build [TARGET]          # host: the kernels into $NOVA_CACHE_DIR
    ncu --clock-control none -k regex:nova -c 3 --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section SchedulerStats python3 bench/probes/epilogue_ncu.py run
"""
import sys

M, N, K = 16384, 2048, 512


def problems():
    from nova.kernels.gemm.problem import GemmProblem
    return [GemmProblem(M, N, K, "tf32"),
            GemmProblem(M, N, K, "tf32", trans_b=True, bias=True, activation="gelu", preactivation=True),
            GemmProblem(M, N, K, "tf32", activation="gelu", residual=True, activation_grad=True)]


def build(target: str) -> None:
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    from nova.runtime.matmul import precompile_gemms
    print(precompile_gemms(problems(), get_target(target), KernelCache()))


def run() -> None:
    import torch
    import nova
    gen = torch.Generator(device="cuda").manual_seed(20261206)
    a = torch.randn(M, K, device="cuda", generator=gen)
    b = torch.randn(K, N, device="cuda", generator=gen)
    w = torch.randn(N, K, device="cuda", generator=gen)
    bias = torch.randn(N, device="cuda", generator=gen)
    pre = torch.randn(M, N, device="cuda", generator=gen) * 3
    out, p = torch.empty(M, N, device="cuda"), torch.empty(M, N, device="cuda")
    calls = [lambda: nova.matmul(a, b, out=out),
             lambda: nova.matmul(a, w.T, out=out, bias=bias, activation="gelu", preactivation=p),
             lambda: nova.matmul(a, b, out=out, activation="gelu", residual=pre, activation_grad=True)]
    for _ in range(3):                        # kernel loads outside the profile
        for call in calls:
            call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for name, call in zip(("plain NN", "NT +bias+gelu+P", "NN gelu'(R)"), calls):
        start.record()
        for _ in range(20):
            call()
        end.record()
        torch.cuda.synchronize()
        print(f"{name:16s} {start.elapsed_time(end) / 20 * 1000:8.1f} us (events, 20 back to back)")
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    build(sys.argv[2] if len(sys.argv) > 2 else "h200") if sys.argv[1] == "build" else run()
