"""Whole-step parity against a float64 twin, for the compiled-step tests (CPU and GPU).

Why not compare the compiled model with an eager one parameter by parameter: some gradients are zero in
exact arithmetic -- GPT's key bias, because softmax ignores a shift that is the same along a row
(``q . b_k`` is one number per query row). What a finite-precision run gets there is rounding noise, and
Adam divides by the noise's own size, so every such element moves a full ``lr`` step in a random
direction. Eager bf16 autocast and eager fp32 on the CPU end 58% apart on that bias after three AdamW
steps; any two correct implementations differ as much.

So: a float64 twin takes the same steps; elements whose float64 first-step gradient is zero (below
``ZERO`` times the tensor's largest) are left out; every other element of every parameter must be as
close to the float64 twin as eager in the same precision is, times ``slack``, plus ``floor``.
"""
from __future__ import annotations

import contextlib
import copy

import torch

ZERO = 1e-9


@contextlib.contextmanager
def tf32_matmuls():
    """Eager's fp32 matmuls in TF32, the precision of Nova's fp32 GEMMs (they ignore
    ``allow_tf32``): the eager twin then errs as Nova's arithmetic does."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def float64_twin(model):
    return copy.deepcopy(model).double()


def zero_gradient_masks(model64, loss_of) -> dict[str, torch.Tensor]:
    """``name -> bool mask`` of the elements whose float64 gradient of ``loss_of(model64)`` is zero
    (|g| <= ZERO * max |g| of the tensor); the twin's gradients are cleared afterwards."""
    loss_of(model64).backward()
    masks = {}
    for name, p in model64.named_parameters():
        g = p.grad.abs() if p.grad is not None else torch.zeros_like(p)
        masks[name] = g <= ZERO * g.max().clamp_min(1e-300)
        p.grad = None
    return masks


def masked_errors(model, model64, masks) -> dict[str, float]:
    """Relative error of each parameter against the float64 twin over the elements with a nonzero
    gradient."""
    out = {}
    for (name, p), q in zip(model.named_parameters(), model64.parameters()):
        keep = ~masks[name]
        got, ref = p.detach().double()[keep], q.detach()[keep]
        out[name] = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
    return out


def assert_tracks_float64(compiled_model, eager_model, model64, masks, *, slack=2.0, floor=1e-4):
    """Every parameter of the compiled model is within ``slack`` x eager's error (same precision, same
    steps) of the float64 twin, plus ``floor``; the message names the worst."""
    ours, theirs = masked_errors(compiled_model, model64, masks), masked_errors(eager_model, model64, masks)
    bad = {n: (ours[n], theirs[n]) for n in ours if ours[n] > slack * theirs[n] + floor}
    assert not bad, f"parameters further from float64 than eager x{slack} + {floor}: " + ", ".join(
        f"{n} {a:.2e} (eager {b:.2e})" for n, (a, b) in sorted(bad.items(), key=lambda kv: -kv[1][0])[:4])
    return ours, theirs


def take_steps(compiled, eager, float64, batches, loss_bound: float, eager_context=contextlib.nullcontext) -> None:
    """Each batch through the compiled step, the eager one (under ``eager_context``: ``tf32_matmuls`` for
    fp32) and the float64 one; the compiled and eager losses within ``loss_bound`` of each other."""
    for batch in batches:
        loss = compiled(*batch).detach().double().cpu()
        with eager_context():
            ref = eager(*batch).detach().double().cpu()
        float64(*batch)
        assert float((loss - ref).abs() / ref.abs().clamp_min(1e-30)) < loss_bound, (float(loss), float(ref))


def captured_step_inputs(graph, seed: int, int_high: int) -> list:
    """Random inputs of a captured AdamW training step (``nova.passes.examples.random_inputs``) with the
    optimizer's hyper-parameters set to usable values (lr, betas, eps, decay) and its second moments
    and step counts at least one."""
    from nova.passes.examples import random_inputs
    xs = random_inputs(graph, seed, int_high=int_high)
    for spec, t in zip(graph.inputs, xs):
        if spec.value.dtype == "f64":                                     # AdamW's lr, betas, eps, decay
            t.copy_(torch.tensor([1e-3, 0.9, 0.95, 1e-8, 0.1], dtype=torch.float64))
        elif spec.name.endswith(("exp_avg_sq", ".step")):
            t.abs_().add_(1.0)
    return xs
