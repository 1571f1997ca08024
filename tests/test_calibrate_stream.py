"""The memory-bound families' calibration (``nova/hwmodel/calibration/h200.stream.json``) refits from
the committed per-launch measurements, and the families price with it."""
import json
from pathlib import Path

from nova.bench.calibrate_stream import calibrate, repriced
from nova.hwmodel import calibration, get_target

REPO = Path(__file__).resolve().parent.parent


def test_the_stored_constant_is_the_fit_of_its_results():
    stored = calibration.load("h200", "stream")
    results = {Path(p).name: json.loads((REPO / p).read_text()) for p in stored["source"]["results"]}
    fit = calibrate(results, stored["fixed"]["eta_before"], stored["fixed"]["t_launch_us"])
    assert fit["eta_dram"] == stored["constants"]["eta_dram"]
    assert fit["after"]["within_15pct"] == stored["after"]["within_15pct"] > stored["before"]["within_15pct"]
    assert all(c["within_15pct"] >= 0.6 for c in fit["leave_one_model_out"].values())


def test_the_memory_bound_families_use_it_and_the_gemms_do_not():
    gpu = get_target("h200")
    stream, linear = calibration.memory_constants(gpu, streaming=True), calibration.memory_constants(gpu)
    assert stream["eta_dram"] == calibration.load("h200", "stream")["constants"]["eta_dram"] < linear["eta_dram"]
    from nova.kernels.gemm.skinny import launch_constants as skinny
    from nova.kernels.pointwise.derive import launch_constants as pointwise
    from nova.kernels.rows.derive import memory_constants as rows
    assert pointwise(gpu) == rows(gpu) == stream and skinny(gpu) == linear


def test_repricing_scales_only_the_memory_time():
    row = {"predicted_us": 11.0, "measured_us": 0.0}
    assert repriced(row, 0.5, 1.0, 1.0) == 21.0 and repriced({"predicted_us": 0.5}, 0.5, 1.0, 1.0) == 1.0
