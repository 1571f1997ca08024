"""One attention problem in isolation (a crash's diagnosis): ``python3 bench/probes/attention_one.py
B H Hkv T D dtype causal WHO`` runs Nova's forward and backward (WHO=nova, against float64) or one torch
SDPA backend (WHO=flash|cudnn|efficient|math; WHO=nova-fwd: Nova's forward alone) on fresh random data, synchronizing after each call so
that an asynchronous CUDA error names its call."""
import math
import sys

import torch

B, H, Hkv, T, D = map(int, sys.argv[1:6])
dtype, causal, who = sys.argv[6], sys.argv[7] == "causal", sys.argv[8]
dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dtype]
gen = torch.Generator(device="cuda").manual_seed(7)
q, do = (torch.randn(B, H, T, D, device="cuda", dtype=dt, generator=gen) for _ in range(2))
k, v = (torch.randn(B, Hkv, T, D, device="cuda", dtype=dt, generator=gen) for _ in range(2))
if who.startswith("nova"):
    import nova
    from nova.bench.heldout import attention_reference
    out, lse = torch.full_like(q, math.nan), torch.full((B, H, T), math.nan, device="cuda")
    nova.attention(q, k, v, causal=causal, out=out, lse=lse)
    torch.cuda.synchronize()
    print("forward ok", flush=True)
    if who == "nova-fwd":
        sys.exit(0)
    dq, dk, dv = torch.full_like(q, math.nan), torch.full_like(k, math.nan), torch.full_like(v, math.nan)
    nova.attention_backward(do, q, k, v, out, lse, causal=causal, dq=dq, dk=dk, dv=dv)
    torch.cuda.synchronize()
    print("backward ok", flush=True)
    ref = attention_reference(torch, q, k, v, do, causal)
    for name, got, want in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, dq, dk, dv), ref):
        print(name, float((got.double() - want).norm() / want.norm()), flush=True)
else:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[who]
    qa, ka, va = (x.clone().requires_grad_() for x in (q, k, v))
    with sdpa_kernel([backend]):
        F.scaled_dot_product_attention(qa, ka, va, is_causal=causal, enable_gqa=H != Hkv).backward(do)
    torch.cuda.synchronize()
    print(who, "ok", flush=True)
