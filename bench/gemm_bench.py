#!/usr/bin/env python3
"""Nova vs cuBLAS (torch.matmul, TF32 on) side by side on the device; CSV + Markdown table.

    PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python bench/gemm_bench.py \
        --suite bench/suites/perf.txt --dtypes tf32,bf16 --out $OUT

Columns: per-call (synchronised, launch latency included) and back-to-back (launch-overlapped)
medians for both, TFLOP/s from back-to-back, Nova/cuBLAS ratio, host-side microseconds per call,
the configurator's predicted time and its error, and both libraries' relative error vs float64.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nova.cli.shapes import read_suite  # noqa: E402
from nova.runtime.bench import bench_case, environment  # noqa: E402

COLUMNS = ["M", "N", "K", "dtype", "schedule", "nova_us", "cublas_us", "nova_b2b_us", "cublas_b2b_us",
           "nova_tflops", "cublas_tflops", "ratio_vs_cublas", "predicted_us", "prediction_error",
           "nova_host_us", "cublas_host_us", "nova_error", "cublas_error"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="bench/suites/perf.txt")
    ap.add_argument("--dtypes", default="tf32")
    ap.add_argument("--reps", type=int, default=50, help="timed runs per measurement (median)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tag", default="bench")
    args = ap.parse_args(argv)

    import numpy as np
    import pandas as pd
    env = environment()
    rows = []
    for dt in args.dtypes.split(","):
        for (m, n, k) in read_suite(args.suite):
            try:
                r = bench_case(m, n, k, dt, reps=args.reps)
            except Exception as e:
                print(f"ERROR {m}x{n}x{k} {dt}: {type(e).__name__}: {e}", flush=True)
                continue
            rows.append(r)
            print(f"{m}x{n}x{k} {dt}: nova {r['nova_tflops']:.1f} TFLOP/s, cuBLAS {r['cublas_tflops']:.1f}, "
                  f"ratio {r['ratio_vs_cublas']:.2f}, err {r['nova_error']:.2e}, pred {r['predicted_us']:.1f} us "
                  f"vs {r['nova_b2b_us']:.1f} us", flush=True)
    df = pd.DataFrame(rows)[COLUMNS]
    os.makedirs(args.out, exist_ok=True)
    df.to_csv(os.path.join(args.out, f"{args.tag}.csv"), index=False)
    geo = {dt: float(np.exp(np.log(g["ratio_vs_cublas"]).mean())) for dt, g in df.groupby("dtype")}
    header = (f"# Nova vs cuBLAS GEMM\n\n{env['device']} ({env['sms']} SMs), torch {env['torch']} (CUDA {env['cuda']}), "
              f"Nova {env['nova']}, {env['date']}. Times in microseconds: median of {args.reps} runs after warm-up; "
              "`_us` per call (synchronised), `_b2b_us` back-to-back; TFLOP/s from back-to-back. "
              "Geomean Nova/cuBLAS: " + ", ".join(f"{k} {v:.3f}" for k, v in geo.items()) + "\n\n")
    with open(os.path.join(args.out, f"{args.tag}.md"), "w") as f:
        f.write(header + df.to_markdown(index=False, floatfmt=".4g") + "\n")
    with open(os.path.join(args.out, f"{args.tag}.json"), "w") as f:
        json.dump({"environment": env, "geomean_ratio": geo, "rows": rows}, f, indent=1)
    print(header)
    print(df[["M", "N", "K", "dtype", "nova_tflops", "cublas_tflops", "ratio_vs_cublas", "prediction_error",
              "nova_error"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
