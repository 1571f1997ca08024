"""The tensor-ceiling probe (nova.bench.tensor_ceiling, the measured power-limited ceiling): its
kernels lower and assemble clean (no spills, no serialised wgmma) in the structure they claim, its FLOP
count matches the wgmma instructions it issues, its timing closes every chunk, and its report takes the
ceiling from the fastest probe on random data."""
import re

import pytest

from nova.bench import tensor_ceiling as tc
from nova.codegen.ptxas import wgmma_hazards


@pytest.mark.parametrize("probe", [tc.Probe("bf16"), tc.Probe("tf32", 1), tc.Probe("bf16", 2, 2),
                                   tc.Probe("tf32", turns=True)],
                         ids=lambda p: p.name)
def test_probe_kernels_assemble_clean(probe):
    from nova.codegen import ptxas
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    art = tc.compile_probe(probe, ctas=132)
    r = art.resources
    assert r["spill_store_bytes"] == 0 and r["stack_bytes"] == 0 and not wgmma_hazards(r), r
    assert art.smem_bytes == probe.smem_bytes() <= 232448
    assert art.block == (probe.threads, 1, 1) and art.grid == (132, 1, 1)
    # the loop body: one wgmma per k-step of a 128-byte slot and chain, of the probe's N, one commit
    kstep = tc.KSTEP[probe.dtype]
    wgmmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)", art.ptx)
    per_slot = tc.SWIZZLE_BYTES // (kstep * tc.ELEMENT_BYTES[probe.dtype]) * probe.chains
    assert len(wgmmas) == per_slot and {(int(n), int(k)) for n, k in wgmmas} == {(probe.n, kstep)}
    assert "cp.async" not in art.ptx and "ld.global" in art.ptx   # the ring is filled once, by plain loads
    # turns: each warpgroup bar.syncs on its own named barrier and bar.arrives on the other's, 256 threads
    assert (re.search(r"bar\.sync\s+%r\d+, 256", art.ptx) is not None) == probe.turns
    assert (re.search(r"bar\.arrive\s+%r\d+, 256", art.ptx) is not None) == probe.turns


def test_flops_count_the_issued_wgmmas():
    """FLOP per launch = CTAs x warpgroups x slots x (wgmmas per slot x 2 x 64 x N x K)."""
    for probe in tc.PROBES:
        kstep = tc.KSTEP[probe.dtype]
        per_slot = tc.SWIZZLE_BYTES // (kstep * tc.ELEMENT_BYTES[probe.dtype]) * probe.chains
        assert probe.flops_per_launch(132) == 132 * probe.warpgroups * tc.ITERATIONS * per_slot * 2 * 64 * probe.n * kstep


def test_unknown_dtype_is_one_clear_error():
    with pytest.raises(ValueError, match="dtype 'fp8'"):
        tc.build_module(tc.Probe("fp8"), 132)
    with pytest.raises(ValueError, match="turns are between two warpgroups"):
        tc.build_module(tc.Probe("bf16", 3, turns=True), 132)


def test_sustained_chunks_are_closed_by_a_sync(monkeypatch):
    """Every chunk holds the same number of calls and ends with a sync, so no chunk's wall time can
    include calls queued in an earlier one.  Without nvidia-smi (CI) the clock
    sampler records nothing."""
    import shutil
    monkeypatch.setattr(shutil, "which", lambda name: None)      # no nvidia-smi, wherever this runs
    monkeypatch.setattr(tc.time, "sleep", lambda s: None)
    queued, synced = [], []

    def fn(i=0):
        queued.append(i)

    def sync():
        synced.append(len(queued))
    clock = iter(range(10**6))
    monkeypatch.setattr(tc.time, "time", lambda: next(clock) * 0.001)   # 1 ms per reading
    us, first_us, mhz, watts, n, trace = tc.sustained(fn, sync, 0.2)
    assert synced[-1] == len(queued)          # the last call was waited for
    # warm-up and the single timed call: sync, 1 call, sync each; then each chunk is synced before and after
    assert synced[:4] == [0, 1, 1, 2]
    starts, ends = synced[4::2], synced[5::2]
    assert len(ends) >= 2 and starts == [2] + ends[:-1]      # nothing is queued between chunks
    sizes = {b - a for a, b in zip(starts, ends)}
    assert len(sizes) == 1 and sizes.pop() >= 1
    assert us > 0 and first_us > 0 and mhz is None and n == 0 and trace is None


def test_report_takes_the_fastest_random_data_probe_as_the_ceiling():
    rows = [
        {"what": "probe a", "kind": "probe", "data": "randn", "dtype": "bf16", "us": 1, "tflops": 800.0,
         "sm_mhz": 1800, "power_w": 690, "pipe_use": 0.85},
        {"what": "probe b", "kind": "probe", "data": "randn", "dtype": "bf16", "us": 1, "tflops": 850.0,
         "sm_mhz": 1750, "power_w": 690, "pipe_use": 0.90},
        {"what": "probe zeros", "kind": "probe", "data": "zeros", "dtype": "bf16", "us": 1, "tflops": 910.0,
         "sm_mhz": 1950, "power_w": 290, "pipe_use": 0.87},
        {"what": "nova", "kind": "nova", "dtype": "bf16", "us": 1, "tflops": 680.0, "sm_mhz": 1450,
         "power_w": 690, "pipe_use": 0.855},
    ]
    table = tc.report(rows)
    nova = next(line for line in table.splitlines() if line.startswith("| nova"))
    cells = [c.strip() for c in nova.strip("|").split("|")]
    assert cells[4] == f"{680 / 850:.3f}" and cells[8] == f"{0.855 / 0.90:.3f}"


# ---- the stored ceiling (nova/hwmodel/calibration/h200.wgmma.json) and explain -------------------
def test_stored_ceiling_is_rederived_from_the_committed_results():
    """The calibration's ceiling is ``ceilings`` of the results file it names, nothing typed in."""
    import json
    from pathlib import Path

    from nova.hwmodel.calibration import load
    stored = load("h200", "wgmma")["ceiling"]
    results = Path(__file__).resolve().parents[1] / stored["results"]
    assert tc.ceilings(json.loads(results.read_text())["rows"]) == stored["per_dtype"]
    # the ceiling is a one-warpgroup probe's, at the power cap, above every GEMM of the same run
    rows = json.loads(results.read_text())["rows"]
    for dtype, c in stored["per_dtype"].items():
        assert c["power_w"] > 650 and all(r["tflops"] < c["tflops"] for r in rows if r["kind"] != "probe" and r["dtype"] == dtype)


def test_explain_sets_the_prediction_against_the_measured_ceiling(capsys):
    from nova.cli.config import main
    from nova.hwmodel.calibration import measured_ceiling
    from nova.configurator import GemmProblem, configure
    assert measured_ceiling("h200", "fp16") is None and measured_ceiling("a100", "bf16") is None
    cfg = configure(GemmProblem(8192, 8192, 8192, "bf16"), "h200")
    assert cfg.to_dict()["measured_ceiling"] == measured_ceiling("h200", "bf16")
    assert main(["explain", "matmul", "8192x8192x8192", "--dtype", "bf16", "--target", "h200"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    fraction = 8192 ** 3 * 2 / cfg.calibrated_time_us / 1e6 / measured_ceiling("h200", "bf16")["tflops"]
    assert f"Ceiling: {measured_ceiling('h200', 'bf16')['tflops']:.1f} TFLOP/s bf16" in text
    assert f"calibrated {fraction:.2f} of it" in text
    assert main(["explain", "matmul", "4096x4096", "--dtype", "fp16", "--target", "h200"]) == 0
    assert "Ceiling:" not in capsys.readouterr().out


def test_run_without_a_gpu_is_one_clear_line(capsys, monkeypatch, tmp_path):
    import nova.runtime.driver as driver
    monkeypatch.setattr(driver, "gpu_available", lambda: False)
    assert tc.main(["run", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no GPU" in err[0]
    assert tc.main(["run", "--out", str(tmp_path), "--data", "ones"]) == 2      # checked before the GPU
    assert "--data 'ones'" in capsys.readouterr().err
    assert tc.main(["run", "--out", str(tmp_path), "--libraries", "nova,mkl"]) == 2
    assert "unknown libraries ['mkl']" in capsys.readouterr().err
