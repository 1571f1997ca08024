"""Thread-block clusters with TMA multicast on the Hopper path (hopper.py step 12, emit_hopper's
"Clusters"), host side: the configurator's rule, the forced shapes (``NOVA_CLUSTER``), the tile walk,
and MLIR -> PTX -> ptxas for sm_90a with the cluster machinery in the PTX.
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from nova.configurator import GemmProblem, configure
from nova.hwmodel import get_target
from mbarrier_model import Mbarrier

from nova.codegen.ptxas import wgmma_hazards   # wgmmas serialised, arrive/wait injected, setmaxnreg ignored
# (cluster, M, N, K, dtype, problem options): bf16 and tf32, NN/NT/TN/TT, split-K through the
# workspace, the TMA-store epilogue, bias + activation, swapped TF32 (B^T from registers), A^T from
# registers, operand prep, and clusters whose last cluster tile holds a tile wholly outside C
CLUSTER_SPREAD = [
    ("2x1", 512, 2048, 16384, "bf16", {"trans_b": True}),                     # deep K: split-K workspace
    ("1x2", 512, 2048, 16384, "bf16", {"trans_b": True}),
    ("1x2", 3000, 5000, 700, "bf16", {"trans_b": True, "bias": True, "activation": "gelu"}),   # TMA store, prep
    ("2x1", 16384, 32768, 512, "bf16", {"trans_b": True}),                    # NT, TMA store, K-major slices of B
    ("1x2", 16384, 32768, 512, "bf16", {"trans_b": True}),                    # K-major slices of A
    ("2x1", 384, 640, 4096, "bf16", {"trans_b": True, "bias": True}),         # 3 tile rows: one tile outside C
    ("2x1", 300, 200, 8192, "bf16", {"trans_b": True, "bias": True, "activation": "gelu"}),   # ragged, outside C
    ("2x1", 4096, 4096, 4096, "tf32", {}),                                    # swapped: B^T (regs) shared
    ("1x2", 4095, 4100, 1000, "tf32", {"activation": "relu"}),                # swapped, TMA store, a tile outside C
    ("2x1", 1000, 1000, 1000, "tf32", {}),
    ("1x2", 768, 3072, 16384, "tf32", {"trans_a": True}),                     # A prepped, split-K workspace
    ("1x2", 3000, 5000, 700, "tf32", {"trans_a": True, "trans_b": True, "bias": True}),   # A^T from registers
    ("2x1", 2048, 2048, 512, "tf32", {"trans_b": True, "bias": True}),        # f32 TMA store
    ("4x1", 4096, 4096, 4096, "bf16", {"trans_b": True}),                     # extent 4 (forced only)
]
# 16-bit problems with an MN-major operand: on the H200 their cluster kernels compute wrong results
# unless the descriptors' start address is masked to 14 bits (bench/results/h200-2026-12-01/a/call3);
# NOVA_CLUSTER forces them like any other
MN_MAJOR_16BIT = [
    ("2x1", 512, 2048, 16384, "bf16", {"trans_a": True}),
    ("1x2", 3000, 5000, 700, "bf16", {"bias": True, "activation": "gelu"}),
    ("4x1", 2900, 3000, 1000, "fp16", {}),
]


@pytest.mark.parametrize("case", MN_MAJOR_16BIT, ids=lambda c: _id(c))
def test_mn_major_16bit_tiles_enter_clusters(case, forced):
    from nova.kernels.gemm.hopper import cluster_blocker
    cl, M, N, K, dtype, extra = case
    forced(cl)
    p = GemmProblem(M, N, K, dtype, **extra)
    cfg = configure(p, "h200")
    assert (cfg.schedule.cluster_m, cfg.schedule.cluster_n) == _shape(cl)
    assert "smem_t" in (cfg.schedule.hopper.operands.a.feed, cfg.schedule.hopper.operands.b.feed)
    assert cluster_blocker(p, cfg.schedule, _shape(cl)) is None


def _id(case):
    cl, M, N, K, dt, extra = case
    return f"{cl}-{M}x{N}x{K}-{dt}-" + "".join(f"{k}={v}" for k, v in extra.items())


@pytest.fixture
def forced(monkeypatch):
    """``forced("2x1")`` sets NOVA_CLUSTER for this test."""
    return lambda shape: monkeypatch.setenv("NOVA_CLUSTER", shape)


@pytest.fixture(autouse=True)
def no_forced_cluster(monkeypatch):
    monkeypatch.delenv("NOVA_CLUSTER", raising=False)
    monkeypatch.setenv("NOVA_PINGPONG", "0")     # clusters run the cooperative consumers (hopper.pingpong_blocker)


def _shape(text):
    return tuple(int(v) for v in text.split("x"))


@pytest.mark.parametrize("case", CLUSTER_SPREAD, ids=_id)
def test_cluster_kernels_assemble_with_the_cluster_machinery(case, forced):
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    cl, M, N, K, dtype, extra = case
    forced(cl)
    p = GemmProblem(M, N, K, dtype, **extra)
    s = configure(p, "h200").schedule
    size = s.cluster_m * s.cluster_n
    assert (s.cluster_m, s.cluster_n) == _shape(cl) and s.hopper.ctas % size == 0
    art = compile_gemm(p, s)
    ptx, r = art.ptx, art.resources
    assert f".reqnctapercluster {size}, 1, 1" in ptx and art.grid == (s.hopper.ctas, 1, 1)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster" in ptx
    assert "mapa.shared::cluster" in ptx and "mbarrier.arrive.shared::cluster.b64" in ptx and ".release.cluster.shared::cluster" not in ptx
    assert ptx.count("barrier.cluster.arrive;") == 2 and ptx.count("barrier.cluster.wait;") == 2
    assert "fence.mbarrier_init.release.cluster" in ptx and "%cluster_ctarank" in ptx and "%nclusterid.x" in ptx
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    assert r["registers"] <= 168, r
    assert not wgmma_hazards(r), r["ptxas_info"]
    assert ("reduce_kernel" in art.meta) == s.split_workspace


def test_cluster_mlir_counts_every_consumer_of_the_cluster(forced):
    """empty[s] expects 4 warps x warpgroups x cluster size arrivals; lane r of each consumer warp
    arrives on the CTA of rank r; the shared tile's boxes are this CTA's slice, multicast."""
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    forced("2x1")
    p = GemmProblem(512, 2048, 16384, "bf16", trans_b=True)
    s = configure(p, "h200").schedule
    text = build_hopper_module(p, s)
    assert s.consumer_warpgroups == 2 and text.count("nvgpu.mbarrier.init %empty") == s.stages
    assert all(f"nvgpu.mbarrier.init %empty[%c{i}], %c16," in text for i in range(s.stages))
    assert "nvvm.cluster_dim = array<i32: 2, 1, 1>" in text and "gpu.barrier" not in text
    assert "%signals_peer = arith.cmpi slt, %lane, %c2 : index" in text
    assert "nvvm.mapa %empty_ptr, %lane_i32 : !llvm.ptr<3> -> !llvm.ptr<7>" in text
    assert text.count("multicast_mask = %mc_mask") == s.hopper.box_b.count // 2    # B (shared): 2 of its 4 boxes
    assert "scf.for %tile = %cluster_id to %c64 step %nclusters" in text            # 2x8 cluster tiles x 4 slices


def test_one_by_one_kernels_have_no_cluster_machinery():
    """A 1x1 schedule generates the kernel it generated before clusters existed (the fingerprint
    checks the bytes): no cluster attribute, barrier, rank, multicast or remote arrive."""
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    p = GemmProblem(4096, 4096, 4096, "bf16")
    s = configure(p, "h200").schedule
    assert (s.cluster_m, s.cluster_n) == (1, 1) and s.multicast is None
    text = build_hopper_module(p, s)
    for needle in ("cluster", "multicast", "mapa", "ctarank"):
        assert needle not in text, needle
    assert "gpu.barrier" in text and "step %nblocks" in text


def test_the_cluster_walk_covers_every_tile_once_per_k_slice(forced, monkeypatch):
    """The emitter's own tile walk, run on integers: every cluster unit's CTAs compute distinct tiles,
    together every tile of C once per K slice, and the only extra tiles lie wholly outside C (the
    128-row tiles these shapes were chosen for: NOVA_WIDE_CONSUMERS=0)."""
    from nova.kernels.gemm.emit_hopper import _HopperKernel
    monkeypatch.setenv("NOVA_WIDE_CONSUMERS", "0")
    for cl, p in (("2x1", GemmProblem(320, 640, 4096, "bf16", trans_b=True)),
                  ("1x2", GemmProblem(4095, 4100, 1000, "tf32")),
                  ("2x1", GemmProblem(300, 200, 8192, "bf16", trans_b=True)),
                  ("4x1", GemmProblem(2900, 3000, 1000, "bf16", trans_b=True))):
        forced(cl)
        s = configure(p, "h200").schedule
        assert (s.cluster_m, s.cluster_n) == _shape(cl)
        k = _HopperKernel(p, s)
        k.tiles_i, k.tiles_j = -(-k.I // k.tile_i), -(-k.J // k.tile_j)
        k.walk_i, k.walk_j = -(-k.tiles_i // k.ci), -(-k.tiles_j // k.cj)
        seen, outside = set(), 0
        for tile in range(k.walk_i * k.walk_j):
            origins = set()
            for rank in range(k.csize):
                k.rank = rank
                i0, j0 = k.tile_origin(tile)
                origins.add((i0, j0))
                if i0 >= k.I or j0 >= k.J:
                    outside += 1
                else:
                    assert (i0, j0) not in seen
                    seen.add((i0, j0))
            assert len(origins) == k.csize
        assert len(seen) == k.tiles_i * k.tiles_j
        assert outside == k.walk_i * k.walk_j * k.csize - len(seen) > 0, (cl, p.describe())
        assert k.ragged["m" if s.cluster_m > 1 else "n"]           # so the epilogue predicates those stores


def test_the_model_prefers_clusters_it_is_not_trusted_with(monkeypatch):
    """The H200 measured every cluster kernel the model preferred slower than its 1x1 kernel
    (bench/results/h200-2026-12-01/a/call4, call7): by default the configurator keeps 1x1 and says why."""
    p = GemmProblem(1024, 1024, 1024)
    step = {st.step: st for st in configure(p, "h200").derivation}["cluster"]
    assert step.value == "1x1" and "measured slower than 1x1" in step.reason


def test_configurator_picks_a_cluster_where_the_model_predicts_a_gain(monkeypatch):
    """The model's rule (AUTO_CLUSTERS on): where a tile's L2 fills bind (narrow tiles: 128x4096x4096
    BF16 is 64x64 tiles), multicasting one operand's tile cuts them and the model predicts a gain: a
    cluster.  Where the tensor cores bind (512x2048x16384 BF16 dW: mma 35.8 us vs L2 31.6), the
    problem is small or its few tiles' SMs fill at their ports' rate (1024^3), the cluster's barriers are
    all it adds: 1x1.  The step records every candidate's
    prediction."""
    from nova.kernels.gemm import hopper
    from nova.kernels.gemm.hopper import predict_hopper
    monkeypatch.setattr(hopper, "AUTO_CLUSTERS", True)
    for p, shape in ((GemmProblem(128, 4096, 4096, "bf16", trans_b=True), (2, 1)), (GemmProblem(128, 4096, 4096), (2, 1))):
        cfg = configure(p, "h200")
        s = cfg.schedule
        assert (s.cluster_m, s.cluster_n) == shape, p.describe()
        base = predict_hopper(p, cfg.target, configure_one_by_one(p))
        assert cfg.prediction.time_us < base.time_us and cfg.prediction.terms_us["l2"] < base.terms_us["l2"]
        step = {st.step: st for st in cfg.derivation}["cluster"]
        assert step.value == f"{shape[0]}x{shape[1]}" and f"1x1 {base.time_us:.1f}" in step.reason
        assert s.hopper.ctas % (s.cluster_m * s.cluster_n) == 0
    # 1024^3 TF32 (64 tiles): its 64 SMs' L2 ports fill at their own rate (L2_PORT_B_PER_CLK), not at
    # 1/132 of the L2's, so multicast no longer pays for the cluster's barriers
    for p in (GemmProblem(512, 2048, 16384, "bf16", trans_a=True), GemmProblem(256, 256, 256, "bf16"),
              GemmProblem(1024, 1024, 1024),
              GemmProblem(8192, 8192, 8192, "bf16"), GemmProblem(16384, 32768, 512, "bf16", trans_b=True)):
        cfg = configure(p, "h200")
        step = {st.step: st for st in cfg.derivation}["cluster"]
        assert (cfg.schedule.cluster_m, cfg.schedule.cluster_n) == (1, 1) and step.value == "1x1", p.describe()
        assert step.reason.startswith("1x1: no cluster shape is predicted faster")


def configure_one_by_one(p):
    """The configurator's schedule with clusters forced off (NOVA_CLUSTER=1x1)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NOVA_CLUSTER", "1x1")
        return configure(p, "h200").schedule


def test_cluster_model_terms():
    """Multicast divides the shared tile's fill bytes by the extent; the clusters walk cluster units
    floor(SMs / size) at a time (ragged cluster tiles padded); the barriers cost CLUSTER_SYNC_S."""
    from nova.kernels.gemm.hopper import (CLUSTER_SYNC_S, cluster_pacing, cluster_slots, fill_share, operand_plan,
                                          time_terms)
    gpu = get_target("h200")
    assert fill_share(128, 256, (2, 1)) == pytest.approx(256 / 384)      # B's 256 rows shared along M
    assert fill_share(128, 256, (1, 2)) == pytest.approx(320 / 384)      # A's 128 rows shared along N
    assert cluster_slots(gpu, 2) == 66 and cluster_slots(gpu, 4) == 33
    # 512x2048 in 128x256 tiles x 4 K slices: 128 units on 132 SMs, 64 cluster units on 66 clusters
    assert cluster_pacing(gpu, 512, 2048, 128, 256, 4, (2, 1)) == gpu.sm_count
    # 3 tile rows in clusters of 2 along them: 2 cluster rows x 100 columns = 200 > 66 -> 4 per SM
    assert cluster_pacing(gpu, 384, 25600, 128, 256, 1, (2, 1)) == 4 * gpu.sm_count
    p = GemmProblem(512, 2048, 16384, "bf16", trans_a=True)
    ops = operand_plan(p)
    one = time_terms(p, gpu, 128, 256, 4, ops, "workspace")
    two = time_terms(p, gpu, 128, 256, 4, ops, "workspace", cluster=(2, 1))
    assert two["l2"] == pytest.approx(one["l2"] * 256 / 384) and two["mma"] == one["mma"]
    assert two["fill"] == pytest.approx(one["fill"] + CLUSTER_SYNC_S)


def test_forced_cluster_shapes_and_what_blocks_them(forced):
    from nova.codegen import CodegenError
    from nova.kernels.gemm.emit_hopper import check_supported
    from nova.kernels.gemm.hopper import cluster_blocker
    p = GemmProblem(4096, 4096, 4096, "bf16", trans_b=True)
    forced("1x2")
    s = configure(p, "h200").schedule
    assert (s.cluster_m, s.cluster_n) == (1, 2) and s.multicast == ("a", 2)
    assert (s.hopper.box_a.rows, s.hopper.box_a.count) == (64, 2)          # A K-major: 2 slices of 64 rows
    assert {st.step: st for st in configure(p, "h200").derivation}["cluster"].reason.startswith("NOVA_CLUSTER=1x2")
    forced("2x2")                                   # not generated: falls back to 1x1 and says why
    cfg = configure(p, "h200")
    assert (cfg.schedule.cluster_m, cfg.schedule.cluster_n) == (1, 1)
    assert "multicast both operands" in {st.step: st for st in cfg.derivation}["cluster"].reason
    forced("two")
    with pytest.raises(ValueError, match="NOVA_CLUSTER"):
        configure(p, "h200")
    forced("1x1")
    one = configure(p, "h200").schedule
    assert cluster_blocker(p, one, (2, 1)) is None
    thin = GemmProblem(64, 4096, 4096, "bf16", trans_b=True)            # one tile row
    assert "wider than the problem" in cluster_blocker(thin, configure(thin, "h200").schedule, (2, 1))
    assert "persistent" in cluster_blocker(p, dataclasses.replace(one, persistent=False), (2, 1))
    assert "portable" in cluster_blocker(p, one, (16, 1))
    nn = GemmProblem(128, 4096, 4096, "bf16")                          # B MN-major: allowed (masked descriptors)
    assert cluster_blocker(nn, configure(nn, "h200").schedule, (1, 2)) is None
    with pytest.raises(CodegenError, match="cluster 2x2: .*multicast both operands"):
        check_supported(p, dataclasses.replace(one, cluster_m=2, cluster_n=2))


def test_cluster_schedules_key_and_round_trip(forced):
    """The cluster shape is part of the schedule: its own cache key, JSON round trip, its label."""
    import json

    from nova.kernels.gemm.schedule import Schedule
    from nova.kernels.gemm.space import label
    from nova.kernels.gemm.family import kernel_key
    p, gpu = GemmProblem(512, 2048, 16384, "bf16", trans_b=True), get_target("h200")
    one = configure(p, gpu).schedule
    forced("2x1")
    two = configure(p, gpu).schedule
    assert kernel_key(p, one, gpu) != kernel_key(p, two, gpu)
    assert Schedule.from_dict(json.loads(json.dumps(two.to_dict()))) == two
    assert label(two).endswith(" c2x1") and " c" not in label(one).split("g")[-1]


def test_atomic_split_k_in_a_cluster_assembles():
    """FP32 atomics into C (the configurator prefers the workspace today, so built directly)."""
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    from nova.kernels.gemm.hopper import operand_plan, wgmma_schedule
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    p, gpu = GemmProblem(512, 256, 16384), get_target("h200")
    s = wgmma_schedule(p, gpu, operand_plan(p), 2, 128, 8, 6, 1, reduction="atomic", cluster=(2, 1))
    art = compile_gemm(p, s)
    assert s.zero_output and art.zero_output and re.search(r"(red|atom)\.global\.add\.f32", art.ptx)
    assert ".reqnctapercluster 2, 1, 1" in art.ptx and art.resources["spill_store_bytes"] == 0


def test_the_space_enumerates_cluster_shapes():
    """The oracle measures the pick's cluster choice: the wgmma space holds 2x1 and 1x2 variants of its
    persistent schedules (every one accepted by codegen: tests/test_space.py)."""
    from nova.kernels.gemm.space import enumerate_schedules
    space = enumerate_schedules(GemmProblem(1024, 1024, 1024, "bf16", trans_b=True), "h200")
    shapes = {(s.cluster_m, s.cluster_n) for s in space}
    assert shapes == {(1, 1), (2, 1), (1, 2)}
    assert all(s.persistent and s.hopper.ctas % 2 == 0 for s in space if s.cluster_m * s.cluster_n > 1)


def test_the_gpu_tests_cluster_cases_get_their_shapes(forced):
    """Each cluster case of tests/test_runtime_gpu.py is configured in the shape it forces (a shape
    the kernel cannot run would fall back to 1x1), and its precompile line forces it too; no default
    case picks a cluster (AUTO_CLUSTERS is off)."""
    from test_runtime_gpu import CASES, CLUSTER_CASES, precompile_commands
    lines = precompile_commands("h200")
    for shape, case in CLUSTER_CASES:
        forced(shape)
        s = configure(GemmProblem(*case), "h200").schedule
        assert (s.cluster_m, s.cluster_n) == _shape(shape), case
        assert any(ln.startswith(f"NOVA_CLUSTER={shape} nova precompile gemm --shapes ") and
                   "{}x{}x{}".format(*case[:3]) in ln for ln in lines), case
    forced("")
    picks = {case: configure(GemmProblem(*case), "h200").schedule for case in CASES}
    # the skinny kernel (a few rows) has no cluster: one CTA per block
    assert not [case for case, s in picks.items() if getattr(s, "cluster_m", 1) * getattr(s, "cluster_n", 1) > 1]
    assert any(hasattr(s, "cluster_m") for s in picks.values())


# ---- the cluster's TMA writes = the 1x1 kernel's, on integers ------------------------------------
def _kernel_walk(k):
    """The tile-walk numbers ``setup`` would compute (the kernel is not built)."""
    k.tiles_i, k.tiles_j = -(-k.I // k.tile_i), -(-k.J // k.tile_j)
    k.walk_i, k.walk_j = -(-k.tiles_i // k.ci), -(-k.tiles_j // k.cj)
    return k


def _tma_rows(k, rank, i0, j0, k0):
    """What CTA ``rank`` of kernel ``k``'s TMA loads write for one ring slot: {destination rank:
    set of 128-byte rows (operand, outer global index, inner global index, smem byte offset in the
    slot)} (a K-major row is (M|N row, K start), an MN-major row (K row, M|N start)), and the bytes
    that land in each destination (its full[slot] counts them).  Computed with the emitter's own
    box functions (box_index, box_smem_offset, box_coords) on integers."""
    from nova.kernels.gemm.emit_hopper import SWIZZLE_BYTES, box_coords, box_index, box_smem_offset, boxes_per_cta
    ir, rows, landed = k.ir, {}, {}
    for op, r0, tile_off in ((k.X, i0, 0), (k.Y, j0, k.x_bytes)):
        box, major = k.h.box(op), k.ops.role(op).major
        shared = op == k.shared_op
        per = boxes_per_cta(box, shared, k.csize)
        for q in range(per):
            c = box_index(ir, shared, rank, per, q)
            off = tile_off + box_smem_offset(ir, box, c)
            assert off % 1024 == 0, (op, c, off)       # whole swizzle atoms: TMA's swizzle is the descriptor's
            inner, outer = box_coords(ir, major, box, c, r0, k0)
            for dest in (range(k.csize) if shared else (rank,)):
                rows.setdefault(dest, set()).update(
                    (op, outer + i, inner, off + i * SWIZZLE_BYTES) for i in range(box.rows))
                landed[dest] = landed.get(dest, 0) + box.rows * SWIZZLE_BYTES
    return rows, landed


def _descriptor_rows(k, i0, j0, k0):
    """The 128-byte rows where the consumers read the slot (wgmma descriptors, or the register
    fragments of an MN-major TF32 X, which address the same boxes): a K-major tile row by row, an
    MN-major tile as 128-byte column blocks ``LBO`` apart (LBO from the kernel's descriptor)."""
    from nova.kernels.gemm.emit_hopper import SWIZZLE_BYTES
    rows = set()
    for op, r0, extent, tile_off in ((k.X, i0, k.tile_i, 0), (k.Y, j0, k.tile_j, k.x_bytes)):
        if k.ops.role(op).major == "k":
            rows |= {(op, r0 + i, k0, tile_off + i * SWIZZLE_BYTES) for i in range(extent)}
            continue
        per_row = SWIZZLE_BYTES // k.p.in_bytes
        lbo = ((k.descriptor_hi(op) >> 16) & 0x3FFF) << 4
        assert lbo == k.BK * SWIZZLE_BYTES
        rows |= {(op, k0 + kk, r0 + b * per_row, tile_off + b * lbo + kk * SWIZZLE_BYTES)
                 for b in range(extent // per_row) for kk in range(k.BK)}
    return rows


LAYOUT_PROBLEMS = [(M, N, K, dt, {"trans_a": ta, "trans_b": tb})
                   for M, N, K in ((2900, 3000, 1000), (512, 2048, 16384), (300, 200, 8192))
                   for dt in ("bf16", "fp16", "tf32") for ta in (False, True) for tb in (False, True)]


@pytest.mark.parametrize("case", LAYOUT_PROBLEMS, ids=lambda c: _id(("any",) + tuple(c)))
def test_cluster_tma_writes_are_the_one_by_one_kernels(case):
    """Every layout and dtype, every cluster shape the slicing allows (MN-major 16-bit included,
    whatever cluster_blocker says of them on the device): for each cluster tile and K tile, the TMA
    boxes the cluster's CTAs issue put, into each CTA, exactly the 128-byte rows (global rows and
    columns, smem offsets) that the 1x1 kernel's loads put there for that CTA's tile, signal the
    same full[slot], whose expect_tx (the stage's bytes) they fill exactly, and those are the rows
    where the consumers' descriptors read."""
    from nova.kernels.gemm.emit_hopper import _HopperKernel
    from nova.kernels.gemm.hopper import cluster_blocker, cluster_schedule
    M, N, K, dtype, extra = case
    p, gpu = GemmProblem(M, N, K, dtype, **extra), get_target("h200")
    one = configure_one_by_one(p)
    k1 = _kernel_walk(_HopperKernel(p, one))
    checked = 0
    for shape in ((2, 1), (1, 2), (4, 1), (1, 4)):
        why = cluster_blocker(p, one, shape)
        if why and "MN-major 16-bit" not in why:
            continue
        s = cluster_schedule(p, gpu, one, shape)
        k = _kernel_walk(_HopperKernel(p, s))
        assert (k.tile_i, k.tile_j, k.x_bytes, k.stage) == (k1.tile_i, k1.tile_j, k1.x_bytes, k1.stage)
        tiles = range(k.walk_i * k.walk_j)
        for tile in (tiles if len(tiles) <= 16 else list(tiles[:8]) + list(tiles[-8:])):
            for k0 in (0, k.BK * (k.ktiles - 1)):
                origins, writes, landed = {}, {}, {}
                for rank in range(k.csize):
                    k.rank = rank
                    origins[rank] = k.tile_origin(tile)
                    rows, got = _tma_rows(k, rank, *origins[rank], k0)
                    for dest, rs in rows.items():
                        writes.setdefault(dest, set()).update(rs)
                        landed[dest] = landed.get(dest, 0) + got[dest]
                for rank, (i0, j0) in origins.items():
                    want, want_bytes = _tma_rows(k1, 0, i0, j0, k0)
                    assert writes[rank] == want[0], (shape, tile, rank)
                    assert landed[rank] == want_bytes[0] == k.stage, (shape, tile, rank)
                    assert writes[rank] == _descriptor_rows(k1, i0, j0, k0), (shape, tile, rank)
        checked += 1
    assert checked or p.dtype == "tf32" and not any(v for v in extra.values()), p.describe()


def test_cluster_experiments_take_the_cross_cta_traffic_out_one_step_at_a_time(forced, monkeypatch):
    """bench/probes/cluster_mn_major.py's variants: "local_loads" loads the shared tile in each CTA
    (no multicast; peers still release each other's slots), "local_all" also releases only its own
    slots (the 1x1 ring in a cluster launch); the default kernel is unchanged by the knob, and a
    1x1 schedule ignores it."""
    from nova.codegen import CodegenError
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    forced("1x2")
    monkeypatch.setenv("NOVA_WIDE_CONSUMERS", "0")            # two consumer warpgroups: 16 and 8 arrivals
    p = GemmProblem(3000, 5000, 700, "bf16")                  # B MN-major (not shared), A K-major shared
    s = configure(p, "h200").schedule
    assert (s.cluster_m, s.cluster_n) == (1, 2) and s.hopper.operands.b.feed == "smem_t"
    base = build_hopper_module(p, s)
    assert base == build_hopper_module(p, s, cluster_experiment=None)
    loads = build_hopper_module(p, s, cluster_experiment="local_loads")
    alone = build_hopper_module(p, s, cluster_experiment="local_all")
    assert "multicast_mask" in base and "multicast_mask" not in loads and "multicast_mask" not in alone
    assert loads.count("nvgpu.tma.async.load") == base.count("nvgpu.tma.async.load") + 1   # A's 2 boxes, not 1
    assert "nvvm.mapa" in loads and "nvvm.mapa" not in alone
    assert "nvgpu.mbarrier.init %empty[%c0], %c16," in loads and "nvgpu.mbarrier.init %empty[%c0], %c8," in alone
    assert all("nvvm.cluster_dim = array<i32: 2, 1, 1>" in t for t in (base, loads, alone))
    with pytest.raises(CodegenError, match="cluster experiment"):
        build_hopper_module(p, s, cluster_experiment="nothing")
    forced("1x1")
    one = configure(p, "h200").schedule
    assert build_hopper_module(p, one, cluster_experiment="local_all") == build_hopper_module(p, one)


def test_cluster_descriptors_mask_the_start_address_to_its_14_bits(forced):
    """In a cluster launch rank r's shared::cta addresses carry r above bit 18 (they are its
    shared::cluster addresses); unmasked, >> 4 carries that into the descriptor's LBO field and rank
    >= 1 CTAs read MN-major tiles' boxes 1.. from the wrong place (the H200's wrong results in
    bench/results/h200-2026-12-01/a/call3).  Cluster kernels mask (addr >> 4) to the 14-bit start field; MN-major 16-bit tiles are
    allowed in clusters; 1x1 kernels mask too (ptxas, see emit_hopper)."""
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    from nova.kernels.gemm.hopper import cluster_blocker
    p = GemmProblem(512, 2048, 16384, "bf16", trans_a=True)
    s = configure_one_by_one(p)
    assert cluster_blocker(p, s, (2, 1)) is None
    assert "%ring_enc14 = arith.andi %ring_enc, %c16383 : index" in build_hopper_module(p, s)
    forced("2x1")
    c = configure(p, "h200").schedule
    assert (c.cluster_m, c.cluster_n) == (2, 1) and c.hopper.operands.b.feed == "smem_t"
    text = build_hopper_module(p, c)
    assert "%ring_enc14 = arith.andi %ring_enc, %c16383 : index" in text
    after = text.split("%ring_enc14 = arith.andi %ring_enc, %c16383 : index")[1]
    assert "%ring_enc," not in after and "%ring_enc14" in after    # descriptors start from the masked base


# ---- the ring protocol of a cluster, as a model under random interleavings -----------------------


def _ring_run(csize, stages, iters, own_boxes, shared_boxes, seed):
    """One random interleaving of the kernel's ring in a cluster: each producer waits empty[s]
    (flipped parity), arrive.expect_tx(full[s], stage bytes), issues its own boxes and its slice
    of the shared tile multicast to every CTA (landing later, in any order: complete_tx on each
    destination's full[s]); each consumer waits full[s], reads the slot until it releases it one
    K tile later (wait_group 1) on the empty[s] of every CTA of the cluster (remote arrivals land
    later), the last slot at the end.  Asserts a consumer reads only its own round's boxes and no
    box lands in a slot its consumer is still reading."""
    import random
    rng = random.Random(seed)
    per = shared_boxes // csize
    stage = own_boxes + shared_boxes
    full = [[Mbarrier(1) for _ in range(stages)] for _ in range(csize)]
    empty = [[Mbarrier(csize) for _ in range(stages)] for _ in range(csize)]
    data = [[[None] * stage for _ in range(stages)] for _ in range(csize)]
    reading = [[None] * stages for _ in range(csize)]
    prod, cons, last, done, events = [0] * csize, [0] * csize, [None] * csize, [False] * csize, []

    def release(r):
        s = last[r] % stages
        reading[r][s] = None
        events.extend(("arrive", d, s) for d in range(csize))

    while True:
        moves = [("event", i) for i in range(len(events))]
        for r in range(csize):
            it = prod[r]
            if it < iters and empty[r][it % stages].passed(((it // stages) & 1) ^ 1):
                moves.append(("produce", r))
            it = cons[r]
            if it < iters and full[r][it % stages].passed((it // stages) & 1):
                moves.append(("consume", r))
            elif it == iters and not done[r]:
                moves.append(("finish", r))
        if not moves:
            assert all(done) and prod == [iters] * csize, f"deadlock: producers {prod}, consumers {cons}"
            return
        kind, x = rng.choice(moves)
        if kind == "produce":
            it = prod[x]
            s = it % stages
            full[x][s].arrive(expect_tx=stage)
            events.extend(("land", x, s, b, it) for b in range(own_boxes))
            events.extend(("land", d, s, own_boxes + x * per + q, it) for q in range(per) for d in range(csize))
            prod[x] += 1
        elif kind == "consume":
            it = cons[x]
            s = it % stages
            assert data[x][s] == [it] * stage, (x, s, it, data[x][s])
            reading[x][s] = it
            if last[x] is not None:
                release(x)
            last[x], cons[x] = it, it + 1
        elif kind == "finish":
            release(x)
            done[x] = True
        else:
            ev = events.pop(x)
            if ev[0] == "land":
                _, d, s, b, it = ev
                assert reading[d][s] is None, f"round {it} landed in CTA {d} slot {s} during round {reading[d][s]}"
                data[d][s][b] = it
                full[d][s].complete_tx(1)
            else:
                empty[ev[1]][ev[2]].arrive()


def test_the_cluster_ring_protocol_holds_under_any_interleaving():
    """The protocol the emitter implements (module docstring, 'Clusters'), independent of the
    operands' majors: with the box placement equal to the 1x1 kernel's (the test above), this is
    what would have to fail for a cluster kernel to read wrong data."""
    for csize in (2, 4):
        for stages in (2, 3, 4):
            for own, shared in ((1, csize), (2, 2 * csize), (4, csize)):
                for seed in range(25):
                    _ring_run(csize, stages, 3 * stages + 1, own, shared, seed)
