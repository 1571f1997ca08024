"""``nova-config export``: Nova's decisions in other tools' formats (docs/integrations.md).

    nova-config export triton matmul MxNxK [--dtype tf32|bf16|fp16] [--target h200] [--trans-a] [--trans-b] [--json]
    nova-config export transform matmul MxNxK [--dtype ...] [--target h200] [--trans-a] [--trans-b] [--with-payload]

Bad input is one line on stderr and exit status 2 (``nova.cli.common``).
"""
from __future__ import annotations

import argparse
import json

from nova.cli.common import CliParser, UsageError, dispatch

def add_matmul_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", help="operation: matmul (alias gemm)")
    p.add_argument("shape", help="S, SxS or MxNxK")
    p.add_argument("--dtype", default="tf32", help="tensor-core mode: tf32|bf16|fp16 (default tf32)")
    p.add_argument("--target", default="h200", help="GPU model (see nova-config targets; default h200)")
    p.add_argument("--trans-a", action="store_true", help="A is stored transposed ([K,M] row-major)")
    p.add_argument("--trans-b", action="store_true", help="B is stored transposed ([N,K] row-major)")


DESCRIPTION = "Nova's decisions in other tools' formats (docs/integrations.md)."


def add_formats(ap: argparse.ArgumentParser) -> None:
    """The formats, as ``ap``'s subcommands (``nova-config export`` on its own, or under ``nova-config``)."""
    sub = ap.add_subparsers(dest="format", required=True, metavar="FORMAT")
    triton = sub.add_parser("triton", help="a GEMM's schedule as a Triton matmul config (BLOCK_M/N/K, GROUP_M, "
                                           "num_warps, num_stages)")
    add_matmul_args(triton)
    triton.add_argument("--json", action="store_true", help="machine-readable output: the config, the Nova schedule "
                                                            "fields it read and the notes")
    transform = sub.add_parser("transform", help="a GEMM's schedule as a transform-dialect script for linalg.matmul")
    add_matmul_args(transform)
    transform.add_argument("--with-payload", action="store_true",
                           help="also write a func.func with the linalg.matmul, in one module: the input of "
                                "mlir-opt --transform-interpreter")


def build_parser() -> argparse.ArgumentParser:
    ap = CliParser(prog="nova-config export", description=DESCRIPTION)
    add_formats(ap)
    return ap


def _matmul(args) -> tuple[int, int, int]:
    from nova.cli.shapes import parse_gemm_shape
    if args.op not in ("matmul", "gemm"):
        raise UsageError(f"unknown operation {args.op!r}; export {args.format} takes matmul")
    return parse_gemm_shape(args.shape)


def cmd_triton(args) -> int:
    from nova.integrations.triton import triton_config
    M, N, K = _matmul(args)
    config = triton_config(M, N, K, args.dtype, args.target, trans_a=args.trans_a, trans_b=args.trans_b)
    if args.json:
        print(json.dumps(config.to_dict(), indent=1))
        return 0
    kwargs = ", ".join(f'"{k}": {v}' for k, v in config.kwargs.items())
    print(f"# Nova's schedule of {config.problem} on {config.target} as a Triton matmul config "
          f"(nova.integrations.triton.autotune_configs)")
    print(f"triton.Config({{{kwargs}}}, num_warps={config.num_warps}, num_stages={config.num_stages})")
    if config.input_precision:
        print(f'# tl.dot(a, b, input_precision="{config.input_precision}")')
    for note in config.notes:
        print(f"# note: {note}")
    return 0


def cmd_transform(args) -> int:
    from nova.integrations.transform_script import transform_script, with_payload
    M, N, K = _matmul(args)
    write = with_payload if args.with_payload else transform_script
    print(write(M, N, K, args.dtype, args.target, trans_a=args.trans_a, trans_b=args.trans_b), end="")
    return 0


COMMANDS = {"triton": cmd_triton, "transform": cmd_transform}


def run(args) -> int:
    """The parsed ``nova-config export FORMAT ...``'s command."""
    return COMMANDS[args.format](args)


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    return dispatch("nova-config", lambda: run(args), (OSError,))
