"""``nova-config explain train --gpus N``: the data-parallel step's communication schedule and its
predicted scaling, on the meta device (no GPU, no process group)."""
import pytest

from nova.compiler.explain import explain_train
from nova.hwmodel import get_target
from nova.hwmodel.interconnect import collective_time_us, gradient_bucket_size


@pytest.fixture(scope="module")
def report():
    return explain_train("tiny", 2, 16, "h200", "adamw", gpus=4)


def test_buckets_carry_every_gradient_once(report):
    comm = report["communication"]
    grad_bytes = 4 * report["model"]["parameters"]                  # f32 gradients
    assert sum(b["bytes"] for b in comm["buckets"]) == grad_bytes
    assert report["captured_ops"]["all_reduce"] == len(comm["buckets"])
    size = gradient_bucket_size(get_target("h200"), 4)
    assert comm["bucket_bytes"] == size.bytes
    assert all(b["bytes"] >= size.bytes for b in comm["buckets"][:-1])
    for b in comm["buckets"]:
        assert b["time_us"] == pytest.approx(collective_time_us("all_reduce", b["bytes"], 4, get_target("h200")), abs=0.01)


def test_schedule_is_consistent(report):
    comm, scale = report["communication"], report["scaling"]
    starts = [b["start_us"] for b in comm["buckets"]]
    assert starts == sorted(starts)
    for b, after in zip(comm["buckets"], comm["buckets"][1:]):
        assert after["start_us"] >= b["end_us"] - 0.01                  # one communication stream
    assert all(b["start_us"] >= b["ready_us"] for b in comm["buckets"])
    assert comm["step_us"] >= max(comm["compute_us"], comm["buckets"][-1]["end_us"]) - 0.01
    assert comm["exposed_us"] == pytest.approx(sum(b["exposed_us"] for b in comm["buckets"]), abs=0.05)
    assert 0 < scale["efficiency"] <= 1
    assert scale["tokens_per_s"] == round(4 * 2 * 16 / (comm["step_us"] * 1e-6))


def test_cli_prints_the_schedule(capsys):
    from nova.cli.config import main
    assert main(["explain", "train", "tiny", "--batch", "2", "--seq", "16", "--gpus", "2"]) == 0
    out = capsys.readouterr().out
    assert "communication schedule" in out and "Scaling: 2 GPUs" in out and "bucket size" in out
    assert main(["explain", "train", "tiny", "--batch", "2", "--gpus", "0"]) == 2
