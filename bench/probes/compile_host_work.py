"""nova.compile's own host work per call, on the CPU: the guard key, the cache lookup, gathering the
program's inputs and writing its outputs back, around a stub engine that returns each updated input
as its output (as a CUDA program that writes the user's tensors in place does) -- the program's own
launches left out.  GPT-42M at batch 1 x 16 (the work scales with parameters, not tokens):

    python3 bench/probes/compile_host_work.py [--model gpt42m] [--per-repeat 50] [--repeats 7]

Prints the best of ``--repeats`` averages over ``--per-repeat`` calls, in ms.
"""
import argparse
import time

import torch

from nova import models
from nova.compiler.step import CompiledStep
from nova.models import make_train_step


class StubEngine:
    outputs_alias_engine = False

    def __init__(self, graph):
        self.updates = [o.updates for o in graph.outputs]

    def __call__(self, tensors):
        return [torch.zeros(()) if i is None else tensors[i] for i in self.updates]


class StubStep(CompiledStep):
    def _build_engine(self, graph, device):
        return StubEngine(graph)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt42m")
    ap.add_argument("--per-repeat", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    cfg = models.config(args.model)
    model = models.build(args.model, seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    idx = torch.randint(0, cfg.vocab_size, (1, 16))
    make_train_step(model, opt)(idx, idx)              # eager once: grads and optimizer state exist
    step = StubStep(make_train_step(model, opt))
    step(idx, idx)
    step(idx, idx)
    best = float("inf")
    for _ in range(args.repeats):
        t = time.perf_counter()
        for _ in range(args.per_repeat):
            step(idx, idx)
        best = min(best, (time.perf_counter() - t) / args.per_repeat * 1e3)
    print(f"{args.model}: nova.compile's host work per call, engine excluded: {best:.3f} ms "
          f"(captures {step.stats.captures}, {len(step.captured.bindings.inputs)} inputs)")


if __name__ == "__main__":
    main()
