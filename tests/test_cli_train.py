"""``nova-config explain train`` and ``nova precompile train``: the whole-program commands, on the
tiny GPT (no GPU, no memory for the model: it is captured on the meta device)."""
import json

import pytest

pytest.importorskip("torch")

from nova.cli.config import main as config_main          # noqa: E402
from nova.cli.main import main as nova_main              # noqa: E402


def test_explain_train_json_has_the_documented_keys(capsys):
    assert config_main(["explain", "train", "tiny", "--batch", "2", "--target", "h200", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("captured_ops", "kernels", "fallback_ops", "memory", "prediction", "model"):
        assert key in report
    assert report["fallback_ops"] == {}                       # every op of the GPT step is in the IR
    kinds = {k["kind"] for k in report["kernels"]}
    assert {"gemm", "composite"} <= kinds
    assert all(k["predicted_us"] > 0 and k["name"] for k in report["kernels"])
    gemms = [k for k in report["kernels"] if k["kind"] == "gemm" and k["kernel"] == "nova"]
    assert gemms and all(k["schedule"]["tile"] for k in gemms)
    mem, pred = report["memory"], report["prediction"]
    assert mem["peak_bytes"] >= mem["arena_bytes"] > 0 and sum(mem["breakdown"].values()) == mem["peak_bytes"]
    assert pred["step_ms"] == pytest.approx(sum(k["predicted_us"] for k in report["kernels"]) / 1e3, rel=1e-3)
    assert pred["tokens_per_s"] == pytest.approx(2 * 16 / (pred["step_ms"] * 1e-3), rel=1e-2)


def test_explain_train_text_names_the_parts(capsys):
    assert config_main(["explain", "train", "tiny", "--batch", "2", "--target", "h200", "--top", "3"]) == 0
    out = capsys.readouterr().out
    for part in ("captured", "kernels by kind", "most expensive kernels", "GEMM schedules", "memory plan",
                 "Prediction:"):
        assert part in out


@pytest.mark.parametrize("argv, message", [
    (["explain", "train", "bogus", "--batch", "2"], "unknown model 'bogus'"),
    (["explain", "train", "tiny", "--batch", "0"], "--batch must be a positive integer"),
    (["explain", "train", "tiny", "--batch", "2", "--seq", "99"], "--seq 99 is outside 1..16"),
    (["explain", "train", "tiny", "--batch", "2", "--top", "-5"], "--top must be 0 or more"),   # not "all but 5"
])
def test_bad_training_arguments_are_one_line(argv, message, capsys):
    assert config_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_plot_path_that_cannot_be_a_png_file_is_one_line(tmp_path, capsys):
    """``--plot`` under a regular file, on a folder or without .png: one usage line naming the flag,
    before the step is planned; a missing folder is made."""
    (tmp_path / "file").write_text("")
    cases = [(tmp_path / "file" / "x.png", f"{tmp_path / 'file'} is a file, not a folder"),
             (tmp_path / "file" / "a" / "x.png", f"{tmp_path / 'file'} is a file, not a folder"),
             (tmp_path, "that is a folder; give the PNG file to write"),
             (tmp_path / "x.svg", "the plot is a PNG; give a path ending in .png")]
    for path, message in cases:
        assert config_main(["explain", "train", "tiny", "--batch", "2", "--plot", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"nova-config: error: --plot {path}: {message}"), err
    png = tmp_path / "new" / "memory.png"
    assert config_main(["explain", "train", "tiny", "--batch", "2", "--plot", str(png), "--json"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bad_attention_precision_is_one_line_not_a_silent_fallback(capsys, monkeypatch):
    """A typo in $NOVA_ATTENTION_PRECISION is the user's error: explain (and the executor, which asks
    the same question) must not quietly treat the attention as one Nova's kernels do not cover."""
    monkeypatch.setenv("NOVA_ATTENTION_PRECISION", "fast")
    assert config_main(["explain", "train", "tiny", "--batch", "2", "--target", "h200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NOVA_ATTENTION_PRECISION='fast': expected tf32, 3xtf32" in err[0]


def test_precompile_train_needs_a_model(capsys):
    assert nova_main(["precompile", "train", "--target", "h200"]) == 2
    assert "needs a model" in capsys.readouterr().err


def test_the_batch_defaults_to_the_benchmarks_batch(capsys):
    import json
    from nova import models
    assert config_main(["explain", "train", "tiny", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["prediction"]["tokens_per_step"] == models.BENCH_BATCH["tiny"] * models.config("tiny").block_size
    assert set(models.BENCH_BATCH) == set(models.MODELS)


def test_the_llama_models_are_built_in_models(capsys):
    """llama-tiny and llama42m are named like the GPTs: explain train plans them, bench and precompile
    resolve them through the same registry (nova.models.MODELS)."""
    from nova import models
    assert {"tiny", "gpt42m", "gpt144m", "llama-tiny", "llama42m"} <= set(models.MODELS)
    assert models.config("llama42m").block_size == 512 and models.MODELS["llama42m"][0] is models.Llama
    assert config_main(["explain", "train", "llama-tiny", "--batch", "2", "--json"]) == 0
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["prediction"]["step_ms"] > 0
    assert config_main(["explain", "train", "llama-huge", "--batch", "2"]) == 2
    assert "unknown model 'llama-huge'; built-in models: tiny, gpt42m, gpt144m, llama-tiny, llama42m" in \
        capsys.readouterr().err


def test_explain_train_autocast_plans_bf16_gemms_on_a_host_without_a_gpu(capsys):
    """The step is written with ``torch.autocast("cuda")``; a CPU-only torch would disable it (and the
    plan would silently be the FP32 step's): captured on the meta device it is planned as CUDA runs it."""
    assert config_main(["explain", "train", "tiny", "--batch", "2", "--autocast", "bf16", "--clip-grad-norm", "1",
                        "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    gemms = [k["name"] for k in report["kernels"] if k["kind"] == "gemm"]
    assert gemms and all(" bf16 " in name for name in gemms)
    assert report["model"]["recipe"] == "autocast bf16, clip 1"
    assert config_main(["explain", "train", "tiny", "--batch", "2", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert all(" bf16 " not in k["name"] for k in plain["kernels"] if k["kind"] == "gemm")


@pytest.mark.parametrize("argv, message", [
    (["explain", "train", "tiny", "--batch", "2", "--padded"], "--padded passes an attention mask, which only"),
    (["explain", "train", "tiny", "--batch", "2", "--clip-grad-norm", "-1"], "clip_grad_norm must be >= 0"),
])
def test_bad_recipes_are_one_line(argv, message, capsys):
    assert config_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_recipe_flags_are_refused_where_they_would_be_ignored(capsys):
    assert nova_main(["precompile", "gemm", "--shapes", "64x64x64", "--autocast", "bf16", "--target", "h200"]) == 2
    assert "--autocast" in capsys.readouterr().err
