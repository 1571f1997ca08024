"""``nova-config explain pointwise`` and ``nova-config explain adamw / sgd`` through a subprocess, as users
run them: the text (schedule, every derivation step with its reason, the prediction), the JSON, and
one line with exit status 2 for bad input."""
import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "nova.cli.config", "explain", *args], capture_output=True, text=True,
                          timeout=120)


def test_explain_pointwise_text():
    r = run("pointwise", "gelu_tanh(x)+y", "16384x2048", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.splitlines()[0].startswith("pointwise gelu_tanh+add over 33554432 (bf16, 2 in, 1 out) on NVIDIA H200")
    assert "canonical program: out0 = add(gelu_tanh(in0), in1)" in out
    for word in ("Derivation", "vector", "threads", "CTAs per SM", "grid", "loop trips", "DRAM time", "Schedule",
                 "8 elements per access", "Prediction", "bound by dram", "configured in"):
        assert word in out, word


def test_explain_pointwise_json_matches_the_configurator():
    from nova.kernels.pointwise.derive import configure_pointwise
    from nova.passes.pointwise_from_ir import expression_problem
    r = run("pointwise", "0.5*x*(1+tanh(0.7978845608*(x+0.044715*x**3)))", "1000x3", "--target", "a100", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    cfg = configure_pointwise(expression_problem("gelu_tanh(x)", (1000, 3), "f32"), "a100")
    assert (d["op"], d["target"], d["arch"]) == ("pointwise", "a100", "sm_80")
    assert d["expression"] == "out0 = gelu_tanh(in0)" and d["schedule"] == cfg.schedule.to_dict()
    assert d["prediction"]["time_us"] == pytest.approx(cfg.prediction.time_us)
    assert [s["step"] for s in d["derivation"]] == [s.step for s in cfg.derivation]
    assert all({"step", "formula", "value", "reason"} <= set(s) for s in d["derivation"])


def test_explain_adamw_text():
    r = run("adamw", "42000000", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.splitlines()[0].startswith("multi-tensor adamw bf16, f32 steps over 1 tensor (42M elements) on NVIDIA H200")
    for word in ("Derivation", "unroll", "chunk", "CTAs per SM", "trips", "DRAM time", "Schedule",
                 "persistent CTAs", "argument table", "read from the device at run time", "Prediction", "bound by dram"):
        assert word in out, word


@pytest.mark.parametrize("args, rule", [
    (["adamw", "50304x768,768,3x768x768", "--adam", "--maximize", "--step-dtype", "i64", "--dtype", "f16"],
     dict(op="adamw", dtype="f16", step_dtype="i64", decoupled=False, maximize=True)),
    (["sgd", "1000,7", "--nesterov"], dict(op="sgd", dtype="f32", with_momentum=True, nesterov=True)),
    (["sgd", "1000", "--first-step", "--dtype", "f64"], dict(op="sgd", dtype="f64", with_momentum=True, first_step=True)),
])
def test_explain_update_json_matches_the_configurator(args, rule):
    from nova.kernels.optimizer.derive import configure_multi_tensor
    from nova.kernels.optimizer.problem import MultiTensorProblem, UpdateRule, parse_sizes
    r = run(*args, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    cfg = configure_multi_tensor(MultiTensorProblem(UpdateRule(**rule), parse_sizes(args[1])), "h200")
    assert d["op"] == rule["op"] and d["problem"]["rule"] == cfg.problem.rule.to_dict()
    assert d["problem"]["sizes"] == list(parse_sizes(args[1])) and d["schedule"]["chunk"] == cfg.schedule.chunk
    assert {k: v for k, v in d["schedule"].items() if k != "chunk"} == cfg.schedule.to_dict()
    assert d["prediction"]["time_us"] == pytest.approx(cfg.prediction.time_us) and d["facts"]["chunks"] > 0


@pytest.mark.parametrize("args, message", [
    (["pointwise", "gelu_tanh(x", "64x64"], "expected ')'"),
    (["pointwise", "foo(x)+y", "64x64"], "'foo' is not an IR pointwise op"),
    (["pointwise", "x+y", "64xa"], "bad shape '64xa'"),
    (["pointwise", "x+y", "0x4"], "bad shape '0x4'"),
    (["pointwise", "x+y", "64", "--dtype", "i32"], "dtype must be one of"),
    (["pointwise", "x+y", "64", "--target", "h900"], "unknown target 'h900'"),
    (["adamw", "12,abc"], "tensor sizes '12,abc'"),
    (["adamw", "0"], "every extent must be a positive integer"),
    (["adamw", "100", "--dtype", "i8"], "dtype must be one of"),
    (["adamw", "100", "--step-dtype", "bf16"], "the step counts must be one of"),
    (["sgd", "100", "--dtype", "f8"], "dtype must be one of"),
    # sizes no GPU holds: one line before any derivation (an attention derivation walks its CTAs)
    (["pointwise", "x+y", "1024x1024x1024x1024"], "more than the 154.6 GB of the largest GPU"),
    # a literal the math type cannot hold: refused, not infinity (nor `Infinity` in --json)
    (["pointwise", "x*1e400", "1024", "--json"], "the constant 1e400 overflows f32 (largest finite value 3.4028235e+38)"),
    (["pointwise", "x+1e39", "1024", "--dtype", "bf16"], "the constant 1e39 overflows f32"),
    (["pointwise", "x-2e308", "1024", "--dtype", "f64"], "the constant 2e308 overflows f64"),
    (["adamw", "100000000000000"], "more than the 154.6 GB of the largest GPU"),
    (["attention", "1000,64,100000,128", "--target", "h200"], "more than the 154.6 GB of the largest GPU"),
    (["log_softmax", "1000000000000x4096"], "more than the 154.6 GB of the largest GPU"),
    (["embedding", "16384x512", "--vocab", "100000000000000"], "more than the 154.6 GB of the largest GPU"),
    (["embedding", "16384x512", "--vocab", "3000000000", "--index-dtype", "i32"], "cannot be numbered by i32"),
    (["cross_entropy", "16384x32768", "--forward-backward", "--backward"], "give one of them"),
    # argparse's own errors: one line too, not the usage block
    (["attention", "32,8,512,64", "--scale", "abc"], "invalid float value: 'abc'"),
    (["layernorm", "16384x512", "--dtype", "f64"], "invalid choice: 'f64'"),
    (["embedding", "16384x512"], "required: --vocab"),
])
def test_bad_input_is_one_clear_line(args, message):
    r = run(*args)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nova-config") and " error: " in lines[0] and message in lines[0], \
        r.stderr


def test_the_largest_finite_constant_is_a_constant():
    """The largest f32 as printed (it rounds to f32's largest) is a number, and --json is valid JSON."""
    r = run("pointwise", "x*3.4028235e38", "1024", "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


def test_explain_train_prices_nova_memory_bound_groups_with_their_configurators(monkeypatch):
    """The pointwise and optimizer groups that run on Nova kernels show as Nova kernels priced by their
    configurators (the same times as explain pointwise / adamw); NOVA_POINTWISE=0 puts them back on ATen."""
    from nova.compiler.explain import explain_train, plan_training_step
    from nova.kernels.optimizer.derive import configure_multi_tensor
    from nova.kernels.pointwise.derive import configure_pointwise
    planned, _ = plan_training_step("tiny", 2, 16, "adamw", "h200")
    report = explain_train("tiny", 2, 16, "h200", "adamw")
    kernels = {k["index"]: k for k in report["kernels"]}
    nova_pointwise = [i for i, g in enumerate(planned.groups) if g.kind == "pointwise" and g.kernel == "nova"]
    (update,) = [i for i, g in enumerate(planned.groups) if g.nodes[0].op == "adamw"]
    assert nova_pointwise and planned.groups[update].kernel == "nova"
    for i in nova_pointwise:
        k, problem = kernels[i], planned.groups[i].problem
        assert (k["kernel"], k["model"], k["name"]) == ("nova", "pointwise configurator", problem.describe())
        assert k["predicted_us"] == pytest.approx(configure_pointwise(problem, "h200").prediction.time_us, abs=1e-3)
    k = kernels[update]
    assert (k["kernel"], k["model"]) == ("nova", "multi-tensor configurator") and k["schedule"]["chunk"] > 0
    cfg = configure_multi_tensor(planned.groups[update].problem, "h200")
    assert k["predicted_us"] == pytest.approx(cfg.prediction.time_us, abs=1e-3)
    assert report["prediction"]["by_kind"]["pointwise/nova"]["count"] == len(nova_pointwise)
    monkeypatch.setenv("NOVA_POINTWISE", "0")
    off = explain_train("tiny", 2, 16, "h200", "adamw")
    assert "pointwise/nova" not in off["prediction"]["by_kind"]
    assert all(k["kernel"] == "aten" for k in off["kernels"] if "adamw" in k["name"])
