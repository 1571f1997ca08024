"""One GEMM launched a few times (for ncu): ``python3 bench/probes/cluster_one.py M N K dtype [NN|NT|TN]``
(TN: A stored [K, M], the weight gradient's layout); the cluster shape comes from $NOVA_CLUSTER
(precompiled with the same setting)."""
import sys

import torch

import nova

M, N, K, dtype = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
layout = sys.argv[5] if len(sys.argv) > 5 else "NN"
nt = layout == "NT"
dt = torch.float32 if dtype == "tf32" else torch.bfloat16
a = torch.randn(K, M, device="cuda", dtype=dt).t() if layout == "TN" else torch.randn(M, K, device="cuda", dtype=dt)
b = torch.randn(N, K, device="cuda", dtype=dt).t() if nt else torch.randn(K, N, device="cuda", dtype=dt)
for _ in range(5):
    c = nova.matmul(a, b)
torch.cuda.synchronize()
print("ok", float((c.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()))
