"""Data-parallel training benchmark: one framework per ``torchrun`` launch, every rank on its GPU.

    torchrun --nproc_per_node 2 -m nova.bench.train_ddp --framework nova --model gpt144m --batch 16 --out DIR
    python3 -m nova.bench.train_ddp --summary DIR --single DIR/nova-gpt144m-b16.json

Frameworks: ``eager`` (the model in ``DistributedDataParallel``), ``compile`` (``torch.compile``
of the DDP-wrapped model, DDP's optimizer), ``nova`` (``nova.compile`` of the whole step with the
DDP-wrapped model: the gradient all-reduce bucketed in the program).  Each uses ``nova.bench.train``'s
model, data and protocol (``measure``): rank ``r`` trains on the batches ``r, r + n, r + 2n, ...``
of the common token stream (``--batch`` sequences per GPU), the same weights on every rank (DDP
broadcasts rank 0's).  The logged loss is the mean over ranks (one all-reduce per step,
outside the timed window's measurement of the step itself).  Rank 0 writes
``ddp<N>-<framework>-<model>-b<batch>.json`` with the losses, the timing (tokens/s over all GPUs)
and, after all frameworks, ``--summary`` compares them: tokens/s, scaling efficiency against a
single-GPU result (``--single``: ``nova.bench.train``'s JSON), and the loss parity of each
framework against eager DDP over the curve.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

FRAMEWORKS = ("eager", "compile", "nova")


def result_path(out, world: int, framework: str, model: str, batch: int) -> Path:
    return Path(out) / f"ddp{world}-{framework}-{model}-b{batch}.json"


def run(args) -> int:
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from nova.bench import train as single

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda", local)
    log = (lambda text: print(f"[{args.framework} x{world}] {text}", flush=True)) if rank == 0 else (lambda text: None)

    cfg = single.model_config(args.model)
    args.seq = args.seq or cfg.block_size
    n_batches = max(args.steps, 64)
    tokens = single.token_batches(cfg.vocab_size, args.batch, args.seq, n_batches * world, args.seed)
    mine = np.ascontiguousarray(tokens[rank::world])                 # this rank's batches
    idx = torch.from_numpy(np.ascontiguousarray(mine[:, :, :-1])).to(dev)
    tgt = torch.from_numpy(np.ascontiguousarray(mine[:, :, 1:])).to(dev)

    model = DDP(single.build_torch_model(cfg, args.seed).to(dev), device_ids=[local])
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=single.ADAMW["lr"], betas=single.ADAMW["betas"],
                            eps=single.ADAMW["eps"], weight_decay=single.ADAMW["weight_decay"])
    fwd = torch.compile(model) if args.framework == "compile" else model

    def train_step(x, y):
        loss = single.torch_loss(fwd, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    step = train_step
    res: dict = {"framework": args.framework, "world_size": world, "model": args.model, "batch_per_gpu": args.batch,
                 "seq": args.seq, "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                 "device_name": torch.cuda.get_device_name(dev)}
    if args.framework == "nova":
        import nova
        step = nova.compile(train_step)

    def run_step(i):
        loss = step(idx[i], tgt[i]).reshape(()).float()
        return loss

    def loss_values(handles):
        stacked = torch.stack(handles)
        dist.all_reduce(stacked)
        return (stacked / world).cpu().tolist()

    def timer(fn):
        torch.cuda.synchronize()
        dist.barrier()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3

    t0 = time.perf_counter()
    res.update(single.measure(run_step, torch.cuda.synchronize, loss_values, timer, args, n_batches, log))
    res["wall_s"] = time.perf_counter() - t0
    res["timing"]["tokens_per_s_all_gpus"] = res["timing"]["tokens_per_s"] * world
    if args.framework == "nova":
        res["nova"] = {"captures": step.stats.captures, "buckets": [
            {"tensors": len(b.members), "bytes": b.nbytes} for b in step.buckets],
            "backend": step.backend}
    if rank == 0:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        path = result_path(args.out, world, args.framework, args.model, args.batch)
        path.write_text(json.dumps(single._jsonable(res), indent=1))
        log(f"{res['timing']['tokens_per_s_all_gpus']:,.0f} tokens/s on {world} GPUs -> {path}")
    dist.destroy_process_group()
    return 0


def summary(out: str, single_path: str | None) -> int:
    """Tokens/s, scaling efficiency against the single-GPU Nova result, loss parity against eager DDP."""
    results = {}
    for path in sorted(Path(out).glob("ddp*-*.json")):
        r = json.loads(path.read_text())
        results[r["framework"]] = r
    if not results:
        print(f"no ddp results in {out}")
        return 1
    base = json.loads(Path(single_path).read_text()) if single_path and Path(single_path).exists() else None
    base_tps = base["timing"]["tokens_per_s"] if base else None
    eager = results.get("eager")
    print("| framework | GPUs | tokens/s (all GPUs) | step ms | scaling vs 1-GPU Nova | max abs loss diff vs eager DDP |")
    print("|---|---|---|---|---|---|")
    for name in FRAMEWORKS:
        r = results.get(name)
        if r is None:
            continue
        tps, n = r["timing"]["tokens_per_s_all_gpus"], r["world_size"]
        scaling = f"{tps / (n * base_tps):.1%}" if base_tps else "-"
        parity = "-"
        if eager is not None and name != "eager":
            diffs = [abs(a - b) for a, b in zip(r["losses"], eager["losses"])]
            parity = f"{max(diffs):.2e} over {len(diffs)} steps"
        print(f"| {name} | {n} | {tps:,.0f} | {r['timing']['step_ms_median']:.2f} | {scaling} | {parity} |")
    if base_tps:
        print(f"(single-GPU Nova: {base_tps:,.0f} tokens/s from {single_path})")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="torchrun --nproc_per_node N -m nova.bench.train_ddp",
                                 description="data-parallel training: eager DDP, torch.compile + DDP, Nova")
    ap.add_argument("--framework", choices=FRAMEWORKS)
    ap.add_argument("--summary", metavar="DIR", help="print the comparison of the results in DIR (no training)")
    ap.add_argument("--single", metavar="JSON", help="with --summary: the single-GPU Nova result (nova.bench.train)")
    ap.add_argument("--model", default="gpt144m")
    ap.add_argument("--batch", type=int, default=16, help="sequences per GPU")
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--steps", type=int, default=200, help="loss-curve steps")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--settle-s", type=float, default=2.0)
    ap.add_argument("--timed", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.summary:
        return summary(args.summary, args.single)
    if args.framework is None:
        parser().error("--framework or --summary is required")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
