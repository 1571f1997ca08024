"""The command line of the GPU test files that build their own kernels on a host with MLIR:

    NOVA_CACHE_DIR=.nova-cache python tests/test_clipping_gpu.py --target h200 [--cache-dir DIR]

Each file defines ``build_kernels(target, cache_dir) -> {"compiled", "cached", "failed"}`` and ends
with ``main(build_kernels)``.  The files whose kernels are built behind a ``--build`` flag

    NOVA_CACHE_DIR=.nova-cache python tests/test_embedding_gpu.py --build --target h200

define ``_build(target)`` and end with ``flag_main(_build, "embedding")``.
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


def flag_main(build, what: str) -> None:
    """``--build [--target T]``: ``build(target)`` compiles the file's ``what`` kernels into $NOVA_CACHE_DIR."""
    ap = argparse.ArgumentParser(description=f"build this file's {what} kernels into $NOVA_CACHE_DIR")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--build", action="store_true", help="compile the kernels (a host with MLIR, no GPU needed)")
    args = ap.parse_args()
    if args.build:
        build(args.target)
