"""Across the layers, on the host: configurator schedules compile, and ptxas confirms the resources.

For a spread of problems on every architecture, the schedule the configurator derives is lowered
to PTX and assembled with ``ptxas``: no spills, no stack frame, dynamic shared memory as the
schedule says, and the real register count still allows the predicted blocks per SM.
"""
import shutil

import pytest

from nova.configurator import GemmProblem, configure
from nova.hwmodel import PRESETS


@pytest.fixture(autouse=True)
def _mma_sync_path(monkeypatch):
    """The Ampere-class (mma.sync) pipeline on every target; tests/test_hopper.py covers wgmma."""
    monkeypatch.setenv("NOVA_HOPPER", "0")


pytestmark = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not installed")

CASES = [
    ((4096, 4096, 4096), "tf32", {}),
    ((4096, 4096, 4096), "bf16", {}),
    ((4096, 4096, 4096), "fp16", {}),
    ((1000, 33, 7), "tf32", {}),
    ((128, 4096, 4096), "tf32", {}),               # split-K
    ((64, 8192, 1024), "bf16", {}),                # skinny: small tiles
    ((1000, 1000, 1000), "tf32", {"bias": True, "activation": "relu"}),
    ((255, 511, 300), "bf16", {"trans_a": True, "trans_b": True}),
    ((255, 511, 301), "bf16", {}),                 # odd K: 16-bit rows copied element by element
    ((1000, 33, 777), "tf32", {"trans_b": True}),
    ((1, 7, 3), "fp16", {}),
    ((1000, 1002, 1000), "tf32", {"bias": True, "activation": "gelu", "preactivation": True, "residual": True}),
    ((128, 4096, 4096), "tf32", {"bias": True, "residual": True}),    # split-K: slice 0 adds R
    ((1000, 1024, 512), "bf16", {"bias": True, "activation": "gelu_erf"}),     # the exact GELU: math.erf
    ((2048, 3072, 768), "tf32", {"bias": True, "activation": "gelu_erf", "preactivation": True}),
]


@pytest.mark.parametrize("target", ["rtx3060", "a100", "rtx4090", "h200"])
@pytest.mark.parametrize("shape, dtype, extra", CASES, ids=[f"{s[0]}x{s[1]}x{s[2]}-{d}-{'-'.join(e) or 'plain'}"
                                                            for s, d, e in CASES])
def test_schedule_compiles_with_predicted_resources(target, shape, dtype, extra):
    from nova.kernels.gemm.compile import compile_gemm
    problem = GemmProblem(*shape, dtype=dtype, **extra)
    cfg = configure(problem, target, kernel="tiles")     # the tensor-core tiles (the skinny kernel: test_skinny)
    s, gpu = cfg.schedule, PRESETS[target]
    art = compile_gemm(problem, s)
    r = art.resources
    assert f".target {gpu.arch}" in art.ptx and art.name == "nova_gemm"
    assert art.params == ("A", "B", "C") + problem.epilogue_operands      # what the runtime passes
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0, r
    assert r["stack_bytes"] == 0, r
    assert art.smem_bytes == s.smem_bytes and art.grid == s.grid(*shape[:2])
    assert r["registers"] <= gpu.max_regs_per_thread
    # the predicted occupancy holds with the real register count (256-register warp granules)
    per_warp = -(-r["registers"] * 32 // 256) * 256
    assert s.blocks_per_sm * s.warps * per_warp <= gpu.regs_per_sm, (r["registers"], s.blocks_per_sm)
