"""Does the fused cross-entropy kernel (``cross_entropy_forward_backward``) give the same bits as the
forward and backward kernels it replaces?  One loss chunk of the GPT-42M / Llama-42M steps (8192 x
32768 f32, reduction sum, some rows ignored) on fresh random logits: the loss and dlogits of each,
compared bit for bit (device, offline cache: the kernels of the steps' plans).

    python3 bench/probes/ce_fused_bitwise.py build    # host: compile the three kernels into the cache
    python3 bench/probes/ce_fused_bitwise.py          # device
"""
import dataclasses

import torch

from nova.kernels.rows import cli_problem
from nova.kernels.rows.launch import schedule_for

ROWS, N, IGNORE = 8192, 32768, -100


def run(problem, tensors):
    from nova.hwmodel import get_target
    from rows_launch import launchable
    launchable(problem, schedule_for(problem, get_target("h200")), tensors)()
    torch.cuda.synchronize()


def problems():
    attrs = {"reduction": "sum", "ignore_index": IGNORE}
    return [dataclasses.replace(cli_problem("cross_entropy", ROWS, N, "f32", **flag), attrs=attrs)
            for flag in ({}, {"backward": True}, {"forward_backward": True})]


def build():
    from nova.hwmodel import get_target
    from nova.kernels.rows.compile import get_or_compile
    gpu = get_target("h200")
    for p in problems():
        s = schedule_for(p, gpu)
        for role in s.roles:
            print(p.describe()[:60], role, get_or_compile(p, s, role, gpu, offline=False)[2])


def main():
    fwd, bwd, both = problems()
    g = torch.Generator(device="cuda").manual_seed(7)
    logits = torch.randn(ROWS, N, device="cuda", generator=g) * 3
    target = torch.randint(0, N, (ROWS,), device="cuda", generator=g)
    target[::9] = IGNORE
    dloss = torch.tensor(1.0 / 7000, device="cuda")
    a = {"logits": logits, "target": target, "loss": torch.full((), float("nan"), device="cuda"),
         "lse": torch.full((ROWS,), float("nan"), device="cuda")}
    run(fwd, a)
    a.update(dloss=dloss, dlogits=torch.full_like(logits, float("nan")))
    run(bwd, a)
    b = {"dloss": dloss, "logits": logits.clone(), "target": target, "loss": torch.full((), float("nan"), device="cuda")}
    b["dlogits"] = b["logits"]                       # in place, as the plan runs it
    run(both, b)
    same_loss = bool(torch.equal(a["loss"], b["loss"]))
    diff = (a["dlogits"] != b["dlogits"]).sum().item()
    print(f"loss apart {a['loss'].item()!r}, fused {b['loss'].item()!r}: bitwise equal {same_loss}")
    print(f"dlogits: {diff} of {ROWS * N} elements differ; largest difference "
          f"{(a['dlogits'] - b['dlogits']).abs().max().item():.3e}")


if __name__ == "__main__":
    import sys
    build() if sys.argv[1:] == ["build"] else main()
