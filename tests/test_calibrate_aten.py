"""The calibration of ATen's kernels (``nova.bench.calibrate_aten``, ``h200.aten.json``): refitting
on the committed profile reproduces it, explain applies it on the H200 and not on a target without
one, and with it ``explain train`` predicts the measured GPT-42M step; the kernel kinds and bytes
of ``nova.compiler.aten_launches`` on small meta programs."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from nova.bench import calibrate_aten                      # noqa: E402
from nova.compiler import cost                             # noqa: E402
from nova.compiler.aten_launches import counting_mode, multi_tensor_apply_launches   # noqa: E402
from nova.hwmodel import get_target                        # noqa: E402
from nova.hwmodel.calibration import load                  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STORED = load("h200", "aten")
PROFILE = ROOT / STORED["source"]["profile"]      # provenance: the committed profile it was fitted on
# The measured GPT-42M b32 step: 31.58 ms of GPU time per step (the sum of the kernels' device times
# in PROFILE, nova.bench.train_profile on the H200, 2026-12-01, single-TF32 attention scores).  Today's
# default 3xtf32 scores cost ~1 ms more (bench/results/h200-2026-12-01/a/train-gpt42m: 32.83 vs 31.78 ms
# per step), which the attention configurator prices; the band is +-10% of the profile's time.
MEASURED_MS = 31.5788
BAND = 0.10
# the newest profile of Nova's GPT-42M b32 step (nova.bench.train_profile on the H200, every Nova kernel family)
LATEST_PROFILE = ROOT / "bench/results/h200-2026-12-04/run13/profile-gpt42m/profile-nova.json"


@pytest.fixture
def aten_plan():
    """The calibration's profile ran the step with its norms, losses, reductions, pointwise groups and
    optimizer updates on ATen: a test of how ATen groups are priced plans it so (no rows kernels,
    ``nova/passes/rows.py``; ``NOVA_POINTWISE=none``)."""
    import nova.passes.fusion
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nova.passes.fusion, "select_rows", lambda group, layouts: "")
        mp.setenv("NOVA_POINTWISE", "none")
        yield


@pytest.fixture(scope="module")
def gpt42m():
    """GPT-42M's training step at batch 32 captured and planned for the H200 once (meta device)."""
    from nova.compiler.explain import training_step
    from nova.frontend import capture
    from nova.passes import pipeline
    fn, args, model, opt, tokens = training_step("gpt42m", 32)
    captured = capture(fn, args, models=[model], optimizers=[opt], name="train_gpt42m")
    return captured.graph, pipeline(captured.graph, "h200"), tokens


def test_stored_aten_calibration_is_reproducible():
    """Refitting the stored per-kind data (each kind's measured time from the profile the calibration
    names, its kernels and bytes from the meta dispatch of the plan that profile ran) gives the stored
    constants (no hand-typed numbers).  The profiled plan ran every memory-bound group on ATen; today's
    plans run most of them on Nova's kernels, so the constants price what is left on ATen."""
    assert PROFILE.exists()
    t_fixed = STORED["constants"]["t_fixed_us"]
    measured = {k: {"us": d["measured_us"], "kernels": d["profile_kernels"], "families": d["families"]}
                for k, d in STORED["data"].items()}
    dispatched = {k: (d["kernels"], d["bytes"]) for k, d in STORED["data"].items()}
    record = calibrate_aten.fit(measured, dispatched, t_fixed, STORED["source"]["dram_bw"])
    for kind, d in STORED["data"].items():
        assert abs(d["residual_us"]) < 1e-3
        assert record["data"][kind]["fitted_us"] == pytest.approx(d["measured_us"], abs=1e-2), kind
    assert record["constants"]["eta"] == pytest.approx(STORED["constants"]["eta"], rel=1e-4)   # data rounded to ns
    assert set(record["constants"]["eta"]) == set(STORED["constants"]["eta"])


def test_dispatch_counts_the_kernels_the_profile_ran():
    """The meta dispatch's kernel count of every kind is within 1% of the profile's (the kinds map
    the profile's families right, and the step is the profiled one)."""
    for kind, d in STORED["data"].items():
        assert d["kernels"] == pytest.approx(d["profile_kernels"], rel=0.01), kind


def test_profile_families_are_all_placed():
    with pytest.raises(ValueError, match="neither an ATen kind"):
        calibrate_aten.family_kind("some_new_kernel")
    assert calibrate_aten.family_kind("nova_gemm") is None and calibrate_aten.family_kind("memcpy128") == "memcpy"


def test_explain_train_predicts_the_measured_gpt42m_step(gpt42m):
    """explain's whole-step prediction for GPT-42M b32 on the H200 lands within +-10% of the GPU time
    of the newest committed profile of that step (a check of the models against a measurement, not a
    timed test); what stays on ATen is priced by the calibration."""
    from nova.compiler.explain import explain_planned
    graph, planned, tokens = gpt42m
    report = explain_planned(graph, planned, "h200", tokens)
    p = report["prediction"]
    measured_ms = json.loads(LATEST_PROFILE.read_text())["gpu_ms_per_step"]
    assert abs(p["step_ms"] / measured_ms - 1) <= BAND, (p["step_ms"], measured_ms)
    assert p["aten"]["model"] == "calibrated" and p["aten"]["calibration"]["file"] == "h200.aten.json"


def test_targets_without_a_calibration_keep_the_memory_bound_model(aten_plan):
    """On the H100 (no ATen calibration) the ATen groups keep the memory-bound and cross-entropy
    closed forms; on the H200 every group whose launch ran on meta is priced by kind."""
    from nova.compiler.explain import aten_dispatch, explain_planned, kernel_reports, plan_training_step
    assert cost.aten_calibration(get_target("h100")) is None and cost.aten_calibration(get_target("h200"))
    planned, tokens = plan_training_step("tiny", 2, target="h100")
    dispatched = aten_dispatch(planned)
    h100 = kernel_reports(planned, get_target("h100"))
    h200 = kernel_reports(planned, get_target("h200"))
    aten100 = [k for k in h100 if k.index in dispatched and k.model != "fp32 attention"]
    aten200 = [k for k in h200 if k.index in dispatched and k.model != "fp32 attention"]
    assert aten100 and {k.model for k in aten100} <= {"memory-bound", "cross-entropy closed form"}
    assert all(k.aten_kinds is None for k in aten100)
    assert {k.model for k in aten200} == {"aten kinds (calibrated)"} and all(k.aten_kinds for k in aten200)
    assert "cross-entropy closed form" in {k.model for k in aten100}
    assert explain_planned(planned.graph, planned, "h100", tokens)["prediction"]["aten"]["calibration"] is None


def test_a_kind_the_calibration_lacks_is_priced_memory_bound():
    h200 = get_target("h200")
    kt = cost.aten_kinds_time({"other": (2, 10**8), "elementwise": (3, 10**8)}, h200, STORED)
    c = STORED["constants"]
    assert kt.terms["other"]["calibrated"] is False and "uncalibrated kind" in kt.formula
    assert kt.terms["elementwise"]["time_us"] == pytest.approx(3 * c["t_fixed_us"] + 1e8 / (h200.dram_bw * c["eta"]["elementwise"]) * 1e6, rel=1e-3)
    assert kt.time_us == pytest.approx(sum(t["time_us"] for t in kt.terms.values()), abs=0.01)


# ------------------------------------------------------------------ kinds and bytes on meta
def _count(fn):
    mode = counting_mode()
    with torch.no_grad(), mode:
        fn()
    return mode.dispatched


def _meta(*shape):
    return torch.empty(shape, device="meta")


def test_elementwise_reads_and_writes_each_tensor_once_and_views_launch_nothing():
    x, y, o = _meta(1024, 256), _meta(256), _meta(1024, 256)
    d = _count(lambda: (torch.add(x, y, out=o), x.t(), x.view(-1)))
    assert d.kinds == {"elementwise": [1, 2 * 1024 * 256 * 4 + 256 * 4]} and d.calls == 1
    d = _count(lambda: x.mul_(2.0))                       # in place: read and written
    assert d.kinds == {"elementwise": [1, 2 * 1024 * 256 * 4]}
    d = _count(lambda: x.zero_())                         # a fill only writes
    assert d.kinds == {"elementwise": [1, 1024 * 256 * 4]}


def test_layer_norm_backward_is_two_kernels_and_out_wrappers_copy_their_results():
    x, w, b = _meta(64, 512), _meta(512), _meta(512)
    outs = (_meta(64, 512), _meta(64, 1), _meta(64, 1))
    d = _count(lambda: torch.ops.aten.native_layer_norm.out(x, [512], w, b, 1e-5, out0=outs[0], out1=outs[1],
                                                             out2=outs[2]))
    assert d.kinds["layer_norm"][0] == 1 and d.kinds["memcpy"] == [3, 2 * (64 * 512 + 64 + 64) * 4]
    dx, dw, db = _meta(64, 512), _meta(512), _meta(512)
    d = _count(lambda: torch.ops.aten.native_layer_norm_backward.out(
        x, x, [512], outs[1], outs[2], w, b, [True, True, True], out0=dx, out1=dw, out2=db))
    assert d.kinds["layer_norm"][0] == 1 and d.kinds["layer_norm_weight_grad"][0] == 1
    assert d.kinds["layer_norm_weight_grad"][1] == (2 * 64 * 512 + 2 * 64 + 2 * 512) * 4


def test_foreach_fast_path_by_multi_tensor_apply_and_slow_path_per_tensor():
    params = [_meta(4096, 4096)] + [_meta(512) for _ in range(70)]
    assert multi_tensor_apply_launches([params]) == 2                     # 256 blocks, then 70 small ones
    assert multi_tensor_apply_launches([params, params]) == 2             # 64 tensors a launch at depth 2
    d = _count(lambda: torch._foreach_mul_(params, 0.5))
    assert d.kinds["foreach"][0] == 2
    scalars = [torch.empty((), device="meta") for _ in params]
    d = _count(lambda: torch._foreach_div_(params, scalars))              # shapes differ: one kernel each
    assert d.kinds == {"elementwise": [len(params), d.kinds["elementwise"][1]]}


def test_gathers_move_what_they_index_not_the_whole_source():
    logits, idx, o = _meta(4096, 32768), torch.empty((4096, 1), dtype=torch.long, device="meta"), _meta(4096, 1)
    d = _count(lambda: torch.gather(logits, 1, idx, out=o))
    assert d.kinds == {"elementwise": [1, 2 * 4096 * 4 + 4096 * 8]}
    table, rows, out = _meta(32768, 512), torch.empty(1024, dtype=torch.long, device="meta"), _meta(1024, 512)
    d = _count(lambda: torch.index_select(table, 0, rows, out=out))
    assert d.kinds == {"gather": [1, 2 * 1024 * 512 * 4 + 1024 * 8]}
