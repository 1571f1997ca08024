"""Does the fused cross-entropy kernel (``cross_entropy_forward_backward``) give the same bits as the
forward and backward kernels it replaces?  One loss chunk of the GPT-42M / Llama-42M steps (8192 x
32768 f32, reduction sum, some rows ignored) on fresh random logits: the loss and dlogits of each,
compared bit for bit (device, offline cache: the kernels of the steps' plans).

    python3 bench/probes/ce_fused_bitwise.py
"""
import dataclasses

import torch

from nova.kernels.rows import cli_problem
from nova.kernels.rows.launch import launch_args, resolve

ROWS, N, IGNORE = 8192, 32768, -100


def run(problem, tensors):
    r = resolve(problem)
    ws = torch.zeros(max(1, r.workspace_bytes // 4), device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for kernel, args in launch_args(r, {k: v.data_ptr() for k, v in tensors.items()}, ws.data_ptr()):
        kernel.launch(args, stream)
    torch.cuda.synchronize()


def main():
    attrs = {"reduction": "sum", "ignore_index": IGNORE}
    fwd = dataclasses.replace(cli_problem("cross_entropy", ROWS, N, "f32"), attrs=attrs)
    bwd = dataclasses.replace(cli_problem("cross_entropy", ROWS, N, "f32", backward=True), attrs=attrs)
    both = dataclasses.replace(cli_problem("cross_entropy", ROWS, N, "f32", forward_backward=True), attrs=attrs)
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
    main()
