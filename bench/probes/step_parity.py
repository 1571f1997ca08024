"""One built-in model's training step through nova.compile against eager, gradient by gradient and
then loss by loss (run on the GPU; kernels from the cache with NOVA_OFFLINE=1):

    python3 bench/probes/step_parity.py --model llama42m --batch 32 --steps 40

Prints the first step's worst parameter gradients (relative Frobenius error against eager), then
each step's loss from both (AdamW, the benchmark's recipe) and where they part.
"""
from __future__ import annotations

import argparse
import copy

import torch

import nova
from nova import models
from nova.bench.train import ADAMW, token_batches
from nova.models import make_train_step


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama42m")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    cfg = models.config(args.model)
    model = models.build(args.model, seed=0).cuda()
    twin = copy.deepcopy(model)
    tokens = torch.from_numpy(token_batches(cfg.vocab_size, args.batch, cfg.block_size, args.steps, 0)).cuda()
    batch = lambda i: (tokens[i, :, :-1].contiguous(), tokens[i, :, 1:].contiguous())  # noqa: E731

    def grads(m, idx, tgt):
        loss = m(idx, tgt)
        loss.backward()
        return loss
    step = nova.compile(lambda idx, tgt: grads(model, idx, tgt))
    loss_c, loss_e = step(*batch(0)), grads(twin, *batch(0))
    print(f"first step loss: nova {float(loss_c):.6f} eager {float(loss_e):.6f}")
    errs = sorted(((rel(p.grad, q.grad), n) for (n, p), q in zip(model.named_parameters(), twin.parameters())),
                  reverse=True)
    for e, n in errs[:10]:
        print(f"  grad {n:50s} {e:.2e}")
    for m in (model, twin):
        m.zero_grad(set_to_none=True)
    opts = [torch.optim.AdamW(m.parameters(), lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                              weight_decay=ADAMW["weight_decay"]) for m in (model, twin)]
    train_c, train_e = nova.compile(make_train_step(model, opts[0])), make_train_step(twin, opts[1])
    for i in range(args.steps):
        idx, tgt = batch(i)
        a, b = float(train_c(idx, tgt)), float(train_e(idx, tgt))
        if i % 5 == 0 or abs(a - b) > 5e-3 * abs(b):
            worst = max((rel(p, q), n) for (n, p), q in zip(model.named_parameters(), twin.parameters()))
            print(f"step {i:3d}: nova {a:.5f} eager {b:.5f} rel {abs(a - b) / abs(b):.1e}; "
                  f"parameters worst {worst[1]} {worst[0]:.1e}")


if __name__ == "__main__":
    main()
