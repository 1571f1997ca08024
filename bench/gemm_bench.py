#!/usr/bin/env python3
"""Nova vs cuBLAS (torch.matmul, TF32 on) side by side on the device; CSV + Markdown table.

    PYTHONPATH=. NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python bench/gemm_bench.py \
        --suite bench/suites/perf.txt --dtypes tf32,bf16 --out $OUT

Columns: per-call (synchronised, launch latency included), back-to-back (launch-overlapped) and
CUDA-graph replay (device time per call) medians for both, each shape after --settle-s seconds of
both back to back, TFLOP/s from back-to-back, Nova/cuBLAS ratio, host-side microseconds per call,
the configurator's predicted time and its error, and both libraries' relative error vs float64.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from nova.cli.shapes import read_suite  # noqa: E402
from nova.runtime.bench import run_benchmark  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="bench/suites/perf.txt")
    ap.add_argument("--dtypes", default="tf32")
    ap.add_argument("--reps", type=int, default=50, help="timed runs per measurement (median)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tag", default="bench")
    ap.add_argument("--settle-s", type=float, default=0.5,
                    help="seconds of both libraries back to back before each shape is timed (power steady state)")
    ap.add_argument("--graph-s", type=float, default=0.3, help="minimum seconds of CUDA-graph replay per library")
    args = ap.parse_args(argv)
    run_benchmark(read_suite(args.suite), args.dtypes.split(","), reps=args.reps, out=args.out, tag=args.tag,
                  log=lambda line: print(line, flush=True), settle_s=args.settle_s,
                  graph_s=args.graph_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
