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


@pytest.mark.parametrize("M, N, K, trans_a, trans_b, stated", [
    (512, 32, 1, True, True, (False, False)),       # K = 1: A [M, 1] and B [1, N] are both layouts at once
    (1, 96, 64, True, True, (False, True)),         # M = 1: A [1, K] is; B is not
    (64, 1, 48, True, True, (True, False)),         # N = 1: B [K, 1] is; A is not
    (64, 96, 48, True, True, (True, True)),
])
def test_a_matrix_one_element_wide_is_stated_row_major(M, N, K, trans_a, trans_b, stated):
    """A matrix with one row or one column is the same bytes in either layout: the problem states it
    row-major, so the plan's problem and the one ``nova.matmul`` reads off the bound views are one
    problem with one kernel key (Hugging Face Llama's rotary angles, ``inv_freq[:, None] @ pos[None]``,
    planned as TT and bound as NN, ran on torch.matmul)."""
    p = GemmProblem(M, N, K, "tf32", trans_a=trans_a, trans_b=trans_b)
    assert (p.trans_a, p.trans_b) == stated
    assert p == GemmProblem(M, N, K, "tf32", trans_a=stated[0], trans_b=stated[1])


def test_rotary_angles_run_on_nova_gemm_as_planned():
    """The rotary embedding's outer product of Hugging Face's Llama (an expanded [B, D/2, 1] by a
    [B, 1, T], both transposed in the IR): its meta program binds the planned Nova GEMM, none on torch."""
    torch = pytest.importorskip("torch")
    from nova.compiler.executor import Program
    from nova.frontend.capture import capture
    from nova.passes import pipeline
    class Rotary(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", torch.rand(32))

        def forward(self, position_ids):
            inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            freqs = (inv.float() @ position_ids[:, None, :].float()).transpose(1, 2)
            return torch.cat((freqs, freqs), dim=-1).cos()

    rotary = Rotary()
    planned = pipeline(capture(rotary, (torch.arange(512)[None].float(),), models=[rotary]).graph, "h200")
    program = Program(planned, "meta", target="h200")
    gemms = [gl for launch in program.launches for gl in launch.gemms]
    assert gemms and all(gl.backend == "nova" for gl in gemms), [getattr(gl, "reason", "") for gl in gemms]
    assert program.stats["torch_gemms"] == 0
