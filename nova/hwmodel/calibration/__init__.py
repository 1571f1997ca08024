"""Efficiency constants per preset and instruction family, from device measurements (``nova.bench.calibrate``).

The cost models (``nova/kernels/gemm/cost.py``, ``hopper.py``) predict

    time = max(t_tensor, t_smem, t_l2, t_dram, t_ring) + t_fill + t_epilogue + ... + t_launch

from datasheet, [EST] and [MEASURED] figures at the preset's clock.  A calibration holds a few
constants, never per shape, and scales the model's terms:

    eta_tc       achievable fraction of the modelled tensor-core rate; divides t_tensor and t_smem
                 (both are issue-rate limits inside the SM)
    eta_tc_pingpong  (wgmma, optional) the same for ping-pong kernels, fitted on their own
                 measurements (``constants_for``): their modelled K loop (smem cap and
                 ``hopper.PINGPONG_KLOOP_TENSOR``, a factor the consumers step needs relative to the
                 cooperative one) is absolute-pessimistic, so it exceeds 1
    eta_dram     achievable fraction of the datasheet DRAM bandwidth (a linear stream); divides t_prep, and
                 t_dram where the calibration has no eta_dram_tiles
    eta_dram_tiles  (wgmma, optional, fitted on held-out draws) the same for a GEMM's operand tiles streaming
                 from DRAM, where it differs from the linear stream's: divides t_dram (the stored H100 and
                 H200 calibrations have none since the model prices the loads' latency apart: t_dram_wait,
                 ``hopper.dram_wait_time``, added unscaled)
    eta_split_workspace  (wgmma, optional) the fraction of its modelled rate a K slice keeps when it
                 stores its FP32 partial tile through a workspace (split-K reduced by a second kernel):
                 divides the K loop's bound, max(compute, L2, DRAM + wait, ring); fitted on held-out draws
                 (``fit_heldout``), the cause not modelled
    t_launch_us  per-launch cost (split-K adds a memset launch, an operand prep its pass)
    f_sustained_mhz, f_max_mhz, f_model_mhz   (optional) the power-limited SM clock, below

    time_cal = max(t_tensor*s/eta_tc, t_smem*s/eta_tc, t_l2*s, t_dram/eta_dram_tiles + t_dram_wait, t_ring) / eta_split
               + t_epilogue*s + t_fill + t_split + t_prep/eta_dram + launches*t_launch_us

(launches: ``Schedule.launches`` where the caller has the schedule: the GEMM, split-K's memset or
reduction, each operand-prep pass; else ``launches_of``.)

with s = 1, or with the power constants s = f_model / f and f = min(f_max, f_sustained *
duty^(-1/3)) (``clock_and_time``): at the power cap a kernel that keeps the tensor cores busier runs
at a lower clock.  Constants measured elsewhere are held while the rest are fitted (the JSON's
``fixed``).

``<preset>.json`` (mma.sync) and ``<preset>.<family>.json`` beside this file store the constants with
their provenance (results file, device, date, fit error, held constants).  They are self-contained
package data: everything applied at run time is in them; ``source.results`` names the file of the
Nova repository they were fitted on (``bench/results/...``), provenance that nothing reads at run
time (``tests/test_calibrate.py`` refits from it).  ``Config.calibrated_time_us``,
``Config.calibrated_clock_mhz`` (and ``nova-config explain``) report the calibrated time and clock
next to the model's; the derivation of a kernel never uses them (a calibration reports, it does not
choose), except to weigh two instruction families against each other, whose models meet on one scale
only through their calibrations (an eager call's kernel, ``nova.kernels.gemm.eager``).

``<preset>.wgmma.json`` may also hold ``ceiling``: the measured power-limited tensor ceiling per input
dtype (``nova.bench.tensor_ceiling``: the fastest wgmma-only kernel on random data, sustained at the
power cap; ``source`` its results file), which ``measured_ceiling`` returns and ``nova-config explain``
sets each prediction against; ``tests/test_tensor_ceiling.py`` re-derives it from the committed results.

``<preset>.stream.json`` (family ``stream``) holds ``eta_dram`` and ``t_launch_us`` of the memory-bound
kernel families (``memory_constants(gpu, streaming=True)``), fitted by ``nova.bench.calibrate_stream``
on the per-launch device times of training steps (``source.results``); ``tests/test_calibrate_stream.py``
refits it.
``<preset>.aten.json`` (family ``aten``) calibrates the kernels ATen runs for a compiled step's
non-GEMM groups instead (``nova.bench.calibrate_aten`` on a CUPTI profile of a training step,
``source.profile``): ``t_fixed_us`` per kernel and ``eta`` per kernel kind, applied by
``nova.compiler.cost.aten_kinds_time`` (``nova-config explain train``); ``tests/test_calibrate_aten.py``
refits it from the committed profile.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
CONSTANTS = ("eta_tc", "eta_dram", "t_launch_us")


def path_for(preset: str, family: str = "mma.sync") -> Path:
    """``h200.json`` for the mma.sync model, ``h200.wgmma.json`` for the Hopper model."""
    return HERE / (f"{preset}.json" if family == "mma.sync" else f"{preset}.{family}.json")


@lru_cache(maxsize=None)
def load(preset: str, family: str = "mma.sync") -> dict | None:
    """The stored calibration of ``preset``'s ``family`` model (``{"constants": {...}, ...}``), or None.
    Read once per process (the files ship with the package); treat the result as read-only."""
    p = path_for(preset, family)
    return json.loads(p.read_text()) if p.exists() else None


def store(preset: str, family: str, doc: dict) -> Path:
    """Write a fitted calibration (its constants with their provenance) beside the others, dated
    today; the path written.  The process's cached ``load`` of it is dropped."""
    import datetime
    path = path_for(preset, family)
    path.write_text(json.dumps({**doc, "fitted": datetime.date.today().isoformat()}, indent=1) + "\n")
    load.cache_clear()
    return path


def measured_ceiling(preset: str, dtype: str) -> dict | None:
    """The measured power-limited tensor ceiling of ``preset`` for ``dtype`` (``{"tflops", "sm_mhz",
    "power_w", "probe", "pipe_use"}``), or None where none was measured (other presets, FP16)."""
    cal = load(preset, "wgmma")
    return None if cal is None else cal.get("ceiling", {}).get("per_dtype", {}).get(dtype)


def constants_for(constants: dict, schedule) -> dict:
    """The constants to apply to the kernel of a tile ``schedule`` (``Schedule``): ``eta_tc_pingpong`` in
    place of ``eta_tc`` for a ping-pong kernel where the calibration has it (a ping-pong row fitted with
    the cooperative eta_tc was ~39% pessimistic on the H200, bench/results/h200-2026-12-01/d/call8);
    ``eta_split`` = ``eta_split_workspace`` for split-K through a workspace where it has that (1 otherwise)."""
    out = dict(constants)
    if schedule.pingpong and "eta_tc_pingpong" in constants:
        out["eta_tc"] = constants["eta_tc_pingpong"]
    if schedule.split_workspace and "eta_split_workspace" in constants:
        out["eta_split"] = constants["eta_split_workspace"]
    return out


def launches_of(terms_us: dict, split_k: int) -> int:
    """Kernel launches per call: split-K adds the output memset, a Hopper operand prep adds its pass."""
    return 1 + (split_k > 1) + (terms_us.get("prep", 0) > 0)


CLOCK_EXPONENT = 3    # dynamic power ~ C V^2 f with V roughly proportional to f in the DVFS range


def calibrated_time_us(terms_us: dict, split_k, constants: dict, launches=None):
    """The calibrated time from a ``Prediction.terms_us`` (microseconds), for either model:
    mma.sync terms (tensor-core, smem, l2, dram, fill) or Hopper terms (mma, l2, dram, ring, fill,
    epilogue, prep, split).  Works elementwise on numpy arrays (``nova.bench.calibrate`` fits on them).

    With the power constants (``f_sustained_mhz``, ``f_max_mhz``, ``f_model_mhz``) the SM clock is
    predicted too (``clock_and_time``)."""
    return clock_and_time(terms_us, split_k, constants, launches)[1]


def predicted_clock_mhz(terms_us: dict, split_k, constants: dict, launches=None):
    """The SM clock the calibrated model settles on; None without the power constants."""
    return clock_and_time(terms_us, split_k, constants, launches)[0]


def clock_and_time(terms_us: dict, split_k, constants: dict, launches=None):
    """(SM clock in MHz or None, calibrated time in us).

    time = max(compute, L2, DRAM / eta_dram_tiles + DRAM wait, ring) / eta_split + epilogue + arith + fill + split
           + prep / eta_dram + launches * t_launch, with compute = tensor (or smem) time / eta_tc (the Hopper model's ring
           latency bound and the DRAM wait, ``hopper.dram_wait_time``, are in nanoseconds of memory latency: not scaled).
    Power-limited clock: the terms that run on the SM clock (tensor, L2, epilogue stores and arithmetic) scale by
    f_model / f, and f = min(f_max, f_sustained * duty^(-1/3)): duty is the fraction of the call the
    tensor cores are busy (compute / time), f_sustained the clock the GPU holds at its power cap
    with them always busy (at a fixed power budget, dynamic power ~ C V^2 f ~ f^3).  Solved by
    fixed-point iteration from f_max.  ``launches``: the schedule's count (``Schedule.launches``), else
    ``launches_of``."""
    c = constants
    at = _at_scale(terms_us, split_k, constants, launches)
    if "f_sustained_mhz" not in c:
        return None, at(1.0)[1]
    f = np.full(np.shape(at(1.0)[1]), float(c["f_max_mhz"]))
    for _ in range(40):
        compute, time = at(c["f_model_mhz"] / f)
        duty = np.clip(compute / time, 1e-6, 1.0)
        f = np.minimum(c["f_max_mhz"], c["f_sustained_mhz"] * duty ** (-1 / CLOCK_EXPONENT))
    return f, at(c["f_model_mhz"] / f)[1]


def _at_scale(terms_us: dict, split_k, constants: dict, launches=None):
    """scale -> (compute, time): the calibrated model with the SM-clock terms scaled by ``scale``
    (f_model / f); ``clock_and_time``'s formula."""
    c, t = constants, terms_us
    compute0 = np.maximum(t.get("tensor-core", 0) + t.get("mma", 0), t.get("smem", 0)) / c["eta_tc"]  # one is 0
    dram = np.maximum(t.get("dram", 0) / c.get("eta_dram_tiles", c["eta_dram"]) + t.get("dram_wait", 0),
                      t.get("ring", 0))
    fixed = (t.get("fill", 0) + t.get("split", 0) + t.get("prep", 0) / c["eta_dram"]
             + (launches_of(t, split_k) if launches is None else launches) * c["t_launch_us"])

    def at(scale):
        compute = compute0 * scale
        time = (np.maximum(np.maximum(compute, t.get("l2", 0) * scale), dram) / c.get("eta_split", 1.0)
                + (t.get("epilogue", 0) + t.get("arith", 0)) * scale + fixed)
        return compute, time
    return at


def at_clock(terms_us: dict, split_k, constants: dict, mhz, launches=None):
    """(tensor-core time, calibrated time) in us with the SM clock held at ``mhz`` instead of the
    power-limited one.  Needs ``f_model_mhz`` (the clock the model's peak figures assume)."""
    return _at_scale(terms_us, split_k, constants, launches)(constants["f_model_mhz"] / mhz)


def time_at_clock(terms_us: dict, split_k, constants: dict, mhz, launches=None):
    """The calibrated time (us) at a given clock (``at_clock``): a measured one (a held-out row's
    ``nova_graph_sm_mhz``, the kernel model checked apart from the clock model) or a step's
    (``nova.compiler.step_clock``)."""
    return at_clock(terms_us, split_k, constants, mhz, launches)[1]


def memory_constants(gpu, streaming: bool = False) -> dict:
    """``eta_dram`` and ``t_launch_us`` of a memory-bound kernel.  ``streaming`` (the memory-bound
    families: pointwise, rows, embedding, multi-tensor): their own calibration where stored
    (``<preset>.stream.json``, fitted by ``nova.bench.calibrate_stream`` to their device times in
    training steps, ``nova.bench.step_kernels``); otherwise, and for the others (attention's memory
    terms, the skinny GEMM), the target's Hopper (else mma.sync) GEMM calibration, whose eta_dram is
    ``nova.bench.l2_probe``'s linear stream and t_launch the CUDA-graph gap between kernels; else the
    datasheet bandwidth (eta 1) and the preset's launch overhead ([EST])."""
    for family in (("stream",) if streaming else ()) + ("wgmma", "mma.sync"):
        stored = load(gpu.name, family)
        if stored:
            c = stored["constants"]
            return {"eta_dram": c["eta_dram"], "t_launch_us": c["t_launch_us"],
                    "source": f"calibration {path_for(gpu.name, family).name}"}
    return {"eta_dram": 1.0, "t_launch_us": gpu.launch_overhead_us, "source": "datasheet, preset launch overhead"}
