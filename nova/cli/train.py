"""The whole-program commands: ``nova-config explain train`` and ``nova precompile train``.

    nova-config explain train gpt42m --batch 32 [--seq 512] [--target h200] [--optimizer adamw] [--gpus 8]
                              [--memory-budget 12GiB] [--autocast bf16] [--padded] [--clip-grad-norm 1.0] [--json]
    nova precompile train gpt42m --batch 32 [--seq 512] --target h200 [--memory-budget 12GiB] [recipe flags]
                                 [--cache-dir DIR]
    nova precompile train --step my_pkg.my_module:make_step [--batch 32] [--seq 512] --target h200

Both capture the built-in model's training step (forward, backward, optimizer) on the meta device:
no GPU and no memory for the model are needed.
"""
from __future__ import annotations

import argparse
import json
import sys

from nova.cli.common import CliParser, UsageError, dispatch
from nova.models.recipe import add_recipe_args



def model_help() -> str:
    from nova.models import MODELS, describe
    return "built-in model: " + ", ".join(describe(name) for name in MODELS) + \
        " (hf-*: Hugging Face's own modules, needs transformers)"


def add_train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help=model_help())
    p.add_argument("--batch", type=int, default=None,
                   help="sequences per step (default: the batch the benchmarks train the model at: 32 for the "
                        "42M models, 16 for gpt144m, 4 for the tiny ones)")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the model's context length)")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"],
                   help="adamw (lr 3e-4, betas 0.9/0.95, weight decay 0.1) or sgd (lr 1e-2, momentum 0.9)")
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="plan the step to need at most SIZE of device memory (12GiB, 11.5GB, 800MiB): chunked loss, "
                        "rematerialization; refused in one line when it cannot fit")


def train_recipe(args):
    """The ``TrainRecipe`` of the recipe flags; a value it refuses, or --padded on a model that takes
    no mask, is a usage error."""
    from nova.models.recipe import recipe_from_args
    try:
        return recipe_from_args(args)
    except ValueError as e:
        raise UsageError(str(e)) from None


def memory_budget(args, target_given: bool = False):
    """The budget in bytes: ``--memory-budget`` (a bad size is a usage error), else the memory of
    an explicitly given ``--target``, else None."""
    from nova.passes.budget import MemoryBudgetError, parse_size
    if args.memory_budget is not None:
        try:
            return parse_size(args.memory_budget)
        except MemoryBudgetError as e:
            raise UsageError(f"--memory-budget: {e}") from None
    if target_given:
        from nova.hwmodel import get_target
        gpu = get_target(args.target)
        return int(gpu.memory_bytes) if gpu.has("memory_bytes") else None
    return None


def check_train_args(args) -> None:
    """Bad model, batch or sequence length: one usage line (exit 2), before anything is captured."""
    from nova.models import MODELS
    if args.model not in MODELS:
        raise UsageError(f"unknown model {args.model!r}; built-in models: {', '.join(MODELS)}")
    if args.batch is None:
        from nova.models import BENCH_BATCH
        args.batch = BENCH_BATCH[args.model]
    if args.batch < 1:
        raise UsageError(f"--batch must be a positive integer, got {args.batch}")
    longest = MODELS[args.model][1].block_size
    if args.seq is not None and not 1 <= args.seq <= longest:
        raise UsageError(f"--seq {args.seq} is outside 1..{longest} ({args.model}'s learned positions)")


def plot_path(text: str):
    """``--plot``'s file: a ``.png`` path that is not a folder, below folders (made when missing) that
    are not files; else a usage error naming the flag and what is in the way."""
    from pathlib import Path
    path = Path(text).expanduser()
    if path.is_dir():
        raise UsageError(f"--plot {text}: that is a folder; give the PNG file to write, e.g. {path / 'memory.png'}")
    if path.suffix.lower() != ".png":
        raise UsageError(f"--plot {text}: the plot is a PNG; give a path ending in .png")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"--plot {text}: {parent} is a file, not a folder")
            break
    return path


def explain_parser() -> argparse.ArgumentParser:
    ap = CliParser(prog="nova-config explain train",
                   description="capture a built-in model's training step, plan it and explain every kernel, "
                               "the memory plan and the predicted step time (no GPU needed)")
    add_train_args(ap)
    add_recipe_args(ap)
    ap.add_argument("--target", default=None,
                    help="GPU model (see nova-config targets; default h200); given, its memory is the default --memory-budget")
    ap.add_argument("--gpus", type=int, default=1,
                    help="data-parallel GPUs (DDP: each its own --batch); > 1 adds the gradient all-reduce's "
                         "communication schedule and the predicted scaling (default 1)")
    ap.add_argument("--top", type=int, default=12, help="how many of the most expensive kernels to list (default 12)")
    ap.add_argument("--plot", metavar="PNG", default=None,
                    help="also write the plan's device memory over the step's schedule to the .png file PNG (its "
                         "folder made if missing; with --memory-budget, beside the plan without the budget)")
    ap.add_argument("--json", action="store_true",
                    help="machine-readable output: captured_ops, kernels, fallback_ops, memory, prediction, ...")
    return ap


def explain_main(argv) -> int:
    args = explain_parser().parse_args(argv)

    def run() -> int:
        check_train_args(args)
        if args.top < 0:
            raise UsageError(f"--top must be 0 or more (the number of kernels to list), got {args.top}")
        if args.gpus < 1:
            raise UsageError(f"--gpus must be a positive integer, got {args.gpus}")
        from nova.compiler.explain import explain_train, render
        budget = memory_budget(args, target_given=args.target is not None)
        if args.plot is not None and args.gpus > 1:
            raise UsageError("--plot draws one GPU's plan; leave out --gpus")
        plot = plot_path(args.plot) if args.plot is not None else None
        report = explain_train(args.model, args.batch, args.seq, args.target or "h200", args.optimizer,
                               gpus=args.gpus, memory_budget=budget, recipe=train_recipe(args),
                               unbudgeted=args.plot is not None)
        if plot is not None:
            from nova.report.plots import memory_schedule
            try:
                written = memory_schedule(report, plot)
            except OSError as e:            # a failed write (permissions, a full disk): one line, exit 1
                raise OSError(f"--plot {args.plot}: cannot write it ({e.strerror or e})") from None
            print(f"memory over the schedule: {written}", file=sys.stderr)
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            from rich.console import Console
            render(report, Console(width=None if sys.stdout.isatty() else 160, highlight=False), top=args.top)
        return 0
    from nova.passes.budget import MemoryBudgetError
    return dispatch("nova-config", run, (OSError, MemoryBudgetError))


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
    planned, _ = plan_training_step(args.model, args.batch, args.seq, args.optimizer, target, memory_budget(args),
                                    train_recipe(args))
    counts = precompile_planned(planned, target, cache, log=lambda line: print(line, flush=True))
    return 1 if counts["failed"] else 0


def run_precompile_user_step(args) -> int:
    """``nova precompile train --step MODULE:FACTORY``: every kernel of the user's own step
    (``nova.integrations.user_step``), into the cache; a bad ``--step`` is a usage error."""
    from nova.frontend.errors import NovaUnsupportedError
    from nova.hwmodel import get_target
    from nova.integrations.user_step import StepSpecError, precompile_spec
    if args.model:
        raise UsageError(f"give a built-in model or --step, not both (got {args.model!r} and --step {args.step!r})")
    for flag in ("batch", "seq"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag} must be a positive integer, got {value}")
    target = get_target(args.target)
    try:
        counts = precompile_spec(args.step, target, args.cache_dir, log=lambda line: print(line, flush=True),
                                 batch=args.batch, seq=args.seq)
    except StepSpecError as e:
        raise UsageError(str(e)) from None
    except NovaUnsupportedError as e:      # the step itself: one line naming the construct, exit 1
        raise ValueError(f"capturing --step {args.step}: {e}") from None
    return 1 if counts["failed"] else 0


def run_precompile_dynamo(args) -> int:
    """``nova precompile dynamo --step MODULE:FACTORY``: every Nova kernel of
    ``torch.compile(model, backend="nova")`` on the factory's ``(model, example_inputs)``
    (``nova.integrations.dynamo_precompile``), into the cache; a bad ``--step`` is a usage error."""
    from nova.hwmodel import get_target
    from nova.integrations.dynamo_precompile import precompile_factory
    from nova.integrations.user_step import StepSpecError
    if args.step is None:
        raise UsageError("precompile dynamo needs --step MODULE:FACTORY (a factory returning (model, example_inputs))")
    if args.model:
        raise UsageError(f"unexpected argument {args.model!r}: precompile dynamo takes --step MODULE:FACTORY")
    for flag in ("batch", "seq"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag} must be a positive integer, got {value}")
    target = get_target(args.target)
    try:
        counts = precompile_factory(args.step, target, args.cache_dir, training=not args.inference,
                                    log=lambda line: print(line, flush=True), batch=args.batch, seq=args.seq)
    except StepSpecError as e:
        raise UsageError(str(e)) from None
    return 1 if counts["failed"] else 0
