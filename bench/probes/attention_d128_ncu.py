"""One forward + backward of the D128 benchmark problem (BF16 causal 8x16x2048x128), for Nsight
Compute on the device (session 8: what binds the wgmma dK/dV and dQ kernels at D128, the shape
still below cuDNN):  ncu --clock-control none -k regex:nova_attn -c 4 --section SpeedOfLight ...
python3 bench/probes/attention_d128_ncu.py"""
import torch

import nova

q, k, v, do = (torch.randn(8, 16, 2048, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
o, lse = nova.attention(q, k, v, causal=True)
nova.attention_backward(do, q, k, v, o, lse, causal=True)
torch.cuda.synchronize()
