"""The whole-program commands: ``nova-config explain train`` and ``nova precompile train``.

    nova-config explain train gpt42m --batch 32 [--seq 512] [--target h200] [--optimizer adamw] [--json]
    nova precompile train gpt42m --batch 32 [--seq 512] --target h200 [--cache-dir DIR]

Both capture the built-in model's training step (forward, backward, optimizer) on the meta device:
no GPU and no memory for the model are needed.
"""
from __future__ import annotations

import argparse
import json
import sys

from nova.cli.common import CliParser, UsageError, dispatch

MODEL_HELP = ("built-in model: tiny, gpt42m (vocab 32768, d 512, 8 layers), gpt144m (vocab 50304, d 768, 15 layers), "
              "llama-tiny or llama42m (vocab 32768, d 512, 8 layers, 8 query / 4 key-value heads, SwiGLU 1344)")


def add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--batch", type=int, required=True, help="sequences per step")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the model's context length)")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"],
                   help="adamw (lr 3e-4, betas 0.9/0.95, weight decay 0.1) or sgd (lr 1e-2, momentum 0.9)")


def check_train_args(args) -> None:
    """Bad model, batch or sequence length: one usage line (exit 2), before anything is captured."""
    from nova.models import MODELS
    if args.model not in MODELS:
        raise UsageError(f"unknown model {args.model!r}; built-in models: {', '.join(MODELS)}")
    if args.batch is None or args.batch < 1:
        raise UsageError(f"--batch must be a positive integer, got {args.batch}")
    longest = MODELS[args.model][1].block_size
    if args.seq is not None and not 1 <= args.seq <= longest:
        raise UsageError(f"--seq {args.seq} is outside 1..{longest} ({args.model}'s learned positions)")


def explain_parser() -> argparse.ArgumentParser:
    ap = CliParser(prog="nova-config explain train",
                   description="capture a built-in model's training step, plan it and explain every kernel, "
                               "the memory plan and the predicted step time (no GPU needed)")
    add_train_args(ap)
    ap.add_argument("--target", default="h200", help="GPU model (see nova-config targets; default h200)")
    ap.add_argument("--top", type=int, default=12, help="how many of the most expensive kernels to list (default 12)")
    ap.add_argument("--json", action="store_true",
                    help="machine-readable output: captured_ops, kernels, fallback_ops, memory, prediction, ...")
    return ap


def explain_main(argv) -> int:
    args = explain_parser().parse_args(argv)

    def run() -> int:
        check_train_args(args)
        if args.top < 0:
            raise UsageError(f"--top must be 0 or more (the number of kernels to list), got {args.top}")
        from nova.compiler.explain import explain_train, render
        report = explain_train(args.model, args.batch, args.seq, args.target, args.optimizer)
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            from rich.console import Console
            render(report, Console(width=None if sys.stdout.isatty() else 160, highlight=False), top=args.top)
        return 0
    return dispatch("nova-config", run, (OSError,))


def run_precompile_train(args) -> int:
    """``nova precompile train``: every Nova kernel of the step (GEMMs, attention, fused pointwise,
    multi-tensor optimizer updates), into the cache."""
    from nova.compiler.explain import plan_training_step
    from nova.compiler.precompile import precompile_planned
    from nova.hwmodel import get_target
    from nova.cli.cache_dir import open_cache
    check_train_args(args)
    target = get_target(args.target)
    cache = open_cache(args.cache_dir, writes=True)
    planned, _ = plan_training_step(args.model, args.batch, args.seq, args.optimizer, target)
    counts = precompile_planned(planned, target, cache, log=lambda line: print(line, flush=True))
    return 1 if counts["failed"] else 0
