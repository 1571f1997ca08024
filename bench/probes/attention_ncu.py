"""One forward + backward of an attention problem, for Nsight Compute on the device (what binds the
Hopper attention kernels): ``python3 bench/probes/attention_ncu.py [B,H,T,D] [dtype]`` (default: the
D128 benchmark problem, BF16 causal 8x16x2048x128; dtype bf16, fp16 or tf32, FP32 storage for TF32),
run under e.g.  ncu --clock-control none -k regex:nova_attn -c 4 --section SpeedOfLight ...
(used on the D128 BF16 kernels, the TF32 T512 forward and the D128 TF32 dK/dV)."""
import sys

import torch

import nova

B, H, T, D = (int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "8,16,2048,128").split(","))
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[sys.argv[2] if len(sys.argv) > 2
                                                                                   else "bf16"]
q, k, v, do = (torch.randn(B, H, T, D, device="cuda", dtype=dtype) for _ in range(4))
o, lse = nova.attention(q, k, v, causal=True)
nova.attention_backward(do, q, k, v, o, lse, causal=True)
torch.cuda.synchronize()
