"""Every full-size plan through ``validate_memory_plan`` (host, meta device): the built-in and Hugging
Face models' training steps (plain, a recipe, memory budgets and policies) and the torch.compile
backend's forward and backward graphs.  Prints one line a plan; an invalid plan prints what the
validator names (a launch writing bytes it reads elsewhere, overlapping buffers, ...).

    NOVA_CACHE_DIR=.nova-cache python3 bench/probes/validate_plans.py
"""
import torch

from nova import models, options
from nova.compiler.explain import plan_training_step
from nova.hwmodel import get_target
from nova.integrations.dynamo_precompile import plan_dynamo
from nova.models.recipe import TrainRecipe
from nova.passes.memory import validate_memory_plan

STEPS = [("gpt42m", 32, None, None, None), ("llama42m", 32, None, None, None), ("hf-llama-42m", 32, None, None, None),
         ("hf-gpt2-42m", 32, None, None, None),
         ("hf-gpt2-42m", 32, TrainRecipe(autocast="bf16", padded=True, clip_grad_norm=1.0), None, None),
         ("llama42m", 32, TrainRecipe(autocast="bf16"), None, None),
         ("hf-llama-42m", 32, TrainRecipe(autocast="bf16"), None, None),
         ("gpt144m", 16, None, None, None), ("gpt144m", 16, None, "12GiB", None), ("gpt144m", 20, None, "12GiB", None),
         ("gpt144m", 24, None, "12GiB", None),
         ("llama42m", 32, None, None, "fast"), ("hf-llama-42m", 32, None, None, "0.015"), ("gpt42m", 32, None, "4GiB", None)]
BACKEND = [("gpt42m", 4, 256), ("llama42m", 4, 256), ("gpt42m", 32, 512)]


def check(what, planned) -> None:
    try:
        validate_memory_plan(planned.graph, planned.groups, planned.memory)
        print(f"{what}: valid", flush=True)
    except AssertionError as e:
        print(f"{what}: INVALID: {e}", flush=True)


def main() -> None:
    for name, batch, recipe, budget, policy in STEPS:
        opts = options.parse({"NOVA_MEMORY_POLICY": policy} if policy else {})
        planned, _ = plan_training_step(name, batch, target="h200", recipe=recipe, memory_budget=budget, opts=opts)
        check(f"{name} b{batch} {recipe.describe() if recipe else 'plain'} budget {budget} policy {policy}", planned)
    for name, batch, seq in BACKEND:
        idx = torch.randint(0, models.config(name).vocab_size, (batch, seq))
        for g in plan_dynamo(models.build(name, seed=0), (idx, idx), get_target("h200")).graphs:
            if g.planned is not None:
                check(f"backend {name} b{batch} x {seq} {g.name}", g.planned)
            else:
                print(f"backend {name} b{batch} x {seq} {g.name}: fell back")


if __name__ == "__main__":
    main()
