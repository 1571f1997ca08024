"""The compiled-step cache (``nova.compiler.plan_cache``): ``nova.compile(..., backend="executor")``
on CPU stores ``pipeline``'s plan by the captured graph's structural hash; a second compile of the
same step (in this process or another one) loads it instead of running the passes."""
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from nova.models import make_train_step  # noqa: E402  (needs torch)

REPO = Path(__file__).resolve().parents[1]


def _run(batch=2, steps=2):
    """A fresh tiny GPT + AdamW compiled with the executor; (step, losses, final parameters)."""
    import nova
    from nova.models.gpt import GPT
    model = GPT("tiny", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    train_step = make_train_step(model, opt)
    step = nova.compile(train_step, backend="executor")
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, vocab, (batch, 16), generator=gen)
        targets = torch.randint(0, vocab, (batch, 16), generator=gen)
        losses.append(float(step(idx, targets)))
    return step, losses, [p.detach().clone() for p in model.parameters()]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NOVA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NOVA_PLAN_CACHE", raising=False)
    return tmp_path


def _plans(root):
    return sorted((root / "plans").glob("*/*.plan"))


def test_planned_pickles_and_round_trips():
    from nova.compiler.explain import training_step
    from nova.frontend import capture
    from nova.ir.hashing import structural_hash
    from nova.passes import pipeline
    fn, args, model, opt, _ = training_step("tiny", 2, 8)
    planned = pipeline(capture(fn, args, models=[model], optimizers=[opt]).graph)
    back = pickle.loads(pickle.dumps(planned, protocol=pickle.HIGHEST_PROTOCOL))
    assert structural_hash(back.graph) == structural_hash(planned.graph)
    assert [g.kind for g in back.groups] == [g.kind for g in planned.groups]
    assert back.memory.arena_bytes == planned.memory.arena_bytes
    # the memory plan and the groups refer to the very values of the loaded graph
    values = {v for n in back.graph.nodes for v in n.outputs} | {i.value for i in back.graph.inputs}
    assert set(back.memory.values) <= values
    assert all(v in values for g in back.groups for v in g.outputs)


def test_second_compile_loads_the_plan_and_gives_identical_results(cache_dir):
    first, losses1, params1 = _run()
    assert first.stats.plan_cache == "miss" and len(_plans(cache_dir)) == 1
    second, losses2, params2 = _run()
    assert second.stats.plan_cache == "hit"
    assert second.stats.pipeline_s >= 0 and second.stats.build_s > 0
    assert losses1 == losses2
    assert all(torch.equal(a, b) for a, b in zip(params1, params2))
    # positions line up with the captured graph
    planned_graph, captured = second._last.engine.graph, second.graph
    assert [(str(i.value.type), i.role) for i in planned_graph.inputs] == \
           [(str(i.value.type), i.role) for i in captured.inputs]
    assert [(o.role, o.updates) for o in planned_graph.outputs] == [(o.role, o.updates) for o in captured.outputs]


def test_another_batch_size_misses(cache_dir):
    _run(batch=2, steps=1)
    step, _, _ = _run(batch=3, steps=1)
    assert step.stats.plan_cache == "miss" and len(_plans(cache_dir)) == 2


def test_a_corrupt_entry_warns_and_is_rebuilt(cache_dir):
    from nova.compiler.plan_cache import PlanCacheWarning
    _, losses1, _ = _run(steps=1)
    [path] = _plans(cache_dir)
    data = bytearray(path.read_bytes())
    data[-100:] = b"x" * 100
    path.write_bytes(bytes(data))
    with pytest.warns(PlanCacheWarning, match="checksum"):
        step, losses2, _ = _run(steps=1)
    assert step.stats.plan_cache == "miss" and losses1 == losses2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step, _, _ = _run(steps=1)          # rebuilt and stored again
    assert step.stats.plan_cache == "hit"
    path.write_bytes(b"garbage")
    with pytest.warns(PlanCacheWarning, match="not a Nova plan file"):
        step, _, _ = _run(steps=1)
    assert step.stats.plan_cache == "miss"


def test_nova_plan_cache_0_turns_it_off(cache_dir, monkeypatch):
    monkeypatch.setenv("NOVA_PLAN_CACHE", "0")
    step, _, _ = _run(steps=1)
    assert step.stats.plan_cache == "off" and not _plans(cache_dir)


def test_a_second_process_loads_the_plan(cache_dir):
    _, losses, _ = _run()
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_compile_plan_cache import _run
        step, losses, _ = _run()
        print(step.stats.plan_cache, repr(losses))
    """)
    env = dict(os.environ, NOVA_CACHE_DIR=str(cache_dir), PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    status, rest = r.stdout.strip().splitlines()[-1].split(" ", 1)
    assert status == "hit" and eval(rest) == losses


def test_explain_reports_the_whole_program(cache_dir):
    step, _, _ = _run(steps=1)
    text = step.explain()
    assert "on h200" in text and "memory plan" in text and "Prediction" in text and "matmul" in text
    report = step.explain(json=True)
    assert report["target"] == "h200" and report["kernels"] and report["prediction"]["step_ms"] > 0
    assert report["prediction"]["tokens_per_step"] == 2 * 16
    assert step.stats.plan_cache == "miss"             # the engine's, not explain's
    assert step.explain(target="a100", json=True)["target"] == "a100"


def test_the_code_fingerprint_covers_the_hardware_model(monkeypatch, tmp_path):
    """A target's figures decide plans (the offload's link and its toll, the step clock the memory
    policy prices with): an edited figure file changes the fingerprint, so no plan made before is reused."""
    from pathlib import Path
    import shutil
    from nova.compiler import plan_cache
    package = Path(plan_cache.__file__).resolve().parents[1]
    copy = tmp_path / "nova"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    fake_module = copy / "compiler" / "plan_cache.py"
    monkeypatch.setattr(plan_cache, "__file__", str(fake_module))
    try:
        plan_cache.code_fingerprint.cache_clear()
        before = plan_cache.code_fingerprint()
        toml = copy / "hwmodel" / "gpus.toml"
        toml.write_text(toml.read_text() + "\n# an edited figure\n")
        plan_cache.code_fingerprint.cache_clear()
        assert plan_cache.code_fingerprint() != before
    finally:
        plan_cache.code_fingerprint.cache_clear()
