"""Where a training step's GPU time goes: per-kernel device time (CUPTI, through torch.profiler) of
a few steps of PyTorch eager or ``nova.compile`` on a built-in GPT, grouped by kernel name.

    python3 -m nova.bench.train_profile --framework nova --model gpt42m --batch 32 [--steps 5] [--out DIR]

Prints the kernels by total time (with their count per step), then the idle time between them
(``gaps``: from one kernel's end to the next one's start on the device, per step, by the family of
the kernel that waits), and writes ``profile-<framework>.json``.  ``--host`` also records the host:
the CUDA runtime calls of the steps by total time per step (a synchronizing call there is where the
host waited for the device, so the device then waited for the host).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from nova.models.recipe import add_recipe_args


def kernel_family(name: str) -> str:
    """A short family name for a CUDA kernel: Nova's, cuBLAS/cutlass GEMMs, attention, elementwise..."""
    n = name.lower()
    if n.startswith("nova_"):
        return name.split("(")[0]
    for key, family in (("gemm", "cublas/cutlass gemm"), ("fmha", "torch attention"), ("attention", "torch attention"),
                        ("layer_norm", "layer_norm"), ("softmax", "softmax"), ("nll_loss", "nll_loss"),
                        ("multi_tensor_apply", "foreach (optimizer)"), ("reduce", "reduction"),
                        ("elementwise", "elementwise"), ("copy", "copy"), ("index", "index/gather/scatter"),
                        ("embedding", "embedding"), ("memset", "memset"), ("fill", "fill")):
        if key in n:
            return family
    return re.sub(r"<.*", "", name)[:60]


def gaps(kernels: list[tuple[float, float, str]], steps: int) -> dict:
    """The device's idle time between ``kernels`` (``(start_us, end_us, family)``, any order, one
    stream): each gap is the next kernel's start minus the latest end before it (0 when they
    overlap).  ``per_step_us`` sums them over ``steps``; ``by_next`` sums them by the family of the
    kernel that starts after the gap (what it waited to launch), with counts; ``median_us`` and
    ``p90_us`` over all gaps; ``span_us`` from the first start to the last end, per step."""
    ordered = sorted(kernels)
    found, by_next = [], {}
    latest = None
    for start, end, family in ordered:
        if latest is not None:
            gap = max(0.0, start - latest)
            found.append(gap)
            r = by_next.setdefault(family, {"us": 0.0, "count": 0})
            r["us"] += gap
            r["count"] += 1
        latest = end if latest is None else max(latest, end)
    found_sorted = sorted(found)

    def quantile(q):
        return found_sorted[min(len(found_sorted) - 1, int(q * len(found_sorted)))] if found_sorted else 0.0
    return {"per_step_us": sum(found) / steps, "count_per_step": len(found) / steps,
            "median_us": quantile(0.5), "p90_us": quantile(0.9),
            "span_us": ((ordered[-1][1] - ordered[0][0]) / steps) if ordered else 0.0,
            "by_next": {k: {"us_per_step": v["us"] / steps, "count_per_step": v["count"] / steps,
                            "mean_us": v["us"] / v["count"]}
                        for k, v in sorted(by_next.items(), key=lambda kv: -kv[1]["us"])}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m nova.bench.train_profile", description=__doc__.splitlines()[0])
    ap.add_argument("--framework", choices=["eager", "nova"], required=True)
    ap.add_argument("--model", default="gpt42m")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--steps", type=int, default=5, help="profiled steps (after 5 warm-up steps)")
    ap.add_argument("--out", default=".")
    ap.add_argument("--host", action="store_true", help="also record the host's CUDA runtime calls")
    add_recipe_args(ap)
    args = ap.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile
    from nova.models import TrainRecipe, make_train_step
    from nova import models
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    cfg = models.config(args.model)
    seq = args.seq or cfg.block_size
    model = models.build(args.model, seed=0).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)

    recipe = TrainRecipe(autocast=args.autocast, padded=args.padded, clip_grad_norm=args.clip_grad_norm)
    train_step = make_train_step(model, opt, recipe)
    step = train_step
    if args.framework == "nova":
        import nova
        step = nova.compile(train_step)
    gen = torch.Generator(device="cuda").manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (args.batch, seq), device="cuda", generator=gen)
    batch = (idx, idx)
    if recipe.padded:
        from nova.bench.train import padding_masks
        batch += (torch.from_numpy(padding_masks(args.batch, seq, 1, 0)[0]).cuda(),)
    for _ in range(5):
        step(*batch)
    torch.cuda.synchronize()
    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if args.host else [])
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            step(*batch)
        torch.cuda.synchronize()
    rows: dict[str, dict] = {}
    by_name: dict[str, dict] = {}
    timeline = []
    host_calls: dict[str, dict] = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            if e.name.startswith("cuda"):                      # a CUDA runtime call on the host
                r = host_calls.setdefault(e.name, {"us": 0.0, "count": 0})
                r["us"] += e.cpu_time_total
                r["count"] += 1
            continue
        fam = kernel_family(e.name)
        timeline.append((e.time_range.start, e.time_range.end, fam))
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        r = rows.setdefault(fam, {"us": 0.0, "count": 0, "example": e.name[:100]})
        r["us"] += us
        r["count"] += 1
        k = by_name.setdefault(e.name[:160], {"us": 0.0, "count": 0})
        k["us"] += us
        k["count"] += 1
    total = sum(r["us"] for r in rows.values())
    table = sorted(rows.items(), key=lambda kv: -kv[1]["us"])
    print(f"{args.framework} {args.model} b{args.batch}x{seq}: {total / args.steps / 1e3:.2f} ms GPU time per step")
    for fam, r in table[:30]:
        print(f"  {r['us'] / args.steps / 1e3:8.3f} ms {r['count'] / args.steps:7.1f}/step  {fam}")
    top = sorted(by_name.items(), key=lambda kv: -kv[1]["us"])[:40]
    print("kernels by name (the 40 costliest):")
    for name, r in top:
        print(f"  {r['us'] / args.steps / 1e3:8.3f} ms {r['count'] / args.steps:7.1f}/step  {name}")
    idle = gaps(timeline, args.steps)
    print(f"idle between kernels: {idle['per_step_us'] / 1e3:.3f} ms per step over {idle['count_per_step']:.0f} gaps "
          f"(median {idle['median_us']:.2f} us, p90 {idle['p90_us']:.2f} us; span {idle['span_us'] / 1e3:.2f} ms "
          f"per step); by the kernel that waited:")
    for fam, r in list(idle["by_next"].items())[:15]:
        print(f"  {r['us_per_step'] / 1e3:8.3f} ms {r['count_per_step']:7.1f}/step  {r['mean_us']:6.2f} us each  {fam}")
    if args.host:
        print("host: CUDA runtime calls by total time per step:")
        for name, r in sorted(host_calls.items(), key=lambda kv: -kv[1]["us"])[:12]:
            print(f"  {r['us'] / args.steps / 1e3:8.3f} ms {r['count'] / args.steps:7.1f}/step  {name}")
    out = Path(args.out) / f"profile-{args.framework}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"framework": args.framework, "model": args.model, "batch": args.batch, "seq": seq,
                               "steps": args.steps, "gpu_ms_per_step": total / args.steps / 1e3,
                               "recipe": recipe.describe(), "kernels": {k: v for k, v in table}, "gaps": idle,
                               "host_calls": host_calls,
                               "by_name": {k: v for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]["us"])}},
                              indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
