"""GPU tests of the runtime: ``nova.matmul`` on torch tensors vs a float64 reference (fresh random
data, NaN-poisoned outputs), raw-pointer ``launch_gemm``, driver error paths, offline mode.

On a GPU machine without MLIR, precompile on a host that has it and carry the cache over:

    python tests/test_runtime_gpu.py --target h200      # prints the `nova precompile` commands (run them
                                                        # as printed: some set NOVA_HOPPER=0)
    NOVA_OFFLINE=1 NOVA_CACHE_DIR=/carried/cache python -m pytest -m gpu tests/test_runtime_gpu.py

With NOVA_OFFLINE=1 every test uses only that cache (a miss fails with the command to run).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from nova.kernels.gemm import family as gemm_family

import nova
from nova.kernels.gemm.problem import GemmProblem
from nova.runtime import cache as cache_mod, driver, matmul as mm
from nova.messages import precompile_command
from nova.runtime.cache import KernelCache, NotPrecompiledError, is_offline, mlir_available

# (M, N, K, dtype, trans_a, trans_b, bias, activation): odd shapes, every dtype, transposes, epilogues
CASES = [
    (256, 256, 256, "tf32", False, False, False, "none"),
    (1000, 1000, 1000, "tf32", False, False, False, "none"),
    (127, 253, 61, "tf32", False, False, False, "none"),
    (3, 5, 7, "tf32", False, False, False, "none"),
    (512, 384, 320, "bf16", False, False, False, "none"),
    (333, 257, 129, "fp16", False, False, False, "none"),
    (256, 192, 128, "tf32", True, False, False, "none"),
    (256, 192, 128, "tf32", False, True, False, "none"),
    (384, 256, 128, "tf32", False, False, True, "relu"),
    (384, 256, 128, "bf16", False, False, True, "relu"),
    # deep K (a weight gradient's shape): split-K through a workspace (16-bit output, activation) or atomics
    (512, 512, 16384, "bf16", True, False, False, "none"),
    (300, 200, 8192, "bf16", True, False, True, "gelu"),
    (512, 512, 16384, "tf32", True, False, False, "none"),
    (200, 96, 12000, "tf32", False, False, True, "silu"),
    # 192-wide tiles (hopper.py's tile_widths): ragged M and N, every epilogue, swapped TF32,
    # the split-K workspace's 16-byte partial stores
    (777, 1555, 4096, "bf16", False, False, False, "none"),
    (777, 1555, 4096, "tf32", False, True, True, "relu"),
    (2500, 1800, 1024, "bf16", True, False, True, "none"),
    (3072, 1000, 2048, "tf32", False, False, False, "none"),
    (768, 3072, 16384, "bf16", True, False, False, "none"),
    # three consumer warpgroups (192x192 tiles, 512 threads, hopper.py's WIDE_CONSUMER_WARPGROUPS): the
    # BF16 weight gradient above and these: split 8 (short enough for racecheck), split-K ragged with bias +
    # gelu, unsplit persistent and ragged (BF16 NN, TF32 NT from shared memory), FP16 NT with bias + silu
    (768, 768, 16384, "bf16", True, False, False, "none"),
    (3000, 700, 16000, "bf16", True, False, True, "gelu"),
    (3000, 3000, 3000, "bf16", False, False, False, "none"),
    (3000, 3000, 3000, "tf32", False, True, False, "relu"),
    (12288, 1536, 1536, "fp16", False, True, True, "silu"),
    # K off the 128-byte line: A's prep pads K (700 bf16) to whole lines; B (1000 fp16, readable in place)
    # padded by the line-pad step
    (3000, 5000, 700, "bf16", False, False, True, "gelu"),
    (5000, 3000, 1000, "fp16", False, True, False, "none"),
    # the TMA-store epilogue on the H200 (hopper.py's epilogue step; tests/test_hopper.py TMA_SPREAD):
    # 16-bit boxes, ragged M and N, bias + activation; FP32 boxes with the lanes' rotation (NT: A
    # and B K-major; TT: A^T from registers); swapped TF32 (boxes of C's rows side by side along N)
    (3000, 5056, 700, "bf16", False, False, True, "gelu"),
    (4095, 4104, 1024, "bf16", False, True, True, "silu"),
    (5000, 3000, 1024, "fp16", False, True, False, "none"),
    (2048, 2048, 512, "tf32", False, True, True, "none"),
    (3000, 5000, 700, "tf32", True, True, True, "none"),
    (3000, 5000, 700, "tf32", False, False, True, "none"),
    (4095, 4100, 1000, "tf32", False, False, False, "relu"),
]
TMA_STORE_CASES = CASES[-7:]
# Thread-block clusters with TMA multicast (hopper.py step 12), each shape forced with NOVA_CLUSTER (and
# precompiled so: precompile_commands): 2x1 and 1x2 (and one 4x1), bf16 and tf32; M or N not a
# multiple of the cluster tile, so a CTA's tile lies wholly outside C (it loads its slice of the shared
# tile for its peer and stores nothing); the split-K workspace; the TMA store; bias + gelu; swapped
# TF32 (B^T from registers); A^T from registers; operand prep
CLUSTER_CASES = [
    ("2x1", (512, 2048, 16384, "bf16", False, True, False, "none")),     # deep K: split-K workspace, K-major slices
    ("1x2", (512, 2048, 16384, "bf16", False, True, False, "none")),
    ("2x1", (300, 200, 8192, "bf16", False, True, True, "gelu")),        # workspace, bias + gelu, a tile outside C
    ("2x1", (384, 640, 4096, "bf16", False, True, True, "none")),        # 3 tile rows: a tile outside C
    ("1x2", (3000, 5000, 700, "bf16", False, True, True, "gelu")),       # TMA store, ragged, prep passes (K = 700)
    ("1x2", (4095, 4100, 1000, "tf32", False, False, False, "relu")),    # swapped, TMA store, a tile outside C
    ("2x1", (1000, 1000, 1000, "tf32", False, False, False, "none")),    # swapped, register epilogue, ragged
    ("1x2", (768, 3072, 16384, "tf32", True, False, False, "none")),     # A transposed by a prep pass, workspace
    ("1x2", (3000, 5000, 700, "tf32", True, True, True, "none")),        # A^T from registers, TMA store
    ("4x1", (2900, 3000, 1000, "bf16", False, True, False, "none")),     # extent 4, a tile outside C
    # MN-major 16-bit tiles (the descriptor's transpose bit; wrong on rank >= 1 without the 14-bit mask
    # of the descriptor's start address): dW (A^T and B MN-major, B shared), NN (B
    # MN-major, not shared), TT (A MN-major shared), FP16, bias + gelu, ragged
    ("2x1", (512, 2048, 16384, "bf16", True, False, False, "none")),
    ("1x2", (3000, 5000, 700, "bf16", False, False, True, "gelu")),
    ("1x2", (2000, 1500, 2000, "fp16", True, True, False, "none")),     # a 128x192 tile, A MN-major shared
    ("2x1", (8192, 8192, 8192, "bf16", False, False, False, "none")),
]
# Stream-K (hopper.py step 8, ``Schedule.stream_k``), each forced with NOVA_STREAM_K=1 (and precompiled
# so): the GPT models' BF16 weight gradients (A stored [K, M]), bias, ragged M and N with K not a
# multiple of 64 (gelu), a hybrid walk (264 tiles walked whole before the stream-K tiles), TF32 (A
# through registers or a prep pass; swapped with B^T from registers), NN, FP16, an f32 output
STREAM_K_CASES = [
    (768, 3072, 16384, "bf16", True, False, False, "none"),
    (2304, 768, 16384, "bf16", True, False, True, "none"),
    (1536, 512, 16384, "bf16", True, False, False, "none"),
    (3072, 768, 16384, "bf16", True, False, False, "none"),
    (1000, 600, 5000, "bf16", True, False, True, "gelu"),
    (4000, 4000, 2000, "bf16", False, True, True, "silu"),
    (700, 300, 9000, "tf32", True, False, True, "none"),
    (1000, 1000, 3000, "tf32", False, False, False, "relu"),
    (500, 384, 7000, "bf16", False, False, False, "none"),
    (1536, 512, 16384, "fp16", True, False, False, "none"),
    (512, 2048, 16384, "tf32", True, False, False, "none"),
]
# Ping-pong consumers (hopper.py's consumers step, ``Schedule.consumers``), each forced with NOVA_PINGPONG=1
# (and precompiled so): the two consumer warpgroups alternate the CTA's tiles, their K loops ordered by
# named barriers.  GPT-42M's MLP forward (BF16 NT, 16384x2048x512) and its NN dX twin (B by the
# transpose bit), with the TMA store; 128-row tiles per warpgroup (two slabs) and 64-row ones; TF32 NT
# and NN (swapped: B^T from registers, one 64-row slab per warpgroup), A^T from registers; ragged M, N
# and K with bias + gelu / silu (register and TMA-store epilogues); the fewest K tiles ping-pong takes
# (hopper.PINGPONG_MIN_STAGES: 4000x4004x256; 1023x1025x264, 5); units per CTA odd
# and even, and CTAs with one unit (300x200: 20 CTAs); an f32 output from bf16; a batch
PINGPONG_CASES = [
    (16384, 2048, 512, "bf16", False, True, False, "none"),
    (16384, 2048, 512, "bf16", False, False, False, "none"),
    (4095, 4100, 1000, "bf16", True, False, True, "gelu"),
    (3000, 5000, 700, "fp16", False, False, True, "silu"),
    (2048, 2048, 512, "tf32", False, True, True, "none"),
    (3000, 5000, 700, "tf32", False, False, False, "relu"),
    (1000, 1000, 1000, "tf32", True, True, False, "none"),
    (4000, 4004, 256, "bf16", False, True, False, "none"),
    (1023, 1025, 264, "bf16", False, False, True, "gelu"),
    (300, 200, 999, "bf16", False, True, False, "none"),
]
PINGPONG_F32_OUT = (4096, 4096, 256, "bf16")        # f32 output from bf16 inputs (out_dtype: its own test)
# Ping-pong on 128x192 warpgroup tiles (192 accumulators a thread: hopper.PINGPONG_OVERHEAD_REGS), forced with
# NOVA_PINGPONG=128x192: an LM-head-like BF16 NT forward with N a multiple of 192, its NN twin, ragged M/N/K
# in fp16 NT, A^T in BF16 TN (ragged M and K), TF32 NT
# (the model's pick for 3000x5000x700 NT); not batched (hopper.pingpong_regs: a batch keeps 40 registers)
PINGPONG_WIDE = "128x192"
# 64-row ping-pong tiles on a short K (4 K tiles of 64): the TMA-store kernel that failed at 8 ring stages
PINGPONG_ONE_SLAB = "64x64"
PINGPONG_SHORT_K_CASE = (17, 300, 200, 256, "bf16", False, True, False, "none", None)
PINGPONG_WIDE_CASES = [
    (2048, 6144, 768, "bf16", False, True, False, "none"),
    (2048, 6144, 768, "bf16", False, False, False, "none"),
    (4095, 4104, 1000, "fp16", False, True, False, "none"),
    (1000, 1024, 520, "bf16", True, False, False, "none"),
    (3000, 5000, 700, "tf32", False, True, False, "none"),
]
# MN-major 16-bit tiles (the descriptor's transpose bit) computed wrong results in clusters on the H200
# (bench/results/h200-2026-12-01/a/call3): hopper.cluster_blocker keeps them 1x1 (tests/test_hopper_cluster.py)
DETERMINISTIC_CASE = (512, 384, 16384, "tf32")
# C of the first (stored by TMA on the H200) is the A of the second, launched right after it
CHAIN = ((2048, 2048, 512, "bf16"), (2048, 1024, 2048, "bf16"))
TOLERANCE = {"tf32": 2e-3, "bf16": 1e-2, "fp16": 1e-2}   # relative Frobenius error vs float64

# Batched GEMMs (one launch): (batch, M, N, K, dtype, trans_a, trans_b, bias, activation, broadcast),
# broadcast "a"/"b": that operand is one 2-D matrix for the whole batch.  NN/NT/TN/TT in bf16 and
# tf32, ragged M/N/K, batch 1 (a [1, M, K] batch: the unbatched kernel), 3, 17 and 256, operand
# prep passes over every matrix (K % 8, TF32 with two MN-major operands), bias + activations, the
# TMA-store epilogue with a 3-D map of C, a deep K (no split-K with a batch).  On the H200 each
# configures the wgmma family; what the problem is: ``batched_problem``.
BATCHED_CASES = [
    (3, 127, 253, 61, "bf16", False, False, False, "none", None),      # ragged, both operands prepped
    (17, 300, 200, 256, "bf16", False, True, False, "none", None),
    (3, 256, 192, 128, "bf16", True, False, False, "none", None),
    (3, 333, 257, 129, "bf16", True, True, True, "gelu", None),
    (1, 256, 192, 128, "bf16", False, True, False, "none", None),
    (3, 300, 200, 256, "tf32", False, False, False, "none", None),      # swapped: B^T from registers
    (17, 127, 253, 64, "tf32", False, True, False, "none", None),
    (3, 256, 192, 128, "tf32", True, False, False, "none", None),       # two MN-major TF32: B prepped, batched
    (5, 1000, 1000, 512, "tf32", True, True, False, "none", None),
    (1, 127, 253, 61, "tf32", True, True, False, "none", None),
    (3, 384, 256, 128, "bf16", True, False, True, "relu", "b"),          # broadcast B (2-D tensor map)
    (3, 255, 511, 320, "bf16", True, True, False, "none", "a"),          # broadcast A, prepped once
    (4, 512, 384, 256, "tf32", False, False, True, "silu", "a"),
    (17, 200, 96, 512, "tf32", True, False, True, "gelu", "b"),
    (256, 512, 512, 64, "bf16", False, True, False, "none", None),       # attention scores, TMA store
    (4, 2048, 2048, 512, "bf16", False, False, True, "gelu", None),     # TMA store
    (3, 3000, 2048, 512, "tf32", False, True, True, "none", "a"),       # TMA store, ragged M, broadcast A
    (8, 1024, 1024, 1024, "tf32", False, False, False, "none", None),   # TMA store
    (3, 256, 256, 8192, "bf16", True, False, False, "none", None),      # deep K: unbatched it would split
    (3, 64, 1024, 4096, "fp16", False, False, False, "none", None),
]
BATCHED_TMA_STORE_CASES = [BATCHED_CASES[i] for i in (1, 8, 14, 15, 16, 17)]
# Strided batches: (batch, M, N, K, dtype, trans_a, trans_b, (pad_a, pad_b, pad_c)): each operand's
# matrices ``pad`` elements apart beyond packed (an odd pad: a stride TMA cannot use, so Hopper preps
# that operand; the mma.sync kernel narrows its vectors)
STRIDED_CASES = [
    (3, 256, 192, 128, "bf16", False, False, (3, 0, 64)),
    (5, 200, 96, 512, "tf32", True, False, (0, 8, 1)),
    (3, 128, 256, 64, "bf16", False, True, (64, 5, 0)),
]
# Ping-pong over a batch (NOVA_PINGPONG=1): packed, and with a broadcast A
PINGPONG_BATCHED_CASES = [
    (3, 1000, 1000, 512, "bf16", False, True, True, "gelu", None),
    (4, 2048, 2048, 256, "tf32", False, False, False, "none", "a"),
]
# The mma.sync family on the H200 too (NOVA_HOPPER=0; precompiled with the variable set)
MMA_SYNC_CASES = [BATCHED_CASES[i] for i in (0, 3, 10, 13, 12)]


def _gpu_reason() -> str:
    return "" if driver.gpu_available() else "no usable CUDA GPU (cuInit failed or no device)"


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(_gpu_reason()), reason=_gpu_reason() or "gpu")]


@pytest.fixture(scope="module", autouse=True)
def fresh_runtime():
    mm.reset()
    yield
    mm.reset()


@pytest.fixture
def kernels():
    """For tests that run Nova kernels: they come from the cache (offline) or the code generator."""
    if not is_offline() and not mlir_available():
        pytest.skip("no MLIR here: precompile (`python tests/test_runtime_gpu.py --target T` prints the commands) "
                    "and run with NOVA_OFFLINE=1 NOVA_CACHE_DIR=<carried cache>")


def case_id(c):
    M, N, K, dt, ta, tb, bias, act = c
    return f"{M}x{N}x{K}-{dt}-{'T' if ta else 'N'}{'T' if tb else 'N'}" + ("-bias" if bias else "") + \
        (f"-{act}" if act != "none" else "")


def rel_fro(torch, got, ref) -> float:
    return float(torch.linalg.norm(got.to(torch.float64) - ref) / torch.linalg.norm(ref))


def make_inputs(torch, M, N, K, dtype, trans_a, trans_b, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tdt = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn((K, M) if trans_a else (M, K), device="cuda", generator=gen).to(tdt)
    b = torch.randn((N, K) if trans_b else (K, N), device="cuda", generator=gen).to(tdt)
    return (a.T if trans_a else a), (b.T if trans_b else b), gen, tdt


def reference(torch, a, b, bias, activation):
    ref = a.to(torch.float64) @ b.to(torch.float64)
    if bias is not None:
        ref = ref + bias.to(torch.float64)
    if activation == "relu":
        ref = torch.relu(ref)
    elif activation == "gelu":
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    elif activation == "silu":
        ref = torch.nn.functional.silu(ref)
    return ref


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_matmul_torch_vs_float64(case, kernels):
    check_matmul(case)


def check_matmul(case):
    """``nova.matmul`` of ``case`` on fresh random data into a NaN-poisoned output vs float64."""
    torch = pytest.importorskip("torch")
    M, N, K, dtype, trans_a, trans_b, has_bias, act = case
    seed = int.from_bytes(os.urandom(4), "little")           # fresh data every run; printed on failure
    a, b, gen, tdt = make_inputs(torch, M, N, K, dtype, trans_a, trans_b, seed=seed)
    bias = torch.randn(N, device="cuda", generator=gen).to(torch.float32 if dtype == "tf32" else tdt) \
        if has_bias else None
    out = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    assert nova.matmul(a, b, out=out, bias=bias, activation=act) is out
    torch.cuda.synchronize()
    assert int(torch.isnan(out).sum()) == 0, f"{case_id(case)} (seed {seed}): output elements left unwritten"
    err = rel_fro(torch, out, reference(torch, a, b, bias, act))
    assert err < TOLERANCE[dtype], f"{case_id(case)} (seed {seed}): relative Frobenius error {err:.2e}"


@pytest.fixture
def force(monkeypatch):
    """``force("NOVA_CLUSTER", "2x1")``: configure with that schedule switch from now on (the
    runtime's memos are cleared, here and after the test)."""
    def setenv(name, value):
        monkeypatch.setenv(name, value)
        mm.reset()
    yield setenv
    mm.reset()


def require_hopper(why: str) -> None:
    """Skip (with ``why``) unless the device is sm_90: the schedule under test is Hopper-only."""
    if driver.get_device().cc < (9, 0):
        pytest.skip(why)


def check_forced_matmul(case, chosen) -> None:
    """The case's kernel, configured under the test's forced switch, has the schedule ``chosen(s)``
    asks for, and matches float64 (``check_matmul``)."""
    resolved = mm.resolve_kernel(GemmProblem(*case))
    assert chosen(resolved.schedule), resolved.problem.describe()
    check_matmul(case)


@pytest.mark.parametrize("shape,case", CLUSTER_CASES, ids=lambda v: v if isinstance(v, str) else case_id(v))
def test_cluster_matmul_vs_float64(shape, case, kernels, force):
    """A kernel in thread-block clusters (TMA multicast of one operand, remote releases of the ring's
    slots, cluster barriers) computes what the 1x1 kernel computes, every element written."""
    require_hopper("thread-block clusters are a Hopper-path schedule")
    force("NOVA_CLUSTER", shape)
    check_forced_matmul(case, lambda s: f"{s.cluster_m}x{s.cluster_n}" == shape)


@pytest.mark.parametrize("case", STREAM_K_CASES, ids=case_id)
def test_stream_k_matmul_vs_float64(case, kernels, force):
    """A stream-K kernel (whole tiles into C, split tiles' FP32 partials into the workspace, the
    reduction kernel adds them in segment order) vs float64, every element written."""
    force("NOVA_STREAM_K", "1")
    require_hopper("stream-K is a Hopper-path schedule")
    check_forced_matmul(case, lambda s: s.stream_k)


def test_stream_k_gives_the_same_bits_every_run(kernels, force):
    """Stream-K is deterministic: the segments add in slot order whatever order the CTAs ran in."""
    force("NOVA_STREAM_K", "1")
    torch = pytest.importorskip("torch")
    require_hopper("stream-K is a Hopper-path schedule")
    M, N, K, dtype, trans_a, trans_b, _, _ = STREAM_K_CASES[0]
    a, b, _, tdt = make_inputs(torch, M, N, K, dtype, trans_a, trans_b, seed=int.from_bytes(os.urandom(4), "little"))
    runs = []
    for _ in range(3):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
        nova.matmul(a, b, out=out)
        runs.append(out)
    torch.cuda.synchronize()
    assert all(torch.equal(runs[0], r) for r in runs[1:]), "stream-K differed between runs"
    assert rel_fro(torch, runs[0], reference(torch, a, b, None, "none")) < TOLERANCE[dtype]


def test_tma_store_cases_use_the_tma_store_on_hopper(kernels):
    """The TMA_STORE_CASES exercise the TMA-store epilogue (on an sm_90 device); a case the model runs
    with ping-pong consumers picks its epilogue by their model (the forced PINGPONG_CASES cover both)."""
    require_hopper("the TMA-store epilogue is a Hopper-path schedule")
    for M, N, K, dt, ta, tb, bias, act in TMA_STORE_CASES + [CHAIN[0] + (False, False, False, "none")]:
        resolved = mm.resolve_kernel(GemmProblem(M, N, K, dt, ta, tb, bias, act))
        s = resolved.schedule
        assert s.hopper.epilogue == "tma_store" or s.pingpong, resolved.problem.describe()


@pytest.mark.parametrize("case", PINGPONG_CASES, ids=case_id)
def test_pingpong_matmul_vs_float64(case, kernels, force):
    """Ping-pong consumers (the warpgroups alternate tiles, named barriers order their K loops, each
    its own epilogue) vs float64 on fresh random data, every element of a NaN-poisoned C written."""
    force("NOVA_PINGPONG", "1")
    require_hopper("ping-pong consumers are a Hopper-path schedule")
    check_forced_matmul(case, lambda s: s.pingpong)


@pytest.mark.parametrize("case", PINGPONG_WIDE_CASES, ids=case_id)
def test_pingpong_wide_tiles_vs_float64(case, kernels, force):
    """Ping-pong on 128x192 warpgroup tiles (NOVA_PINGPONG=128x192: 192 FP32 accumulators a consumer
    thread, ptxas's registers measured in hopper.PINGPONG_OVERHEAD_REGS) vs float64, every element written."""
    force("NOVA_PINGPONG", PINGPONG_WIDE)
    require_hopper("ping-pong consumers are a Hopper-path schedule")
    check_forced_matmul(case, lambda s: s.pingpong and s.tile_slabs == 2 and s.mma.n == 192)


def test_short_k_pingpong_one_slab_tiles_vs_float64(kernels, force):
    """The batched 17x300x200x256 bf16 NT case forced onto 64x64 ping-pong tiles with the TMA store: at 8
    ring stages for its 4 K tiles every tile came out wrong on the H100 (bench/results/h100-2026-12-07/
    run124-h100, run126-h100); the ring is now held to the K tiles (``hopper.pingpong_ring_cap``)."""
    force("NOVA_PINGPONG", PINGPONG_ONE_SLAB)
    require_hopper("ping-pong consumers are a Hopper-path schedule")
    s = mm.resolve_kernel(batched_problem(PINGPONG_SHORT_K_CASE)).schedule
    assert s.pingpong and s.tile_slabs == 1 and s.stages <= 4 and s.hopper.tma_store
    check_batched(pytest.importorskip("torch"), PINGPONG_SHORT_K_CASE)


def test_pingpong_f32_output_and_batch(kernels, force):
    """Ping-pong with an f32 output from bf16 inputs, and a batched problem (every (batch element, tile)
    unit streams all of K, so the warpgroups' ring positions hold), vs float64."""
    force("NOVA_PINGPONG", "1")
    torch = pytest.importorskip("torch")
    require_hopper("ping-pong consumers are a Hopper-path schedule")
    M, N, K, dtype = PINGPONG_F32_OUT
    seed = int.from_bytes(os.urandom(4), "little")
    a, b, _, _ = make_inputs(torch, M, N, K, dtype, False, False, seed=seed)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
    nova.matmul(a, b, out=out)
    resolved = mm.resolve_kernel(GemmProblem(M, N, K, dtype, out_dtype="f32"))
    assert resolved.schedule.pingpong
    torch.cuda.synchronize()
    assert int(torch.isnan(out).sum()) == 0, f"seed {seed}: output elements left unwritten"
    assert rel_fro(torch, out, reference(torch, a, b, None, "none")) < TOLERANCE[dtype], f"seed {seed}"
    for case in PINGPONG_BATCHED_CASES:
        assert mm.resolve_kernel(batched_problem(case)).schedule.pingpong, batched_id(case)
        check_batched(torch, case)


def case_fields(case) -> tuple:
    """``(B, M, N, K, dtype, trans_a, trans_b, bias, activation, broadcast, pads)`` of a
    BATCHED_CASES (packed) or STRIDED_CASES (no epilogue, no broadcast) case."""
    if isinstance(case[-1], tuple):
        return (*case[:7], False, "none", None, case[-1])
    return (*case, (0, 0, 0))


def batched_id(c):
    B, M, N, K, dt, ta, tb, bias, act, bcast, pads = case_fields(c)
    extra = ("-bias" if bias else "") + (f"-{act}" if act != "none" else "") + (f"-bcast{bcast}" if bcast else "") \
        + ("-pad" + "_".join(map(str, pads)) if any(pads) else "")
    return f"{B}x{M}x{N}x{K}-{dt}-{'T' if ta else 'N'}{'T' if tb else 'N'}{extra}"


def batched_problem(case) -> GemmProblem:
    """The problem ``nova.matmul`` states for a BATCHED_CASES or STRIDED_CASES case (``GemmProblem``
    normalises a batch of one, and packed A and C against one B, to the unbatched GEMM): what the
    precompile lister builds."""
    B, M, N, K, dtype, ta, tb, bias, act, bcast, pads = case_fields(case)
    strides = [0 if bcast == op else size + pad for op, size, pad in zip("abc", (M * K, K * N, M * N), pads)]
    return GemmProblem(M, N, K, dtype, ta, tb, bias, act, None, "rna", False, B, *strides)


def batched_inputs(torch, case, seed):
    """(a, b, bias, out, dtype) of a batched case: fresh randn operands stored as the case says
    (``.mT`` views of row-major [K, M] / [N, K] matrices where transposed, 2-D where broadcast,
    matrices ``pad`` elements apart), a NaN-poisoned [B, M, N] output (its matrices padded too)."""
    B, M, N, K, dtype, ta, tb, bias_on, act, bcast, pads = case_fields(case)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    tdt = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]

    def batch_of(rows, cols, pad, fill=None):
        flat = torch.empty(B * (rows * cols + pad) + rows * cols, device="cuda", dtype=tdt)
        if fill is None:
            flat.copy_(torch.randn(flat.numel(), device="cuda", generator=gen))
        else:
            flat.fill_(fill)
        return flat.as_strided((B, rows, cols), (rows * cols + pad, cols, 1))

    def operand(rows, cols, trans, pad, broadcast):
        if broadcast:
            x = torch.randn((cols, rows) if trans else (rows, cols), device="cuda", generator=gen).to(tdt)
            return x.T if trans else x
        x = batch_of(cols, rows, pad) if trans else batch_of(rows, cols, pad)
        return x.mT if trans else x
    a = operand(M, K, ta, pads[0], bcast == "a")
    b = operand(K, N, tb, pads[1], bcast == "b")
    bias = torch.randn(N, device="cuda", generator=gen).to(torch.float32 if dtype == "tf32" else tdt) if bias_on else None
    return a, b, bias, act, batch_of(M, N, pads[2], float("nan")), dtype


def check_batched(torch, case):
    """nova.matmul on a batched case (one launch of ``batched_problem(case)``, the problem the lister
    precompiles) vs float64 torch.matmul: every element written."""
    seed = int.from_bytes(os.urandom(4), "little")
    a, b, bias, act, out, dtype = batched_inputs(torch, case, seed)
    assert nova.matmul(a, b, out=out, bias=bias, activation=act) is out
    assert batched_problem(case) in {memo[0] for memo in mm._kernels}, batched_id(case)
    torch.cuda.synchronize()
    assert int(torch.isnan(out).sum()) == 0, f"{batched_id(case)} (seed {seed}): output elements left unwritten"
    err = rel_fro(torch, out, reference(torch, a, b, bias, act))
    assert err < TOLERANCE[dtype], f"{batched_id(case)} (seed {seed}): relative Frobenius error {err:.2e}"


@pytest.mark.parametrize("case", BATCHED_CASES + STRIDED_CASES, ids=batched_id)
def test_batched_matmul_vs_float64(case, kernels):
    torch = pytest.importorskip("torch")
    check_batched(torch, case)


def test_batched_tma_store_cases_use_the_tma_store_on_hopper(kernels):
    """The BATCHED_TMA_STORE_CASES store C by TMA through a 3-D tensor map of C (on an sm_90 device);
    the other batched cases store from registers."""
    require_hopper("the TMA-store epilogue is a Hopper-path schedule")
    for case in BATCHED_CASES + STRIDED_CASES:
        resolved = mm.resolve_kernel(batched_problem(case))
        s = resolved.schedule                   # ping-pong picks choose their epilogue by their own model
        assert s.hopper.tma_store == (case in BATCHED_TMA_STORE_CASES) or s.pingpong, batched_id(case)


@pytest.mark.parametrize("case", MMA_SYNC_CASES + STRIDED_CASES[:2], ids=batched_id)
def test_batched_mma_sync_family(case, kernels, monkeypatch):
    """The mma.sync kernel's batched grid and 3-D memrefs, on an sm_90 device too (NOVA_HOPPER=0)."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("NOVA_HOPPER", "0")
    mm.reset()
    try:
        check_batched(torch, case)
        assert mm.resolve_kernel(batched_problem(case)).schedule.mma.family == "mma.sync"
    finally:
        mm.reset()


def test_tma_stored_output_feeds_the_next_kernel(kernels):
    """The TMA-store epilogue writes C through the async proxy (and waits for its stores before the
    CTA exits): the next kernel on the stream, a GEMM whose A is that C, reads all of it, with no
    synchronisation between the two launches."""
    torch = pytest.importorskip("torch")
    (M, N, K, dt), (_, N2, _, _) = CHAIN
    seed = int.from_bytes(os.urandom(4), "little")
    a, b, gen, tdt = make_inputs(torch, M, N, K, dt, False, False, seed=seed)
    e = torch.randn((N, N2), device="cuda", generator=gen).to(tdt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    d = torch.full((M, N2), float("nan"), device="cuda", dtype=tdt)
    nova.matmul(a, b, out=c)
    nova.matmul(c, e, out=d)
    torch.cuda.synchronize()
    assert int(torch.isnan(d).sum()) == 0, f"seed {seed}: the second GEMM read unwritten elements of C"
    assert rel_fro(torch, c, reference(torch, a, b, None, "none")) < TOLERANCE[dt]
    assert rel_fro(torch, d, reference(torch, c, e, None, "none")) < TOLERANCE[dt], f"seed {seed}"


def test_deterministic_split_k_gives_the_same_bits_every_run(kernels):
    torch = pytest.importorskip("torch")
    M, N, K, dtype = DETERMINISTIC_CASE
    a, b, _, _ = make_inputs(torch, M, N, K, dtype, False, False, seed=int.from_bytes(os.urandom(4), "little"))
    runs = []
    for _ in range(3):
        out = torch.full((M, N), float("nan"), device="cuda")
        nova.matmul(a, b, out=out, deterministic=True)
        runs.append(out)
    torch.cuda.synchronize()
    assert rel_fro(torch, runs[0], reference(torch, a, b, None, "none")) < TOLERANCE[dtype]
    assert all(torch.equal(runs[0], r) for r in runs[1:]), "deterministic split-K differed between runs"


def test_matmul_allocates_output_like_inputs(kernels):
    torch = pytest.importorskip("torch")
    a, b, _, tdt = make_inputs(torch, 256, 256, 256, "tf32", False, False, seed=7)
    c = nova.matmul(a, b)
    torch.cuda.synchronize()
    assert c.shape == (256, 256) and c.dtype == tdt and c.device == a.device
    assert rel_fro(torch, c, reference(torch, a, b, None, "none")) < TOLERANCE["tf32"]


def test_matmul_on_a_side_stream(kernels):
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a, b, _, _ = make_inputs(torch, 256, 256, 256, "tf32", False, False, seed=11)
        out = torch.full((256, 256), float("nan"), device="cuda")
        nova.matmul(a, b, out=out)
    s.synchronize()
    assert rel_fro(torch, out, reference(torch, a, b, None, "none")) < TOLERANCE["tf32"]


# Graph capture: a Hopper TF32 kernel (operand swap), split-K (its memset is captured too: C is
# NaN-poisoned before each replay) and an operand-prep pass (fp16, K % 8 != 0).
GRAPH_CASES = [(1000, 1000, 1000, "tf32"), (64, 1024, 4096, "tf32"), (333, 257, 129, "fp16"),
               (3000, 2048, 700, "tf32")]                   # the last: C's tensor map made before the capture


@pytest.mark.parametrize("shape", GRAPH_CASES, ids=lambda c: "x".join(map(str, c[:3])) + "-" + c[3])
def test_matmul_in_a_cuda_graph(shape, kernels):
    """Warm up on the capture stream, capture, then replay on fresh data copied into the captured
    inputs: the replay computes the new product (float64 reference), every element written."""
    torch = pytest.importorskip("torch")
    M, N, K, dtype = shape
    seed = int.from_bytes(os.urandom(4), "little")
    a, b, _, tdt = make_inputs(torch, M, N, K, dtype, False, False, seed=seed)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=tdt)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        nova.matmul(a, b, out=out)
    s.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        nova.matmul(a, b, out=out)
    for replay in range(2):
        fresh_a, fresh_b, _, _ = make_inputs(torch, M, N, K, dtype, False, False, seed=seed + 1 + replay)
        a.copy_(fresh_a)
        b.copy_(fresh_b)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert int(torch.isnan(out).sum()) == 0, f"{shape} replay {replay} (seed {seed}): elements left unwritten"
        err = rel_fro(torch, out, reference(torch, a, b, None, "none"))
        assert err < TOLERANCE[dtype], f"{shape} replay {replay} (seed {seed}): relative error {err:.2e}"


CAPTURE_WITHOUT_WARM_UP = """
import torch, nova
from nova.runtime import driver
a = torch.randn(1000, 1000, device="cuda")
b = torch.randn(1000, 1000, device="cuda")
out = torch.empty(1000, 1000, device="cuda")
graph = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(graph):
        nova.matmul(a, b, out=out)
except Exception as e:
    chain = []
    while e is not None:
        chain.append(e)
        e = e.__context__
    print("NOVA:", next((str(x) for x in chain if isinstance(x, driver.NovaRuntimeError)), "none"))
"""


def test_capture_without_warm_up_says_what_to_do(kernels):
    """Capturing a Hopper call on tensors Nova has never seen needs a tensor map, which cannot be
    allocated during capture: the error says to call once first (not a bare CUDA error).  In a
    child process: a capture that fails leaves torch's default CUDA generator unusable for the rest
    of the process ("Offset increment outside graph capture"), which broke the tests after it."""
    import subprocess
    require_hopper("tensor maps are a Hopper-path resource")
    run = subprocess.run([sys.executable, "-c", CAPTURE_WITHOUT_WARM_UP], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert "call nova.matmul once with the same tensors on the capture stream" in run.stdout, run.stdout + run.stderr[-2000:]


def test_signature_hits_on_real_tensors(kernels):
    """Repeated calls take the signature-cache path: new data and a new output every call, the
    current stream read every call, and a misaligned view of the same signature still rejected."""
    torch = pytest.importorskip("torch")
    M = N = K = 256
    results = []
    s = torch.cuda.Stream()
    for seed in (21, 22, 23):
        a, b, _, _ = make_inputs(torch, M, N, K, "tf32", False, False, seed=seed)
        with torch.cuda.stream(s if seed == 23 else torch.cuda.current_stream()):
            results.append((nova.matmul(a, b), reference(torch, a, b, None, "none")))
    torch.cuda.synchronize()
    assert len({c.data_ptr() for c, _ in results}) == 3
    for c, ref in results:
        assert rel_fro(torch, c, ref) < TOLERANCE["tf32"]
    unstated = ("default", mm.torch_deterministic())          # the key of a call that states no `deterministic`
    resolved = mm._plans[mm.signature(a, b, None, None, "none", None, False, unstated)].resolved
    if resolved.hopper is None or "a" not in resolved.hopper.preps:   # rejected on the host, before A is read
        a_bad = torch.randn(M * K + 1, device="cuda")[1:].view(M, K)     # 4 bytes past an allocation
        with pytest.raises((ValueError, driver.NovaRuntimeError), match="aligned"):
            nova.matmul(a_bad, b)
        torch.cuda.synchronize()


def test_validation_errors_on_real_tensors():
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 32, device="cuda")
    with pytest.raises(TypeError, match="different element types"):
        nova.matmul(a, torch.randn(32, 16, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="not on a CUDA GPU"):
        nova.matmul(a, torch.randn(32, 16))
    with pytest.raises(ValueError, match="neither row-major"):
        nova.matmul(a, torch.randn(32, 32, device="cuda")[:, ::2])


def test_host_overhead_per_call(kernels):
    torch = pytest.importorskip("torch")
    a, b, _, _ = make_inputs(torch, 256, 256, 256, "tf32", False, False, seed=3)
    out = torch.empty(256, 256, device="cuda")
    nova.matmul(a, b, out=out)
    torch.cuda.synchronize()
    n = 500
    t0 = time.perf_counter()
    for _ in range(n):
        nova.matmul(a, b, out=out)
    per_call = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    print(f"nova.matmul host-side cost: {per_call:.1f} us/call")
    assert per_call < 200


# --------------------------------------------------------------------------- raw pointers (no torch)
class DeviceArray:
    """A cuMemAlloc buffer exposing __cuda_array_interface__ (tests the generic path without torch)."""

    def __init__(self, host):
        import numpy as np
        self.host = np.ascontiguousarray(host)
        driver.get_device(0).make_current()
        cu = driver.cuda()
        self.ptr = int(driver.check(cu.cuMemAlloc(max(self.host.nbytes, 1)), "cuMemAlloc"))
        driver.check(cu.cuMemcpyHtoD(cu.CUdeviceptr(self.ptr), self.host.ctypes.data, self.host.nbytes), "cuMemcpyHtoD")
        self.__cuda_array_interface__ = {"shape": self.host.shape, "typestr": self.host.dtype.str,
                                         "data": (self.ptr, False), "strides": None, "version": 3}

    def to_host(self):
        import numpy as np
        res = np.empty_like(self.host)
        driver.synchronize()
        cu = driver.cuda()
        driver.check(cu.cuMemcpyDtoH(res.ctypes.data, cu.CUdeviceptr(self.ptr), res.nbytes), "cuMemcpyDtoH")
        return res

    def free(self):
        cu = driver.cuda()
        driver.check(cu.cuMemFree(cu.CUdeviceptr(self.ptr)), "cuMemFree")


def test_launch_gemm_raw_pointers_and_cai(kernels):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(5)
    M, N, K = 256, 256, 256
    A = rng.standard_normal((M, K)).astype(np.float32)
    B = rng.standard_normal((K, N)).astype(np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    bufs = [DeviceArray(A), DeviceArray(B), DeviceArray(np.full((M, N), np.nan, np.float32)),
            DeviceArray(np.full((M, N), np.nan, np.float32))]
    try:
        mm.launch_gemm(GemmProblem(M, N, K), bufs[0].ptr, bufs[1].ptr, bufs[2].ptr)
        nova.matmul(bufs[0], bufs[1], out=bufs[3])           # the __cuda_array_interface__ path
        for buf in bufs[2:]:
            C = buf.to_host()
            assert not np.isnan(C).any()
            assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < TOLERANCE["tf32"]
    finally:
        for buf in bufs:
            buf.free()


def test_matmul_cupy_and_dlpack(kernels):
    """cupy arrays (own class) and a bare DLPack producer (only __dlpack__/__dlpack_device__)."""
    torch = pytest.importorskip("torch")
    M = N = K = 256
    a, b, _, _ = make_inputs(torch, M, N, K, "tf32", False, False, seed=11)
    ref = a.to(torch.float64) @ b.to(torch.float64)

    class DLPackOnly:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    out = torch.full((M, N), float("nan"), device="cuda")
    nova.matmul(DLPackOnly(a), DLPackOnly(b), out=DLPackOnly(out))
    torch.cuda.synchronize()
    assert not torch.isnan(out).any() and rel_fro(torch, out, ref) < TOLERANCE["tf32"]
    cupy = pytest.importorskip("cupy")
    ca, cb = cupy.asarray(a), cupy.asarray(b)
    cc = nova.matmul(ca, cb)                                  # allocated with cupy
    assert isinstance(cc, cupy.ndarray)
    got = torch.as_tensor(cc, device="cuda")
    torch.cuda.synchronize()
    assert rel_fro(torch, got, ref) < TOLERANCE["tf32"]


def test_from_device_models_this_gpu():
    from nova.hwmodel import PRESETS, from_device
    g = from_device()
    preset = mm.preset_for_device_name(g.full_name)
    assert g.sm_count > 0 and g.smem_per_block > 48 * 1024 and g.dram_bw > 1e11
    if preset:
        p = PRESETS[preset]
        assert g.sm_count == p.sm_count and g.arch == p.arch and g.regs_per_sm == p.regs_per_sm
        assert g.smem_per_block == p.smem_per_block
        assert 0.7 < g.dram_bw / p.dram_bw < 1.3       # bus width x memory clock vs datasheet


# --------------------------------------------------------------------------- driver error paths
def _artifact(**kw):
    from nova.codegen.artifact import KernelArtifact
    base = dict(name="nova_gemm", arch="sm_80", ptx="this is not PTX", grid=(1, 1, 1), block=(32, 1, 1),
                smem_bytes=0, params=("A", "B", "C"))
    return KernelArtifact(**{**base, **kw})


def test_bad_ptx_error_names_kernel_and_cuda_error():
    dev = driver.get_device(0)
    with pytest.raises(driver.NovaRuntimeError, match=r"loading bogus gemm from PTX \(sm_80\) on .*CUDA_ERROR_"):
        driver.load_kernel(_artifact(), dev, "bogus gemm")


def test_smem_above_optin_and_wrong_arch_are_clear():
    dev = driver.get_device(0)
    with pytest.raises(driver.NovaRuntimeError, match="allows at most"):
        driver.load_kernel(_artifact(smem_bytes=dev.smem_optin + 1024), dev, "huge gemm")
    major, minor = dev.cc
    with pytest.raises(driver.NovaRuntimeError, match="generated for sm_"):
        driver.load_kernel(_artifact(arch=f"sm_{major + 1}{minor}"), dev, "future gemm")


# --------------------------------------------------------------------------- offline mode
def test_offline_miss_says_what_to_precompile(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("NOVA_CACHE_DIR", str(tmp_path / "empty"))
    cache_mod.set_offline(True)
    mm.reset()
    try:
        a, b, _, _ = make_inputs(torch, 7, 11, 13, "tf32", False, False, seed=1)
        with pytest.raises(NotPrecompiledError, match=r"^not precompiled: gemm 7x11x13 tf32 NN -> f32 on .*"
                                                      r"nova precompile gemm --shapes 7x11x13 --target"):
            nova.matmul(a, b)
    finally:
        cache_mod.set_offline(None)
        mm.reset()


@pytest.mark.skipif(not (os.environ.get("NOVA_OFFLINE") == "1" and os.environ.get("NOVA_CACHE_DIR")),
                    reason="set NOVA_OFFLINE=1 and NOVA_CACHE_DIR to a precompiled cache")
def test_offline_uses_only_the_given_cache(monkeypatch, kernels):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(gemm_family, "compile_artifact", lambda *a: pytest.fail("offline mode compiled a kernel"))
    mm.reset()
    M, N, K = CASES[0][:3]
    a, b, _, _ = make_inputs(torch, M, N, K, "tf32", False, False, seed=2)
    out = torch.full((M, N), float("nan"), device="cuda")
    nova.matmul(a, b, out=out)
    torch.cuda.synchronize()
    resolved = mm.resolve_kernel(GemmProblem(M, N, K), device=driver.get_device(a.device.index))
    assert resolved.status == "cached"
    cache = KernelCache()
    assert cache.root == Path(os.environ["NOVA_CACHE_DIR"]).expanduser()
    assert cache.path_for(resolved.key).exists()
    assert rel_fro(torch, out, reference(torch, a, b, None, "none")) < TOLERANCE["tf32"]


# --------------------------------------------------------------------------- precompile commands
def precompile_commands(target: str) -> list[str]:
    """One ``nova precompile`` line per distinct epilogue/layout among the problems these tests run
    (the cluster cases' lines set NOVA_CLUSTER, the stream-K cases' NOVA_STREAM_K=1, the ping-pong cases'
    NOVA_PINGPONG=1, the batched mma.sync cases' NOVA_HOPPER=0, as their tests do)."""
    groups: dict[tuple, list[str]] = {}
    extra = [(256, 256, 256, "tf32", False, False, False, "none")]     # allocate/stream/overhead/offline tests
    extra += [(M, N, K, dt, False, False, False, "none") for M, N, K, dt in GRAPH_CASES + list(CHAIN)]
    problems = [("", GemmProblem(*case)) for case in CASES + extra]
    problems.append(("", GemmProblem(*DETERMINISTIC_CASE, deterministic=True)))
    problems += [(f"NOVA_CLUSTER={shape} ", GemmProblem(*case)) for shape, case in CLUSTER_CASES]
    problems += [("NOVA_STREAM_K=1 ", GemmProblem(*case)) for case in STREAM_K_CASES]
    problems += [("NOVA_PINGPONG=1 ", GemmProblem(*case)) for case in PINGPONG_CASES]
    problems.append(("NOVA_PINGPONG=1 ", GemmProblem(*PINGPONG_F32_OUT, out_dtype="f32")))
    problems += [("NOVA_PINGPONG=1 ", batched_problem(c)) for c in PINGPONG_BATCHED_CASES]
    problems += [(f"NOVA_PINGPONG={PINGPONG_WIDE} ", GemmProblem(*case)) for case in PINGPONG_WIDE_CASES]
    problems.append((f"NOVA_PINGPONG={PINGPONG_ONE_SLAB} ", batched_problem(PINGPONG_SHORT_K_CASE)))
    problems += [("", batched_problem(c)) for c in BATCHED_CASES + STRIDED_CASES]
    problems += [("NOVA_HOPPER=0 ", batched_problem(c)) for c in MMA_SYNC_CASES + STRIDED_CASES[:2]]
    for env, p in problems:
        flags = precompile_command(p, target).split(" --dtype ")[1]
        dtype, _, rest = flags.partition(" ")
        groups.setdefault((env, rest, dtype), []).append(f"{p.batch}x{p.M}x{p.N}x{p.K}" if p.batch > 1
                                                         else f"{p.M}x{p.N}x{p.K}")
    return [f"{env}nova precompile gemm --shapes {','.join(dict.fromkeys(shapes))} --target {target} --dtype {dtype}"
            + (f" {rest}" if rest else "") for (env, rest, dtype), shapes in groups.items()]


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="print the precompile commands for these GPU tests")
    ap.add_argument("--target", default="h200")
    for line in precompile_commands(ap.parse_args().target):
        print(line)
    sys.exit(0)
