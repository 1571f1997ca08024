"""GEMM epilogue operands on the GPU: ``nova.matmul(..., residual=R, preactivation=P)`` against float64
(and the exact GELU, ``activation="gelu_erf"``; the cast epilogue, ``round_through=True``; the GELU's
backward, ``activation_grad=True``).

``C = act(A @ B + bias) + R`` and ``P = A @ B + bias`` on fresh random data (a new seed each run,
printed on failure), C and P poisoned with NaN before the launch: every element written, within the
tolerance of its type.  The cases cover the register epilogue (pairs, ragged M and N, odd N), the
TMA-store epilogue with R and P (C's rows whole 16-byte units; ragged M, swapped), the
atomic split-K kernel (R added by slice 0), the split-K workspace's reduction kernel (R and P there),
TF32 and BF16, and both kernel generations (``NOVA_HOPPER=0``: the mma.sync kernel on an sm_90 device).

Offline on the device: build the kernels here first (``python tests/test_gemm_epilogue_gpu.py --build
--target h200`` into $NOVA_CACHE_DIR, a host with MLIR, no GPU needed).
"""
from __future__ import annotations

import os

import pytest

import nova
from nova.kernels.gemm.problem import GemmProblem
from nova.runtime import driver, matmul as mm
from nova.runtime.cache import is_offline, mlir_available

# (M, N, K, dtype, bias, activation, residual, preactivation)
CASES = [
    (16384 // 8, 2048, 512, "tf32", True, "gelu", False, True),       # GPT's fc1: gelu with its input kept
    (2048, 512, 512, "tf32", True, "none", True, False),             # GPT's c_proj: the residual connection
    (1000, 1001, 999, "tf32", True, "silu", True, True),             # ragged M, odd N: element stores
    (129, 258, 4096, "tf32", True, "gelu", True, True),              # deep K: split-K through a workspace
    (64, 512, 8192, "tf32", True, "none", True, False),              # atomic split-K: slice 0 adds R
    (2048, 2048, 512, "bf16", True, "gelu", False, True),
    (1000, 1002, 520, "bf16", False, "relu", True, True),
    (2048, 3072, 768, "tf32", True, "gelu_erf", False, True),         # the exact GELU (BERT-style MLPs)
    (1000, 1024, 512, "bf16", True, "gelu_erf", True, False),
    (1000, 1024, 520, "bf16", True, "gelu", True, True),             # TMA store of C and P, ragged M: R's rows clamped
    (64, 2048, 512, "tf32", True, "gelu", True, True),               # swapped (C^T tiles): R read along C's rows
    (2000, 3000, 512, "tf32", False, "silu", True, True),            # swapped and ragged
]
TOLERANCE = {"tf32": 2e-3, "bf16": 1e-2}   # relative Frobenius error vs float64 (tests/test_runtime_gpu.py's)
HOPPER_SWITCH = ("1", "0")                  # the Hopper kernel, then the mma.sync one (NOVA_HOPPER=0)


def _gpu_reason() -> str:
    return "" if driver.gpu_available() else "no usable CUDA GPU (cuInit failed or no device)"


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_gpu_reason()), reason=_gpu_reason() or "gpu")]


def case_id(c) -> str:
    M, N, K, dtype, bias, act, res, pre = c
    return f"{M}x{N}x{K}-{dtype}" + ("-bias" if bias else "") + f"-{act}" + ("-residual" if res else "") + \
        ("-preact" if pre else "")


def problem(case) -> GemmProblem:
    M, N, K, dtype, bias, act, res, pre = case
    return GemmProblem(M, N, K, dtype, bias=bias, activation=act, residual=res, preactivation=pre)


@pytest.fixture(autouse=True)
def kernels():
    if not is_offline() and not mlir_available():
        pytest.skip("no MLIR here: build the kernels (`python tests/test_gemm_epilogue_gpu.py --build`) and run "
                    "with NOVA_OFFLINE=1 NOVA_CACHE_DIR=<carried cache>")


def start(hopper: str, monkeypatch):
    """(torch, a fresh seed, its CUDA generator) for a test of kernel generation ``hopper`` (``NOVA_HOPPER``;
    skipped where the GPU has no sm_90 for the Hopper kernel)."""
    torch = pytest.importorskip("torch")
    if hopper == "1" and driver.get_device().cc < (9, 0):
        pytest.skip("the Hopper kernel needs sm_90")
    monkeypatch.setenv("NOVA_HOPPER", hopper)
    mm.reset()
    seed = int.from_bytes(os.urandom(4), "little")
    return torch, seed, torch.Generator(device="cuda").manual_seed(seed)


@pytest.mark.parametrize("hopper", HOPPER_SWITCH)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_residual_and_preactivation_vs_float64(case, hopper, monkeypatch):
    torch, seed, gen = start(hopper, monkeypatch)
    M, N, K, dtype, has_bias, act, has_res, has_pre = case
    tdt = {"tf32": torch.float32, "bf16": torch.bfloat16}[dtype]
    a = torch.randn(M, K, device="cuda", generator=gen).to(tdt)
    b = torch.randn(K, N, device="cuda", generator=gen).to(tdt)
    bias = torch.randn(N, device="cuda", generator=gen).to(torch.float32 if dtype == "tf32" else tdt) \
        if has_bias else None
    r = (torch.randn(M, N, device="cuda", generator=gen) * 8).to(tdt) if has_res else None
    out = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    pre = torch.full((M, N), float("nan"), device="cuda", dtype=tdt) if has_pre else None
    try:
        assert nova.matmul(a, b, out=out, bias=bias, activation=act, residual=r, preactivation=pre) is out
        torch.cuda.synchronize()
    finally:
        mm.reset()
    z = a.double() @ b.double() + (bias.double() if bias is not None else 0)
    y = {"none": z, "relu": torch.relu(z), "silu": torch.nn.functional.silu(z),
         "gelu": torch.nn.functional.gelu(z, approximate="tanh"), "gelu_erf": torch.nn.functional.gelu(z)}[act] \
        + (r.double() if r is not None else 0)
    what = f"{case_id(case)} NOVA_HOPPER={hopper} (seed {seed})"
    for name, got, ref in (("C", out, y), ("P", pre, z)):
        if got is None:
            continue
        assert int(torch.isnan(got).sum()) == 0, f"{what}: {name} has elements left unwritten"
        err = float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))
        assert err < TOLERANCE[dtype], f"{what}: {name}'s relative Frobenius error {err:.2e}"


# the cast epilogue (round_through): bf16 inputs, an f32 C rounded through bf16 first; (M, N, K, bias, residual)
ROUND_CASES = [
    (2048, 768, 768, True, True),          # autocast's R + (x @ W^T + b): the register epilogue with R in f32
    (1000, 1002, 520, False, False),       # a weight gradient widened: ragged M, element stores
    (129, 258, 4096, True, True),          # deep K: the split-K workspace's reduction rounds the sum
]


def round_problem(case) -> GemmProblem:
    M, N, K, bias, res = case
    return GemmProblem(M, N, K, "bf16", bias=bias, out_dtype="f32", residual=res, round_through="bf16")


@pytest.mark.parametrize("hopper", HOPPER_SWITCH)
@pytest.mark.parametrize("case", ROUND_CASES, ids=lambda c: "x".join(map(str, c[:3])) + ("-bias" if c[3] else "")
                         + ("-residual" if c[4] else ""))
def test_the_cast_epilogue_writes_the_bf16_result_widened(case, hopper, monkeypatch):
    """Without R every element of C is a bf16 value (the rounding happened); with R, C is
    f32(bf16(A @ B + bias)) + R within bf16's tolerance of float64."""
    torch, seed, gen = start(hopper, monkeypatch)
    M, N, K, has_bias, has_res = case
    a = torch.randn(M, K, device="cuda", generator=gen).bfloat16()
    b = torch.randn(K, N, device="cuda", generator=gen).bfloat16()
    bias = torch.randn(N, device="cuda", generator=gen).bfloat16() if has_bias else None
    r = torch.randn(M, N, device="cuda", generator=gen) * 8 if has_res else None
    out = torch.full((M, N), float("nan"), device="cuda")
    try:
        assert nova.matmul(a, b, out=out, bias=bias, residual=r, round_through=True) is out
        torch.cuda.synchronize()
    finally:
        mm.reset()
    what = f"{round_problem(case).describe()} NOVA_HOPPER={hopper} (seed {seed})"
    assert int(torch.isnan(out).sum()) == 0, f"{what}: C has elements left unwritten"
    z = a.double() @ b.double() + (bias.double() if bias is not None else 0)
    y = z.to(torch.bfloat16).double() + (r.double() if r is not None else 0)
    err = float(torch.linalg.norm(out.double() - y) / torch.linalg.norm(y))
    assert err < TOLERANCE["bf16"], f"{what}: relative Frobenius error {err:.2e}"
    if r is None:
        assert torch.equal(out, out.bfloat16().float()), f"{what}: C holds values no bf16 has (not rounded)"


# the activation's backward (activation_grad): C = (A @ B) * gelu'(R), R the pre-activation;
# (M, N, K, dtype, B stored transposed)
GRAD_CASES = [
    (16384 // 8, 2048, 512, "tf32", False),   # GPT's dh = dy @ W2 then gelu_backward(dh, pre)
    (16384 // 8, 2048, 512, "bf16", True),    # HF GPT-2's under autocast (Conv1D's weight: NT), its GELU op by op
    (1000, 1002, 520, "bf16", False),         # ragged M, odd N
    (129, 258, 4096, "tf32", False),          # deep K: the split-K workspace's reduction applies it
]


def grad_problem(case) -> GemmProblem:
    M, N, K, dtype, trans_b = case
    return GemmProblem(M, N, K, dtype, trans_b=trans_b, activation="gelu", residual=True, activation_grad=True)


@pytest.mark.parametrize("hopper", HOPPER_SWITCH)
@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: "x".join(map(str, c[:3])) + f"-{c[3]}" + "-NT" * c[4])
def test_the_activation_grad_epilogue_against_float64(case, hopper, monkeypatch):
    torch, seed, gen = start(hopper, monkeypatch)
    M, N, K, dtype, trans_b = case
    tdt = {"tf32": torch.float32, "bf16": torch.bfloat16}[dtype]
    a = torch.randn(M, K, device="cuda", generator=gen).to(tdt)
    b = torch.randn(N, K, device="cuda", generator=gen).to(tdt).T if trans_b else \
        torch.randn(K, N, device="cuda", generator=gen).to(tdt)
    pre = (torch.randn(M, N, device="cuda", generator=gen) * 3).to(tdt)      # the GELU's curve and its tails
    out = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    try:
        assert nova.matmul(a, b, out=out, activation="gelu", residual=pre, activation_grad=True) is out
        torch.cuda.synchronize()
    finally:
        mm.reset()
    what = f"{grad_problem(case).describe()} NOVA_HOPPER={hopper} (seed {seed})"
    assert int(torch.isnan(out).sum()) == 0, f"{what}: C has elements left unwritten"
    y = torch.ops.aten.gelu_backward(a.double() @ b.double(), pre.double(), approximate="tanh")
    err = float(torch.linalg.norm(out.double() - y) / torch.linalg.norm(y))
    assert err < TOLERANCE[dtype], f"{what}: relative Frobenius error {err:.2e}"


def test_a_residual_not_laid_out_as_the_output_is_refused_in_one_line():
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 32, device="cuda")
    b = torch.randn(32, 48, device="cuda")
    r = torch.randn(48, 64, device="cuda").T                      # the output's shape, another layout
    with pytest.raises(ValueError, match="residual.*must match the output"):
        nova.matmul(a, b, residual=r)


def _build(target: str) -> None:
    """Every kernel these tests launch, for both kernel generations, into $NOVA_CACHE_DIR."""
    from nova.hwmodel import get_target
    from nova.runtime.cache import KernelCache
    for hopper in HOPPER_SWITCH:
        os.environ["NOVA_HOPPER"] = hopper
        mm.reset()
        counts = mm.precompile_gemms([problem(c) for c in CASES] + [round_problem(c) for c in ROUND_CASES]
                                     + [grad_problem(c) for c in GRAD_CASES],
                                     get_target(target), KernelCache(),
                                     label=f"NOVA_HOPPER={hopper} ")
        print(counts)


if __name__ == "__main__":
    from gpu_build import flag_main
    flag_main(_build, "GEMM")
