"""Is a compiled training step deterministic?  The same step (built-in model, fresh weights from one
seed, AdamW) compiled and run ``--steps`` times from the same start, ``--runs`` times in one process;
after the steps each parameter, its AdamW moments and the losses of one run are compared bit for bit
with the first run's.  The parameter nearest the loss whose moments differ shows where in the
backward the bits part (a gradient that differs changes every gradient computed from it).

    NOVA_DETERMINISTIC=1 python3 bench/probes/deterministic_step.py --model llama42m --batch 32
"""
import argparse

import torch

from nova.bench.train import ADAMW, build_torch_model, model_config, token_batches


def one_run(cfg, batch: int, seq: int, steps: int, seed: int, device: str):
    import nova
    from nova.models import make_train_step
    model = build_torch_model(cfg, seed).to(device)
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    step = nova.compile(make_train_step(model, opt))
    tokens = torch.from_numpy(token_batches(cfg.vocab_size, batch, seq, steps, seed)).to(device)
    losses = [step(tokens[i, :, :-1].contiguous(), tokens[i, :, 1:].contiguous()).item() for i in range(steps)]
    state = {}
    for name, p in model.named_parameters():
        s = opt.state[p]
        state[name] = (p.detach().clone(), s["exp_avg"].clone(), s["exp_avg_sq"].clone())
    return losses, state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama42m")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    cfg = model_config(args.model)
    first_losses, first = one_run(cfg, args.batch, args.seq, args.steps, args.seed, args.device)
    print(f"run 0 losses {first_losses}")
    for r in range(1, args.runs):
        losses, state = one_run(cfg, args.batch, args.seq, args.steps, args.seed, args.device)
        parted = [(name, [int((a != b).sum()) for a, b in zip(first[name], state[name])]) for name in first]
        parted = [(n, d) for n, d in parted if any(d)]
        print(f"run {r}: losses {'equal' if losses == first_losses else losses}; "
              f"{len(parted)} of {len(first)} parameters differ (elements differing: value, exp_avg, exp_avg_sq)")
        for name, d in parted:
            print(f"    {name}: {d}")


if __name__ == "__main__":
    main()
