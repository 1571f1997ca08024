"""The ``nova`` command: ``compile``, ``precompile``, ``cache``, ``bench``, ``tune`` and ``report``.

Adding a subcommand = one ``add_<name>(subparsers)`` function that builds its parser and sets
``run=<handler>``, appended to ``SUBCOMMANDS``.  Handlers return an exit status.  Errors print one
line on stderr: exit 2 for bad input (shape, dtype, target, options, a problem no kernel can run),
1 for a failed step (compile, driver, files); the traceback is shown only with ``NOVA_DEBUG=1``
(``nova.cli.common``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nova.cli.train import model_help
from nova.models.recipe import RECIPE_FLAGS, add_recipe_args
from nova.cli.common import CliParser, UsageError, add_version, check_tf32_fast, dispatch, dtype_list
from nova.cli.shapes import (ACTIVATION_GRAD_HELP, ROUND_THROUGH_HELP, STRIDES_HELP, ShapeError, parse_batch_strides,
                             parse_gemm_shape, parse_problem_shape, parse_problem_shape_list, parse_shape_list,
                             read_suite, read_suite_entries, round_through_fields)


def _at_least_one(text: str) -> int:
    """An integer >= 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _arg(parse):
    """Adapt a parser raising ``ShapeError`` for argparse, keeping its message."""
    def convert(text):
        try:
            return parse(text)
        except ShapeError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = parse.__name__
    return convert


# --------------------------------------------------------------------------- shared arguments
def add_problem_args(p: argparse.ArgumentParser, several_dtypes: bool = False, batched: bool = False,
                     target_required: bool = True) -> None:
    """Target, dtype and epilogue options of a GEMM (``batched``: and ``--batch-strides``)."""
    p.add_argument("--target", required=target_required, default=None,
                   help="hwmodel preset (rtx3060, a100, rtx4090, h100, h200) or auto"
                        + ("" if target_required else " (every op but misses needs it)"))
    p.add_argument("--dtype", default="tf32",
                   help="input mode: tf32, bf16 or fp16" + (" (comma-separated list allowed)" if several_dtypes else ""))
    p.add_argument("--trans-a", action="store_true", help="A is stored as [K, M] row-major")
    p.add_argument("--trans-b", action="store_true", help="B is stored as [N, K] row-major")
    p.add_argument("--bias", action="store_true", help="add a bias vector of length N")
    p.add_argument("--activation", default="none", help="none, relu, gelu or silu")
    p.add_argument("--residual", action="store_true",
                   help="the epilogue adds a residual matrix R (C's shape and type) after the activation")
    p.add_argument("--preactivation", action="store_true",
                   help="the kernel also writes the pre-activation A @ B + bias as a second output (needs --activation)")
    p.add_argument("--out-dtype", default=None, help="output storage f32, bf16 or f16 (default: input storage)")
    p.add_argument("--round-through", action="store_true", help=ROUND_THROUGH_HELP)
    p.add_argument("--activation-grad", action="store_true", help=ACTIVATION_GRAD_HELP)
    p.add_argument("--tf32-fast", action="store_true",
                   help="tf32 only: let the tensor cores truncate FP32 instead of rounding to nearest (opt-in, ~2.6x error)"
                        + ("; with a list it applies to tf32, which the list must hold" if several_dtypes else ""))
    p.add_argument("--deterministic", action="store_true",
                   help="the same bits on every run: split-K adds its slices in a workspace, in order, not with atomics "
                        "(what nova.matmul does under NOVA_DETERMINISTIC=1 or torch.use_deterministic_algorithms)")
    if batched:
        p.add_argument("--batch-strides", type=_arg(parse_batch_strides), default=None, metavar="A,B,C",
                       help=STRIDES_HELP)


SUITE_HELP = "file: one shape per line (# comments) or a JSON list"
PRECOMPILE_SUITE_HELP = (SUITE_HELP + "; in nova precompile gemm a JSON object entry {\"M\", \"N\", \"K\", "
                         "\"trans_a\", \"trans_b\", \"bias\", \"activation\", \"residual\", \"preactivation\", "
                         "\"round_through\", \"activation_grad\", \"out_dtype\", \"B\", "
                         "\"batch_strides\"} sets its own layout, epilogue and batch (missing keys: the flags), e.g. "
                         "bench/suites/train_gemms.json, bench/suites/batched_gemms.json; a text line may be BxMxNxK")


def add_shape_list_args(p: argparse.ArgumentParser, required: bool = True, suite_help: str | None = None,
                        batched: bool = False) -> None:
    """``--shapes S1,S2,...`` or ``--suite FILE`` (one of the two is required, unless ``required``
    is False and the command checks it itself); ``batched``: shapes may be ``BxMxNxK``."""
    shapes = p.add_mutually_exclusive_group(required=required)
    if batched:
        shapes.add_argument("--shapes", type=_arg(parse_problem_shape_list),
                            help="comma-separated S | SxS | MxNxK | BxMxNxK (a batch of B GEMMs)")
    else:
        shapes.add_argument("--shapes", type=_arg(parse_shape_list), help="comma-separated S | SxS | MxNxK")
    shapes.add_argument("--suite", help=suite_help or SUITE_HELP)


def shapes_from(args) -> list:
    return args.shapes if args.shapes is not None else read_suite(args.suite)


def make_problem(shape: tuple[int, int, int], dtype: str, args, fields: dict | None = None):
    """The problem of one shape and dtype; ``fields`` (a JSON suite entry's trans_a, trans_b, bias,
    activation, residual, preactivation, round_through, activation_grad, out_dtype, B, batch_strides; a
    ``BxMxNxK`` shape's B) override the command's flags.  ``--tf32-fast`` reaches bf16/fp16 problems too, which normalise it away
    (``GemmProblem``): their keys are those ``nova.matmul(..., tf32_fast=True)`` looks up."""
    from nova.kernels.gemm.problem import GemmProblem
    M, N, K = shape
    f = {"trans_a": args.trans_a, "trans_b": args.trans_b, "bias": args.bias, "activation": args.activation,
         "residual": getattr(args, "residual", False), "preactivation": getattr(args, "preactivation", False),
         "round_through": getattr(args, "round_through", False),
         "activation_grad": getattr(args, "activation_grad", False),
         "out_dtype": args.out_dtype, "B": 1, "batch_strides": getattr(args, "batch_strides", None), **(fields or {})}
    strides = parse_batch_strides(f["batch_strides"]) if f["batch_strides"] is not None else (None, None, None)
    rounded = round_through_fields(dtype.strip(), f["round_through"], f["out_dtype"])
    return GemmProblem(M, N, K, dtype.strip(), f["trans_a"], f["trans_b"], f["bias"], f["activation"],
                       rounded.pop("out_dtype"), "truncate" if getattr(args, "tf32_fast", False) else "rna",
                       getattr(args, "deterministic", False), f["B"], *strides, residual=f["residual"],
                       preactivation=f["preactivation"], activation_grad=f["activation_grad"], **rounded)


def problems_from(shapes: list, args) -> list:
    """Every (dtype, shape) problem of a command, dtype-major; ``--tf32-fast`` needs a tf32 in the list.
    ``shapes`` holds (M, N, K) tuples or ``(shape, fields)`` suite entries (``read_suite_entries``)."""
    dtypes = dtype_list(args.dtype)
    check_tf32_fast(dtypes, getattr(args, "tf32_fast", False))
    entries = [s if isinstance(s[0], tuple) else (s, {}) for s in shapes]
    return [make_problem(s, d, args, fields) for d in dtypes for s, fields in entries]


def cache_from(args, *, reads: bool = False, writes: bool = False):
    """The command's kernel cache, its directory checked first (``nova.cli.cache_dir``)."""
    from nova.cli.cache_dir import open_cache
    return open_cache(args.cache_dir, reads=reads, writes=writes)


def refuse_flags(args, names: dict[str, object], why: str) -> None:
    """One usage line for flags the command would otherwise ignore: ``names`` maps each argument's
    dest to the value it has when not given."""
    given = [f"--{dest.replace('_', '-')}" for dest, unset in names.items() if getattr(args, dest, unset) != unset]
    if given:
        raise UsageError(f"{', '.join(given)}: {why}")


def check_batch_strides(entries: list, batch_strides) -> None:
    """``--batch-strides`` describes a batch: refused where no shape is batched (``BxMxNxK``, or a
    suite entry with ``B``), instead of being ignored."""
    if batch_strides is not None and not any("B" in fields for _, fields in entries):
        raise UsageError("--batch-strides applies to a batched shape (BxMxNxK, or a JSON suite entry with \"B\"); "
                         "these shapes are single GEMMs")


GEMM_ONLY_FLAGS = {"shapes": None, "suite": None, "dtype": "tf32", "trans_a": False, "trans_b": False, "bias": False,
                   "activation": "none", "out_dtype": None, "tf32_fast": False, "batch_strides": None}
TRAIN_ONLY_FLAGS = {"batch": None, "seq": None, "optimizer": "adamw", "memory_budget": None, **RECIPE_FLAGS}


# --------------------------------------------------------------------------- nova compile
def add_compile(sub) -> None:
    p = sub.add_parser("compile", help="configure and compile one kernel to MLIR, PTX or a cubin",
                       description="Configure one GEMM for a target and write its MLIR, PTX or cubin.")
    p.add_argument("op", choices=["gemm"], help="operation: gemm")
    p.add_argument("shape", type=_arg(parse_problem_shape), help="S, SxS, MxNxK or BxMxNxK (a batch of B GEMMs)")
    add_problem_args(p, batched=True)
    p.add_argument("--emit", choices=["mlir", "ptx", "cubin"], default="ptx",
                   help="what to write: mlir (the kernel before lowering), ptx (default) or cubin (needs ptxas and -o)")
    p.add_argument("-o", "--output", default="-", help="output file ('-': stdout; not for cubin)")
    p.set_defaults(run=run_compile)


def run_compile(args) -> int:
    from nova.hwmodel import get_target
    from nova.kernels.gemm.family import compile_artifact
    from nova.runtime.cache import summary_line
    from nova.runtime.matmul import configure_schedule
    target = get_target(args.target)
    if "," in args.dtype:
        raise UsageError(f"nova compile builds one kernel: give one --dtype, not {args.dtype!r}")
    check_batch_strides([args.shape], args.batch_strides)
    [problem] = problems_from([args.shape], args)
    if args.emit == "cubin" and args.output == "-":
        raise UsageError("refusing to write a binary cubin to the terminal; pass -o FILE")
    schedule = configure_schedule(problem, target)
    if args.emit == "mlir":
        from nova.kernels.gemm.compile import build_module
        data = str(build_module(problem, schedule)).encode()
    else:
        artifact = compile_artifact(problem, schedule, target)
        if args.emit == "ptx":
            data = artifact.ptx.encode()
        elif artifact.cubin is None:
            raise ValueError("no cubin was produced (ptxas not found on this machine?); use --emit ptx")
        else:
            data = artifact.cubin
    if args.output == "-":
        sys.stdout.write(data.decode())
    else:
        Path(args.output).write_bytes(data)
        print(f"wrote {args.output} ({len(data)} bytes): {summary_line(problem, target)}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- nova precompile
def add_precompile(sub) -> None:
    p = sub.add_parser("precompile", help="fill the kernel cache for a target (for offline GPU machines)",
                       description="Compile kernels into the cache so that a GPU machine without MLIR can run "
                                   "them with NOVA_OFFLINE=1 (carry the cache directory over).")
    p.add_argument("op", choices=["gemm", "train", "dynamo", "misses"],
                   help="gemm: the GEMMs of --shapes/--suite; train MODEL: every kernel of a built-in model's "
                        "training step (nova precompile train gpt42m --batch 32 --target h200); dynamo --step "
                        "MODULE:FACTORY: every kernel of torch.compile(model, backend='nova') on the factory's "
                        "(model, example_inputs), forward and backward; misses: every kernel an offline GPU "
                        "machine looked up in --cache-dir and did not find (recorded there, each for its own target)")
    p.add_argument("model", nargs="?", help="train only: " + model_help())
    p.add_argument("--step", default=None, metavar="MODULE:FACTORY",
                   help="train, instead of a model: your own step, a factory returning (step_fn, example_args) "
                        "or (step_fn, example_args, models, optimizers), called on the meta device with --batch/--seq "
                        "as keywords (my_pkg.my_module:make_step or file.py:make_step); dynamo: a factory returning "
                        "(model, example_inputs)")
    p.add_argument("--inference", action="store_true",
                   help="dynamo only: the model's inference graphs (no backward)")
    add_shape_list_args(p, required=False, suite_help=PRECOMPILE_SUITE_HELP, batched=True)
    add_problem_args(p, several_dtypes=True, batched=True, target_required=False)
    p.add_argument("--batch", type=int, default=None,
                   help="train only: sequences per step (default: the batch the benchmarks train the model at)")
    p.add_argument("--seq", type=int, default=None, help="train only: tokens per sequence (default: the model's)")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"], help="train only: the optimizer")
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="train only: the kernels of the step planned under this budget (12GiB; as nova.compile's "
                        "memory_budget)")
    add_recipe_args(p)
    p.add_argument("--cache-dir", default=None, help="cache directory (default: NOVA_CACHE_DIR or ~/.cache/nova)")
    p.set_defaults(run=run_precompile)


def run_precompile(args) -> int:
    if args.op == "misses":
        return run_precompile_misses(args)
    if args.target is None:
        raise UsageError(f"precompile {args.op} needs --target (rtx3060, a100, rtx4090, h100, h200)")
    if args.op == "dynamo":
        refuse_flags(args, GEMM_ONLY_FLAGS, "precompile gemm's options; the kernels follow from the model")
        refuse_flags(args, {"optimizer": "adamw", "memory_budget": None},
                     "precompile train's options; under torch.compile the optimizer stays eager and the plan has "
                     "no memory budget")
        from nova.cli.train import run_precompile_dynamo
        return run_precompile_dynamo(args)
    if args.inference:
        raise UsageError("--inference is taken by 'precompile dynamo' only")
    if args.op == "train" and args.step is not None:
        refuse_flags(args, RECIPE_FLAGS, "options of a built-in model's step: your factory's step says how it runs")
        from nova.cli.train import run_precompile_user_step
        return run_precompile_user_step(args)
    if args.step is not None:
        raise UsageError("--step is taken by 'precompile train' and 'precompile dynamo' only")
    if args.op == "train":
        refuse_flags(args, GEMM_ONLY_FLAGS, "precompile gemm's options; a training step's kernels follow from the "
                                            "model (its dtype, layouts and epilogues)")
        refuse_flags(args, {"deterministic": False}, "set NOVA_DETERMINISTIC=1 for a training step's deterministic "
                                                     "kernels (what nova.compile reads)")
        if not args.model:
            raise UsageError("precompile train needs a model (e.g. nova precompile train gpt42m --batch 32 "
                             "--target h200)")
        from nova.cli.train import run_precompile_train
        return run_precompile_train(args)
    if args.model:
        raise UsageError(f"unexpected argument {args.model!r}: a model is taken by 'precompile train' only")
    refuse_flags(args, TRAIN_ONLY_FLAGS, "options of precompile train only")
    if args.shapes is None and args.suite is None:
        raise UsageError("precompile gemm needs --shapes or --suite")
    from nova.hwmodel import get_target
    from nova.runtime.matmul import precompile_gemms
    shapes = args.shapes if args.shapes is not None else read_suite_entries(args.suite)
    check_batch_strides(shapes, args.batch_strides)
    target = get_target(args.target)
    cache = cache_from(args, writes=True)
    problems = list(dict.fromkeys(problems_from(shapes, args)))      # a problem listed twice compiles once
    start = time.perf_counter()
    counts = precompile_gemms(problems, target, cache, log=lambda line: print(line, flush=True))
    print(f"precompiled {len(problems)} problems for {target.name} into {cache.root}: kernels {counts['compiled']} compiled, "
          f"{counts['cached']} already cached, {counts['failed']} failed ({time.perf_counter() - start:.1f} s)")
    return 1 if counts["failed"] else 0


def run_precompile_misses(args) -> int:
    """``nova precompile misses``: build every kernel an offline run recorded as missing in the cache."""
    refuse_flags(args, {"target": None, "model": None, "step": None, "inference": False, "deterministic": False,
                        **GEMM_ONLY_FLAGS, **TRAIN_ONLY_FLAGS},
                 "precompile misses builds what the offline run recorded, for the target it ran on")
    from nova.compiler.precompile import build_misses
    from nova.kernels import registry  # noqa: F401  (every family, to build any record)
    cache = cache_from(args, writes=True)
    start = time.perf_counter()
    counts = build_misses(cache, log=lambda line: print(line, flush=True))
    total = sum(counts.values())
    print(f"built {total} recorded misses into {cache.root}: {counts['compiled']} compiled, {counts['cached']} "
          f"already cached, {counts['failed']} failed ({time.perf_counter() - start:.1f} s)"
          if total else f"no recorded misses in {cache.misses_dir}")
    return 1 if counts["failed"] else 0


# --------------------------------------------------------------------------- nova cache
def add_cache(sub) -> None:
    p = sub.add_parser("cache", help="list, prune, clear or locate the kernel cache",
                       description="list: every kernel; prune: delete the ones this Nova would never look up "
                                   "(corrupt, or built by an older Nova, toolchain or kernel ABI); clear: delete "
                                   "all; path: the directory.")
    p.add_argument("action", choices=["list", "prune", "clear", "path"])
    p.add_argument("--dry-run", action="store_true", help="prune: list what would be deleted, delete nothing")
    p.add_argument("--max-size", type=byte_size, default=None, metavar="SIZE",
                   help="prune: then delete the least recently used kernels until the cache holds at most SIZE "
                        "(bytes, or with K, M, G: KiB, MiB, GiB; e.g. 40M)")
    p.add_argument("--cache-dir", default=None, help="cache directory (default: NOVA_CACHE_DIR or ~/.cache/nova)")
    p.set_defaults(run=run_cache)


def byte_size(text: str) -> int:
    """'40M' -> 41943040: bytes, or a number with K, M or G (powers of 1024)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    number = t[:-1] if scale > 1 else t
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes or a number with K, M or G (e.g. 40M)")
    return int(value * scale)


def run_cache(args) -> int:
    cache = cache_from(args, reads=args.action != "path")
    if args.action == "path":
        print(cache.root)
    elif args.action == "clear":
        print(f"removed {cache.clear()} kernels from {cache.root}")
    elif args.action == "prune":
        from nova.kernels.registry import current_keys
        gone = cache.prune(dry_run=args.dry_run, max_bytes=args.max_size, current_keys=current_keys)
        for e in gone:
            why = "CORRUPT" if e.pruned == "corrupt" else e.pruned
            print(f"{e.key[:12]}  {e.size / 1024:8.1f} KB  {why:9s}  {e.summary}")
        left = len(cache.entries()) - (len(gone) if args.dry_run else 0)     # a dry run removed nothing
        print(f"{'would remove' if args.dry_run else 'removed'} {len(gone)} kernels "
              f"({sum(e.size for e in gone) / 2**20:.1f} MB) from {cache.root}; {left} kept")
    else:
        entries = cache.entries()
        for e in entries:
            flags = ("cubin+ptx" if e.has_cubin else "ptx") if e.valid else "CORRUPT"
            print(f"{e.key[:12]}  {e.size / 1024:8.1f} KB  {flags:9s}  {e.summary}")
        print(f"{len(entries)} kernels in {cache.root}" + ("" if cache.root.exists() else
                                                            " (the directory does not exist yet)"))
        misses = cache.miss_paths()          # counted, not unpickled
        if misses:
            from nova.messages import misses_command
            print(f"{len(misses)} recorded misses in {cache.misses_dir} (kernels an offline run looked up and did "
                  f"not find): `{misses_command(cache.root)}` builds them")
    return 0


# --------------------------------------------------------------------------- nova bench
def add_bench(sub) -> None:
    bench = sub.add_parser("bench", help="time Nova against cuBLAS (gemm) or other frameworks (train) on this GPU",
                           description="nova bench gemm: Nova vs cuBLAS GEMMs; nova bench train: the training-step "
                                       "benchmark (nova.bench.train) with the same flags.")
    ops = bench.add_subparsers(dest="op", metavar="OP", required=True)
    p = ops.add_parser("gemm", help="Nova vs cuBLAS (torch.matmul) GEMMs",
                       description="Nova vs cuBLAS side by side in one process: CUDA events, warm-up, median; "
                                   "writes <tag>.csv, <tag>.md and <tag>.json.  Needs torch and a GPU.")
    add_shape_list_args(p)
    p.add_argument("--dtype", default="tf32", help="tf32, bf16, fp16 (comma-separated list allowed)")
    p.add_argument("--reps", type=int, default=50, help="timed runs per measurement (median; default 50)")
    p.add_argument("--out", default=".", help="folder for the result files (default: current folder)")
    p.add_argument("--tag", default="bench", help="result file name stem (default: bench)")
    p.add_argument("--settle-s", type=float, default=0.5,
                   help="seconds both libraries run back to back before a shape is timed, so every shape is "
                        "timed at the clock the GPU holds under sustained load (default 0.5; 0 = off)")
    p.add_argument("--graph-s", type=float, default=0.3,
                   help="minimum seconds of CUDA-graph replay per library and shape (default 0.3: long enough "
                        "for 50 ms clock samples to see the timed kernel)")
    p.set_defaults(run=run_bench)
    t = ops.add_parser("train", add_help=False, help="the training-step benchmark: eager, torch.compile, JAX, Nova",
                       description="Every argument after 'train' goes to python3 -m nova.bench.train "
                                   "(--model, --batch, --seq, --framework or --all, --steps, --out, ...; "
                                   "nova bench train --help lists them).")
    t.set_defaults(run=run_bench_train, forwards=True)


def run_bench_train(args) -> int:
    from nova.bench import train
    return train.main(args.forwarded, prog="nova bench train")


def run_bench(args) -> int:
    from nova.bench.benchmark import run_benchmark
    run_benchmark(shapes_from(args), dtype_list(args.dtype), reps=args.reps, out=args.out, tag=args.tag,
                  log=lambda line: print(line, flush=True), settle_s=args.settle_s, graph_s=args.graph_s)
    return 0


# --------------------------------------------------------------------------- nova tune
def add_tune(sub) -> None:
    p = sub.add_parser("tune", help="precompile a GEMM's whole schedule space (the oracle's host side)",
                       description="Enumerate every legal schedule of the GEMM (nova.kernels.gemm.space), "
                                   "compile each into the kernel cache and write a candidate manifest; time "
                                   "them on the GPU with python3 -m nova.bench.oracle (offline, from the cache).")
    p.add_argument("op", choices=["gemm"], help="operation: gemm")
    p.add_argument("shape", nargs="?", type=_arg(parse_gemm_shape), help="S, SxS or MxNxK (or --suite)")
    p.add_argument("--suite", help=SUITE_HELP)
    add_problem_args(p, several_dtypes=True)
    p.add_argument("--exhaustive", action="store_true", required=True,
                   help="search Nova's own schedule space (the only mode)")
    p.add_argument("--limit", type=int, default=None,
                   help="at most N candidates per problem (deterministic; always includes the analytic pick)")
    p.add_argument("--strategy", default="mixed", choices=["mixed", "model", "uniform", "structure"],
                   help="how --limit subsamples: model-ranked, seeded-uniform, half each (default), or the "
                        "model's best of each kernel structure (tiling, split, cluster, ping-pong, epilogue)")
    p.add_argument("--family", default=None, choices=["wgmma", "mma.sync"],
                   help="instruction family of the space (default: the configurator's, i.e. wgmma on Hopper)")
    p.add_argument("--jobs", type=_at_least_one, default=1, help="compiler processes (default 1)")
    p.add_argument("--manifest", default=None, help="manifest JSON (default: <cache-dir>/tune-manifest.json)")
    p.add_argument("--cache-dir", default=None, help="cache directory (default: NOVA_CACHE_DIR or ~/.cache/nova)")
    p.set_defaults(run=run_tune)


def run_tune(args) -> int:
    from nova.bench.tune import run_precompile_cli
    if (args.shape is None) == (args.suite is None):
        raise UsageError("give one shape (MxNxK) or --suite FILE")
    shapes = [args.shape] if args.shape is not None else read_suite(args.suite)
    problems = problems_from(shapes, args)
    return run_precompile_cli(problems, args.target, cache_from(args, writes=True).root, args.limit, args.strategy,
                              args.jobs, args.manifest, args.family)


# --------------------------------------------------------------------------- nova report
def add_report(sub) -> None:
    p = sub.add_parser("report", help="render benchmark/oracle results as an HTML + Markdown report (no GPU)",
                       description="Read results files (nova bench JSON or CSV, "
                                   "nova.bench.oracle JSON) and write a self-contained report directory: "
                                   "index.html, README.md, PNG plots.  Needs no GPU.")
    p.add_argument("--results", required=True, help="comma-separated benchmark results files (.json or .csv)")
    p.add_argument("--oracle", default=None,
                   help="oracle results file(s) (nova.bench.oracle JSON), comma-separated: the first is the run "
                        "of record, later ones are repeat runs compared with it (and their Inductor timings shown)")
    p.add_argument("--out", default=None, help="output directory (default: reports/<target>-<date>/)")
    p.add_argument("--title", default=None, help="report title")
    p.set_defaults(run=run_report)


def run_report(args) -> int:
    from nova.report import write_report
    from nova.report.load import ResultsError
    files = [f.strip() for f in args.results.split(",") if f.strip()]
    try:
        out = write_report(files, oracle=args.oracle, out=args.out, title=args.title)
    except ResultsError as e:              # a results file that is not one: bad input, one line, exit 2
        raise UsageError(str(e)) from None
    print(f"report written to {out / 'index.html'} and {out / 'README.md'}")
    return 0


# --------------------------------------------------------------------------- entry point
SUBCOMMANDS = [add_compile, add_precompile, add_cache, add_bench, add_tune, add_report]


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="nova", description="Nova: MLIR GEMM kernels with an analytic configurator.",
                       epilog="Exit status: 0 success, 2 bad input or usage, 1 a failed step (compile, driver, files).")
    add_version(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _runtime_errors() -> tuple[type, ...]:
    """Exceptions that mean a failed step (exit 1, one line), not a Nova bug; bad input is exit 2."""
    from nova.runtime.driver import NovaRuntimeError
    errors: list[type] = [NovaRuntimeError, ValueError, TypeError, KeyError, OSError]
    try:
        from nova.codegen import CodegenError
        errors.append(CodegenError)
    except ImportError:
        pass
    return tuple(errors)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "forwards", False):           # nova bench train ...: its arguments are nova.bench.train's
        args.forwarded = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return 2
    return dispatch("nova", lambda: args.run(args), _runtime_errors())


if __name__ == "__main__":
    sys.exit(main())
