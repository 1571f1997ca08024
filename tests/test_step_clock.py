"""The step clock (``nova/compiler/step_clock.py``): one SM clock for a whole step, from its tensor-core
duty, with the step's GEMMs priced at it; its constant refits from the committed measurements."""
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from nova.compiler import step_clock
from nova.hwmodel import calibration, get_target

REPO = Path(__file__).resolve().parent.parent
H200 = get_target("h200")


def _gemm(tensor_us: float, dram_us: float = 0.0) -> step_clock.PricedGemm:
    constants = calibration.load("h200", "wgmma")["constants"]
    return step_clock.PricedGemm({"mma": tensor_us, "dram": dram_us}, 1, 1, constants)


def test_the_settled_clock_is_a_fixed_point_of_the_model():
    gemms = [_gemm(300.0), _gemm(120.0, 40.0)]
    clock = step_clock.settle(gemms, attention_tensor_us=50.0, other_us=600.0, target=H200)
    duty, _ = step_clock.duty_at(clock.mhz, gemms, 50.0, 600.0)
    assert clock.duty == pytest.approx(duty, rel=1e-6)
    expected = min(clock.max_mhz, clock.sustained_mhz * duty ** (-1 / 3))
    assert clock.mhz == pytest.approx(expected, rel=1e-6)


@settings(max_examples=30, deadline=None)
@given(tensor=st.floats(10.0, 5000.0), other=st.floats(10.0, 5000.0), more=st.floats(1.01, 4.0))
def test_more_tensor_work_in_the_same_step_lowers_the_clock(tensor, other, more):
    slow = step_clock.settle([_gemm(tensor * more)], 0.0, other, H200)
    fast = step_clock.settle([_gemm(tensor)], 0.0, other, H200)
    assert slow.duty >= fast.duty - 1e-9 and slow.mhz <= fast.mhz + 1e-6
    assert slow.sustained_mhz <= slow.mhz <= slow.max_mhz


def test_no_step_calibration_means_no_step_clock():
    rtx = get_target("rtx3060")
    assert step_clock.step_constants(rtx) is None
    assert step_clock.settle([_gemm(100.0)], 0.0, 100.0, rtx) is None


def test_the_stored_constant_is_the_fit_of_its_rows():
    from nova.bench.calibrate_step_clock import fit, measured, Row
    stored = calibration.load("h200", "step")
    rows = stored["rows"]
    for r in rows:          # each row's clock is its results file's, its constant f * duty^(1/3)
        assert measured(Row(r["results"], r["policy"]))["mhz"] == r["measured_mhz"]
        assert r["sustained_mhz"] == pytest.approx(r["measured_mhz"] * r["duty_at_measured"] ** (1 / 3), abs=0.2)
    assert stored["constants"]["f_step_sustained_mhz"] == pytest.approx(fit(rows), abs=0.1)
    assert stored["max_clock_error"] < 0.06


def test_a_stored_duty_is_what_planning_the_step_gives_today():
    """The first row (GPT-42M) re-planned: its duty at the measured clock within 2% of the stored one
    (a change to the kernel models moves it: refit with ``python3 -m nova.bench.calibrate_step_clock --write``)."""
    from nova.bench.calibrate_step_clock import ROWS, calibrate
    first = calibrate(ROWS[:1])["rows"][0]
    stored = calibration.load("h200", "step")["rows"][0]
    assert first["results"] == stored["results"]
    assert first["duty_at_measured"] == pytest.approx(stored["duty_at_measured"], rel=0.02)


def test_explain_prices_the_step_gemms_at_the_step_clock():
    from nova.compiler.explain import explain_train
    report = explain_train("tiny", 4, target="h200")
    clock = report["prediction"]["sm_clock"]
    assert clock is not None and clock["sustained_mhz"] <= clock["mhz"] <= clock["max_mhz"]
    gemms = [k for k in report["kernels"] if k["model"] == "gemm configurator (calibrated)"]
    assert gemms and all("step's clock" in k["formula"] for k in gemms)
    # the step's clock is above the GEMMs' own back-to-back clocks here: each is priced faster
    assert all(k["predicted_us"] <= k["schedule"]["own_clock_us"] + 1e-6 for k in gemms)
    assert math.isclose(report["prediction"]["step_ms"] * 1e3, sum(k["predicted_us"] for k in report["kernels"]),
                        rel_tol=1e-3)
    json.dumps(report)
