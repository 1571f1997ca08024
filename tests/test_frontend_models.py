"""The built-in models: sizes, deterministic init, and whole-step capture of the paper's GPTs on
the meta device (nothing allocated; the capture time is printed, not asserted)."""
import time

import pytest
import torch

from nova.frontend import capture
from nova.ir import OPS
from nova.models import make_train_step
from nova.models.gpt import GPT
from nova.models.llama import Llama


def test_parameter_counts():
    with torch.device("meta"):
        assert GPT("gpt42m").num_parameters() == 42_259_456      # tied head counted once
        assert GPT("gpt144m").num_parameters() == 145_739_520
        assert GPT("tiny").num_parameters() < 100_000 and Llama("tiny").num_parameters() < 100_000


@pytest.mark.parametrize("family", [GPT, Llama])
def test_init_is_deterministic_from_the_seed(family):
    a, b, c = family("tiny", seed=0), family("tiny", seed=0), family("tiny", seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert any(not torch.equal(x, z) for x, z in zip(a.parameters(), c.parameters()))


def test_models_run_and_train_in_eager():
    for model in (GPT("tiny"), Llama("tiny")):
        idx = torch.randint(0, model.config.vocab_size, (2, 8))
        assert model(idx).shape == (2, 8, model.config.vocab_size)
        loss = model(idx, idx)
        assert loss.ndim == 0 and abs(loss.item() - torch.log(torch.tensor(model.config.vocab_size)).item()) < 0.5
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", ["hf-gpt2-42m", "hf-gpt2-144m", "hf-llama-42m"])
def test_the_hugging_face_models_build_and_train_without_a_warning(name):
    """The built-in Hugging Face configs hold no token id outside the vocabulary and name their loss:
    building one and taking its loss prints nothing (transformers logs to stderr on its own)."""
    import subprocess
    import sys
    pytest.importorskip("transformers")
    code = (f"import torch; from nova.models.hf import HFCausalLM; m = HFCausalLM({name!r}); "
            "idx = torch.randint(0, m.config.vocab_size, (2, 8)); m(idx, idx).backward()")
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr


@pytest.mark.parametrize("name,batch,seq", [("gpt42m", 32, 512)])
def test_whole_step_capture_of_the_paper_models(name, batch, seq):
    with torch.device("meta"):
        model = GPT(name)
        idx = torch.zeros(batch, seq, dtype=torch.long)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    train_step = make_train_step(model, opt)
    t0 = time.perf_counter()
    captured = capture(train_step, (idx, idx))
    seconds = time.perf_counter() - t0
    g = captured.graph
    ops = g.op_counts()
    print(f"\n{name} B{batch}xT{seq}: capture {seconds:.2f} s (trace {captured.stats.trace_s:.2f}, lower "
          f"{captured.stats.lower_s:.2f}), {captured.stats.fx_nodes} ATen nodes -> {len(g.nodes)} IR nodes")
    assert set(ops) <= set(OPS) and "aten" not in ops
    n_params = len(list(model.parameters()))
    assert ops["adamw"] == n_params and ops["attention"] == model.config.n_layer
    logits = next(n for n in g.nodes if n.op == "log_softmax").outputs[0]
    assert logits.type.shape == (batch * seq, model.config.vocab_size)      # never allocated


def test_a_model_added_to_the_registry_and_removed_leaves_it_as_it_was():
    """``nova.models.MODELS`` is one dict: a test (or a user) that adds a model to it and to its
    family's configs, looks it up, and takes both out again leaves every lookup consistent."""
    import pytest
    from nova import models
    from nova.models import gpt
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(models.MODELS, "scratch", (gpt.GPT, gpt.CONFIGS["tiny"]))   # the registry first: built
        mp.setitem(gpt.CONFIGS, "scratch", gpt.CONFIGS["tiny"])               # before the config is added
        assert models.config("scratch") is gpt.CONFIGS["tiny"] and models.build("scratch", seed=0) is not None
    assert "scratch" not in models.MODELS
    assert [models.describe(name) for name in models.MODELS]
