"""Every memory access of the Hopper attention kernels in bounds, for every block, thread and loop
iteration (``nova.kernels.attention.bounds``: the generated MLIR's index arithmetic evaluated exactly,
on the host).  The illegal address of wgmma dK/dV at B2 H4 T1000 D64 FP16 non-causal on the H200
is not an out-of-bounds index of the kernel: its problem is checked here with the passing ones.  It
is ptxas (bench/results/h200-2026-12-01/c/call1): the descriptors' high word left unwritten on the consumers' path; the kernels
now mask the descriptor start to 14 bits, which the last test keeps."""
from __future__ import annotations

import pytest

from nova.bench.attention import FLASH_CASES, GPU_TEST_CASES, problem_of
from nova.kernels.attention.bounds import access_summary, check_attention_kernel, check_bounds, tensor_map_dims
from nova.kernels.attention.build_hopper import build_hopper_fwd
from nova.kernels.attention.build_hopper_bwd import build_hopper_bwd
from nova.kernels.attention.derive import configure_attention

FAILING = (2, 4, 4, 1000, 1000, 64, False, "fp16")          # the H200's illegal address without the mask
CASES = tuple(dict.fromkeys((FAILING,) + FLASH_CASES + tuple(c for c in GPU_TEST_CASES if c[7] != "tf32") + (
    (2, 4, 4, 1000, 1000, 64, False, "bf16"), (2, 4, 4, 1024, 1024, 64, False, "fp16"),
    (1, 1, 1, 1000, 1000, 64, False, "fp16"), (2, 4, 4, 600, 600, 64, False, "bf16"),
    (2, 4, 4, 1000, 1000, 128, False, "bf16"), (2, 8, 2, 333, 1000, 64, False, "fp16"))))


def _schedule(case, monkeypatch):
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER_BWD", "1")
    p = problem_of(case)
    s = configure_attention(p, "h200").schedule
    assert s.bwd_dkv.hopper and s.bwd_dq.hopper and s.tma
    return p, s


@pytest.mark.parametrize("case", CASES, ids=lambda c: "B{}H{}kv{}T{}x{}D{}{}-{}".format(
    *c[:6], "-causal" if c[6] else "", c[7]))
def test_hopper_kernels_access_memory_in_bounds(case, monkeypatch):
    p, s = _schedule(case, monkeypatch)
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        assert check_attention_kernel(p, s, role) == [], role


@pytest.mark.parametrize("case", [(2, 3, 3, 77, 77, 64, True, "tf32"), (1, 2, 2, 130, 130, 128, False, "tf32"),
                                  (2, 4, 4, 1000, 1000, 64, True, "tf32")], ids=["D64-causal", "D128", "T1000"])
def test_hopper_tf32_kernels_access_memory_in_bounds(case, monkeypatch):
    """TF32's kernels add the transposer warps' copies in shared memory (V^T; K^T; Q^T and dO^T): every
    load and store of them inside their ring slot's views, for every slot, unit and lane; at D128 the
    dK/dV kernel has one consumer warpgroup (64 kept rows)."""
    monkeypatch.setenv("NOVA_ATTENTION_HOPPER", "force")
    p = problem_of(case)
    s = configure_attention(p, "h200").schedule
    assert s.tma and s.bwd_dq.hopper and s.bwd_dkv.hopper
    assert s.bwd_dkv.consumer_warpgroups == (2 if p.head_dim == 64 else 1)    # D128: 64-row K, V (step 11)
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        assert check_attention_kernel(p, s, role) == [], role
    assert access_summary(build_hopper_fwd(p, s), tensor_map_dims(p))["view"] == 8 + 6 * (p.head_dim // 64 - 1)


def test_the_check_sees_out_of_bounds_accesses(monkeypatch):
    """The failing problem's dK/dV kernel with one bound broken at a time: each is reported."""
    p, s = _schedule(FAILING, monkeypatch)
    kt = s.bwd_dkv
    text = build_hopper_bwd(p, s, "bwd_dkv")
    check = lambda t, smem=kt.smem_bytes: check_bounds(t, kt.grid, kt.threads, smem, tensor_map_dims(p))
    assert check(text) == []
    # all of them seen: 2 LSE/D loads x 2 column halves, 2 outputs x 2 rows x D/8 stores; 4 LSE/D smem stores,
    # 2 x BC/8 loads, 15 mbarrier ops; kept k, v and streamed q, dout boxes; 8 S/dP wgmmas x 2 descriptors + 8
    assert access_summary(text, tensor_map_dims(p)) == {"global": 36, "smem": 35, "view": 6, "tma": 4, "wgmma": 24}
    broken = {
        "slt, %st_row, %c1000": "slt, %st_row, %c1023",                 # dK/dV rows beyond Tk stored
        "tm_q[%c0, %qs, %hk, %b]": "tm_q[%c0, %qs, %by, %b]",           # a head coordinate beyond H
        "%nl2_sm[%slot_1, %vcol]": "%nl2_sm[%slot_1, %vrow_1]",         # an LSE column beyond the slot
        "%vsrc_3 = arith.select %vrow_ok_1, %vsrc_2, %c0": "%vsrc_3 = arith.select %vrow_ok_1, %vsrc_2, %c8192",
    }
    for old, new in broken.items():
        assert old in text, old
        assert check(text.replace(old, new)), new
    assert check(text, kt.smem_bytes - 64)                              # less dynamic smem than the plan


@pytest.mark.parametrize("case", [FAILING, (1, 8, 8, 777, 777, 128, True, "bf16")], ids=["failing", "D128-causal"])
def test_descriptors_start_from_the_14_bit_masked_base(case, monkeypatch):
    """Every wgmma descriptor of the forward, dK/dV and dQ kernels is built from the shared address >> 4
    masked to the start field's 14 bits, never from the unmasked value: without the mask ptxas 13.0
    split the descriptor's 64-bit add and left its high word (SBO, swizzle) unwritten on the
    consumers' path of the failing problem's dK/dV kernel (H200, bench/results/h200-2026-12-01/c/call1: memcheck
    "out-of-range shared address" at an HGMMA; SASS read by nvdisasm)."""
    p, s = _schedule(case, monkeypatch)
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        text = build_hopper_fwd(p, s) if role == "fwd" else build_hopper_bwd(p, s, role)
        masked = "%base_enc14 = arith.andi %base_enc, %c16383 : index"
        assert text.count(masked) == 1, role
        after = text.split(masked)[1]
        assert "%base_enc," not in after and "%base_enc " not in after and "%base_enc14" in after, role
