"""Probe: the SM clock and board power each library's GEMM holds under sustained
load.  The oracle (events, ~30 ms per candidate, boost clock) timed Nova's LM head 16384x32768x512 BF16
at 794 us (692 TFLOP/s) where the training-GEMM suite (settled power, interleaved rounds) measured
971 us; XLA held 687 TFLOP/s in the suite.  Each library runs alone for ``SECONDS`` back to back while
nvidia-smi samples clocks.sm and power.draw every 50 ms; reported: time per call over the last half
and the median clock and power over it.

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 bench/probes/sustained_clocks.py [$OUT]
Host: nova precompile gemm for each CASES entry (--trans-b, --bias as listed)."""
import json
import os
import statistics
import subprocess
import sys
import time

import torch

import nova

CASES = [(16384, 32768, 512, "bf16", False), (16384, 32768, 512, "tf32", False),
         (16384, 3072, 768, "tf32", True), (16384, 3072, 768, "bf16", True)]
SECONDS = 3.0


def sampler(path):
    return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                             "-lms", "50"], stdout=open(path, "w"), stderr=subprocess.DEVNULL)


def run_for(fn, seconds, sync):
    """Back-to-back calls for ``seconds``, ``sync(last result)`` every ~50 ms; returns
    [(start, end, calls)] per chunk (the wall clock times every library alike, XLA's own stream too)."""
    sync(fn())
    marks, t_end = [], time.time() + seconds
    while time.time() < t_end:
        t0, n = time.time(), 0
        while time.time() - t0 < 0.05:
            last = fn()
            n += 1
        sync(last)
        marks.append((t0, time.time(), n))
    return marks


def main(out_dir):
    import jax
    import jax.numpy as jnp
    torch.backends.cuda.matmul.allow_tf32 = True
    rows = []
    os.makedirs(out_dir, exist_ok=True)
    for M, N, K, dtype, with_bias in CASES:
        tdt = torch.float32 if dtype == "tf32" else torch.bfloat16
        x = torch.randn(M, K, device="cuda").to(tdt)
        w = torch.randn(N, K, device="cuda").to(tdt)
        bias = torch.randn(N, device="cuda").to(tdt) if with_bias else None
        out = torch.empty(M, N, device="cuda", dtype=tdt)
        jx = jnp.asarray(x.float().cpu().numpy()).astype(jnp.bfloat16 if dtype == "bf16" else jnp.float32)
        jw = jnp.asarray(w.float().cpu().numpy()).astype(jx.dtype)
        jb = jnp.asarray(bias.float().cpu().numpy()).astype(jx.dtype) if with_bias else None
        prec = jax.lax.Precision.DEFAULT
        xla = jax.jit((lambda a, b, c: jnp.matmul(a, b.T, precision=prec) + c) if with_bias
                      else (lambda a, b: jnp.matmul(a, b.T, precision=prec)))
        jargs = (jx, jw, jb) if with_bias else (jx, jw)
        xla(*jargs).block_until_ready()
        fns = {"nova": lambda: nova.matmul(x, w.T, out=out, bias=bias),
               "cublas": (lambda: torch.addmm(bias, x, w.T, out=out)) if with_bias else (lambda: torch.mm(x, w.T, out=out)),
               "xla": lambda: xla(*jargs)}
        for lib, fn in fns.items():
            path = os.path.join(out_dir, f"clocks-{M}x{N}x{K}-{dtype}-{lib}.csv")
            proc = sampler(path)
            time.sleep(0.3)
            sync = (lambda r: r.block_until_ready()) if lib == "xla" else (lambda r: torch.cuda.synchronize())
            marks = run_for(fn, SECONDS, sync)
            proc.terminate()
            proc.wait()
            half = marks[len(marks) // 2:]
            us = sum(b - a for a, b, _ in half) / sum(n for _, _, n in half) * 1e6
            t_half = half[0][0]
            clocks, power = [], []
            for line in open(path):
                parts = [p.strip() for p in line.split(",")]
                try:
                    ts = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + parts[0].split(".")[1])
                    if ts >= t_half:
                        clocks.append(float(parts[1]))
                        power.append(float(parts[2]))
                except (ValueError, IndexError):
                    continue
            row = {"shape": f"{M}x{N}x{K}", "dtype": dtype, "bias": with_bias, "lib": lib, "us": us,
                   "tflops": 2 * M * N * K / us / 1e6, "sm_mhz": statistics.median(clocks) if clocks else None,
                   "power_w": statistics.median(power) if power else None, "samples": len(clocks)}
            rows.append(row)
            print(f"{row['shape']:>16} {dtype} {'+bias' if with_bias else '     '} {lib:6} {us:8.1f} us "
                  f"{row['tflops']:6.1f} TF  SM {row['sm_mhz']} MHz  {row['power_w']} W ({len(clocks)} samples)", flush=True)
        del x, w, out, jx, jw
    with open(os.path.join(out_dir, "sustained_clocks.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "."))
