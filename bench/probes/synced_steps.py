"""A training loop that reads its loss every step (``float(loss)``, as scripts that log it do) against
one that does not, for eager, torch.compile (the model; optimizer eager, as ``nova.bench.train``)
and nova.compile: the host's time per step stops hiding behind the device's when the loop waits for
each step's result.  GPT-42M, batch 32 x 512, TF32, AdamW (device, NOVA_OFFLINE=1 with the step's
kernels in the cache):

    python3 bench/probes/synced_steps.py [--steps 50] [--frameworks eager,compile,nova]
"""
import argparse
import statistics
import time

import torch

from nova import models
from nova.models import make_train_step


def timed(step, batch, steps: int, synced: bool) -> tuple[float, float]:
    """ms per step over ``steps`` after the device has drained, and the median host time of one
    call (until it returns: in the synced loop, the host work the device waits for)."""
    torch.cuda.synchronize()
    calls = []
    t = time.perf_counter()
    for _ in range(steps):
        c = time.perf_counter()
        loss = step(*batch)
        calls.append(time.perf_counter() - c)
        if synced:
            float(loss)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps * 1e3, statistics.median(calls) * 1e3


def profile_calls(step, batch, calls: int) -> None:
    """The host functions the calls of an unsynced loop spend their time in (cProfile): a call
    that waits for the device shows the wait in the function that waits."""
    import cProfile
    import pstats
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(calls):
        step(*batch)
    profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(20)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--frameworks", default="eager,compile,nova")
    ap.add_argument("--profile", type=int, default=0,
                    help="then profile this many unsynced calls of each framework's step (cProfile, top functions)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    cfg = models.config("gpt42m")
    gen = torch.Generator(device="cuda").manual_seed(0)
    idx = torch.randint(0, cfg.vocab_size, (32, cfg.block_size), device="cuda", generator=gen)
    batch = (idx, idx)
    for name in args.frameworks.split(","):
        model = models.build("gpt42m", seed=0).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
        if name == "compile":
            step = make_train_step(torch.compile(model), opt)
        elif name == "nova":
            import nova
            step = nova.compile(make_train_step(model, opt))
        else:
            step = make_train_step(model, opt)
        for _ in range(10):                                 # compile, capture, warm the clocks
            step(*batch)
        timed(step, batch, args.steps, False)
        free, _ = timed(step, batch, args.steps, False)
        synced, host = timed(step, batch, args.steps, True)
        print(f"{name:8s} unsynced {free:6.2f} ms/step, loss read every step {synced:6.2f} ms/step "
              f"(+{synced - free:.2f} ms; a call's host time {host:.2f} ms)", flush=True)
        if args.profile:
            profile_calls(step, batch, args.profile)
        del step, model, opt
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
