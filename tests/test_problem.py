"""GemmProblem validation: what no kernel can run is one clear ProblemError; tf32_fast only means
something for tf32, so 16-bit problems (and their cache keys) ignore it."""
from __future__ import annotations

from pathlib import Path

import pytest

from nova.cli.shapes import read_suite
from nova.kernels.gemm.problem import MAX_DIM, MAX_GPU_BYTES, GemmProblem, ProblemError

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("dims,name", [((MAX_DIM + 1, 8, 8), "M"), ((8, 2**32, 8), "N"), ((8, 8, 99999999999), "K")])
def test_dimension_limit_names_the_dimension(dims, name):
    with pytest.raises(ProblemError, match=rf"^GEMM dimension {name}=\d+ exceeds the limit 2\^31-1"):
        GemmProblem(*dims)


def test_largest_dimension_with_small_others_is_valid():
    p = GemmProblem(MAX_DIM, 8, 8, "bf16")
    assert p.footprint_bytes <= MAX_GPU_BYTES


@pytest.mark.parametrize("dims,dtype", [((300_000, 300_000, 1), "bf16"), ((200_000, 8, 200_000), "tf32"),
                                        ((16, 16, MAX_DIM), "tf32")])
def test_operands_larger_than_any_gpu_are_rejected(dims, dtype):
    with pytest.raises(ProblemError, match=r"A, B and C take [\d.]+ GB, more than the 154.6 GB of the largest GPU"):
        GemmProblem(*dims, dtype)


def test_limit_is_at_least_the_h200s_memory():
    assert MAX_GPU_BYTES >= 143_771 * 2**20            # what nvidia-smi reports on the H200


def test_shipped_suites_stay_valid():
    for suite in sorted((REPO / "bench" / "suites").glob("*.txt")):
        for M, N, K in read_suite(suite):
            for dtype in ("tf32", "bf16", "fp16"):
                GemmProblem(M, N, K, dtype, bias=True)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_tf32_fast_is_normalised_away_for_16_bit_inputs(dtype):
    fast = GemmProblem(256, 256, 256, dtype, tf32_rounding="truncate")
    assert fast == GemmProblem(256, 256, 256, dtype) and fast.to_dict() == GemmProblem(256, 256, 256, dtype).to_dict()
    assert GemmProblem(256, 256, 256, "tf32", tf32_rounding="truncate").tf32_rounding == "truncate"
