"""The GELU GEMMs' predictions against their measurements (host, no GPU): each measured kernel's model
time at the clock it was measured at (1980 MHz: isolated launches), the consumer schedule the
configurator picks, and the model's terms (in sample: runs 60 and 61; out of sample: run 63's H100 events);
then the steps' launches re-priced by today's model (``step_kernels.gemms_at_clock``; run 63, an H100), the
GELU GEMMs counted apart.  bench/NOTES.md (2026-12-06) quotes it.

    PYTHONPATH=<transformers 5.17>:. python3 bench/probes/epilogue_model_check.py
"""
from nova.bench.step_kernels import gemms_at_clock
from nova.compiler.explain import plan_training_step
from nova.compiler.step_clock import priced_gemm
from nova.configurator import configure
from nova.hwmodel import get_target
from nova.kernels.gemm.problem import GemmProblem
from nova.models.recipe import TrainRecipe

GELU_P = dict(bias=True, activation="gelu", preactivation=True)
DGELU = dict(activation="gelu", residual=True, activation_grad=True)
R61 = "bench/results/h200-2026-12-06/run61/"
R60 = "bench/results/h100-2026-12-05/run60/"
R63 = "bench/results/h100-2026-12-06/run63/"
# (target, problem, measured us, where): CUPTI in the steps' step_kernels files; the events of
# epilogue_ncu.py run back to back (the plain GEMM's 118.8 against 104.9 by CUPTI in a step: ~1.13x)
MEASURED = [
    ("h200", GemmProblem(16384, 2048, 512, "bf16", trans_b=True, **DGELU), 106.0, R61 + "hf-gpt2-bf16 step_kernels"),
    ("h200", GemmProblem(16384, 2048, 512, "bf16", **GELU_P), 80.7, R61 + "hf-gpt2-bf16 step_kernels"),
    ("h100", GemmProblem(16384, 2048, 512, "tf32", **DGELU), 189.6, R60 + "gpt42m step_kernels"),
    ("h100", GemmProblem(16384, 2048, 512, "tf32", trans_b=True, **GELU_P), 147.5, R60 + "gpt42m step_kernels"),
    ("h200", GemmProblem(16384, 2048, 512, "tf32"), 118.8, R61 + "epilogue_ncu-h200.txt (events)"),
    ("h200", GemmProblem(16384, 2048, 512, "tf32", trans_b=True, **GELU_P), 159.5, R61 + "epilogue_ncu-h200.txt (events)"),
    ("h200", GemmProblem(16384, 2048, 512, "tf32", **DGELU), 167.7, R61 + "epilogue_ncu-h200.txt (events)"),
] + [  # out of sample: the same six as configured on an H100, events 20 back to back (run 63's `epilogues-h100.txt`)
    ("h100", q, us, R63 + "epilogues-h100.txt (events)") for q, us in (
        (GemmProblem(16384, 2048, 512, "tf32"), 122.3),
        (GemmProblem(16384, 2048, 512, "tf32", trans_b=True, **GELU_P), 149.5),
        (GemmProblem(16384, 2048, 512, "tf32", **DGELU), 187.2),
        (GemmProblem(16384, 2048, 512, "bf16", trans_b=True), 53.4),
        (GemmProblem(16384, 2048, 512, "bf16", **GELU_P), 85.9),
        (GemmProblem(16384, 2048, 512, "bf16", trans_b=True, **DGELU), 116.5))]
STEPS = [(R63 + "gpt42m/step_kernels-gpt42m.json", "gpt42m", "h100", None),
         (R63 + "hf-gpt2-bf16/step_kernels-hf-gpt2-42m-autocastbf16-padded-clip1.json", "hf-gpt2-42m", "h100",
          TrainRecipe(autocast="bf16", padded=True, clip_grad_norm=1.0))]


def kernels() -> None:
    for target, p, measured, where in MEASURED:
        cfg = configure(p, get_target(target))
        priced = priced_gemm(cfg)
        model = priced.at(1980)[1] if priced else cfg.prediction.time_us
        terms = {k: round(v, 1) for k, v in cfg.prediction.terms_us.items() if v}
        print(f"{target} {p.describe():48s} measured {measured:6.1f} model {model:6.1f} ({measured / model:.2f}x) "
              f"{'ping-pong' if cfg.schedule.pingpong else 'cooperative'} {terms}  [{where}]")


def steps() -> None:
    """A launch whose kernel today's plan no longer has at its position (another fusion) is counted as
    a mismatch and left out of the GELU count."""
    import json
    from nova.compiler.explain import kernel_reports_at_own_clocks
    for path, model, target, recipe in STEPS:
        result = json.load(open(path))
        planned, _ = plan_training_step(model, 32, None, "adamw", target, recipe=recipe)
        names = {rep.index: rep.name for rep in kernel_reports_at_own_clocks(planned, get_target(target))[0]}
        mismatched = sum(names.get(r["group"]) != r["name"] for r in result["rows"])
        gemms_at_clock(result, planned, get_target(target))
        gelu = [r for r in result["rows"] if "predicted_at_measured_clock_us" in r and "gelu" in r["name"]
                and names.get(r["group"]) == r["name"]]
        inside = sum(abs(r["measured_us"] / r["predicted_at_measured_clock_us"] - 1) <= 0.15 for r in gelu)
        print(f"{model} ({target}): {result['summary']['within_band_at_measured_clock']} of "
              f"{result['summary']['priced']} launches within 15% (GEMMs at the measured clock); GELU GEMMs "
              f"{inside} of {len(gelu)}; {mismatched} launches not in today's plan")


if __name__ == "__main__":
    kernels()
    steps()
