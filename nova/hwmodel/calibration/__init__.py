"""Efficiency constants fitted once per preset from device measurements (``bench/calibrate.py``).

The cost model (``nova/configurator/cost.py``) predicts

    time = max(t_tensor, t_smem, t_l2, t_dram) + t_fill + t_launch

from datasheet and [EST] figures.  A calibration holds at most three constants per preset, never
per shape, and scales the model's terms:

    eta_tc       achievable fraction of the modelled tensor-core (mma.sync) rate; divides t_tensor and
                 t_smem (both are issue-rate limits inside the SM)
    eta_dram     achievable fraction of the datasheet DRAM bandwidth; divides t_dram
    t_launch_us  per-launch overhead replacing ``launch_overhead_us`` (split-K launches twice: memset)

    time_cal = max(t_tensor/eta_tc, t_smem/eta_tc, t_l2, t_dram/eta_dram) + t_fill + launches*t_launch_us

``<preset>.json`` beside this file stores the constants with their provenance (results file,
device, date, fit error).  ``Config.calibrated_time_us`` (and ``nova-config explain``) report the
calibrated time next to the model's; schedule decisions never use it (a calibration reports, it
does not choose).
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
CONSTANTS = ("eta_tc", "eta_dram", "t_launch_us")


def path_for(preset: str) -> Path:
    return HERE / f"{preset}.json"


def load(preset: str) -> dict | None:
    """The stored calibration of ``preset`` (``{"constants": {...}, ...}``), or None."""
    p = path_for(preset)
    return json.loads(p.read_text()) if p.exists() else None


def calibrated_time_us(terms_us: dict, split_k: int, constants: dict) -> float:
    """The calibrated time from a ``Prediction.terms_us`` (microseconds)."""
    c = constants
    compute = max(terms_us["tensor-core"], terms_us["smem"]) / c["eta_tc"]
    memory = max(terms_us["l2"], terms_us["dram"] / c["eta_dram"])
    launches = 2 if split_k > 1 else 1
    return max(compute, memory) + terms_us["fill"] + launches * c["t_launch_us"]
