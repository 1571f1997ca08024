"""The training benchmark (nova.bench.train) on the CPU: its data, its torch side, its JAX twin, the
nova branch's one-line failure, the driver's arguments and the summary."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nova.bench import train


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny CPU steps: one intra-op thread (on a loaded 2-core machine OpenMP's barriers made a
    tiny step 40x slower), restored afterwards."""
    import torch
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _small_run(tmp_path, framework="eager", steps=2, extra=()):
    return train.main(["--framework", framework, "--model", "tiny", "--batch", "2", "--steps", str(steps),
                       "--warmup", "0", "--settle-s", "0", "--timed", "1", "--repeats", "2",
                       "--device", "cpu", "--out", str(tmp_path), *extra])


# ------------------------------------------------------------------------------------- the data
def test_token_batches_depend_on_seed_and_index_only():
    a = train.token_batches(96, 3, 16, 4, seed=7)
    b = train.token_batches(96, 3, 16, 2, seed=7)
    assert a.shape == (4, 3, 17) and a.dtype == np.int64
    assert (a[:2] == b).all()                        # batch i is the same whatever the run length
    assert a.min() >= 0 and a.max() < 96
    assert not (train.token_batches(96, 3, 16, 2, seed=8) == b).all()
    assert not (a[0] == a[1]).all()


def test_padding_masks_are_right_padded_from_seed_and_index_only():
    a, b = train.padding_masks(4, 16, 3, seed=1), train.padding_masks(4, 16, 5, seed=1)
    assert a.shape == (3, 4, 16) and a.dtype == np.int64 and (a == b[:3]).all()
    lengths = a.sum(-1)
    assert ((lengths >= 8) & (lengths <= 16)).all() and len(set(lengths.flatten().tolist())) > 1
    assert (np.diff(a, axis=-1) <= 0).all()                       # ones, then zeros: right padding
    assert not (train.padding_masks(4, 16, 3, seed=2) == a).all()


def test_padded_runs_need_a_model_that_takes_a_mask(tmp_path, capsys):
    assert _small_run(tmp_path, extra=("--padded",)) == 2
    assert "--padded passes an attention mask, which only the Hugging Face models take" in capsys.readouterr().err


def test_fp32_matmul_is_for_the_torch_frameworks(tmp_path, capsys):
    assert train.main(["--framework", "nova", "--fp32-matmul", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert train.main(["--all", "--frameworks", "eager,nova", "--fp32-matmul", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["nova.bench.train: --fp32-matmul is for eager and compile (Nova's and XLA's f32 GEMMs run TF32)"] * 2


@pytest.mark.parametrize("extra,message", [
    (("--steps", "0"), "--steps must be at least 1, got 0"),
    (("--seq", "0"), "--seq must be at least 1, got 0"),
    (("--seq", "-3"), "--seq must be at least 1, got -3"),
    (("--warmup", "-1"), "--warmup must be at least 0, got -1"),
    (("--settle-s", "nan"), "--settle-s must be a finite number of seconds >= 0, got nan"),
    (("--settle-s", "inf"), "--settle-s must be a finite number of seconds >= 0, got inf"),
    (("--seed", "-1"), "--seed must be at least 0, got -1"),
    (("--clip-grad-norm", "-1"), "--clip-grad-norm must be a finite norm >= 0"),
    (("--model", "bogus"), "unknown model 'bogus'; built-in models: tiny"),
    (("--seq", "100000"), "--seq 100000 exceeds tiny's position table (16)"),
])
def test_bad_values_are_one_line_and_exit_2(tmp_path, capsys, extra, message):
    assert _small_run(tmp_path, extra=extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.parametrize("extra,message", [
    (("--frameworks", "eager,bogus"), "--frameworks 'eager,bogus': unknown framework(s) bogus; choose from eager"),
    (("--frameworks", ","), "--frameworks ',': names no framework"),
    (("--timeout", "0"), "--timeout must be at least 1, got 0"),
    (("--model", "bogus"), "unknown model 'bogus'"),
    (("--compile-mode", "bogus"), "--compile-mode 'bogus' is not a torch.compile mode; choose from default"),
    (("--frameworks", "eager,compile", "--memory-budget", "2GiB"),
     "--memory-budget is nova.compile's budget; eager, compile would run without it"),
])
def test_the_driver_refuses_bad_values_before_it_starts_a_run(tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.setattr(train, "run_all", lambda args: pytest.fail("the driver started its runs"))
    assert train.main(["--all", "--model", "tiny", "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_value_argparse_refuses_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        train.main(["--framework", "eager", "--batch", "x"], prog="nova bench train")
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "nova bench train: error: argument --batch: invalid int value: 'x' (see nova bench train --help)"]


def test_an_out_folder_that_cannot_be_made_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert train.main(["--framework", "eager", "--out", str(tmp_path / "file")]) == 2
    assert train.main(["--framework", "eager", "--out", str(tmp_path / "file" / "below")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"nova.bench.train: --out {tmp_path / 'file'} is a file, not a folder",
                   f"nova.bench.train: --out {tmp_path / 'file' / 'below'}: cannot make the folder (Not a directory)"]


def test_a_memory_budget_below_the_smallest_plan_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """The planned program (the executor engine, which plans on the CPU too) under a budget no plan
    meets: the budget's one line, naming the smallest plan, exit 2."""
    import functools
    import nova
    if not callable(getattr(nova, "compile", None)):
        pytest.skip("nova.compile is not in this checkout")
    monkeypatch.setattr(nova, "compile", functools.partial(nova.compile, backend="executor"))
    assert _small_run(tmp_path, "nova", extra=("--memory-budget", "1KiB")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not fit a memory budget of 1.0 KiB: the smallest plan is" in err[0]
    rec = json.loads((tmp_path / "nova-tiny-b2.json").read_text())
    assert rec["status"] == "error" and "the smallest plan is" in rec["error"]


def test_token_stream_is_learnable():
    """About 3/4 of the tokens follow their predecessor through the successor table: a bigram
    model beats the unigram entropy, so the loss curve has somewhere to go."""
    v = 64
    a = train.token_batches(v, 8, 256, 2, seed=0).reshape(-1, 257)
    prev, nxt = a[:, :-1].ravel(), a[:, 1:].ravel()
    pair = np.zeros((v, v))
    np.add.at(pair, (prev, nxt), 1)
    top4 = np.sort(pair, axis=1)[:, -4:].sum() / pair.sum()
    assert top4 > 0.7


# ------------------------------------------------------------------------------ torch on the CPU
def test_eager_cpu_run_writes_a_valid_json(tmp_path):
    pytest.importorskip("nova.models.gpt")
    assert _small_run(tmp_path) == 0
    path = tmp_path / "eager-tiny-b2.json"
    rec = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert rec["status"] == "ok" and rec["framework"] == "eager" and rec["device"] == "cpu"
    assert rec["seq"] == rec["config"]["block_size"] and rec["tokens_per_step"] == 2 * rec["seq"]
    assert len(rec["losses"]) == 2 and all(np.isfinite(rec["losses"]))
    assert rec["losses"][0] == pytest.approx(np.log(rec["config"]["vocab_size"]), rel=0.1)   # near-uniform start
    t = rec["timing"]
    assert t["tokens_per_s"] > 0 and len(t["repeat_s"]) == 2 and t["step_ms_median"] > 0
    assert rec["first_step_s"] > 0 and rec["settle"]["steps"] >= 0
    assert rec["optimizer"] == {"class": "torch.optim.AdamW", "lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                "weight_decay": 0.1, "impl_requested": "default", "impl": "forloop",
                                "param_groups": 1, "schedule": "constant", "clip_grad_norm": 0.0}
    assert rec["memory"] is None and "clocks" not in rec           # no GPU, no memory or clock figures


def test_nova_without_compile_fails_in_one_line(tmp_path, monkeypatch, capsys):
    import nova
    monkeypatch.setattr(nova, "compile", None, raising=False)
    assert _small_run(tmp_path, "nova") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nova.compile is not available" in err[0]
    rec = json.loads((tmp_path / "nova-tiny-b2.json").read_text())
    assert rec["status"] == "unavailable" and "nova.compile" in rec["error"]


@pytest.mark.slow
def test_nova_framework_runs_on_the_cpu_and_tracks_eager(tmp_path):
    """Where the graph compiler is merged: ``nova.compile(train_step)`` on the CPU (its reference
    engine) gives eager's losses, and the JSON carries ``step.stats`` and ``step.explain()``."""
    import nova
    pytest.importorskip("nova.models.gpt")
    if not callable(getattr(nova, "compile", None)):
        pytest.skip("nova.compile is not in this checkout")
    assert _small_run(tmp_path, "eager") == 0
    assert _small_run(tmp_path, "nova") == 0
    eager = json.loads((tmp_path / "eager-tiny-b2.json").read_text())
    rec = json.loads((tmp_path / "nova-tiny-b2.json").read_text())
    assert rec["status"] == "ok"
    np.testing.assert_allclose(rec["losses"], eager["losses"], rtol=1e-5)
    assert rec["nova"]["stats"]["captures"] == 1 and isinstance(rec["nova"]["explain"], str)


def test_driver_passes_every_option_to_its_children():
    args = train.parser().parse_args(["--all", "--model", "tiny", "--batch", "3", "--seq", "8", "--steps", "4",
                                      "--warmup", "2", "--timed", "5", "--repeats", "3", "--settle-s", "0.5",
                                      "--seed", "9", "--device", "cpu", "--out", "/tmp/x",
                                      "--compile-mode", "max-autotune", "--adamw-impl", "fused",
                                      "--autocast", "bf16", "--padded", "--clip-grad-norm", "0.5",
                                      "--memory-budget", "1GiB", "--no-memory-cap", "--fp32-matmul"])
    for framework in ("jax", "nova", "eager"):
        argv = train._child_argv(args, framework)
        assert argv[:3] == [sys.executable, "-m", "nova.bench.train"]
        child = train.parser().parse_args(argv[3:])
        assert child.framework == framework and not child.all
        for name in ("model", "batch", "seq", "steps", "warmup", "timed", "repeats", "settle_s", "seed", "device",
                     "out", "compile_mode", "adamw_impl", "autocast", "padded", "clip_grad_norm", "fp32_matmul"):
            assert getattr(child, name) == getattr(args, name), name
        budgeted = framework == "nova"          # nova.compile's budget: the other children would refuse it
        assert (child.memory_budget, child.no_memory_cap) == ((args.memory_budget, True) if budgeted else (None, False))


@pytest.mark.slow
def test_driver_runs_jax_in_its_own_process_and_it_tracks_eager(tmp_path):
    """``--all`` end to end on the CPU for the JAX twin (eager runs in this process: one torch
    start-up fewer): the same tokens, config and loss curve as eager from the same weights; the JAX
    process never imports torch; the summary is written and printed."""
    pytest.importorskip("nova.models.gpt")
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1",
           "XLA_FLAGS": "--xla_backend_optimization_level=0"}      # compile the tiny step in ~2 s, not ~10
    r = subprocess.run([sys.executable, "-m", "nova.bench.train", "--all", "--frameworks", "jax", "--model",
                        "tiny", "--batch", "2", "--steps", "3", "--warmup", "0", "--settle-s", "0", "--timed", "1",
                        "--repeats", "2", "--device", "cpu", "--out", str(tmp_path)],
                       cwd=root, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (tmp_path / "summary-tiny-b2.md").exists() and (tmp_path / "summary-tiny-b2.png").exists()
    assert "| jax |" in r.stdout                         # the table is printed last
    assert _small_run(tmp_path, "eager", steps=3) == 0
    eager = json.loads((tmp_path / "eager-tiny-b2.json").read_text())
    jx = json.loads((tmp_path / "jax-tiny-b2.json").read_text())
    assert eager["status"] == jx["status"] == "ok"
    assert jx["torch_in_process"] is False and jx["init_export_s"] > 0
    assert jx["data"]["tokens_sha_first_batch"] == eager["data"]["tokens_sha_first_batch"]
    assert jx["config"] == eager["config"]
    assert jx["optimizer"]["class"] == "optax.adamw" and jx["jit"]["donated"] == ["params", "opt_state"]
    np.testing.assert_allclose(jx["losses"], eager["losses"], rtol=1e-5)


def test_clock_samples_parse_and_summarise_over_the_timed_windows():
    parse = train.ClockSampler.parse
    a = parse("2026/10/28 12:00:00.000, 1980, 95.20, 31\n", 0.0)
    b = parse("2026/10/28 12:00:01.500, 1425, [N/A], 60\n", 0.0)
    assert a[1:] == (1980.0, 95.2, 31.0) and b[1:] == (1425.0, None, 60.0)
    assert b[0] - a[0] == pytest.approx(1.5)
    assert parse("timestamp, clocks.sm [MHz], power.draw [W], temperature.gpu\n", 0.0) is None
    c = train.ClockSampler()
    c.samples = [a, b, (b[0] + 0.1, 1410.0, 690.0, 61.0)]
    sm = c.summary([(b[0] - 0.01, b[0] + 0.2)], t0=a[0])
    assert sm["timed_samples"] == 2 and sm["timed_sm_mhz_median"] == pytest.approx(1417.5)
    assert sm["timed_power_w_median"] == 690.0 and sm["first_sm_mhz"] == 1980.0
    assert sm["trace"]["t_s"] == [0.0, 1.5, 1.6]


# ----------------------------------------------------------------------------------- the summary
def _fake(fw, tps, mem, losses, status="ok"):
    return {"schema": 1, "framework": fw, "model": "m", "batch": 4, "device": "cuda", "seq": 8, "status": status,
            "device_name": "NVIDIA H200", "protocol": {"steps": 3, "warmup": 1, "settle_s": 2.0, "timed": 5, "repeats": 3},
            "first_step_s": 1.5, "losses": losses,
            "timing": {"tokens_per_s": tps, "step_ms_median": 1e3 * 32 / tps, "spread_pct": 0.5} if tps else None,
            "memory": {"peak_allocated_bytes": mem, "peak_reserved_bytes": mem * 1.2} if mem else None,
            "clocks": {"timed_sm_mhz_median": 1500.0}}


def test_report_table_and_plot(tmp_path):
    from nova.bench.train_report import summary_rows, write_report
    recs = {"eager": _fake("eager", 400e3, 10.6e9, [10.4, 9.0, 8.0]),
            "compile": _fake("compile", 500e3, 6.77e9, [10.4, 9.0, 8.001]),
            "jax": _fake("jax", 450e3, 13.5e9, [10.4, 9.01, 8.0]),
            "nova": {"schema": 1, "framework": "nova", "model": "m", "batch": 4, "status": "unavailable",
                     "error": "nova.compile is not available"}}
    for fw, r in recs.items():
        (tmp_path / f"{fw}-m-b4.json").write_text(json.dumps(r))
    rows = {r["framework"]: r for r in summary_rows(recs)}
    assert rows["compile"]["vs_eager"] == pytest.approx(1.25)
    assert rows["jax"]["max_dloss_vs_eager"] == pytest.approx(0.01)
    assert rows["eager"]["peak_alloc_gb"] == pytest.approx(10.6)
    assert rows["nova"]["tokens_per_s"] is None
    md, png = write_report(tmp_path, "m", 4)
    text = md.read_text()
    assert "| compile | 500,000 | 1.250 |" in text and "unavailable: nova.compile is not available" in text
    assert png.stat().st_size > 10_000


# ---------------------------------------------------------------------------------- the JAX twin
# XLA:CPU at -O0 compiles the tiny step in ~2 s instead of ~10 s; the arithmetic is the same.
FAST_XLA = {"xla_backend_optimization_level": 0}


def _rel(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.fixture(scope="module")
def twin_setup():
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    pytest.importorskip("nova.models.gpt")
    import torch
    from nova.bench import jax_gpt as tw
    cfg = train.model_config("tiny")
    tokens = train.token_batches(cfg.vocab_size, 4, cfg.block_size, 2, seed=3)
    return torch, tw, cfg, tokens


def test_jax_twin_matches_torch_eager_loss_and_gradients(twin_setup):
    torch, tw, cfg, tokens = twin_setup
    import jax
    model = train.build_torch_model(cfg, seed=0)
    idx, tgt = torch.from_numpy(tokens[0, :, :-1].copy()), torch.from_numpy(tokens[0, :, 1:].copy())
    loss = train.torch_loss(model, idx, tgt)
    loss.backward()

    tc = tw.config_from_torch(cfg)
    params = tw.params_from_torch(model.state_dict(), tc)
    x, y = tokens[0, :, :-1].astype(np.int32), tokens[0, :, 1:].astype(np.int32)
    vg = jax.jit(jax.value_and_grad(tw.loss_fn), static_argnums=3).lower(params, x, y, tc).compile(FAST_XLA)
    jloss, jgrads = vg(params, x, y)
    assert float(jloss) == pytest.approx(loss.item(), rel=1e-4)
    g = tw.grads_to_torch(jgrads, tc)
    named = dict(model.named_parameters())                # the tied head appears once, as the embedding
    assert set(g) == set(named)
    worst = max((_rel(g[n], p.grad.numpy()), n) for n, p in named.items())
    assert worst[0] < 1e-4, worst


def test_jax_twin_adamw_steps_track_torch(twin_setup):
    """Two optimizer steps each: the same losses and parameters (optax.adamw = torch AdamW with
    the harness's hyper-parameters)."""
    torch, tw, cfg, tokens = twin_setup
    model = train.build_torch_model(cfg, seed=0)
    tc = tw.config_from_torch(cfg)
    params = tw.params_from_torch(model.state_dict(), tc)
    h = train.ADAMW
    opt = torch.optim.AdamW(model.parameters(), lr=h["lr"], betas=h["betas"], eps=h["eps"], weight_decay=h["weight_decay"])
    jopt = tw.make_optimizer(h["lr"], h["betas"], h["eps"], h["weight_decay"])
    state = jopt.init(params)
    x0, y0 = tokens[0, :, :-1].astype(np.int32), tokens[0, :, 1:].astype(np.int32)
    step = tw.make_train_step(tc, jopt, donate=False).lower(params, state, x0, y0).compile(FAST_XLA)
    for i in range(2):
        loss = train.torch_loss(model, torch.from_numpy(tokens[i, :, :-1].copy()), torch.from_numpy(tokens[i, :, 1:].copy()))
        loss.backward()
        opt.step()
        opt.zero_grad()
        params, state, jloss = step(params, state, tokens[i, :, :-1].astype(np.int32), tokens[i, :, 1:].astype(np.int32))
        assert float(jloss) == pytest.approx(loss.item(), rel=1e-5)
    after = tw.grads_to_torch(params, tc)
    for n, p in model.named_parameters():
        assert np.abs(after[n] - p.detach().numpy()).max() < 1e-6, n


def test_jax_twin_refuses_an_unmapped_parameter(twin_setup):
    torch, tw, cfg, _ = twin_setup
    sd = dict(train.build_torch_model(cfg, seed=0).state_dict())
    sd["transformer.h.0.extra.weight"] = torch.zeros(3)
    with pytest.raises(KeyError, match="without a twin leaf"):
        tw.params_from_torch(sd, tw.config_from_torch(cfg))


def test_a_warmup_cosine_schedule_with_clipping_runs_through_nova_on_cpu(tmp_path):
    """--schedule warmup-cosine --clip-grad-norm 1.0: eager and nova.compile follow the same schedule
    (one capture: the learning rate is a program input) and the result records the recipe."""
    pytest.importorskip("nova.models.gpt")
    import torch
    from nova.bench import train
    sched = train.make_schedule(torch, torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0),
                                "warmup-cosine", 20)
    lrs = []
    for _ in range(25):
        lrs.append(sched.get_last_lr()[0])
        sched.optimizer.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)            # warmup over 2 steps
    assert lrs[2] == pytest.approx(1.0) and lrs[20] == pytest.approx(0.1) == lrs[24]  # cosine to 10%, held
    losses = {}
    for fw in ("eager", "nova"):
        argv = ["--framework", fw, "--model", "tiny", "--batch", "2", "--steps", "4", "--warmup", "1",
                "--settle-s", "0", "--timed", "1", "--repeats", "1", "--device", "cpu", "--out", str(tmp_path),
                "--schedule", "warmup-cosine", "--clip-grad-norm", "1.0"]
        assert train.main(argv) == 0
        rec = json.loads((tmp_path / f"{fw}-tiny-b2.json").read_text())
        assert rec["optimizer"]["schedule"] == "warmup-cosine" and rec["optimizer"]["clip_grad_norm"] == 1.0
        losses[fw] = rec["losses"]
    assert losses["nova"] == pytest.approx(losses["eager"], rel=1e-4)


# ------------------------------------------------------------------------------ the memory diagnostic
def test_memory_diagnostic_merges_the_programs_phases_beside_the_plan():
    """The phases of the benchmark and of the program in time order with their deltas; the plan's
    components sum to its peak; ``unexplained_bytes`` is torch's peak less the predicted torch peak and
    the benchmark's data."""
    import time
    from types import SimpleNamespace
    from nova.bench.memory_phases import MemoryDiagnostic, program_predicted
    from nova.compiler.executor import Program
    from nova.compiler.explain import training_step
    from nova.compiler.outside_arena import account
    from nova.frontend import capture
    from nova.passes import pipeline
    fn, args, model, opt, _ = training_step("tiny", 4, 16)
    planned = pipeline(capture(fn, args, models=[model], optimizers=[opt]).graph, "h200", outside_arena=account)
    program = Program(planned, "meta")
    predicted = program_predicted(program)
    outside = predicted["outside_arena_torch_bytes"]
    assert predicted["torch_peak_bytes"] == predicted["peak_bytes"] == planned.memory.peak_bytes == \
        predicted["arena_bytes"] + sum(predicted["user_tensors_bytes"].values()) + outside["program"] + \
        outside["step"] + outside["launch_largest"]
    assert predicted["launch_workspaces"]["count"] == len(planned.memory.workspaces) > 0

    counters = {"allocated": 1000, "reserved": 2048, "max_allocated": 1000, "max_reserved": 2048}
    fake = SimpleNamespace(cuda=SimpleNamespace(
        mem_get_info=lambda dev: (10_000, 20_000), memory_allocated=lambda dev: counters["allocated"],
        memory_reserved=lambda dev: counters["reserved"], max_memory_allocated=lambda dev: counters["max_allocated"],
        max_memory_reserved=lambda dev: counters["max_reserved"]))
    diagnostic = MemoryDiagnostic()
    assert diagnostic.report() is None                        # off CUDA: nothing recorded
    diagnostic.start(fake, "cuda:0")
    t_program = time.perf_counter()
    peak = predicted["torch_peak_bytes"] + 4096
    program.memory_phases = [{"phase": "program build: arena", "t": t_program, "allocated_bytes": 5000,
                              "reserved_bytes": 6144, "max_allocated_bytes": peak, "max_reserved_bytes": peak + 512,
                              "device_used_bytes": 15_000}]
    counters.update(allocated=3000, max_allocated=3000)
    diagnostic.mark("first step returned (synchronised)")
    diagnostic.compiled = SimpleNamespace(_last=SimpleNamespace(engine=SimpleNamespace(program=program)))
    diagnostic.data_device_bytes = 1024
    report = diagnostic.report()
    assert [(p["phase"], p["source"], p["allocated_delta_bytes"]) for p in report["phases"]] == [
        ("start: CUDA initialised, nothing of the run allocated", "benchmark", 1000),
        ("program build: arena", "program", 4000), ("first step returned (synchronised)", "benchmark", -2000)]
    assert report["phases"][0]["device_used_bytes"] == 10_000 and report["phases"][0]["t_s"] >= 0
    m = report["measured"]
    assert (m["peak_allocated_bytes"], m["reserved_over_allocated_bytes"], m["unexplained_bytes"]) == (peak, 512, 3072)
    json.dumps(report, allow_nan=False)
