"""A user's own training step precompiled on a host without a GPU: ``nova precompile train --step
MODULE:FACTORY`` (or ``FILE.py:FACTORY``) and ``nova.precompile(step, *args)``, with a model defined
here, outside the package; a bad ``--step`` is one line and exit status 2."""
from __future__ import annotations

from pathlib import Path

import re

import pytest

torch = pytest.importorskip("torch")

import nova  # noqa: E402
from nova.cli.main import main as nova_main  # noqa: E402

FACTORY_DEVICES = []            # the default device each factory call saw
NOT_A_FACTORY = 42


class Regressor(torch.nn.Module):
    def __init__(self, width: int = 64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def make_step(batch: int = 4, seq: int = 16):
    FACTORY_DEVICES.append(torch.empty(0).device.type)
    model = Regressor()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    x = torch.zeros(batch, seq, 64)
    return train_step, (x, x.clone())


def make_step_naming_its_objects(batch: int = 4):
    step, args = make_step(batch)
    model = Regressor()
    return step, args, [model], None


def make_three():
    return make_step()[0], (), None


def make_uncallable():
    return "train", ()


def make_batch_only(batch: int = 4):
    return make_step(batch)


def expected_gemms(batch: int, seq: int, target: str = "h200") -> int:
    from nova.compiler.precompile import step_kernels
    from nova.integrations.user_step import make_user_step, plan_step
    from nova.hwmodel import get_target
    planned = plan_step(make_user_step(make_step, batch=batch, seq=seq), get_target(target))
    kernels = step_kernels(planned)
    assert kernels.gemms and not kernels.attention
    return len(kernels.gemms)


def test_cli_precompiles_every_gemm_of_the_users_step(tmp_path, capsys):
    cache = tmp_path / "cache"
    FACTORY_DEVICES.clear()
    argv = ["precompile", "train", "--step", f"{__name__}:make_step", "--batch", "4", "--seq", "8", "--target", "h200",
            "--cache-dir", str(cache)]
    assert nova_main(argv) == 0
    out = capsys.readouterr().out
    assert FACTORY_DEVICES == ["meta"]                     # the factory ran on the meta device
    n = expected_gemms(4, 8)
    assert f"precompiled {n} GEMMs" in out and " for h200 " in out        # and the step's other families' kernels
    built = int(re.search(r"(\d+) kernels compiled, 0 already cached, 0 failed", out).group(1))
    assert built >= n
    # the file form names the same factory: every kernel is found in the cache
    file_argv = ["precompile", "train", "--step", f"{Path(__file__)}:make_step", "--batch", "4", "--seq", "8",
                 "--target", "h200", "--cache-dir", str(cache)]
    assert nova_main(file_argv) == 0
    assert f"0 kernels compiled, {built} already cached, 0 failed" in capsys.readouterr().out


def test_python_form_fills_the_same_cache(tmp_path, capsys):
    cache = tmp_path / "cache"
    with torch.device("meta"):
        step, args = make_step(batch=2, seq=8)
    lines = []
    counts = nova.precompile(step, *args, target="h200", cache_dir=cache, log=lines.append)
    n = expected_gemms(2, 8)
    assert counts["compiled"] >= n and counts["cached"] == 0 and counts["failed"] == 0
    assert lines[-1].startswith(f"precompiled {n} GEMMs")
    assert nova_main(["precompile", "train", "--step", f"{__name__}:make_step", "--batch", "2", "--seq", "8",
                      "--target", "h200", "--cache-dir", str(cache)]) == 0
    assert f"0 kernels compiled, {counts['compiled']} already cached" in capsys.readouterr().out


def test_factory_may_name_its_models_and_optimizers():
    from nova.integrations.user_step import make_user_step
    step = make_user_step(make_step_naming_its_objects, batch=3)
    assert step.args[0].shape == (3, 16, 64) and step.args[0].device.type == "meta"
    assert len(step.models) == 1 and step.optimizers is None


@pytest.mark.parametrize("spec, extra, message", [
    ("no_colon_here", [], "must be MODULE:FACTORY"),
    ("nova_no_such_module_anywhere:make_step", [], "no module named 'nova_no_such_module_anywhere'"),
    ("nova_missing_dir/step.py:make_step", [], "no file 'nova_missing_dir/step.py'"),
    (f"{__name__}:make_stp", [], "has no attribute 'make_stp'"),
    (f"{__name__}:NOT_A_FACTORY", [], "is a int, not a callable factory"),
    (f"{__name__}:make_three", [], "returned a tuple of 3; expected (step_fn, example_args) or"),
    (f"{__name__}:make_uncallable", [], "returned a str as step_fn"),
    (f"{__name__}:make_batch_only", ["--seq", "8"], "takes no 'seq' parameter"),
])
def test_bad_step_spec_is_one_line(spec, extra, message, capsys, tmp_path):
    argv = ["precompile", "train", "--step", spec, "--target", "h200", "--cache-dir", str(tmp_path), *extra]
    assert nova_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nova: error: --step") and message in err[0], err


def test_step_and_model_are_exclusive(capsys, tmp_path):
    argv = ["precompile", "train", "tiny", "--step", f"{__name__}:make_step", "--target", "h200"]
    assert nova_main(argv) == 2
    assert "not both" in capsys.readouterr().err
    assert nova_main(["precompile", "gemm", "--step", f"{__name__}:make_step", "--target", "h200"]) == 2
    assert "'precompile train'" in capsys.readouterr().err


def test_python_form_takes_nova_target_and_refuses_a_non_function(tmp_path, monkeypatch):
    """``nova.precompile`` without ``target=`` builds for ``NOVA_TARGET`` (it built for the H200
    whatever the variable said, and accepted an unknown name), and a step that is not a function is
    one line, as ``nova.compile`` says it."""
    with torch.device("meta"):
        step, args = make_step(batch=2, seq=8)
    lines = []
    monkeypatch.setenv("NOVA_TARGET", "a100")
    nova.precompile(step, *args, cache_dir=tmp_path / "cache", log=lines.append)
    assert any("a100" in line for line in lines) and not any("h200" in line for line in lines), lines[-3:]
    monkeypatch.setenv("NOVA_TARGET", "v100")
    with pytest.raises(ValueError, match="v100"):
        nova.precompile(step, *args, cache_dir=tmp_path / "cache", log=lines.append)
    monkeypatch.delenv("NOVA_TARGET")
    with pytest.raises(TypeError, match=r"^nova.precompile takes a function \(the training step\), got int 42$"):
        nova.precompile(42, *args, target="h200")
