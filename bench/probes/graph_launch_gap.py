"""The per-launch gap of a CUDA-graph replay on this GPU: the calibration's ``t_launch_us``, measured
the way the H200's was (graph replay per call minus the kernel's own CUPTI duration), not fitted.

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=... python3 bench/probes/graph_launch_gap.py     # GPU
    NOVA_CACHE_DIR=... python3 bench/probes/graph_launch_gap.py --build --target h100   # host

A few Nova GEMMs from tiny to 1024^3: each captured 50 times in one CUDA graph, replayed (best of 20
replays per call), and the same calls' kernel durations from torch.profiler (CUPTI, median); the gap
is the difference.  Small kernels show it alone; a large one shows that it does not grow with size."""
import statistics
import sys

from nova.kernels.gemm.problem import GemmProblem

PROBLEMS = [GemmProblem(256, 320, 256, "bf16", trans_b=True), GemmProblem(512, 512, 512, "bf16", trans_b=True),
            GemmProblem(1024, 1024, 1024, "bf16", trans_b=True), GemmProblem(1024, 1024, 1024, "tf32", trans_b=True)]
CALLS = 50

if "--build" in sys.argv:
    from nova.hwmodel import get_target
    from nova.runtime import matmul
    from nova.runtime.cache import KernelCache
    target = get_target(sys.argv[sys.argv.index("--target") + 1])
    print(matmul.precompile_gemms(PROBLEMS, target, KernelCache()))
    sys.exit(0)

import torch  # noqa: E402

import nova  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = True
DT = {"bf16": torch.bfloat16, "tf32": torch.float32}
print(torch.cuda.get_device_name())
for p in PROBLEMS:
    a = torch.randn(p.M, p.K, device="cuda").to(DT[p.dtype])
    b = torch.randn(p.N, p.K, device="cuda").to(DT[p.dtype])
    c = torch.empty(p.M, p.N, device="cuda", dtype=DT[p.dtype])
    for _ in range(3):
        nova.matmul(a, b.t(), out=c)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        nova.matmul(a, b.t(), out=c)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(CALLS):
                nova.matmul(a, b.t(), out=c)
    best = float("inf")
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / CALLS)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = [e.time_range.end - e.time_range.start for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    per_call = sum(kernels) / CALLS
    print(f"{p.describe():<34} graph {best:7.2f} us a call, kernels {per_call:7.2f} us ({len(kernels) // CALLS} a call, "
          f"median {statistics.median(kernels):.2f}), gap {best - per_call:5.2f} us")
