"""The command line of the GPU test files that build their own kernels on a host with MLIR:

    NOVA_CACHE_DIR=.nova-cache python tests/test_clipping_gpu.py --target h200 [--cache-dir DIR]

Each file defines ``build_kernels(target, cache_dir) -> {"compiled", "cached", "failed"}`` and ends
with ``main(build_kernels)``.
"""
import argparse
import sys


def main(build_kernels) -> None:
    ap = argparse.ArgumentParser(description="build the kernels of these GPU tests into the kernel cache "
                                             "(NOVA_CACHE_DIR or --cache-dir) on a host with MLIR")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()
    sys.exit(1 if build_kernels(args.target, args.cache_dir)["failed"] else 0)
