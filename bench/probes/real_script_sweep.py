"""What real training scripts do around a compiled step, on the host (GPT-tiny, the executor on CPU)
against eager on a copy: each scenario prints the largest parameter difference after its steps and the
captures, or the one-line error Nova raises for what it refuses.

    python3 bench/probes/real_script_sweep.py
"""
import copy

import torch

import nova
from nova.models import make_train_step
from nova.models.gpt import GPT

VOCAB = GPT("tiny", seed=0).config.vocab_size
_g = torch.Generator().manual_seed(1)
BATCHES = [(torch.randint(0, VOCAB, (2, 16), generator=_g), torch.randint(0, VOCAB, (2, 16), generator=_g))
           for _ in range(8)]


def pair(make_opt=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.1), seed=0):
    model = GPT("tiny", seed=seed)
    twin = copy.deepcopy(model)
    return model, twin, make_opt(model), make_opt(twin)


def diff(m, t) -> float:
    return max(float((p - q).detach().abs().max()) for p, q in zip(m.parameters(), t.parameters()))


def train(make_opt=None, between=None, batches=BATCHES):
    """The standard step compiled and eager; ``between(i, (model, opt), (twin, twin_opt))`` runs before
    call ``i`` on both sides."""
    model, twin, opt, twin_opt = pair(make_opt) if make_opt else pair()
    step, ref = nova.compile(make_train_step(model, opt), backend="executor"), make_train_step(twin, twin_opt)
    for i, (a, b) in enumerate(batches):
        if between:
            between(i, (model, opt), (twin, twin_opt))
        step(a, b), ref(a, b)
    return f"parameters within {diff(model, twin):.1e}, captures {step.stats.captures}"


def accumulation():
    model, twin, opt, twin_opt = pair()

    def micro(m):
        def f(idx, tgt):
            loss = m(idx, tgt) / 2
            loss.backward()
            return loss
        return f

    def update(o):
        def f():
            o.step()
            o.zero_grad(set_to_none=True)
        return f
    cm, cu = nova.compile(micro(model), backend="executor"), nova.compile(update(opt), backend="executor")
    em, eu = micro(twin), update(twin_opt)
    for i, (a, b) in enumerate(BATCHES):
        cm(a, b), em(a, b)
        if i % 2 == 1:
            cu(), eu()
    return f"parameters within {diff(model, twin):.1e}"


def groups(m):
    return torch.optim.AdamW([{"params": [p for p in m.parameters() if p.dim() >= 2], "weight_decay": 0.1},
                              {"params": [p for p in m.parameters() if p.dim() < 2], "weight_decay": 0.0}], lr=1e-3)


def set_lr(i, *sides):
    if i == 4:
        for _, o in sides:
            for g in o.param_groups:
                g["lr"] = 3e-3


def freeze(i, *sides):
    if i == 3:
        for m, _ in sides:
            for p in list(m.parameters())[:3]:
                p.requires_grad_(False)


_checkpoint = {}


def rollback(i, *sides):
    (_, _), (twin, twin_opt) = sides
    if i == 3:
        _checkpoint["state"] = copy.deepcopy((twin.state_dict(), twin_opt.state_dict()))
    if i == 5:
        for m, o in sides:                      # each its own copy: load_state_dict shares the dict's tensors
            m.load_state_dict(copy.deepcopy(_checkpoint["state"][0]))
            o.load_state_dict(copy.deepcopy(_checkpoint["state"][1]))


def two_models():
    a, ta, oa, toa = pair(seed=0)
    b, tb, ob, tob = pair(seed=1)

    def step(x_, y_, o1, o2):
        def f(idx, tgt):
            l1, l2 = x_(idx, tgt), y_(idx, tgt)
            (l1 + 0.5 * l2).backward()
            o1.step(), o2.step(), o1.zero_grad(), o2.zero_grad()
            return l1, l2
        return f
    s, e = nova.compile(step(a, b, oa, ob), backend="executor"), step(ta, tb, toa, tob)
    for idx, tgt in BATCHES:
        s(idx, tgt), e(idx, tgt)
    return f"parameters within {diff(a, ta):.1e} and {diff(b, tb):.1e}"


def eval_between():
    model, twin, opt, twin_opt = pair()
    step, ref = nova.compile(make_train_step(model, opt), backend="executor"), make_train_step(twin, twin_opt)
    apart = 0.0
    for i, (a, b) in enumerate(BATCHES):
        step(a, b), ref(a, b)
        if i % 3 == 2:                              # the plain models in eval mode, no grad
            model.eval(), twin.eval()
            with torch.no_grad():
                apart = max(apart, abs(float(model(a, b)) - float(twin(a, b))))
            model.train(), twin.train()
    return f"parameters within {diff(model, twin):.1e}, eval losses within {apart:.1e}, captures {step.stats.captures}"


def clipped_norm():
    model, twin, opt, twin_opt = pair()

    def step(m, o):
        def f(idx, tgt):
            loss = m(idx, tgt)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            o.step(), o.zero_grad(set_to_none=True)
            return loss, norm
        return f
    s, e = nova.compile(step(model, opt), backend="executor"), step(twin, twin_opt)
    worst = 0.0
    for a, b in BATCHES:
        (_, n1), (_, n2) = s(a, b), e(a, b)
        worst = max(worst, abs(float(n1) - float(n2)) / float(n2))
    return f"parameters within {diff(model, twin):.1e}, returned norms within {worst:.1e} (relative)"


def grad_scaler():
    model = GPT("tiny", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    def f(idx, tgt):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(idx, tgt)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss
    nova.compile(f, backend="executor")(*BATCHES[0])
    return "ran"


def dropout():
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
    o = torch.optim.SGD(m.parameters(), lr=0.1)

    def f(x):
        loss = m(x).pow(2).mean()
        loss.backward()
        o.step(), o.zero_grad()
        return loss
    nova.compile(f, backend="executor")(torch.randn(4, 16))
    return "ran"


SCENARIOS = {
    "gradient accumulation, the update in another compiled function": accumulation,
    "parameter groups (no decay on 1-d parameters)": lambda: train(groups),
    "a manual lr change": lambda: train(between=set_lr),
    "freezing parameters mid-training": lambda: train(between=freeze),
    "a checkpoint loaded into the same objects mid-training": lambda: train(between=rollback),
    "a smaller last batch": lambda: train(batches=BATCHES[:4] + [(BATCHES[4][0][:1], BATCHES[4][1][:1])]),
    "SGD with Nesterov momentum": lambda: train(lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9,
                                                                          nesterov=True, weight_decay=1e-4)),
    "Adam": lambda: train(lambda m: torch.optim.Adam(m.parameters(), lr=1e-3)),
    "AdamW(amsgrad=True)": lambda: train(lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, amsgrad=True)),
    "Adagrad": lambda: train(lambda m: torch.optim.Adagrad(m.parameters(), lr=1e-2)),
    "RMSprop": lambda: train(lambda m: torch.optim.RMSprop(m.parameters(), lr=1e-3)),
    "evaluation with the plain model between steps": eval_between,
    "clip_grad_norm_'s returned norm": clipped_norm,
    "two models, two optimizers": two_models,
    "fp16-style loss scaling (GradScaler)": grad_scaler,
    "dropout in training": dropout,
}


def main() -> None:
    for name, scenario in SCENARIOS.items():
        try:
            print(f"{name}: {scenario()}")
        except Exception as e:                      # what Nova refuses: its one line
            print(f"{name}: {type(e).__name__}: {str(e).splitlines()[0]}")


if __name__ == "__main__":
    main()
