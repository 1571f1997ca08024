"""One launch each of Nova's TF32 forward 16384x3072x768 NT +bias (shared x shared wgmma), Nova's
dX layout of the same shape (NN: C^T = B^T A^T, B from registers) and cuBLAS's NT +bias, for Nsight
Compute (why Nova's SS TF32 does less work per clock than cuBLAS under the power cap):
    ncu --clock-control none -k regex:"gemm|xmma|cutlass" -c 3 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats python3 bench/probes/tf32_forward_ncu.py"""
import torch

import nova

torch.backends.cuda.matmul.allow_tf32 = True
M, N, K = 16384, 3072, 768
x = torch.randn(M, K, device="cuda")
w = torch.randn(N, K, device="cuda")
wt = w.T.contiguous()
bias = torch.randn(N, device="cuda")
out = torch.empty(M, N, device="cuda")
for _ in range(3):                                    # warm (kernel loads, cuBLAS heuristics) outside the profile
    nova.matmul(x, w.T, out=out, bias=bias)
    nova.matmul(x, wt, out=out)
    torch.addmm(bias, x, w.T, out=out)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
nova.matmul(x, w.T, out=out, bias=bias)
nova.matmul(x, wt, out=out)
torch.addmm(bias, x, w.T, out=out)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
