"""Device correctness sweep for Nova GEMM kernels (run on a GPU, usually offline from a carried cache).

    NOVA_OFFLINE=1 NOVA_CACHE_DIR=.nova-cache python3 -m nova.bench.correctness \
        --suite bench/suites/correctness.txt --dtypes tf32,bf16,fp16 --out $OUT

Every case (``nova.bench.harness.check_case``): fresh random inputs, output poisoned with NaN,
float64 reference, relative Frobenius error within the mode's tolerance (nova/dtypes.py: 5e-4
tf32, 1e-2 bf16/fp16), no NaN left.  Writes correctness.csv and a summary JSON; exits 1 if any
case fails.  ``--print-precompile TARGET`` prints the ``nova precompile`` lines of the
epilogue/layout cases (``bench/build_device_cache.sh``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from nova.bench.harness import TOLERANCE, check_case, environment
from nova.cli.shapes import read_suite
from nova.kernels.gemm.problem import GemmProblem

EPILOGUE_CASES = [
    GemmProblem(1000, 1000, 1000, "tf32", bias=True, activation="relu"),
    GemmProblem(127, 4097, 129, "tf32", bias=True, activation="gelu"),
    GemmProblem(513, 257, 1025, "bf16", bias=True, activation="silu"),
    GemmProblem(64, 64, 64, "fp16", bias=True),
    GemmProblem(1000, 33, 777, "tf32", trans_a=True),
    GemmProblem(1000, 33, 777, "tf32", trans_b=True),
    GemmProblem(255, 511, 300, "bf16", trans_a=True, trans_b=True),
    # v0.5 operand feeds (Hopper): A^T from registers unswapped; A^T transposed + swapped; both 16-bit
    # operands by the descriptor's transpose bit; swapped TF32 with ragged M, bias and activation
    GemmProblem(256, 512, 384, "tf32", trans_a=True, trans_b=True),
    GemmProblem(512, 256, 128, "tf32", trans_a=True, bias=True, activation="relu"),
    GemmProblem(512, 768, 256, "bf16", trans_a=True, bias=True, activation="gelu"),
    GemmProblem(1000, 1024, 520, "tf32", bias=True, activation="gelu"),
    GemmProblem(72, 136, 24, "fp16", trans_a=True),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="bench/suites/correctness.txt")
    ap.add_argument("--dtypes", default="tf32,bf16,fp16")
    ap.add_argument("--limit", type=int, default=0, help="only the first N shapes (e.g. under compute-sanitizer)")
    ap.add_argument("--no-epilogues", action="store_true", help="skip the bias/activation/transpose cases")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for correctness.csv / summary")
    ap.add_argument("--tag", default="correctness")
    ap.add_argument("--print-precompile", metavar="TARGET",
                    help="print the `nova precompile` commands for the epilogue/layout cases and exit")
    args = ap.parse_args(argv)
    if args.print_precompile:
        from nova.messages import precompile_command
        for p in EPILOGUE_CASES:
            print(precompile_command(p, args.print_precompile))
        return 0

    import pandas as pd
    shapes = read_suite(args.suite)
    if args.limit:
        shapes = shapes[:args.limit]
    dtypes = [d for d in args.dtypes.split(",") if d]
    cases = [GemmProblem(m, n, k, dt) for dt in dtypes for (m, n, k) in shapes]
    if not args.no_epilogues:
        cases += [p for p in EPILOGUE_CASES if p.dtype in dtypes]
    rows = []
    for i, p in enumerate(cases):
        r = check_case(p.M, p.N, p.K, p.dtype, seed=1000 + i, bias=p.bias, activation=p.activation,
                       trans_a=p.trans_a, trans_b=p.trans_b)
        rows.append(r)
        if not r["ok"]:
            print(f"FAIL {p.M}x{p.N}x{p.K} {p.dtype} bias={p.bias} act={p.activation} ta={p.trans_a} "
                  f"tb={p.trans_b}: err={r['error']:.3e} nan={r['nan_count']} {r['failure']}", flush=True)
    df = pd.DataFrame(rows)
    os.makedirs(args.out, exist_ok=True)
    df.to_csv(os.path.join(args.out, f"{args.tag}.csv"), index=False)
    summary = {"environment": environment(), "cases": len(df), "failed": int((~df["ok"]).sum()),
               "tolerance": TOLERANCE,
               "max_error": {dt: float(df[df.dtype == dt]["error"].max()) for dt in dtypes},
               "median_error": {dt: float(df[df.dtype == dt]["error"].median()) for dt in dtypes}}
    with open(os.path.join(args.out, f"{args.tag}.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1))
    print(f"{len(df) - summary['failed']} passed, {summary['failed']} failed")
    return 0 if summary["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
