"""The host link as the host offload sees it (``nova/passes/offload.py``): copies between device
memory and page-locked host memory on a copy stream, alone and beside a GEMM loop on the default
stream, each direction alone and both at once; and what the copies take from the GEMMs.

    python3 bench/probes/host_link.py [--mib 256] [--repeats 10]

Prints GB/s per case and the GEMM loop's slowdown, against the target's ``host_link_bw``.
"""
from __future__ import annotations

import argparse
import json

import torch


def timed(fn, repeats: int) -> float:
    """Median milliseconds of ``fn`` (events on the current stream, after a synchronize)."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="bytes per copy, MiB")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--out", default=None, help="write the numbers as JSON here")
    args = ap.parse_args()
    from nova.hwmodel import get_target
    n = args.mib << 20
    device = torch.empty(n, dtype=torch.uint8, device="cuda")
    back = torch.empty(n, dtype=torch.uint8, device="cuda")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host2 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    to_host, to_device = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    c = torch.empty(8192, 8192, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = True

    def gemms():
        for _ in range(8):
            torch.matmul(a, b, out=c)

    def copies(d2h: bool, h2d: bool):
        both(d2h, h2d, False)             # both directions issued before either is waited for

    def both(d2h: bool, h2d: bool, with_gemms: bool):
        main = torch.cuda.current_stream()
        for s, go, dst, src in ((to_host, d2h, host, device), (to_device, h2d, back, host2)):
            if go:
                s.wait_stream(main)
                with torch.cuda.stream(s):
                    dst.copy_(src, non_blocking=True)
        if with_gemms:
            gemms()
        for s, go in ((to_host, d2h), (to_device, h2d)):
            if go:
                main.wait_stream(s)

    gemms()
    copies(True, True)
    out = {"bytes": n, "host_link_bw_model_GBs": get_target("h200").host_link_bw / 1e9}
    gemm_ms = timed(gemms, args.repeats)
    out["gemm_loop_ms"] = gemm_ms
    for name, d2h, h2d in (("to_host", True, False), ("to_device", False, True), ("both", True, True)):
        ms = timed(lambda: copies(d2h, h2d), args.repeats)
        out[f"{name}_GBs"] = n / ms / 1e6 * (2 if name == "both" else 1)
        ms_with = timed(lambda: both(d2h, h2d, True), args.repeats)
        out[f"{name}_with_gemms_ms"] = ms_with
    print(json.dumps(out, indent=1))
    print(f"copy engines: to host {out['to_host_GBs']:.1f} GB/s, to device {out['to_device_GBs']:.1f} GB/s, both "
          f"{out['both_GBs']:.1f} GB/s together (model {out['host_link_bw_model_GBs']:.0f} GB/s a direction); a GEMM "
          f"loop of {gemm_ms:.2f} ms takes {out['both_with_gemms_ms']:.2f} ms beside copies both ways")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
