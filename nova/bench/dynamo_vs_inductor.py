"""``torch.compile(model)`` (Inductor) against ``torch.compile(model, backend="nova")`` on a GPU:
forward and backward compiled, the optimizer eager in both.

    python3 -m nova.bench.dynamo_vs_inductor --model gpt42m --batch 32 --out DIR            # GPU: both
    python3 -m nova.bench.dynamo_vs_inductor --backend nova --model gpt42m --batch 32 --out DIR   # one
    python3 -m nova.bench.dynamo_vs_inductor --precompile --target h200 --model gpt42m --batch 32  # host

Each backend runs in its own process, in the house protocol of ``nova.bench.train`` (its
``measure``): the same weights (``build_torch_model``), the same token stream (``token_batches``),
TF32 matrix products, torch's AdamW (``ADAMW``), first step (compilation included), loss curve,
settle, timed repeats (median), peak memory.  Before the timed run, the first batch's loss and
every gradient of the compiled model are compared with eager's on a copy of the same weights
(relative Frobenius error, the worst parameter named), and the graphs Nova left to torch are
counted (the ``nova`` logger's warnings).

``--precompile --target T`` (a host with MLIR, no GPU): every Nova kernel of the Nova run it would
make (``nova.integrations.dynamo_precompile.precompile`` on the same model and batch shape) into the kernel
cache, for ``NOVA_OFFLINE=1`` on the GPU machine.

Writes ``DIR/dynamo-<backend>-<model>-b<batch>.json`` and, running both, ``DIR/dynamo-<model>-b<batch>.md``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from nova.bench.train import (ADAMW, BenchError, _base_environment, _jsonable, build_torch_model, measure,
                              model_config, token_batches, torch_loss)

BACKENDS = ("inductor", "nova")
MODELS = ("gpt42m", "llama42m")


def result_path(out, backend: str, model: str, batch: int) -> Path:
    return Path(out) / f"dynamo-{backend}-{model}-b{batch}.json"


def _rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def agreement(compiled, eager, idx, tgt) -> dict:
    """The first batch's loss and gradients, compiled against eager (same weights), before any step."""
    losses = []
    for m, fn in ((compiled, compiled), (eager, eager)):
        for p in m.parameters():
            p.grad = None
        loss = torch_loss(fn, idx, tgt)
        loss.backward()
        losses.append(loss)
    named = dict(eager.named_parameters())
    original = getattr(compiled, "_orig_mod", compiled)          # torch.compile's wrapper prefixes the names
    errors = {n: _rel(p.grad, named[n].grad) for n, p in original.named_parameters() if p.grad is not None}
    worst = max(errors, key=errors.get) if errors else None
    missing = [n for n, p in original.named_parameters() if p.grad is None]
    for m in (compiled, eager):
        for p in m.parameters():
            p.grad = None
    return {"loss": float(losses[0].detach()), "loss_eager": float(losses[1].detach()), "loss_rel_error": _rel(losses[0], losses[1]),
            "grad_rel_error_max": errors.get(worst), "grad_worst_parameter": worst, "grads_missing": missing}


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def run_one(args, log) -> dict:
    import copy
    from nova.bench.train import _torch_setup
    torch = _torch_setup("cuda")
    cfg = model_config(args.model)
    tokens = token_batches(cfg.vocab_size, args.batch, args.seq, args.steps, args.seed)
    dev = torch.device("cuda")
    model = build_torch_model(cfg, args.seed).to(dev).train()
    eager = copy.deepcopy(model)
    idx = torch.from_numpy(tokens[:, :, :-1].copy()).to(dev)
    tgt = torch.from_numpy(tokens[:, :, 1:].copy()).to(dev)
    warnings = _Warnings()
    logging.getLogger("nova").addHandler(warnings)
    torch._dynamo.reset()
    from nova.integrations.dynamo import nova_backend        # the callable: no pip entry point needed
    compiled = torch.compile(model) if args.backend == "inductor" else torch.compile(model, backend=nova_backend)
    res = {"backend": args.backend, "model": args.model, "batch": args.batch, "seq": args.seq,
           "torch": torch.__version__, "device_name": torch.cuda.get_device_name(dev),
           "optimizer": {"class": "torch.optim.AdamW", **ADAMW, "eager": True}, "environment": _base_environment()}
    t0 = time.perf_counter()
    res["agreement"] = agreement(compiled, eager, idx[0], tgt[0])
    res["compile_s"] = time.perf_counter() - t0
    del eager
    a = res["agreement"]
    log(f"first batch against eager: loss {a['loss']:.6f} (rel error {a['loss_rel_error']:.2e}), worst gradient "
        f"{a['grad_worst_parameter']} rel error {a['grad_rel_error_max']:.2e}")
    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"])
    torch.cuda.reset_peak_memory_stats(dev)

    def run_step(i):
        opt.zero_grad(set_to_none=True)
        loss = torch_loss(compiled, idx[i], tgt[i])
        loss.backward()
        opt.step()
        return loss.detach()

    def timer(fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    res.update(measure(run_step, torch.cuda.synchronize, lambda hs: [float(h) for h in hs], timer, args, args.steps,
                       log))
    res["memory"] = {"peak_allocated_bytes": torch.cuda.max_memory_allocated(dev),
                     "peak_reserved_bytes": torch.cuda.max_memory_reserved(dev)}
    res["nova_graphs_on_torch"] = [m for m in warnings.messages if "runs on torch" in m or "fell back" in m]
    log(f"peak memory {res['memory']['peak_allocated_bytes'] / 2**30:.2f} GiB; graphs Nova left to torch: "
        f"{len(res['nova_graphs_on_torch'])}")
    return res


def precompile(args, log=print) -> int:
    """Every Nova kernel of this benchmark's Nova run, compiled for ``args.target`` into the cache."""
    import torch
    from nova import models
    from nova.integrations.dynamo_precompile import precompile as precompile_run
    with torch.device("meta"):
        model = models.build(args.model, args.seed)
        idx = torch.zeros(args.batch, args.seq, dtype=torch.long)
    counts = precompile_run(model, (idx, idx), target=args.target, training=True, cache_dir=args.cache_dir, log=log)
    return 1 if counts["failed"] else 0


def report(out, model: str, batch: int, results: dict) -> str:
    """A Markdown table of the two runs."""
    lines = [f"# torch.compile: Inductor vs Nova, {model}, batch {batch}", "",
             "| backend | tokens/s | ms/step | peak GiB | first step s | loss rel err | worst grad rel err | on torch |",
             "|---|---|---|---|---|---|---|---|"]
    for backend, r in results.items():
        if r is None:
            lines.append(f"| {backend} | failed | | | | | | |")
            continue
        t, a = r["timing"], r["agreement"]
        lines.append(f"| {backend} | {t['tokens_per_s']:,.0f} | {t['step_ms_median']:.2f} | "
                     f"{r['memory']['peak_allocated_bytes'] / 2**30:.2f} | {r['first_step_s']:.1f} | "
                     f"{a['loss_rel_error']:.1e} | {a['grad_rel_error_max']:.1e} ({a['grad_worst_parameter']}) | "
                     f"{len(r['nova_graphs_on_torch'])} |")
    text = "\n".join(lines) + "\n"
    (Path(out) / f"dynamo-{model}-b{batch}.md").write_text(text)
    return text


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 -m nova.bench.dynamo_vs_inductor", description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=BACKENDS, default=None, help="run one backend in this process "
                    "(default: both, each in its own process)")
    ap.add_argument("--model", choices=MODELS, default="gpt42m")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence (default: the model's block_size)")
    ap.add_argument("--steps", type=int, default=20, help="loss-curve steps (and distinct batches)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--settle-s", type=float, default=2.0)
    ap.add_argument("--timed", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--timeout", type=int, default=420, help="seconds per backend's process")
    ap.add_argument("--precompile", action="store_true", help="host mode: fill the kernel cache for the Nova run")
    ap.add_argument("--target", default="h200", help="--precompile: the GPU model (default h200)")
    ap.add_argument("--cache-dir", default=None, help="--precompile: the cache directory (default NOVA_CACHE_DIR)")
    return ap


def check(args) -> None:
    """Bad numbers: one line (BenchError)."""
    cfg = model_config(args.model)
    if args.seq is None:
        args.seq = cfg.block_size
    for name in ("batch", "seq", "steps", "timed", "repeats"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if args.seq > cfg.block_size:
        raise BenchError(f"--seq {args.seq} is longer than {args.model}'s context ({cfg.block_size})")


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    log = lambda line: print(line, flush=True)         # noqa: E731
    try:
        check(args)
        if args.precompile:
            return precompile(args, log)
        if args.backend is not None:
            res = run_one(args, log)
            Path(args.out).mkdir(parents=True, exist_ok=True)
            result_path(args.out, args.backend, args.model, args.batch).write_text(json.dumps(_jsonable(res), indent=1))
            return 0
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    Path(args.out).mkdir(parents=True, exist_ok=True)      # the report is written even when both fail
    results = {}
    for backend in BACKENDS:
        argv_child = [sys.executable, "-m", "nova.bench.dynamo_vs_inductor", "--backend", backend, *(argv or sys.argv[1:])]
        try:
            r = subprocess.run(argv_child, timeout=args.timeout)
            ok = r.returncode == 0
        except subprocess.TimeoutExpired:
            log(f"{backend}: killed after {args.timeout} s")
            ok = False
        path = result_path(args.out, backend, args.model, args.batch)
        results[backend] = json.loads(path.read_text()) if ok and path.exists() else None
    print(report(args.out, args.model, args.batch, results))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
