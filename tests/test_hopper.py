"""Hopper path, host side: configurator rules, operand plan, MLIR -> PTX -> ptxas for sm_90a.

ptxas is the judge for every Hopper schedule: it must assemble for sm_90a with no spills, no stack,
and none of the infos that mean a performance bug in a wgmma kernel:
C7515/C7519/C7517 (wgmma serialized / warpgroup.arrive or wait inserted because accumulator
registers were touched between issue and wait) and C7508 (setmaxnreg ignored).
"""
from __future__ import annotations

import pytest
from nova.options import OptionError

from nova.configurator import GemmProblem, configure
from nova.kernels.gemm.problem import ProblemError
from nova.kernels.gemm.hopper import workspace_vector

from nova.codegen.ptxas import wgmma_hazards   # wgmmas serialised, arrive/wait injected, setmaxnreg ignored

SPREAD = [
    (4096, 4096, 4096, "tf32", {}),
    (8192, 8192, 8192, "bf16", {}),
    (1000, 999, 1001, "fp16", {"bias": True, "activation": "gelu"}),
    (128, 4096, 4096, "tf32", {}),                       # wave fill -> N = 64
    (3000, 5000, 700, "tf32", {"trans_b": True, "tf32_rounding": "truncate"}),
    (65, 72, 40, "bf16", {"trans_a": True, "out_dtype": "f32"}),       # single K tile (ptxas C7519 if mishandled)
    (2048, 2048, 40, "bf16", {"trans_a": True, "out_dtype": "f32"}),   # single K tile, 2 consumer warpgroups
    (65, 72, 200, "bf16", {"trans_a": True, "out_dtype": "f32"}),
    (16384, 2304, 768, "tf32", {"bias": True, "activation": "relu"}),
    (1000, 1000, 1000, "tf32", {"bias": True, "activation": "silu"}),    # swapped, ragged, bias along wgmma rows
    (4096, 4096, 4000, "tf32", {}),                      # register-fed, odd K-tile count (ptxas C7513 if mishandled)
    (7, 1992, 1687, "tf32", {}),                         # register-fed, split-K slices of odd length
    (256, 512, 384, "tf32", {"trans_a": True, "trans_b": True}),      # A^T from registers, not swapped
    (4096, 4096, 4096, "bf16", {"trans_a": True}),                     # both operands by the transpose bit
    (4096, 4096, 128, "tf32", {}),          # spilled the producer at 40 registers (found by the wgmma oracle build)
    (8192, 1536, 512, "bf16", {}),          # likewise (128 B of spills)
    (128, 4096, 4096, "tf32", {"bias": True}),
    (512, 512, 16384, "bf16", {"trans_a": True}),                      # split-K workspace (a weight gradient)
    (300, 200, 8192, "bf16", {"trans_a": True, "bias": True, "activation": "gelu"}),   # workspace, ragged, epilogue
    (512, 384, 16384, "tf32", {"deterministic": True}),                # workspace: never atomics
    # three consumer warpgroups (192x192 tiles at 152 registers, 512 threads): a split-K weight gradient,
    # ragged with bias + gelu, and an unsplit persistent square
    (3072, 768, 16384, "bf16", {"trans_a": True}),
    (3000, 700, 16000, "bf16", {"trans_a": True, "bias": True, "activation": "gelu"}),
    (3000, 3000, 3000, "bf16", {}),
    # 192-wide tiles (tile_widths): registers epilogue ragged, split-K workspace with 16-byte partials,
    # the TMA store with an MN-major A, swapped TF32
    (777, 1555, 4096, "bf16", {}),
    (768, 3072, 16384, "bf16", {"trans_a": True}),
    (2500, 1800, 1024, "bf16", {"trans_a": True, "bias": True}),
    (3072, 1000, 2048, "tf32", {}),
]
# The TMA-store epilogue (the configurator's choice for each, test_tma_store_cases_are_the_configurators_choice)
TMA_SPREAD = [
    (16384, 32768, 512, "bf16", {"trans_b": True}),                    # GPT-42M's LM head
    (3000, 5056, 700, "bf16", {"bias": True, "activation": "gelu"}),   # ragged M and N, B by the transpose bit
    (5000, 3000, 1024, "fp16", {"trans_b": True}),
    (4095, 4104, 1024, "bf16", {"trans_b": True, "bias": True, "activation": "silu"}),   # 128x128 tiles, ragged
    (16384, 2048, 512, "tf32", {"trans_b": True, "bias": True}),       # f32 output: rotated staging writes
    (8192, 1536, 512, "bf16", {"out_dtype": "f32"}),                   # f32 output from bf16 inputs
    (4000, 4004, 700, "bf16", {"trans_a": True, "trans_b": True, "out_dtype": "f32"}),
    (3000, 5000, 700, "tf32", {"trans_a": True, "trans_b": True, "bias": True}),        # A^T from registers
    (4096, 4096, 4096, "tf32", {}),                                    # swapped: boxes of C's rows along N
    (4095, 4100, 1000, "tf32", {"bias": True}),                        # swapped, ragged, bias along wgmma rows
    (3000, 5000, 700, "tf32", {"activation": "gelu"}),
    (4096, 4096, 1024, "tf32", {"out_dtype": "bf16"}),                 # swapped, 16-bit output
]


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setenv("NOVA_HOPPER", "1")


def test_default_is_wgmma_on_h200_and_nova_hopper_0_opts_out(monkeypatch):
    monkeypatch.delenv("NOVA_HOPPER", raising=False)
    assert configure(GemmProblem(4096, 4096, 4096), "h200").schedule.mma.family == "wgmma"
    assert configure(GemmProblem(4096, 4096, 4096), "a100").schedule.mma.family == "mma.sync"
    monkeypatch.setenv("NOVA_HOPPER", "0")
    assert configure(GemmProblem(4096, 4096, 4096), "h200").schedule.mma.family == "mma.sync"


def test_tf32_rounding_field_keeps_keys_stable():
    p = GemmProblem(64, 64, 64)
    assert "tf32_rounding" not in p.to_dict()               # v0.1 cache keys unchanged
    fast = GemmProblem(64, 64, 64, tf32_rounding="truncate")
    assert fast.to_dict()["tf32_rounding"] == "truncate"
    assert "tf32_fast" in fast.describe()
    with pytest.raises(ProblemError):
        GemmProblem(64, 64, 64, tf32_rounding="rz")


def test_hopper_rules_4096(hopper):
    cfg = configure(GemmProblem(4096, 4096, 4096), "h200")
    s = cfg.schedule
    # TF32 with row-major B: swapped (C^T = B^T A^T), so the 256-wide wgmma N runs along M
    assert (s.mma.family, s.arch, s.block_m, s.block_n, s.block_k) == ("wgmma", "sm_90a", 256, 128, 32)
    assert (s.consumer_warpgroups, s.producer_warps, s.stages, s.persistent, s.swap_ab) == (2, 4, 4, True, True)
    assert (s.warps_m, s.warps_n, s.mma.n) == (1, 8, 256)
    assert s.smem_bytes <= 232448 and s.threads_per_block == 384
    steps = {st.step: st for st in cfg.derivation}
    for name in ("operand roles", "consumer registers", "warpgroup tile", "smem traffic", "stages", "TMA boxes",
                 "cluster", "grid", "split-K", "operand prep"):
        assert name in steps, name
    assert steps["smem traffic"].value == pytest.approx(128)
    assert steps["operand prep"].value == "none"           # no transpose pass
    assert steps["operand roles"].value == "C^T = B^T A^T"
    bf = configure(GemmProblem(4096, 4096, 4096, "bf16"), "h200")
    assert (bf.schedule.block_m, bf.schedule.block_n, bf.schedule.swap_ab, bf.schedule.pingpong) == (128, 256, False, False)
    assert "transpose bit" in {st.step: st for st in bf.derivation}["operand roles"].reason


def test_hopper_wave_fill_shrinks_n(hopper):
    s = configure(GemmProblem(128, 4096, 4096), "h200").schedule
    assert s.block_n < 256


def _feeds(plan):
    return (plan.swap, plan.a.feed, plan.b.feed, plan.a.prep is not None, plan.b.prep is not None)


def test_operand_plan():
    from nova.kernels.gemm.hopper import operand_plan, tensor_map_type
    # TF32: row-major B is N-major -> swap, B^T from registers, A K-major by descriptor, no prep
    nn = operand_plan(GemmProblem(256, 256, 256))
    assert _feeds(nn) == (True, "smem", "regs", False, False)
    assert (nn.x, nn.y) == ("b", "a") and (nn.b.rows, nn.b.cols) == (256, 256) and nn.tensor_map_type == "tf32"
    assert _feeds(operand_plan(GemmProblem(256, 256, 256, trans_b=True))) == (False, "smem", "smem", False, False)
    # transposed A (M-major) goes through registers without a swap
    assert _feeds(operand_plan(GemmProblem(256, 256, 256, trans_a=True, trans_b=True))) == (False, "regs", "smem", False, False)
    # two MN-major TF32 operands: only one can go through registers -> A is transposed first, then swap
    assert _feeds(operand_plan(GemmProblem(256, 256, 256, trans_a=True))) == (True, "smem", "regs", True, False)
    # TMA's 16-byte stride rule: N = 255 floats per row of B cannot be read -> transpose + pad pass
    assert _feeds(operand_plan(GemmProblem(256, 255, 256))) == (False, "smem", "smem", False, True)
    # 16-bit: the descriptor's transpose bit reads MN-major tiles in place
    assert _feeds(operand_plan(GemmProblem(256, 256, 256, "bf16"))) == (False, "smem", "smem_t", False, False)
    assert _feeds(operand_plan(GemmProblem(256, 256, 256, "fp16", trans_a=True))) == (False, "smem_t", "smem_t", False, False)
    # the v0.4 layout (every non-K-major operand through a transpose pass) stays available for experiments
    assert _feeds(operand_plan(GemmProblem(256, 256, 256, "bf16"), transpose_in_kernel=False)) == (False, "smem", "smem", False, True)
    odd = operand_plan(GemmProblem(256, 256, 255, "bf16", trans_b=True))  # 510-byte rows: pad K
    assert odd.a.prep.dst == (256, 256) and not odd.a.prep.transpose
    rounds = operand_plan(GemmProblem(256, 256, 256), prep_rounds=True)    # the v0.2 experiment: the prep rounds,
    assert rounds.a.prep.round and rounds.b.prep.round and rounds.tensor_map_type == "f32"   # TMA does not
    assert tensor_map_type(GemmProblem(8, 8, 8)) == "tf32"
    assert tensor_map_type(GemmProblem(8, 8, 8, tf32_rounding="truncate")) == "f32"
    assert tensor_map_type(GemmProblem(8, 8, 8, "bf16")) == "bf16"


def test_hopper_mlir_has_the_machinery(hopper):
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    p = GemmProblem(4096, 4096, 4096)
    text = build_hopper_module(p, configure(p, "h200").schedule)
    for needle in ("nvgpu.tma.async.load", "nvgpu.mbarrier.try_wait.parity", "nvvm.setmaxregister decrease 56",
                   "nvvm.setmaxregister increase 224", "gpu.grid_dim x", "nvvm.wgmma.wait.group.sync.aligned 1",
                   # swapped TF32: B^T from registers (8-byte shared loads), wgmma through inline PTX
                   "vector.load", "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32"):
        assert needle in text, needle
    p16 = GemmProblem(4096, 4096, 4096, "bf16")
    text16 = build_hopper_module(p16, configure(p16, "h200").schedule)
    assert '"nvvm.wgmma.mma_async"' in text16 and "layoutB = #nvvm.mma_layout<row>" in text16   # transpose bit


@pytest.mark.parametrize("M,N,K,dtype,extra", SPREAD + TMA_SPREAD, ids=lambda v: str(v))
def test_ptxas_clean_sm90a(hopper, M, N, K, dtype, extra):
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    p = GemmProblem(M, N, K, dtype, **extra)
    s = configure(p, "h200", kernel="tiles").schedule     # the wgmma tiles, also where the skinny kernel predicts lower
    art = compile_gemm(p, s)
    r = art.resources
    assert art.arch == "sm_90a" and ".target sm_90a" in art.ptx
    assert r["spill_store_bytes"] == 0 and r["spill_load_bytes"] == 0 and r["stack_bytes"] == 0, r
    assert r["registers"] <= 168, r
    bad = wgmma_hazards(r)
    assert not bad, bad
    assert "setmaxnreg.inc.sync.aligned.u32" in art.ptx and "wgmma.mma_async" in art.ptx
    for op, d in art.meta["prep_kernels"].items():
        assert d["resources"]["spill_store_bytes"] == 0, (op, d["resources"])
    assert ("reduce_kernel" in art.meta) == (s.split_workspace or s.stream_k)
    if s.hopper.tma_store:
        assert art.params[:3] == ("tmap_a", "tmap_b", "tmap_c") and "cp.async.bulk.tensor.2d.global.shared::cta" in art.ptx
        assert "cp.async.bulk.wait_group.read" in art.ptx and "fence.proxy.async.shared::cta" in art.ptx
        assert "st.global" not in art.ptx and r["smem_bytes"] + s.smem_bytes <= 232448, r
    if s.split_workspace:
        reduce = art.meta["reduce_kernel"]
        assert reduce["resources"]["spill_store_bytes"] == 0 and reduce["params"] == ["W", "C"] + (["bias"] if p.bias else [])
        assert art.params == ("tmap_a", "tmap_b", "W") and not art.zero_output
        # the partials leave in 16-byte stores after a lane exchange where the rows allow it, else in
        # pairs where N is even, else one by one (``workspace_vector``, which the model prices)
        vector = workspace_vector(p, s.swap_ab)
        quads = vector == 4
        assert ("st.global.v4.b32" in art.ptx) == quads and ("st.global.v2.b32" in art.ptx) == (vector == 2), s.swap_ab
        assert ("shfl.sync.bfly" in art.ptx) == quads


def test_three_consumer_warpgroups_where_their_registers_hold_the_tile():
    """Step 8 tries 3 consumer warpgroups (192 wgmma rows) at the N whose accumulators fit 152
    registers (192 and narrower, never 256), where the wgmma A comes from shared memory: GPT-144M's BF16
    weight gradient takes cuBLAS's 192x192 tiles with split 2 (64 tiles x 2 = 128 units, half the
    partial bytes of 128x192 split 4); the launch holds 512 threads at 128 registers and setmaxnreg
    moves them to 152 per consumer; a TF32 A fed from registers keeps 2 warpgroups (with 3, ptxas
    serialised every wgmma: C7512)."""
    from nova.kernels.gemm.hopper import consumer_regs, entry_regs, wide_consumers_fit
    from nova.hwmodel.presets import h200
    gpu = h200()
    assert consumer_regs(gpu.regs_per_sm, 3) == 152 and entry_regs(gpu.regs_per_sm, 3) == 128
    assert entry_regs(gpu.regs_per_sm, 2) == entry_regs(gpu.regs_per_sm, 1) == 168     # unchanged for 1-2
    s = configure(GemmProblem(3072, 768, 16384, "bf16", trans_a=True), "h200").schedule
    assert (s.block_m, s.block_n, s.consumer_warpgroups, s.split_k) == (192, 192, 3, 2) and s.hopper.ctas == 128
    assert s.regs_per_thread == 128 and s.hopper.consumer_regs == 152 and s.warps_m == 12
    assert s.hopper.box_a.count == 3 and s.hopper.ring.x_bytes == 192 * 128       # MN-major A: 3 boxes of 64
    for p in (GemmProblem(3072, 768, 16384, "tf32", trans_a=True), GemmProblem(768, 3072, 16384, "tf32", trans_a=True)):
        t = configure(p, "h200").schedule
        assert not wide_consumers_fit(t.hopper.operands) and t.consumer_warpgroups <= 2
    n256 = configure(GemmProblem(8192, 8192, 8192, "bf16"), "h200").schedule
    assert n256.consumer_warpgroups == 2 and n256.mma.n == 256


def test_nova_wide_consumers_switch(monkeypatch):
    """NOVA_WIDE_CONSUMERS=0 keeps 1-2 consumer warpgroups (the picks before); a bad value is one error."""
    p = GemmProblem(3072, 768, 16384, "bf16", trans_a=True)
    monkeypatch.setenv("NOVA_WIDE_CONSUMERS", "0")
    s = configure(p, "h200").schedule
    assert (s.block_m, s.block_n, s.consumer_warpgroups, s.split_k) == (128, 192, 2, 4)
    monkeypatch.setenv("NOVA_WIDE_CONSUMERS", "2")
    with pytest.raises(OptionError, match="NOVA_WIDE_CONSUMERS='2'"):
        configure(p, "h200")


def test_192_wide_tiles_are_step_8_candidates():
    """Step 8 tries 3/4 of the widest N where that is whole 64-column TMA boxes (256 -> 192, the
    libraries' deep-K tiles), and picks it where it fills the SMs better: 1536^3 BF16 makes 96 tiles of
    128x192 against 72 of 128x256 and 144 of 128x128."""
    from nova.kernels.gemm.hopper import tile_widths
    assert tile_widths(256) == (256, 192, 128, 64) and tile_widths(128) == (128, 64, 32)
    s = configure(GemmProblem(1536, 1536, 1536, "bf16"), "h200").schedule
    assert (s.block_m, s.block_n, s.split_k) == (128, 192, 1) and s.mma.n == 192
    assert s.hopper.box_b.count == 3 and s.hopper.ring.y_bytes == 192 * 128
    t = configure(GemmProblem(3072, 1000, 2048, "tf32"), "h200").schedule    # swapped: 192 wgmma N along M
    assert t.swap_ab and (t.block_m, t.block_n) == (192, 128)


def test_split_k_reductions_follow_the_problem():
    """Deep K with few output tiles splits; a 16-bit output, an activation or a deterministic problem
    adds the slices through the workspace (FP32 atomics cannot: rounding, non-linearity, order)."""
    from nova.kernels.gemm.hopper import atomic_split_blocker, split_reductions
    for p in (GemmProblem(512, 512, 16384, "bf16", trans_a=True),
              GemmProblem(256, 256, 16384, "tf32", activation="relu"),
              GemmProblem(512, 384, 16384, "tf32", deterministic=True)):
        s = configure(p, "h200").schedule
        assert s.split_k > 1 and s.split_reduction == "workspace" and s.split_workspace and not s.zero_output
        assert split_reductions(p) == ("workspace",) and atomic_split_blocker(p)
    assert split_reductions(GemmProblem(256, 256, 16384, "tf32")) == ("atomic", "workspace")
    assert "deterministic" in GemmProblem(8, 8, 8, deterministic=True).describe()
    assert "deterministic" not in GemmProblem(8, 8, 8).to_dict()          # the default keeps keys unchanged
    with pytest.raises(ProblemError, match="deterministic"):
        GemmProblem(8, 8, 8, deterministic="yes")


def test_split_k_workspace_kernels(hopper):
    """The GEMM stores raw FP32 partials (no atomics, no bias, no activation) at rows kslice * M + m of
    a [split * M, N] workspace; the reduction kernel reads the slices in order and does the epilogue."""
    from nova.kernels.gemm.emit_hopper import build_hopper_module, build_split_reduce_module
    p = GemmProblem(300, 200, 8192, "bf16", trans_a=True, bias=True, activation="gelu")
    s = configure(p, "h200").schedule
    main = build_hopper_module(p, s)
    assert f"%C: memref<{s.split_k * 300}x200xf32>" in main and "%bias" not in main
    assert "atomic_rmw" not in main and "ex2.approx" not in main and "slice_row0" in main
    reduce = build_split_reduce_module(p, s)
    assert f"%W: memref<{s.split_k * 300 * 200}xf32>" in reduce and "%C: memref<60000xbf16>" in reduce
    assert "%bias: memref<200xbf16>" in reduce and "ex2.approx" in reduce and "arith.truncf" in reduce
    assert f"scf.for %slice = %c1 to %c{s.split_k} step %c1" in reduce
    atomic = configure(GemmProblem(256, 256, 16384, "tf32"), "h200").schedule
    from dataclasses import replace
    from nova.kernels.gemm.hopper import output_vector
    atomic = replace(atomic, split_reduction="atomic", vector_c=output_vector(GemmProblem(256, 256, 16384), atomic.swap_ab,
                                                                                atomic.split_k, "atomic"))
    assert "memref.atomic_rmw addf" in build_hopper_module(GemmProblem(256, 256, 16384), atomic)
    from nova.codegen import CodegenError
    with pytest.raises(CodegenError, match="no reduction kernel"):
        build_split_reduce_module(GemmProblem(256, 256, 16384), atomic)


def test_schedule_round_trips_through_json():
    """Schedule.from_dict rebuilds every nested dataclass of the Hopper plan (the tune manifests and the
    cache's meta carry schedules as JSON)."""
    import json

    from nova.kernels.gemm.schedule import Schedule
    for p, target in ((GemmProblem(3000, 5000, 700, "bf16"), "h200"),          # A padded by a prep pass
                      (GemmProblem(256, 256, 256, trans_a=True), "h200"),       # A transposed, swapped
                      (GemmProblem(1000, 999, 1001, "fp16"), "rtx3060")):       # mma.sync: no Hopper plan
        s = configure(p, target).schedule
        again = Schedule.from_dict(json.loads(json.dumps(s.to_dict())))
        assert again == s and hash(again) == hash(s)
    assert configure(GemmProblem(3000, 5000, 700, "bf16"), "h200").schedule.hopper.operands.a.prep is not None


def test_the_grid_follows_the_targets_sm_count():
    """The persistent grid is the configurator's min(work units, SMs) for the target it was
    configured for, stored in the schedule; the kernel is launched on exactly that many CTAs (it
    walks its work units by gridDim), whatever the GPU (here an H200 with 114 SMs)."""
    import dataclasses

    from nova.kernels.gemm.emit_hopper import build_hopper_module, compile_hopper
    from nova.hwmodel import Quantity, get_target
    from nova.runtime.cache import mlir_available
    h200 = get_target("h200")
    h114 = dataclasses.replace(h200, name="h200-114sm", q={**h200.q, "sm_count": Quantity(114, "SMs", "test")})
    p = GemmProblem(4096, 4096, 4096, "bf16")
    cfg = configure(p, h114)
    s = cfg.schedule
    assert s.persistent and s.hopper.ctas == 114 and configure(p, h200).schedule.hopper.ctas == 132
    assert {st.step: st.value for st in cfg.derivation}["grid"] == "persistent, 114 CTAs"
    text = build_hopper_module(p, s)
    assert "gpu.grid_dim x" in text and "step %nblocks" in text     # the tile loop strides by the launched grid
    if mlir_available():
        assert compile_hopper(p, s, cubin=False).grid == (114, 1, 1)


def test_tile_choice_uses_the_whole_model():
    """The tile-and-split step ranks its candidates by the prediction itself (DRAM and the ring fill
    included): 8192x64x8192 TF32 is DRAM-bound whatever the tile, so a split-K's zeroing, atomics
    and extra launch cannot pay (the v0.5c oracle: split-K 4 at 0.90 of 64x64 whole-K tiles)."""
    from nova.kernels.gemm.hopper import time_terms, total_time
    from nova.hwmodel import get_target
    gpu = get_target("h200")
    p = GemmProblem(8192, 64, 8192)
    cfg = configure(p, gpu)
    assert cfg.schedule.split_k == 1 and cfg.prediction.bound == "dram"
    t = time_terms(p, gpu, cfg.schedule.mma.m * cfg.schedule.consumer_warpgroups, cfg.schedule.mma.n, 1)
    assert total_time(t) * 1e6 == pytest.approx(cfg.prediction.time_us)


def test_dram_wait_counts_the_dram_share_of_the_fetched_bytes():
    """``dram_wait_time``: the ring's latency bound x DRAM_WAIT_LATENCY x the share of the tiles' fetched
    bytes that is DRAM's.  A decode GEMM (swapped: C^T's rows are N) fetches each byte of B once (share
    ~1); a large square one refetches its operands from L2 (share 0.04); a batch whose B is broadcast
    counts B once among the inputs and once per element among the fetched bytes."""
    from nova.hwmodel import get_target
    from nova.kernels.gemm.hopper import DRAM_WAIT_LATENCY, dram_wait_time, l2_port_bw, L2_PORT_B_PER_CLK
    gpu = get_target("h200")
    decode = GemmProblem(2, 10240, 9600)
    share = (2 * 9600 + 9600 * 10240) / (9600 * (1 * 10240 + 160 * 2))
    assert dram_wait_time(decode, gpu, 64, 64, True, 1.0) == pytest.approx(DRAM_WAIT_LATENCY * share)
    big = GemmProblem(4096, 4096, 4096)
    assert dram_wait_time(big, gpu, 128, 256, False, 1.0) == pytest.approx(
        DRAM_WAIT_LATENCY * 2 * 4096 / (16 * 4096 + 32 * 4096))
    batched = GemmProblem(256, 512, 1024, batch=8, batch_stride_b=0)
    inputs = 8 * 256 * 1024 + 1024 * 512
    fetched = 8 * 1024 * (4 * 256 + 2 * 512)
    assert dram_wait_time(batched, gpu, 128, 128, False, 1.0) == pytest.approx(DRAM_WAIT_LATENCY * inputs / fetched)
    # the L2's TMA bandwidth over the active SMs, each at most its port's
    assert l2_port_bw(gpu, gpu.sm_count) == l2_port_bw(gpu, 10 * gpu.sm_count) == pytest.approx(gpu.l2_tma_bw / gpu.sm_count)
    assert l2_port_bw(gpu, 8) == pytest.approx(L2_PORT_B_PER_CLK * gpu.clock_hz)


def test_model_charges_padded_tile_work_and_atomic_epilogues():
    """A 64-wide tile over N = 7 does the work of N = 64 (the v0.5c oracle's 384x7x4096 miss), and a
    split-K epilogue (4-byte atomics) costs 4x the plain one."""
    from nova.kernels.gemm.hopper import epilogue_time, mainloop_time, output_vector
    from nova.hwmodel import get_target
    gpu = get_target("h200")
    narrow, full = GemmProblem(384, 7, 4096), GemmProblem(384, 64, 4096)
    assert mainloop_time(narrow, gpu, 64, 64, 6, 128) == pytest.approx(mainloop_time(full, gpu, 64, 64, 6, 128))
    assert mainloop_time(full, gpu, 64, 64, 96, 128, split=16) < mainloop_time(full, gpu, 64, 64, 6, 128) / 10
    p = GemmProblem(4096, 4096, 4096)
    whole = epilogue_time(p, gpu, 128, 256, 512, rows=4096, cols=4096)
    assert epilogue_time(p, gpu, 128, 256, 512, split=2, rows=4096, cols=4096) == pytest.approx(4 * whole)
    # a 64-row tile over a 16-row C stores 16 rows (the split-K epilogue of 16x4096x4096 was priced 4x)
    assert epilogue_time(p, gpu, 64, 128, 64, rows=16, cols=4096) == pytest.approx(
        epilogue_time(p, gpu, 64, 128, 64, rows=4096, cols=4096) / 4)
    # the L2's TMA bandwidth is shared by the active SMs, each at most its port's L2_PORT_B_PER_CLK: 64
    # units on 132 SMs fill at the port's rate, not at 1/132 of the L2's (nor at 1/64: over the port)
    from nova.kernels.gemm.hopper import L2_PORT_B_PER_CLK
    share = gpu.l2_tma_bw / gpu.sm_count
    assert L2_PORT_B_PER_CLK * gpu.clock_hz < gpu.l2_tma_bw / 64
    assert mainloop_time(full, gpu, 64, 64, 64, 128, terms=True)["l2"] == pytest.approx(
        mainloop_time(full, gpu, 64, 64, 132, 128, terms=True)["l2"] * share / (L2_PORT_B_PER_CLK * gpu.clock_hz))
    # epilogue store width: 8-byte quads for 16-bit outputs, pairs for FP32, scalar atomics under split-K
    assert output_vector(GemmProblem(64, 64, 64, "bf16"), False, 1) == 4
    assert output_vector(GemmProblem(64, 64, 64), True, 1) == 2
    assert output_vector(GemmProblem(64, 64, 64), True, 4) == 1
    assert output_vector(GemmProblem(64, 66, 64, "bf16"), False, 1) == 2


@pytest.mark.parametrize("M,N,K,dtype,extra", TMA_SPREAD, ids=lambda v: str(v))
def test_tma_store_cases_are_the_configurators_choice(M, N, K, dtype, extra, monkeypatch):
    """Each TMA_SPREAD case is routed to the TMA-store epilogue, with its staging beside the ring (the
    cooperative consumers of 1-2 warpgroups: some of these the model would run ping-pong,
    tests/test_hopper_pingpong.py, or on three warpgroups' 192x192 tiles with the register epilogue)."""
    from nova.kernels.gemm.hopper import c_box, staging_bytes
    monkeypatch.setenv("NOVA_PINGPONG", "0")
    monkeypatch.setenv("NOVA_WIDE_CONSUMERS", "0")
    cfg = configure(GemmProblem(M, N, K, dtype, **extra), "h200")
    s = cfg.schedule
    assert s.hopper.epilogue == "tma_store" and s.split_k == 1, {st.step: st.value for st in cfg.derivation}
    assert s.hopper.box_c == c_box(cfg.problem, s.swap_ab) and s.vector_c * cfg.problem.out_bytes == 16
    assert s.hopper.ring.staging == staging_bytes(s.consumer_warpgroups, "tma_store") == s.consumer_warpgroups * 16384
    assert s.smem_bytes == s.hopper.ring.size(s.stages) <= 232448
    assert {st.step: st.value for st in cfg.derivation}["epilogue"] == "TMA store"


def test_epilogue_step_keeps_registers_where_the_tma_store_cannot_or_does_not_pay():
    """Registers: under split-K, when C's rows are not a multiple of 16 bytes (no tensor map), and
    where every SM runs one tile (nothing to overlap: the staging writes and the final drain only add)."""
    for p, why in ((GemmProblem(512, 512, 16384, "bf16", trans_a=True), "split-K keeps its epilogue"),
                   (GemmProblem(4096, 4098, 512, "bf16"), "not a multiple of 16 bytes"),
                   (GemmProblem(1000, 1000, 1000, "tf32", bias=True, activation="silu"), "does not pay")):
        cfg = configure(p, "h200")
        steps = {st.step: st for st in cfg.derivation}
        assert cfg.schedule.hopper.epilogue == "registers" and cfg.schedule.hopper.box_c is None
        assert cfg.schedule.hopper.ring.staging == 0 and steps["epilogue"].value == "registers"
        assert why in steps["epilogue"].reason, steps["epilogue"].reason
    lm_head = configure(GemmProblem(16384, 32768, 512, "bf16", trans_b=True), "h200")
    why = {st.step: st for st in lm_head.derivation}["epilogue"].reason
    assert "vs registers" in why and "32 KB per CTA" in why


def test_tma_store_model_overlaps_the_staged_stores():
    """The TMA store's cost: the staging writes (shared memory) and the wait for all but the staged
    16 KB per warpgroup to leave are not overlapped; the staged stores count in the L2 term (with
    the fills); the last tile's staged stores drain before the kernel exits.  The ring term is the
    latency bound of the ring's depth and binds only where the ring is shallow."""
    from nova.hwmodel import get_target
    from nova.kernels.gemm.hopper import (epilogue_time, ring_time, time_terms, tma_store_time, total_time,
                                          operand_plan)
    gpu = get_target("h200")
    p = GemmProblem(16384, 32768, 512, "bf16", trans_b=True)
    units = 128 * 128
    serial, overlapped = tma_store_time(p, gpu, 128, 256, units, rows=16384, cols=32768)
    per_sm = -(-units // gpu.sm_count)
    bw = gpu.l2_tma_bw / gpu.sm_count
    staged = 2 * 2 * 8192
    assert overlapped == pytest.approx(per_sm * staged / bw)
    waited = 128 * 256 * 2 - staged                 # must leave before the last step is written
    per_tile = max((128 * 256 * 2 + waited) / (gpu.smem_bytes_per_clk_sm * gpu.clock_hz), waited / bw) \
        + 4 * 64 / gpu.clock_hz
    assert serial == pytest.approx(per_sm * per_tile + staged / bw)
    assert serial < epilogue_time(p, gpu, 128, 256, units, rows=16384, cols=32768)
    reg, tma = (time_terms(p, gpu, 128, 256, 1, operand_plan(p), "atomic", e) for e in ("registers", "tma_store"))
    assert tma["l2"] == pytest.approx(reg["l2"] + overlapped) and tma["mma"] == reg["mma"]
    assert total_time(tma) < total_time(reg)
    # a tile that fits in the staging buffers waits for nothing: only its writes and steps
    small, _ = tma_store_time(p, gpu, 64, 64, 1, rows=16384, cols=32768)
    assert small == pytest.approx(64 * 64 * 2 / (gpu.smem_bytes_per_clk_sm * gpu.clock_hz) + 64 / gpu.clock_hz
                                  + 64 * 64 * 2 / bw)
    # the ring: max(stages - 2, 1) loads ahead, each the loaded latency; 4 stages do not bind at 128x256
    assert ring_time(p, gpu, units, 8, 1, 3) == pytest.approx(2 * ring_time(p, gpu, units, 8, 1, 4))
    assert ring_time(p, gpu, units, 8, 1, 2) == ring_time(p, gpu, units, 8, 1, 3)
    assert reg["ring"] < reg["mma"] and time_terms(p, gpu, 128, 256, 1, stages=3)["ring"] > reg["ring"]


def test_staging_shrinks_the_ring_only_where_the_smem_is_short(monkeypatch):
    """Step 10: the stages formula leaves the staging boxes their 16 KB per consumer warpgroup: a
    128x256 tile keeps 4 stages (48 KB each), a 128x192 one goes from 5 to 4 (40 KB), a 128x128 one
    from 7 to 6 (cooperative consumers)."""
    monkeypatch.setenv("NOVA_PINGPONG", "0")
    monkeypatch.setenv("NOVA_WIDE_CONSUMERS", "0")       # the 2-warpgroup tile (3 would take 192x192, registers)
    from nova.hwmodel import get_target
    from nova.kernels.gemm.hopper import ring_depth, staging_bytes
    gpu = get_target("h200")
    assert ring_depth(gpu, 128, 256) == ring_depth(gpu, 128, 256, staging_bytes(2, "tma_store")) == 4
    assert (ring_depth(gpu, 128, 128), ring_depth(gpu, 128, 128, staging_bytes(2, "tma_store"))) == (7, 6)
    assert (ring_depth(gpu, 128, 192), ring_depth(gpu, 128, 192, staging_bytes(2, "tma_store"))) == (5, 4)
    cfg = configure(GemmProblem(4095, 4104, 1024, "bf16", trans_b=True, bias=True, activation="silu"), gpu)
    steps = {st.step: st for st in cfg.derivation}
    assert cfg.schedule.hopper.tma_store and cfg.schedule.block_n == 192               # 22 x 32 tiles of 128x192
    assert cfg.schedule.stages == steps["stages"].value == 4 and "32 KB of epilogue staging" in steps["stages"].reason


def test_tma_store_mlir_has_the_machinery(hopper, monkeypatch):
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    monkeypatch.setenv("NOVA_PINGPONG", "0")          # the cooperative tile (the default here is ping-pong)
    p = GemmProblem(16384, 2048, 512, "tf32", trans_b=True, bias=True)
    text = build_hopper_module(p, configure(p, "h200").schedule)
    for needle in ("%pC: !llvm.ptr", "nvgpu.tma.async.store", "nvvm.cp.async.bulk.wait_group 1 {read}",
                   "nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}",
                   "nvvm.barrier id = %wg_bar number_of_threads = %c128_i32", "nvvm.cp.async.bulk.commit.group",
                   "nvvm.cp.async.bulk.wait_group 0", "memref<64x32xf32, #smem>"):
        assert needle in text, needle
    assert "%C: memref" not in text and "vector.store" in text
    assert text.count("nvvm.barrier id") == 2 * 8           # two per 8 KB step: 64x256 f32 = 8 steps


# ---- the staging layout, lane by lane --------------------------------------------------------
def _simulate_staging(p, s):
    """Every lane's staging stores of one consumer warpgroup (the emitter's own address code run on
    integer lane ids): ``{step: {(slab row, slab col): byte}}`` (each element of C's slab, checked
    against the wgmma D fragment the value comes from) and per store instruction (wavefronts,
    ideal wavefronts) of shared memory."""
    from collections import defaultdict

    from nova.kernels.gemm.emit_hopper import _HopperKernel
    k = _HopperKernel(p, s)
    k.dsm, k.base_off, ob, box = "%dsm", 0, p.out_bytes, s.hopper.box_c
    written, waves = defaultdict(dict), []
    for w in range(4):
        instrs = defaultdict(list)
        for lane in range(32):
            k.warp, k.g, k.t = w, lane // 4, lane % 4
            if k.x_regs:
                k.fragment_setup()
            q = sum(weight * bit for weight, bit in k.staging_rotation())
            for step in range(k.tile_j // (box.rows if k.swap else box.cols)):
                for gi, (items, slot) in enumerate(k.staging_groups(step)):
                    for i in range(len(items)):
                        row, col, byte = slot(i)
                        for e, a in enumerate(items[i ^ q][1]):   # D fragment: row g + 8h, column 8jj + 2t + d
                            h, jj, d = a % 4 // 2, a // 4, a % 2
                            wrow, wcol = k.slab_row(h), 8 * jj + 2 * k.t + d
                            assert ((wcol, wrow) if k.swap else (wrow, wcol)) == (row, col + e), (w, lane, step, i)
                            assert (row, col + e) not in written[step]
                            written[step][(row, col + e)] = byte + e * ob
                        instrs[(step, gi, i)].append(byte)
        for addrs in instrs.values():
            size = 2 * ob                                      # bytes per lane
            lanes = 128 // size                                # lanes one wavefront serves at best
            total = 0
            for first in range(0, 32, lanes):
                banks = defaultdict(set)
                for byte in addrs[first:first + lanes]:
                    for word in range(byte // 4, (byte + size) // 4):
                        banks[word % 32].add(word)
                total += max(len(v) for v in banks.values())
            waves.append((total, 32 * size // 128))
    return k, written, waves


@pytest.mark.parametrize("dtype,extra,n", [
    ("bf16", {"trans_b": True}, 256), ("fp16", {}, 64), ("tf32", {"trans_b": True}, 256),
    ("bf16", {"out_dtype": "f32"}, 128), ("tf32", {"trans_a": True, "trans_b": True}, 128),
    ("tf32", {"trans_a": True, "trans_b": True, "out_dtype": "bf16"}, 256), ("tf32", {}, 256),
    ("tf32", {"out_dtype": "bf16"}, 128)], ids=str)
def test_staging_layout_is_tmas_and_bank_conflict_free(dtype, extra, n):
    """The staging writes put every element of the warpgroup's slab exactly once where TMA's 128-byte
    swizzle expects it (chunk XOR row % 8 inside each box), and no store instruction of a warp
    meets itself in a bank: 16-bit words fill 32 banks per warp, FP32 pairs 32 per half-warp (the
    lanes' rotation; without it FP32 stores take 2 x the wavefronts)."""
    from nova.hwmodel import get_target
    from nova.kernels.gemm.emit_hopper import _HopperKernel
    from nova.kernels.gemm.hopper import operand_plan, wgmma_schedule
    p = GemmProblem(512, 512, 512, dtype, **extra)
    s = wgmma_schedule(p, get_target("h200"), operand_plan(p), 2, n, 1, 4, 1, epilogue="tma_store")
    k, written, waves = _simulate_staging(p, s)
    box, ob = s.hopper.box_c, p.out_bytes
    rows, cols = (n, 64) if k.swap else (64, n)
    for r in range(rows):
        for c in range(cols):
            if k.swap:
                step, rb, kbox, cb = r // box.rows, r % box.rows, c // box.cols, c % box.cols
            else:
                step, rb, kbox, cb = c // box.cols, r, 0, c % box.cols
            byte = kbox * box.rows * 128 + rb * 128 + ((cb * ob // 16) ^ (rb % 8)) * 16 + cb * ob % 16
            assert written[step][(r, c)] == byte, (r, c)
    assert sum(map(len, written.values())) == rows * cols
    assert all(t == ideal for t, ideal in waves), sorted(set(waves))
    if ob == 4:
        monkey = _HopperKernel.staging_rotation
        try:
            _HopperKernel.staging_rotation = lambda self: []
            assert all(t == 2 * ideal for t, ideal in _simulate_staging(p, s)[2])
        finally:
            _HopperKernel.staging_rotation = monkey


def test_tma_store_odd_step_counts_alternate_buffers_across_tiles(hopper):
    """A 64-wide 16-bit tile is one 8 KB staging step: its buffer alternates with the CTA's tile count
    ((tile - blockIdx) / gridDim), one tile per CTA uses buffer 0; both assemble clean."""
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    from nova.hwmodel import get_target
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    from nova.kernels.gemm.hopper import operand_plan, wgmma_schedule
    gpu = get_target("h200")
    for p, persistent in ((GemmProblem(1000, 1000, 300, "bf16", bias=True), True), (GemmProblem(1000, 1000, 300, "fp16"), False)):
        s = wgmma_schedule(p, gpu, operand_plan(p), 2, 64, 1, 6, 1, persistent=persistent, epilogue="tma_store")
        text = build_hopper_module(p, s)
        assert ("%tile_n = arith.divui" in text) == persistent and text.count("nvgpu.tma.async.store") == 1
        if ptxas.available():
            r = compile_gemm(p, s).resources
            assert r["spill_store_bytes"] == 0 and not wgmma_hazards(r), r


@pytest.mark.parametrize("dtype, extra", [("tf32", {"trans_b": True, "bias": True, "residual": True}),
                                          ("bf16", {"bias": True, "activation": "gelu", "preactivation": True}),
                                          ("tf32", {"residual": True, "activation": "gelu", "activation_grad": True})])
def test_register_epilogue_loads_its_operands_before_the_stores(hopper, dtype, extra):
    """The register epilogue (here: C's rows are not whole 16-byte units, so no tensor map describes
    C) loads the bias and R of EPILOGUE_PREFETCH_BLOCKS column blocks before any of their stores: C
    may be R's storage, so no compiler moves a load above an earlier store, and a block at a time
    waited a memory latency per block (the H100 measured GPT-42M / GPT-2 GEMMs at 1.8-3.4x their
    predictions)."""
    import itertools
    import re
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    from nova.kernels.gemm.emit_hopper import EPILOGUE_PREFETCH_BLOCKS
    if not ptxas.available():
        pytest.skip("ptxas not on PATH")
    p = GemmProblem(16384, 2046 if extra.get("activation") else 510, 512, dtype, **extra)
    s = configure(p, "h200", kernel="tiles").schedule
    assert not s.hopper.tma_store and s.mma.family == "wgmma"
    art = compile_gemm(p, s)
    ops = ["ld" if o.startswith("ld") else "st" for o in re.findall(r"\b(ld\.global|st\.global)", art.ptx)]
    runs = [len(list(g)) for _, g in itertools.groupby(ops)]
    per_block = (2 if p.residual else 0) + (2 if p.bias else 0)     # loads: R's pair in each of a thread's two rows,
                                                                    # the bias of its two columns
    assert ops[0] == "ld" and runs[0] >= EPILOGUE_PREFETCH_BLOCKS * per_block, runs[:6]
    assert art.resources["spill_store_bytes"] == 0, art.resources


@pytest.mark.parametrize("dtype, extra", [("tf32", {"trans_b": True, "bias": True, "activation": "gelu",
                                                    "preactivation": True, "residual": True}),
                                          ("bf16", {"bias": True, "activation": "gelu", "preactivation": True}),
                                          ("tf32", {"trans_b": True, "bias": True, "activation": "gelu", "preactivation": True}),
                                          ("bf16", {"residual": True, "activation": "gelu", "activation_grad": True}),
                                          ("tf32", {"residual": True, "activation": "gelu", "activation_grad": True})])
def test_tma_store_epilogue_reads_r_and_stores_p(hopper, dtype, extra):
    """The training steps' epilogue GEMMs store C (and the pre-activation P, through its own tensor
    map: the kernel's last parameter) by TMA: a step of P, then one of C, each its own bulk group;
    R is read by the threads (pairs of adjacent elements), a step's loads before the step's barriers, its
    lines prefetched into L2 before the tile's K loop.  (A residual add alone keeps the register
    epilogue: through the TMA store it measured slower.)  The
    register epilogue they used ran 1.6-3x slower on the H100 (bench/NOTES.md, 2026-12-05)."""
    import re
    from nova.codegen import ptxas
    from nova.kernels.gemm.compile import compile_gemm
    from nova.kernels.gemm.emit_hopper import build_hopper_module
    p = GemmProblem(16384, 2048 if extra.get("activation") else 512, 512, dtype, **extra)
    for target in ("h200", "h100"):
        s = configure(p, target, kernel="tiles").schedule
        assert s.hopper.tma_store and s.mma.family == "wgmma", (target, s.hopper)
        text = build_hopper_module(p, s)
        plain = build_hopper_module(GemmProblem(p.M, p.N, p.K, dtype, trans_b=p.trans_b), s)
        stores = text.count("nvgpu.tma.async.store")
        assert stores == plain.count("nvgpu.tma.async.store") * (2 if p.preactivation else 1)
        assert ("%tmP" in text) == p.preactivation and ("%R: memref" in text) == p.residual
        assert ("prefetch.global.L2" in text) == p.residual    # R's lines asked into L2 before the K loop
        if not ptxas.available():
            continue
        art = compile_gemm(p, s)
        assert art.params[-1] == ("tmap_p" if p.preactivation else "residual" if p.residual else "bias")
        assert art.resources["spill_store_bytes"] == 0 and art.resources["stack_bytes"] == 0, art.resources
        ops = re.findall(r"\b(ld\.global|st\.global|bar\.sync|cp\.async\.bulk\.tensor\.\dd\.global)", art.ptx)
        assert "st.global" not in ops                       # every output leaves through the TMA
        if p.residual:                                      # each step's R loads come before its barriers
            first = ops.index("ld.global")
            assert ops[first + 1:first + 2] in (["ld.global"], ["bar.sync"]), ops[first:first + 6]
            # an item's two R values are adjacent in C: one 8-byte load (TF32) or 4-byte (16-bit) each,
            # swapped too where the register-fed X makes the accumulator rows adjacent columns
            loads = re.findall(r"\bld\.global[.\w]*", art.ptx)
            if p.bias:                                      # the bias's loads are single elements
                continue
            if s.hopper.operands.swap and p.in_bytes == 2:
                assert loads and all(".b16" in ld or ".u16" in ld for ld in loads), set(loads)
            else:
                assert loads and all(".v2." in ld or (p.in_bytes == 2 and ".b32" in ld) for ld in loads), set(loads)


def test_a_residual_add_alone_keeps_the_register_epilogue(hopper):
    """R without P or gelu'(R): the register epilogue, which the H100 measured 1.05-1.2x faster than
    the TMA store with R's loads at each staging step (the blocker says why, in one line)."""
    from nova.kernels.gemm.hopper import tma_store_blocker
    p = GemmProblem(16384, 512, 2048, "tf32", trans_b=True, bias=True, residual=True)
    s = configure(p, "h200", kernel="tiles").schedule
    assert not s.hopper.tma_store
    assert "register epilogue" in tma_store_blocker(p, s.swap_ab, 1, s.mma.n)
