"""The training-step benchmark: PyTorch eager, torch.compile, JAX and Nova on the built-in GPTs.

    python3 -m nova.bench.train --framework {eager,compile,jax,nova} --model gpt42m --batch 32 \\
        [--seq 512] [--steps 200] [--warmup 10] [--timed 50] [--repeats 5] --out DIR
    python3 -m nova.bench.train --all --model gpt42m --batch 32 --out DIR    # each in its own process

One framework per process.  Every framework starts from the same weights (the torch model built
on the CPU after ``torch.manual_seed(seed)``; the JAX twin copies its ``state_dict``), trains on
the same synthetic token stream (batch ``i`` is a function of ``(seed, i)`` alone, generated with
numpy), with TF32 matrix products and the same AdamW (``ADAMW``: lr 3e-4, betas (0.9, 0.95), eps
1e-8, weight decay 0.1 on every parameter; torch's default implementation, foreach on CUDA).  By
default the learning rate is constant and nothing is clipped; ``--schedule warmup-cosine`` and
``--clip-grad-norm`` make the PyTorch-based frameworks (eager, torch.compile, Nova) run a real
script's loop: a ``LambdaLR`` stepped after every step, ``clip_grad_norm_`` inside it (JAX keeps the
constant schedule and says so in its result).

What a run measures, in order:
1. first step: wall time of step 0 to completion (compilation included);
2. the loss curve: steps 0..steps-1 on batches 0..steps-1, each loss kept on the device and read
   once at the end;
3. settle: at least ``--warmup`` more steps and at least ``--settle-s`` seconds of steps back to
   back, so the GPU is timed at the clock it holds under sustained load (an H200 leaves idle at its
   1980 MHz boost and takes about a second to settle under its power cap: bench/NOTES.md, v0.6);
4. steady state: ``--repeats`` times ``--timed`` steps back to back, timed with CUDA events around
   the loop (JAX: host clock around the loop, ``block_until_ready`` on the whole state before and
   after); tokens/s from the median repeat;
5. peak memory over the whole run (torch: ``max_memory_allocated``/``max_memory_reserved``; JAX:
   ``device.memory_stats()['peak_bytes_in_use']``), and for torch also the peak of the timed phase;
   with ``--memory-budget`` (nova, CUDA) the process is capped at the budget (``cap_memory``; not with
   ``--no-memory-cap``) and
   the program's predicted memory is recorded beside its measured peak (``nova.program_memory``);
   on CUDA the memory diagnostic (``memory_diagnostic``, ``nova.bench.memory_phases``, always on):
   torch's counters at each phase (setup, the program's build, binding, warm-up and capture, the
   first step, the end of the run) beside the plan's predicted components, also written when the
   run fails (an out-of-memory error under the cap);
6. the SM clock and board power, sampled with ``nvidia-smi`` every 100 ms, summarised over the
   timed windows.

Writes ``DIR/<framework>-<model>-b<batch>.json`` (fields: ``nova.bench.train`` docs in
bench/README.md).  ``--all`` runs eager, compile, jax and nova one after another in their own
processes, then writes ``DIR/summary-<model>-b<batch>.md`` and ``.png`` (``nova.bench.train_report``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from nova import options
from nova.bench.harness import ClockSampler
from nova.bench.memory_phases import MemoryDiagnostic
from nova.bench.train_report import FRAMEWORKS, write_report
from nova.cli.common import CliParser
from nova.models.recipe import add_recipe_args

# AdamW hyper-parameters, identical in every framework (optax.adamw takes the same numbers).
ADAMW = {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
SCHEMA = 1


class BenchError(Exception):
    """A benchmark that cannot run; the message is one line for the user."""


class Unavailable(BenchError):
    """The framework is not available in this environment (exit status 2)."""


class BadArgument(BenchError):
    """A command-line value the run cannot take: an unknown model, a ``--seq`` beyond its position
    table, a recipe the model refuses, a ``--memory-budget`` below the smallest plan (exit status 2)."""


def train_recipe(args):
    """The run's ``nova.models.TrainRecipe`` (``BadArgument`` for a combination it refuses)."""
    from nova.models.recipe import recipe_from_args
    try:
        return recipe_from_args(args)
    except ValueError as e:
        raise BadArgument(str(e)) from None


def result_path(out: str | Path, framework: str, model: str, batch: int) -> Path:
    return Path(out) / f"{framework}-{model}-b{batch}.json"


# ------------------------------------------------------------------------------------- the model
def _gpt_module():
    try:
        from nova.models import gpt
    except ImportError as e:
        raise BenchError(f"nova.models.gpt is not importable ({e}); the benchmark trains the built-in GPT") from None
    return gpt


def model_config(name: str):
    from nova import models
    try:
        return models.config(name)
    except ValueError as e:
        raise BadArgument(str(e)) from None


def config_dict(cfg) -> dict:
    import dataclasses
    if dataclasses.is_dataclass(cfg):
        return dataclasses.asdict(cfg)
    return {k: v for k, v in vars(cfg).items() if not k.startswith("_")}


def build_torch_model(cfg, seed: int):
    """The torch model of ``cfg`` (a GPT, Llama or Hugging Face config), built on the CPU from ``seed`` (the model
    draws its weights from its own generator; ``torch.manual_seed`` as well, for anything else
    random): the same weights in every framework and on every machine."""
    import torch
    from nova import models
    gpt = _gpt_module()
    torch.manual_seed(seed)
    from nova.models.hf import HFConfig
    with torch.device("cpu"):
        if isinstance(cfg, HFConfig):
            model = models.HFCausalLM(cfg, seed=seed)
        else:
            model = (models.Llama if isinstance(cfg, models.LlamaConfig) else gpt.GPT)(cfg, seed=seed)
    return model


def initial_state(model: str, seed: int):
    """The torch model's config and initial ``state_dict`` (numpy arrays), built in a child process
    so that the JAX process never imports torch (torch's CUDA libraries, loaded first, can clash
    with jaxlib's own cuDNN/cuBLAS).  Returns ``(config, state_dict, seconds)``; the config is a
    namespace with the fields of ``GPTConfig``."""
    import tempfile
    import types
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "init.npz"
        r = subprocess.run([sys.executable, "-m", "nova.bench.train", "--export-init", str(path), "--model", model,
                            "--seed", str(seed)], capture_output=True, text=True)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            if r.returncode == 2:          # the child refused the model: the same one line
                raise BadArgument(tail.removeprefix("nova.bench.train: "))
            raise BenchError(f"exporting the torch model's initial weights failed: {tail}")
        with np.load(path) as z:
            sd = {k: z[k] for k in z.files if k != CONFIG_KEY}
            cfg = types.SimpleNamespace(**json.loads(str(z[CONFIG_KEY])))
    return cfg, sd, time.perf_counter() - t0


CONFIG_KEY = "__config_json__"


def export_init(model: str, seed: int, path: str) -> None:
    """Write ``build_torch_model(model, seed).state_dict()`` and the config to ``path`` (npz)."""
    cfg = model_config(model)
    sd = build_torch_model(cfg, seed).state_dict()
    np.savez(path, **{k: v.detach().cpu().numpy() for k, v in sd.items()},
             **{CONFIG_KEY: np.array(json.dumps(config_dict(cfg)))})


def torch_loss(model, idx, targets):
    """The model's mean cross-entropy loss for ``(idx, targets)``."""
    out = model(idx, targets)
    return out[-1] if isinstance(out, (tuple, list)) else out


# -------------------------------------------------------------------------------------- the data
def token_batches(vocab: int, batch: int, seq: int, n: int, seed: int) -> np.ndarray:
    """``n`` batches of ``seq + 1`` tokens, ``int64 [n, batch, seq + 1]``; inputs are ``[..., :-1]``,
    targets ``[..., 1:]``.  Batch ``i`` depends on ``(seed, i)`` alone, so every framework, run
    length and machine sees the same tokens.

    A learnable stream, so the loss curve moves: each token follows its predecessor through a fixed
    random successor table (4 successors per token, probability 0.75), otherwise it is drawn from a
    fixed Zipf(1) unigram over a random permutation of the vocabulary."""
    table_rng = np.random.default_rng([seed, 0x5EED])
    succ = table_rng.integers(0, vocab, size=(vocab, 4))
    zipf = 1.0 / np.arange(1, vocab + 1)
    cdf = np.cumsum(zipf / zipf.sum())
    cdf[-1] = 1.0
    perm = table_rng.permutation(vocab)
    out = np.empty((n, batch, seq + 1), dtype=np.int64)
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        unigram = perm[np.searchsorted(cdf, rng.random((batch, seq + 1)), side="right")]
        follow = rng.random((batch, seq + 1)) < 0.75
        pick = rng.integers(0, 4, size=(batch, seq + 1))
        toks = out[i]
        toks[:, 0] = unigram[:, 0]
        for t in range(1, seq + 1):
            toks[:, t] = np.where(follow[:, t], succ[toks[:, t - 1], pick[:, t]], unigram[:, t])
    return out


def padding_masks(batch: int, seq: int, n: int, seed: int) -> np.ndarray:
    """``n`` attention masks ``int64 [n, batch, seq]`` of right-padded sequences (1 = token, 0 =
    padding): each sequence keeps a length drawn uniformly from ``seq // 2 .. seq``, from
    ``(seed, i, "pad")`` alone, as a padding collator's batches of uneven documents look."""
    out = np.zeros((n, batch, seq), dtype=np.int64)
    for i in range(n):
        lengths = np.random.default_rng([seed, i, 0x9AD]).integers(seq // 2, seq + 1, size=batch)
        out[i] = np.arange(seq)[None, :] < lengths[:, None]
    return out


# ---------------------------------------------------------------------------- clocks and context
# ClockSampler (nvidia-smi clock/power samples) lives in nova.bench.harness, shared with tensor_ceiling
def _git_commit() -> str | None:
    try:
        root = Path(__file__).resolve().parents[2]
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10)
        return r.stdout.strip() or None
    except Exception:
        return None


def _base_environment() -> dict:
    import nova
    env = {"python": platform.python_version(), "numpy": np.__version__, "nova": nova.__version__,
           "nova_commit": _git_commit(), "host": platform.node(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
           "NOVA_OFFLINE": options.current().offline,
           "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}
    return env


# ----------------------------------------------------------------------------- the measurement
def measure(run_step, sync, loss_values, timer, args, n_batches: int, log) -> dict:
    """The common protocol (module docstring), for any framework:
    ``run_step(i)`` launches one step on batch ``i`` and returns its loss handle (asynchronously);
    ``sync()`` waits for everything launched; ``loss_values(handles)`` -> floats; ``timer(fn)`` runs
    ``fn`` and returns the seconds it took on the device."""
    res: dict = {}
    t0 = time.perf_counter()
    handles = [run_step(0)]
    sync()
    res["first_step_s"] = time.perf_counter() - t0
    log(f"first step (compilation included): {res['first_step_s']:.2f} s")
    t0 = time.perf_counter()
    for i in range(1, args.steps):
        handles.append(run_step(i))
    sync()
    res["curve_s"] = time.perf_counter() - t0
    res["losses"] = [_finite(v) for v in loss_values(handles)]
    log(f"loss curve: {args.steps} steps, loss {res['losses'][0]} -> {res['losses'][-1]} ({res['curve_s']:.1f} s)")

    k = args.steps
    n = 0
    t0 = time.perf_counter()
    while n < args.warmup or time.perf_counter() - t0 < args.settle_s:
        for _ in range(4):
            run_step(k % n_batches)
            k += 1
            n += 1
        sync()
    res["settle"] = {"steps": n, "seconds": time.perf_counter() - t0, "min_steps": args.warmup,
                     "min_seconds": args.settle_s}

    repeats_s, windows = [], []
    for _ in range(args.repeats):
        def loop(k0=k):
            for j in range(args.timed):
                run_step((k0 + j) % n_batches)
        w0 = time.time()
        repeats_s.append(timer(loop))
        windows.append((w0, time.time()))
        k += args.timed
    med = statistics.median(repeats_s)
    tokens = args.batch * args.seq * args.timed
    res["timing"] = {"timed_steps": args.timed, "repeats": args.repeats, "repeat_s": repeats_s,
                     "step_ms_median": med / args.timed * 1e3,
                     "step_ms_min": min(repeats_s) / args.timed * 1e3,
                     "step_ms_max": max(repeats_s) / args.timed * 1e3,
                     "spread_pct": (max(repeats_s) - min(repeats_s)) / med * 100,
                     "tokens_per_s": tokens / med,
                     "tokens_per_s_repeats": [tokens / s for s in repeats_s],
                     "windows_unix_s": windows}
    log(f"steady: {res['timing']['step_ms_median']:.2f} ms/step, {res['timing']['tokens_per_s']:,.0f} tokens/s "
        f"(median of {args.repeats} x {args.timed} steps, spread {res['timing']['spread_pct']:.1f}%)")
    return res


def _finite(x):
    x = float(x)
    return x if math.isfinite(x) else None


def _jsonable(obj, depth: int = 0):
    """Best-effort JSON form of ``step.stats`` and similar objects."""
    import dataclasses
    if depth > 6:
        return repr(obj)
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return _finite(obj)
    if isinstance(obj, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _jsonable(getattr(obj, f.name), depth + 1) for f in dataclasses.fields(obj)}
    if hasattr(obj, "item") and callable(obj.item):
        try:
            return _jsonable(obj.item(), depth + 1)
        except Exception:
            pass
    if hasattr(obj, "__dict__"):
        return {k: _jsonable(v, depth + 1) for k, v in vars(obj).items() if not k.startswith("_")}
    return repr(obj)


# ------------------------------------------------------------------------------ torch frameworks
def _torch_setup(device: str, tf32: bool = True):
    """torch, its TF32 switches set (``tf32=False``: ``--fp32-matmul``, full FP32 products)."""
    import torch
    if device == "cuda":
        if not torch.cuda.is_available():
            raise BenchError("--device cuda, but torch sees no CUDA device (use --device cpu on a CPU-only machine)")
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    return torch


def _nova_compile():
    import nova
    try:
        fn = getattr(nova, "compile")
    except AttributeError:
        fn = None
    if not callable(fn):
        raise Unavailable("nova.compile is not available in this checkout (the graph compiler is not "
                          "merged): the nova framework cannot run")
    return fn


def run_torch(args, cfg, tokens: np.ndarray, log, diagnostic: MemoryDiagnostic | None = None) -> dict:
    """One PyTorch-based framework's run (module docstring); ``diagnostic`` records its memory phases
    on CUDA (the caller writes its report, also when this raises)."""
    diagnostic = diagnostic if diagnostic is not None else MemoryDiagnostic()
    torch = _torch_setup(args.device, tf32=not args.fp32_matmul)
    nova_compile = _nova_compile() if args.framework == "nova" else None
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    res: dict = {"torch": torch.__version__, "cuda": torch.version.cuda,
                 "device_name": torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu",
                 "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32,
                          "cudnn": torch.backends.cudnn.allow_tf32} if cuda else None}
    t_setup = time.perf_counter()
    if cuda and nova_compile is not None and args.memory_budget is not None and not args.no_memory_cap:
        res["memory_cap"] = cap_memory(torch, dev, args.memory_budget)
    if cuda:
        diagnostic.start(torch, dev)
    model = build_torch_model(cfg, args.seed).to(dev)
    model.train()
    impl = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True},
            "forloop": {"foreach": False}}[args.adamw_impl]
    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"], **impl)
    resolved = args.adamw_impl if args.adamw_impl != "default" else _default_adamw_impl(torch, model, cuda)
    res["optimizer"] = {"class": "torch.optim.AdamW", **ADAMW, "impl_requested": args.adamw_impl,
                        "impl": resolved, "param_groups": 1}
    idx = torch.from_numpy(np.ascontiguousarray(tokens[:, :, :-1])).to(dev)
    tgt = torch.from_numpy(np.ascontiguousarray(tokens[:, :, 1:])).to(dev)
    recipe = train_recipe(args)
    masks = torch.from_numpy(padding_masks(args.batch, args.seq, tokens.shape[0], args.seed)).to(dev) \
        if recipe.padded else None
    res["data_device_bytes"] = diagnostic.data_device_bytes = \
        idx.nbytes + tgt.nbytes + (masks.nbytes if masks is not None else 0)
    res["recipe"] = {"autocast": recipe.autocast, "padded": recipe.padded, "clip_grad_norm": recipe.clip_grad_norm,
                     "describe": recipe.describe()}
    diagnostic.mark("setup: model, optimizer and data on the device")

    fwd = model
    if args.framework == "compile":
        kw = {} if args.compile_mode == "default" else {"mode": args.compile_mode}
        fwd = torch.compile(model, **kw)
        res["compile"] = {"scope": "model (torch.compile(model); backward by AOTAutograd, optimizer eager)",
                          "mode": args.compile_mode}

    from nova.models import make_train_step
    train_step = make_train_step(fwd, opt, recipe)      # the step explain/precompile train plan, recipe included
    scheduler = make_schedule(torch, opt, args.schedule, args.steps)
    res["optimizer"].update(schedule=args.schedule, clip_grad_norm=recipe.clip_grad_norm)

    step = compiled = train_step
    if nova_compile is not None:
        t0 = time.perf_counter()
        compiled = nova_compile(train_step, **({"memory_budget": args.memory_budget} if args.memory_budget else {}))
        res["nova"] = {"compile_call_s": time.perf_counter() - t0, "backend": getattr(compiled, "backend", None),
                       "memory_budget": getattr(compiled, "memory_budget", None)}
        diagnostic.compiled = compiled

        def step(*batch):
            try:
                return compiled(*batch)
            except ImportError as e:     # a part of the pipeline (passes, executor) not in this checkout
                raise Unavailable(f"nova.compile cannot build its program here ({e})") from None
    if cuda:
        torch.cuda.synchronize()
    res["setup_s"] = time.perf_counter() - t_setup

    first = [True]

    def run_step(i):
        loss = step(idx[i], tgt[i], *((masks[i],) if masks is not None else ()))
        if scheduler is not None:
            scheduler.step()
        if first[0] and diagnostic.active:
            first[0] = False
            torch.cuda.synchronize(dev)
            diagnostic.mark("first step returned (synchronised)")
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def loss_values(handles):
        return torch.stack([h.reshape(()).float() for h in handles]).cpu().tolist()

    def timer(fn):
        if not cuda:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3

    run_peaks = {}
    if cuda:
        plain_timer = timer

        def timer(fn):
            if not run_peaks:     # before the first timed repeat: keep the run's peaks, then reset
                torch.cuda.synchronize()
                run_peaks.update(allocated=torch.cuda.max_memory_allocated(dev),
                                 reserved=torch.cuda.max_memory_reserved(dev))
                torch.cuda.reset_peak_memory_stats(dev)
            return plain_timer(fn)
    res["timing_method"] = "cuda-events around the loop" if cuda else "host clock around the loop (cpu)"
    res.update(measure(run_step, sync, loss_values, timer, args, tokens.shape[0], log))
    diagnostic.mark("run done: after the timed repeats")

    if nova_compile is not None:
        res["nova"].update(_nova_report(compiled))
    if args.framework == "compile":
        res["compile"].update(_dynamo_counters())
    if cuda:
        steady_alloc, steady_res = torch.cuda.max_memory_allocated(dev), torch.cuda.max_memory_reserved(dev)
        res["memory"] = {"peak_allocated_bytes": max(steady_alloc, run_peaks["allocated"]),
                         "peak_reserved_bytes": max(steady_res, run_peaks["reserved"]),
                         "steady_peak_allocated_bytes": steady_alloc, "steady_peak_reserved_bytes": steady_res,
                         "source": "torch.cuda.max_memory_allocated/reserved (whole run; steady_: timed phase)"}
    else:
        res["memory"] = None
    return res


def cap_memory(torch, dev, budget_text: str) -> dict:
    """Cap this process's CUDA caching allocator at the memory budget
    (``torch.cuda.set_per_process_memory_fraction(budget / total)``) before anything is allocated, so
    a run proves the budget: an allocation beyond it raises out-of-memory (reported in one line,
    ``oom_line``).  The cap bounds PyTorch's reserved memory (allocated + cached, so fragmentation
    counts too); Nova's GEMM workspaces come from ``cuMemAlloc`` and are outside it (the plan lists
    them: ``outside_arena_driver_bytes``)."""
    from nova.passes.budget import parse_size
    budget = parse_size(budget_text)
    index = None if isinstance(dev, str) else dev.index   # torch's API wants an index: "cuda" has none
    if isinstance(dev, str) and ":" in dev:
        index = int(dev.split(":")[1])
    if index is None:
        index = torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory
    fraction = min(1.0, budget / total)
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    return {"budget_bytes": budget, "device_total_bytes": total, "fraction": fraction,
            "source": "torch.cuda.set_per_process_memory_fraction(budget / total)"}


def in_chain(e: BaseException, test) -> BaseException | None:
    """The first exception in ``e``'s chain (``e``, then its cause or context, ...) that ``test``
    accepts, else None."""
    seen = e
    while seen is not None:
        if test(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def budget_refusal(e: BaseException):
    """The ``MemoryBudgetError`` anywhere in ``e``'s chain (the step does not fit ``--memory-budget``:
    its one line names the smallest plan), else None."""
    from nova.passes.budget import MemoryBudgetError
    return in_chain(e, lambda x: isinstance(x, MemoryBudgetError))


def oom_line(e: BaseException, budget_text: str | None) -> str | None:
    """One line for an out-of-memory anywhere in ``e``'s chain under a memory budget (else None)."""
    if in_chain(e, lambda x: type(x).__name__ == "OutOfMemoryError") is None:
        return None
    return (f"out of memory under the --memory-budget {budget_text} cap: the step allocated more than its "
            f"budget ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")[:400]


SCHEDULES = ("constant", "warmup-cosine")


def make_schedule(torch, opt, name: str, steps: int):
    """The learning-rate schedule of a run, stepped after every optimizer step: ``constant`` (none)
    or ``warmup-cosine`` (linear warmup over the first 10% of ``steps``, then cosine decay to 10% of
    the peak at ``steps``, held there), the usual GPT recipe, as a ``LambdaLR``."""
    if name == "constant":
        return None
    warmup = max(1, steps // 10)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, steps - warmup))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
    return torch.optim.lr_scheduler.LambdaLR(opt, factor)


def _default_adamw_impl(torch, model, cuda: bool) -> str:
    """What ``torch.optim.AdamW`` runs when the user names no implementation (torch's own rule)."""
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach
        fused, foreach = _default_to_fused_or_foreach(list(model.parameters()), False, False)
        return "fused" if fused else "foreach" if foreach else "forloop"
    except Exception:
        return "foreach" if cuda else "forloop"


def _nova_report(step) -> dict:
    """``step.stats`` and ``step.explain()`` of a ``nova.compile`` step, and the engine it ran."""
    out: dict = {}
    last = getattr(step, "_last", None)
    if last is not None and hasattr(last, "engine"):
        out["engine"] = type(last.engine).__name__
    stats = getattr(step, "stats", None)
    out["stats"] = _jsonable(stats() if callable(stats) else stats)
    program = getattr(getattr(last, "engine", None), "program", None)
    if program is not None:            # the plan's prediction beside the program's measured peak
        out["program_memory"] = {k: program.stats.get(k) for k in (
            "arena_bytes", "peak_bytes", "outside_arena_bytes", "outside_arena_driver_bytes", "constants_bytes",
            "static_input_bytes", "scratch_bytes", "workspace_bytes", "launch_workspace_bytes",
            "launch_workspaces_in_arena", "launch_workspaces_outside_arena_bytes", "measured_peak_bytes")}
    explain = getattr(step, "explain", None)
    if callable(explain):
        import contextlib
        import io
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                text = explain()
            out["explain"] = text if isinstance(text, str) else (buf.getvalue() or _jsonable(text))
        except Exception as e:  # recorded, not fatal: the timing stands without it
            out["explain_error"] = f"{type(e).__name__}: {e}"
    return out


def _dynamo_counters() -> dict:
    try:
        from torch._dynamo.utils import counters
        return {"graph_breaks": sum(counters["graph_break"].values()),
                "unique_graphs": counters["stats"].get("unique_graphs")}
    except Exception:
        return {}


# ---------------------------------------------------------------------------------------- JAX
def run_jax(args, cfg, state_dict: dict, tokens: np.ndarray, log) -> dict:
    if args.autocast or args.padded:
        raise Unavailable("--autocast and --padded apply to the PyTorch-based frameworks (the JAX twin trains "
                          "FP32 on unpadded batches)")
    try:
        import jax
        import optax  # noqa: F401
    except ImportError as e:
        raise Unavailable(f"jax/optax not importable ({e}): the jax framework cannot run") from None
    if args.device == "cuda":
        jax.config.update("jax_default_matmul_precision", "tensorfloat32")
        try:
            dev = jax.devices("gpu")[0]
        except RuntimeError:
            raise BenchError("--device cuda, but jax has no GPU backend (jax.devices('gpu') failed)") from None
    else:
        dev = jax.devices("cpu")[0]
    import jax.numpy as jnp
    from nova.bench import jax_gpt as tw

    res: dict = {"jax": jax.__version__, "jaxlib": _pkg_version("jaxlib"),
                 "optax": _pkg_version("optax"), "device_name": dev.device_kind, "backend": dev.platform,
                 "matmul_precision": getattr(jax.config, "jax_default_matmul_precision", None),
                 "XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
                 "XLA_PYTHON_CLIENT_MEM_FRACTION": os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")}
    t_setup = time.perf_counter()
    tc = tw.config_from_torch(cfg)
    params = jax.device_put(tw.params_from_torch(state_dict, tc), dev)
    del state_dict
    opt = tw.make_optimizer(ADAMW["lr"], ADAMW["betas"], ADAMW["eps"], ADAMW["weight_decay"])
    opt_state = jax.jit(opt.init)(params)
    res["optimizer"] = {"class": "optax.adamw", **ADAMW, "impl": "optax (XLA-fused in the jitted step)",
                        "param_groups": 1, "schedule": "constant", "clip_grad_norm": 0.0}
    if args.schedule != "constant" or args.clip_grad_norm:
        log("jax: --schedule and --clip-grad-norm apply to the PyTorch-based frameworks; JAX runs the constant recipe")
    # one device array per batch (indexing one big array would dispatch a slice op per step)
    idx = [jax.device_put(np.ascontiguousarray(b[:, :-1], dtype=np.int32), dev) for b in tokens]
    tgt = [jax.device_put(np.ascontiguousarray(b[:, 1:], dtype=np.int32), dev) for b in tokens]
    res["data_device_bytes"] = int(sum(a.nbytes for a in idx + tgt))
    jax.block_until_ready((params, opt_state, idx, tgt))
    res["setup_s"] = time.perf_counter() - t_setup

    step_jit = tw.make_train_step(tc, opt)
    state = {"params": params, "opt_state": opt_state, "compiled": None}
    del params, opt_state

    def run_step(i):
        if state["compiled"] is None:      # first call: lower + compile (AOT, timed apart), then run
            t0 = time.perf_counter()
            lowered = step_jit.lower(state["params"], state["opt_state"], idx[i], tgt[i])
            t1 = time.perf_counter()
            state["compiled"] = lowered.compile()
            res["jit"] = {"lower_s": t1 - t0, "compile_s": time.perf_counter() - t1, "donated": ["params", "opt_state"]}
        state["params"], state["opt_state"], loss = state["compiled"](state["params"], state["opt_state"],
                                                                      idx[i], tgt[i])
        state["loss"] = loss
        return loss

    def sync():
        jax.block_until_ready((state["params"], state["opt_state"], state.get("loss")))

    def loss_values(handles):
        return [float(v) for v in np.asarray(jax.device_get(jnp.stack(handles)))]

    def timer(fn):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - t0

    res["timing_method"] = "host clock around the loop, block_until_ready(params, opt_state, loss) before and after"
    res.update(measure(run_step, sync, loss_values, timer, args, tokens.shape[0], log))
    res["torch_in_process"] = "torch" in sys.modules          # should stay False (initial_state)
    stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
    if stats:
        res["memory"] = {"peak_allocated_bytes": stats.get("peak_bytes_in_use"),
                         # XLA preallocates 75% of the card by default: its pool says nothing of the step
                         "peak_reserved_bytes": None if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower()
                         not in ("false", "0") else stats.get("peak_pool_bytes") or stats.get("pool_bytes"),
                         "bytes_limit": stats.get("bytes_limit"),
                         "source": "device.memory_stats()['peak_bytes_in_use'] (whole run)",
                         "memory_stats": {k: v for k, v in stats.items() if isinstance(v, (int, float))}}
    else:
        res["memory"] = None
    return res


def _pkg_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


# ---------------------------------------------------------------------------------------- a run
def run_one(args) -> int:
    """One framework in this process; writes its JSON (also on failure); returns the exit status."""
    out = result_path(args.out, args.framework, args.model, args.batch)
    out.parent.mkdir(parents=True, exist_ok=True)
    log = (lambda line: print(f"[{args.framework}] {line}", flush=True))
    t_proc = time.time()
    rec: dict = {"schema": SCHEMA, "framework": args.framework, "model": args.model, "batch": args.batch,
                 "device": args.device, "seed": args.seed, "status": "ok",
                 "protocol": {"steps": args.steps, "warmup": args.warmup, "settle_s": args.settle_s,
                              "timed": args.timed, "repeats": args.repeats},
                 "environment": _base_environment()}
    clocks = ClockSampler().start() if args.device == "cuda" else None
    diagnostic = MemoryDiagnostic()
    status = 0
    try:
        if args.framework == "nova":
            _nova_compile()          # fail in one line before anything is built
        if args.framework == "jax" and args.model.startswith("llama"):
            raise Unavailable(f"the JAX twin (nova.bench.jax_gpt) is a GPT; {args.model} runs in the PyTorch-based "
                              f"frameworks only")
        if args.framework == "jax":
            cfg, state_dict, rec["init_export_s"] = initial_state(args.model, args.seed)
        else:
            cfg = model_config(args.model)
        max_seq = cfg.block_size
        if args.seq is None:
            args.seq = max_seq
        check_seq(args, max_seq)
        rec.update({"seq": args.seq, "tokens_per_step": args.batch * args.seq, "config": config_dict(cfg)})
        t0 = time.perf_counter()
        n_batches = max(args.steps, 1)
        tokens = token_batches(cfg.vocab_size, args.batch, args.seq, n_batches, args.seed)
        rec["data"] = {"kind": "synthetic: successor table (p 0.75) over a Zipf(1) unigram, numpy default_rng([seed, i])",
                       "batches": n_batches, "gen_s": time.perf_counter() - t0,
                       "tokens_sha_first_batch": _digest(tokens[0])}
        log(f"{args.model} b{args.batch}x{args.seq} on {args.device}: {args.steps} curve steps, "
            f"settle >= {args.warmup} steps / {args.settle_s:g} s, {args.repeats} x {args.timed} timed")
        if args.framework == "jax":
            rec.update(run_jax(args, cfg, state_dict, tokens, log))
            del state_dict
        else:
            rec.update(run_torch(args, cfg, tokens, log, diagnostic))
    except Unavailable as e:
        rec.update(status="unavailable", error=str(e))
        print(f"nova.bench.train: {args.framework}: {e}", file=sys.stderr, flush=True)
        status = 2
    except BenchError as e:
        rec.update(status="error", error=str(e))
        print(f"nova.bench.train: {args.framework}: {e}", file=sys.stderr, flush=True)
        status = 2 if isinstance(e, BadArgument) else 1
    except Exception as e:
        budget = budget_refusal(e) if args.memory_budget is not None else None
        line = (str(budget) if budget is not None else None) or \
            (oom_line(e, args.memory_budget) if args.memory_budget is not None else None) or \
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rec.update(status="error", error=line, traceback=traceback.format_exc())
        try:
            diagnostic.mark(f"run failed: {type(e).__name__}")
        except Exception:
            pass
        print(f"nova.bench.train: {args.framework}: {line}", file=sys.stderr, flush=True)
        if options.debug():
            traceback.print_exc()
        status = 2 if budget is not None else 1      # a budget below the smallest plan: the invocation's values
    finally:
        if clocks is not None:
            clocks.stop()
            windows = rec.get("timing", {}).get("windows_unix_s", [])
            rec["clocks"] = clocks.summary([tuple(w) for w in windows], t_proc)
        try:
            memory = diagnostic.report()
        except Exception as e:        # the diagnostic never hides the run's own result
            memory = {"error": f"{type(e).__name__}: {e}"}
        if memory is not None:
            rec["memory_diagnostic"] = memory
    rec["wall_s"] = time.time() - t_proc
    out.write_text(json.dumps(rec, indent=1, allow_nan=False) + "\n")
    log(f"wrote {out} ({rec['status']})")
    return status


def _digest(a: np.ndarray) -> str:
    import hashlib
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.int64).tobytes()).hexdigest()[:16]


# ---------------------------------------------------------------------------------- the driver
def _child_argv(args, framework: str) -> list[str]:
    argv = [sys.executable, "-m", "nova.bench.train", "--framework", framework, "--model", args.model,
            "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--timed", str(args.timed), "--repeats", str(args.repeats), "--settle-s", str(args.settle_s),
            "--seed", str(args.seed), "--device", args.device, "--out", str(args.out),
            "--compile-mode", args.compile_mode, "--adamw-impl", args.adamw_impl, "--schedule", args.schedule,
            "--clip-grad-norm", str(args.clip_grad_norm)] + (["--autocast", args.autocast] if args.autocast else []) \
        + (["--padded"] if args.padded else [])
    if args.seq is not None:
        argv += ["--seq", str(args.seq)]
    if args.memory_budget is not None and framework == "nova":       # nova.compile's budget: nova's child only
        argv += ["--memory-budget", args.memory_budget]
        if args.no_memory_cap:
            argv += ["--no-memory-cap"]
    if args.fp32_matmul:
        argv += ["--fp32-matmul"]
    return argv


def run_all(args) -> int:
    """Each framework in its own process, one after another, then the summary table and plot."""
    frameworks = run_frameworks(args)          # known ones: ``refused`` checked them
    Path(args.out).mkdir(parents=True, exist_ok=True)
    statuses = {}
    for fw in frameworks:
        path = result_path(args.out, fw, args.model, args.batch)
        path.unlink(missing_ok=True)        # never report a stale result
        print(f"== {fw}", flush=True)
        t0 = time.time()
        try:
            rc = subprocess.run(_child_argv(args, fw), timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
            path.write_text(json.dumps({"schema": SCHEMA, "framework": fw, "model": args.model, "batch": args.batch,
                                        "status": "timeout", "error": f"killed after {args.timeout} s"}) + "\n")
        if not path.exists():
            path.write_text(json.dumps({"schema": SCHEMA, "framework": fw, "model": args.model, "batch": args.batch,
                                        "status": "error", "error": f"process exited {rc} without a result"}) + "\n")
        statuses[fw] = rc
        print(f"== {fw}: exit {rc}, {time.time() - t0:.0f} s", flush=True)
    if not args.no_report:
        md, png = write_report(args.out, args.model, args.batch)
        print(Path(md).read_text(), flush=True)
        print(f"wrote {md} and {png}", flush=True)
    return 0 if all(rc == 0 for rc in statuses.values()) else 1


def parser(prog: str = "python3 -m nova.bench.train") -> argparse.ArgumentParser:
    ap = CliParser(prog=prog, description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--framework", choices=FRAMEWORKS, help="run one framework in this process")
    g.add_argument("--all", action="store_true", help="run --frameworks one after another, each in its own process, "
                                                      "then write the summary")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="with --all (default: %(default)s)")
    ap.add_argument("--model", default="gpt42m", help="a built-in model (nova.models: tiny, gpt42m, gpt144m, "
                                                       "llama-tiny, llama42m, hf-gpt2-42m, ...; default: %(default)s)")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step (default: %(default)s)")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the model's block_size)")
    ap.add_argument("--steps", type=int, default=200, help="loss-curve steps (batches 0..steps-1)")
    ap.add_argument("--warmup", type=int, default=10, help="at least this many steps after the curve before timing")
    ap.add_argument("--settle-s", type=float, default=2.0, help="at least this many seconds of steps before timing "
                                                                "(the GPU's clock under sustained load)")
    ap.add_argument("--timed", type=int, default=50, help="steps per timed repeat")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats (median reported)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the initial weights and of the token stream "
                                                         "(default: %(default)s)")
    ap.add_argument("--memory-budget", default=None, metavar="SIZE",
                    help="nova only (refused when the frameworks leave nova out): nova.compile(step, "
                         "memory_budget=SIZE) (12GiB, 11.5GB, 800MiB); on CUDA the "
                         "process is also capped at SIZE (torch.cuda.set_per_process_memory_fraction(SIZE / "
                         "device memory), before the model is built), so an out-of-memory error, reported in one "
                         "line naming the budget, means the step needs more than its budget")
    ap.add_argument("--no-memory-cap", action="store_true",
                    help="with --memory-budget: plan the step under the budget but leave the process uncapped (the "
                         "memory diagnostic then measures the whole step even where it needs more than its budget)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where the step runs (default: %(default)s)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."),
                    help="folder of the result files (default: $OUT, else the current folder)")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode for --framework compile (default, reduce-overhead, max-autotune, ...)")
    ap.add_argument("--fp32-matmul", action="store_true",
                    help="eager and compile: matmuls in full FP32, not TF32 (the loss curve's rounding reference; "
                         "Nova's f32 GEMMs are TF32, so nova refuses it)")
    ap.add_argument("--adamw-impl", choices=("default", "foreach", "fused", "forloop"), default="default",
                    help="torch AdamW implementation (default: torch's choice, foreach on CUDA)")
    ap.add_argument("--schedule", choices=SCHEDULES, default="constant",
                    help="learning-rate schedule of the PyTorch-based frameworks, stepped after every step: "
                         "warmup-cosine = 10%% linear warmup then cosine decay over --steps (default: %(default)s)")
    add_recipe_args(ap)     # --autocast, --padded, --clip-grad-norm: the step explain/precompile train plan
    ap.add_argument("--timeout", type=int, default=300, help="with --all: seconds per framework before it is killed")
    ap.add_argument("--no-report", action="store_true", help="with --all: skip the summary")
    g.add_argument("--export-init", metavar="NPZ", help=argparse.SUPPRESS)   # internal: the JAX run's weights
    return ap


def refused(args) -> str | None:
    """What is wrong with the command line's values, in one line (None: nothing); checked before
    anything is built, without importing torch (a JAX run never does)."""
    for name in ("steps", "timed", "repeats", "batch", "seq", "timeout"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name} must be at least 1, got {value}"
    if args.warmup < 0:
        return f"--warmup must be at least 0, got {args.warmup}"
    if not (math.isfinite(args.settle_s) and args.settle_s >= 0):
        return f"--settle-s must be a finite number of seconds >= 0, got {args.settle_s:g}"
    if args.seed < 0:
        return f"--seed must be at least 0, got {args.seed}"
    if not (math.isfinite(args.clip_grad_norm) and args.clip_grad_norm >= 0):
        return f"--clip-grad-norm must be a finite norm >= 0 (0: off), got {args.clip_grad_norm:g}"
    frameworks = run_frameworks(args)
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad or not frameworks:
        what = f"unknown framework(s) {', '.join(bad)}" if bad else "names no framework"
        return f"--frameworks {args.frameworks!r}: {what}; choose from {', '.join(FRAMEWORKS)}"
    if args.fp32_matmul and {"nova", "jax"} & set(frameworks):
        return "--fp32-matmul is for eager and compile (Nova's and XLA's f32 GEMMs run TF32)"
    if args.memory_budget is not None and "nova" not in frameworks:
        return (f"--memory-budget is nova.compile's budget; {', '.join(frameworks)} would run without it "
                "(add nova to the frameworks, or drop the budget)")
    if args.memory_budget is not None:
        from nova.passes.budget import MemoryBudgetError, parse_size
        try:
            parse_size(args.memory_budget)
        except MemoryBudgetError as e:
            return f"--memory-budget: {e}"
    if "compile" in frameworks and args.compile_mode != "default":
        modes = compile_modes()
        if modes and args.compile_mode not in modes:
            return f"--compile-mode {args.compile_mode!r} is not a torch.compile mode; choose from {', '.join(modes)}"
    return None


def run_frameworks(args) -> list[str]:
    """The frameworks this command line runs: ``--framework``'s, or ``--all``'s ``--frameworks``."""
    if not args.all:
        return [args.framework] if args.framework else []
    return [f.strip() for f in args.frameworks.split(",") if f.strip()]


def compile_modes() -> list[str]:
    """torch.compile's modes (empty where this torch does not list them)."""
    try:
        from torch._inductor import list_mode_options
        return list(list_mode_options())
    except Exception:
        return []


def check_seq(args, max_seq: int) -> None:
    """``--seq`` fits the model's position table (``BadArgument`` otherwise)."""
    if args.seq > max_seq:
        raise BadArgument(f"--seq {args.seq} exceeds {args.model}'s position table ({max_seq})")


def check_model(args) -> None:
    """The model, ``--seq`` and the recipe, as each run checks them (``BadArgument``): the driver's
    check before it starts a process per framework."""
    cfg = model_config(args.model)
    if args.seq is not None:
        check_seq(args, cfg.block_size)
    train_recipe(args)


def main(argv=None, prog: str = "python3 -m nova.bench.train") -> int:
    """The command line (also ``nova bench train ...``, which passes ``prog``).  Exit status: 0 every
    run succeeded, 2 bad input (one line naming it), 1 a run that failed."""
    args = parser(prog).parse_args(argv)
    if args.export_init:                # internal: the JAX run's weights (the model is all it reads)
        try:
            export_init(args.model, args.seed, args.export_init)
        except BadArgument as e:
            print(f"nova.bench.train: {e}", file=sys.stderr)
            return 2
        return 0
    problem = refused(args)
    if problem is None:
        try:
            Path(args.out).mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            problem = f"--out {args.out} is a file, not a folder"
        except OSError as e:
            problem = f"--out {args.out}: cannot make the folder ({e.strerror or e})"
    if problem is not None:
        print(f"nova.bench.train: {problem}", file=sys.stderr)
        return 2
    if args.all:
        try:
            check_model(args)
        except BadArgument as e:
            print(f"nova.bench.train: {e}", file=sys.stderr)
            return 2
        return run_all(args)
    return run_one(args)


if __name__ == "__main__":
    sys.exit(main())
