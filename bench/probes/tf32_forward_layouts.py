"""Probe: why Nova's TF32 forward GEMMs (Y = X W^T + b, B stored [N, K]: both
operands K-major, shared x shared wgmma) trail cuBLAS at K = 512-768 while the dX GEMMs of the same
M, N, K (B stored [K, N]: C^T = B^T A^T, B from registers) lead it.  Times each layout with and
without the bias for Nova and torch (cuBLAS) by CUDA-graph replay on the same data, after settling:

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 bench/probes/tf32_forward_layouts.py [$OUT]
Host: nova precompile gemm <shape> --dtype tf32 [--trans-b] [--bias] for each line of SHAPES x LAYOUTS.
"""
import json
import os
import sys

import torch

import nova
from nova.bench.harness import graph_replay, settle

SHAPES = [(16384, 2048, 512), (16384, 3072, 768)]
LAYOUTS = [("NT+bias", True, True), ("NT", True, False), ("NN", False, False), ("NN+bias", False, True)]


def main(out_dir):
    torch.backends.cuda.matmul.allow_tf32 = True
    rows = []
    for M, N, K in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(M + N + K)
        x = torch.randn(M, K, device="cuda", generator=g)
        w = torch.randn(N, K, device="cuda", generator=g)          # [N, K]: NT reads w.T in place
        wt = w.T.contiguous()                                      # [K, N]: NN
        bias = torch.randn(N, device="cuda", generator=g)
        out = torch.empty(M, N, device="cuda")
        for name, nt, with_bias in LAYOUTS:
            b = w.T if nt else wt
            bb = bias if with_bias else None
            fns = {"nova": lambda i, b=b, bb=bb: nova.matmul(x, b, out=out, bias=bb),
                   "cublas": (lambda i, b=b, bb=bb: torch.addmm(bb, x, b, out=out)) if with_bias
                   else (lambda i, b=b: torch.mm(x, b, out=out))}
            ref = (x.double() @ b.double() + (bb.double() if bb is not None else 0))
            out.fill_(float("nan"))
            fns["nova"](0)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            settle(torch, list(fns.values()), 1.0)
            row = {"shape": f"{M}x{N}x{K}", "layout": name, "nova_rel_err": err}
            for lib, fn in fns.items():
                us, _ = graph_replay(torch, fn, reps=20, rounds=5)
                row[f"{lib}_us"] = us
                row[f"{lib}_tflops"] = 2 * M * N * K / us / 1e6
            row["ratio"] = row["cublas_us"] / row["nova_us"]
            rows.append(row)
            print(f"{row['shape']:>16} {name:8} nova {row['nova_us']:8.1f} us {row['nova_tflops']:6.1f} TF  "
                  f"cublas {row['cublas_us']:8.1f} us {row['cublas_tflops']:6.1f} TF  ratio {row['ratio']:.3f}  "
                  f"err {err:.2e}", flush=True)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tf32_forward_layouts.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "."))
