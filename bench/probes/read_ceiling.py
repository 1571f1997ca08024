"""The DRAM ceiling of a kernel that only reads, beside the copy's: ATen's sum and max over 1 GiB of f32
(one read, a few bytes written) and its copy of 1 GiB (a read and a write), each timed by its CUPTI
duration, best of several runs, an L2-evicting copy between them.  The copy ceiling (4.2 TB/s of read
and written bytes) is what ``nova.bench.step_kernels`` grades memory-bound kernels against; a read-only
kernel (a bias gradient's column sum) may have a ceiling of its own.

    python3 bench/probes/read_ceiling.py OUT.json          # device
"""
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main(out_path):
    x = torch.randn(4096, 65536, device="cuda")                 # 1 GiB
    y = torch.empty_like(x)
    small = torch.randn(16384, 1536, device="cuda")            # a GPT-42M bias gradient's input, 100 MB
    cases = {"sum 1 GiB": lambda: x.sum(), "amax 1 GiB": lambda: x.amax(), "copy 1 GiB": lambda: y.copy_(x),
             "sum over rows 16384x1536": lambda: small.sum(0), "sum 16384x1536": lambda: small.sum()}
    nbytes = {"sum 1 GiB": x.nbytes, "amax 1 GiB": x.nbytes, "copy 1 GiB": 2 * x.nbytes,
              "sum over rows 16384x1536": small.nbytes, "sum 16384x1536": small.nbytes}
    rows = []
    for name, fn in cases.items():
        evict = "1 GiB" not in name                              # 1 GiB does not fit the 50 MB L2 anyway
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                fn()
                if evict:
                    y.fill_(1.0)
            torch.cuda.synchronize()
        per = {}
        for e in prof.events():
            if e.device_type.name == "CUDA" and not (evict and "Fill" in e.name):
                per[e.name[:80]] = per.get(e.name[:80], 0.0) + e.device_time / 10
        us = sum(per.values())
        rows.append({"case": name, "us": round(us, 2), "tb_per_s": round(nbytes[name] / us / 1e6, 3),
                     "kernels": {k: round(v, 2) for k, v in per.items()}})
        print(json.dumps(rows[-1])[:300])
    with open(out_path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
