"""Where nova.matmul's host time goes (device run): host microseconds per call of nova.matmul and
torch.matmul (with and without out=) and of each layer under nova.matmul, on small shapes where the
GPU is never the bottleneck, plus a cProfile of the signature-cache hit path.

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m nova.bench.host_profile --out $OUT

Timing: bursts of ``--burst`` calls right after a synchronize (the launch queue is empty, so no
call waits for the GPU); per-call time = burst time / burst size; the median over ``--bursts``.
Writes host_profile.txt (table + profiles) and host_profile.json to --out.  A white-box profile:
it reads ``nova.runtime.matmul``'s signature-cache plans (``_plans``) to time each layer alone.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time

import nova
from nova.bench.harness import random_operands, require_torch
from nova.dtypes import torch_dtype
from nova.runtime import driver, matmul as mm, tensors


def host_us(torch, fn, bursts: int, burst: int) -> float:
    """Median host microseconds per call of ``fn`` over ``bursts`` bursts of ``burst`` calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(bursts):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        times.append((time.perf_counter() - t0) / burst * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def components(torch, a, b, out):
    """name -> zero-argument callable: the public calls and each layer under a signature-cache hit."""
    key = mm.signature(a, b, out, None, "none", None, False)
    plan = mm._plans[key]
    r = plan.resolved
    ptrs = (a.data_ptr(), b.data_ptr(), out.data_ptr())
    stream = plan.stream()
    dev = r.kernel.device
    calls = {
        "nova_out": lambda: nova.matmul(a, b, out=out),
        "nova": lambda: nova.matmul(a, b),
        "torch_out": lambda: torch.matmul(a, b, out=out),
        "torch": lambda: torch.matmul(a, b),
        "nova_general_path": lambda: (mm._plans.clear(), nova.matmul(a, b, out=out)),   # every check, kernel memoised
        "signature": lambda: mm.signature(a, b, out, None, "none", None, False),
        "resolved_run": lambda: r.run(*ptrs, None, stream),
        "make_current": dev.make_current,
        "current_stream": plan.stream,
        "torch_empty": plan.empty,
        "describe": lambda: tensors.describe(a, "a"),
    }
    if r.hopper is not None:
        h = r.hopper
        main_args = h.main_args(*ptrs, (), h.stream_plan(stream)[1])
        calls["hopper_run_skip_prep"] = lambda: h.run(*ptrs, (), stream, skip_prep=True)
        calls["launch_main"] = lambda: h.main.launch(main_args, stream)     # the launcher alone
    elif r.skinny is not None:                                               # the kernel and its reduction
        calls["launch_main"] = lambda: r.skinny.run(*ptrs, (), stream)
    else:
        calls["launch_main"] = lambda: r.kernel.launch(ptrs, stream)
    return calls


def profile_hits(torch, a, b, out, n: int = 2000) -> str:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        nova.matmul(a, b, out=out)
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(20)
    return s.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp")
    ap.add_argument("--shapes", default="64x64x64")
    ap.add_argument("--dtypes", default="tf32,bf16")
    ap.add_argument("--bursts", type=int, default=200)
    ap.add_argument("--burst", type=int, default=20)
    args = ap.parse_args(argv)
    torch = require_torch()
    rows, profiles = [], []
    driver.cuda()
    print(f"device: {torch.cuda.get_device_name()}; launches through ctypes cuLaunchKernelEx: "
          f"{driver.launches_through_ctypes()}", flush=True)
    for shape in args.shapes.split(","):
        M, N, K = map(int, shape.split("x"))
        for dt in args.dtypes.split(","):
            a, b = random_operands(torch, M, N, K, dt, torch.Generator(device="cuda").manual_seed(0))
            out = torch.empty(M, N, device="cuda", dtype=torch_dtype(torch, dt))
            nova.matmul(a, b, out=out)
            nova.matmul(a, b)
            torch.cuda.synchronize()
            r = mm._plans[mm.signature(a, b, out, None, "none", None, False)].resolved
            family = "wgmma" if r.hopper is not None else "skinny" if r.skinny is not None else "mma.sync"
            launches = 1 + (len(r.hopper.preps) if r.hopper is not None else 0) + int(r.zero_output) + \
                int(r.skinny is not None and r.skinny.reduce is not None)
            row = {"shape": shape, "dtype": dt, "family": family, "launches_per_call": launches}
            for name, fn in components(torch, a, b, out).items():
                row[f"{name}_us"] = round(host_us(torch, fn, args.bursts, args.burst), 2)
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            profiles.append(f"---- cProfile of 2000 nova.matmul(a, b, out=out) hits, {shape} {dt}\n"
                            + profile_hits(torch, a, b, out))
    with open(f"{args.out}/host_profile.json", "w") as f:
        json.dump(rows, f, indent=1)
    with open(f"{args.out}/host_profile.txt", "w") as f:
        f.write("\n".join(" ".join(f"{k}={v}" for k, v in row.items()) for row in rows) + "\n\n")
        f.write("\n".join(profiles))
    print(profiles[-1][:4000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
