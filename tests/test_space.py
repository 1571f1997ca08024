"""The oracle's schedule space (nova.kernels.gemm.space) and the host side of `nova tune`."""
import json
from dataclasses import replace

import pytest

from nova.codegen import CodegenError
from nova.kernels.gemm.emit_ampere import check_supported
from nova.kernels.gemm.emit_hopper import check_supported as check_supported_hopper
from nova.configurator import GemmProblem, check_schedule, configure
from nova.kernels.gemm.hopper import output_vector
from nova.kernels.gemm.space import _raster
from nova.kernels.gemm.space import (MAX_ACC_REGS, WGMMA_N, WGMMA_SPLIT_K, mma_sync_space, wgmma_space_around, analytic_pick, consumer_regs,
                                     enumerate_schedules, label, predict_wgmma, wgmma_fits)
from nova.hwmodel import get_target


SHAPES = [(512, 512, 512, "tf32"), (128, 1024, 2048, "bf16"), (1000, 33, 7, "tf32"), (255, 511, 300, "bf16"),
          (64, 64, 4096, "tf32")]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + s[3])
def space(request):
    M, N, K, dtype = request.param
    p = GemmProblem(M, N, K, dtype)
    return p, get_target("h200"), enumerate_schedules(p, "h200", family="mma.sync")


def test_every_candidate_is_legal(space):
    p, gpu, schedules = space
    assert schedules
    for s in schedules:
        assert check_schedule(p, s, gpu) == [], label(s)
        check_supported(p, s)                                   # the code generator accepts it
        assert s.smem_bytes <= gpu.smem_per_block
        assert s.blocks_per_sm * (s.smem_bytes + gpu.smem_reserved_per_block) <= gpu.smem_per_sm
        assert s.regs_per_thread <= 255
        assert s.blocks_per_sm * s.threads_per_block * s.regs_per_thread <= gpu.regs_per_sm
        assert 1 <= s.warps <= 8 and s.threads_per_block <= 1024
        assert s.warp_tile_m % s.mma.m == 0 and s.warp_tile_n % s.mma.n == 0 and s.block_k % s.mma.k == 0
        assert s.acc_regs_per_thread <= MAX_ACC_REGS
        assert s.split_k == 1 or p.out_dtype == "f32"


def test_space_values_follow_the_rules(space):
    p, gpu, schedules = space
    pick = configure(p, gpu, family="mma.sync").schedule
    grid = [s for s in schedules if s != pick]
    assert {s.block_m for s in grid} <= {16, 32, 64, 128, 256}
    assert {s.stages for s in grid} <= set(range(2, 7))
    assert {s.split_k for s in grid} <= {1, 2, 4, 8}
    assert {s.group_m for s in grid} <= {1, 2, 3, 4, 5, 6, 7, 8, 16} and max(s.group_m for s in grid) <= max(
        1, -(-p.M // 16))
    assert len(set(schedules)) == len(schedules)


def test_analytic_pick_is_included_first_when_limited(space):
    p, gpu, schedules = space
    pick = configure(p, gpu, family="mma.sync").schedule
    assert pick in schedules
    for strategy in ("mixed", "model", "uniform"):
        some = enumerate_schedules(p, gpu, limit=7, strategy=strategy, family="mma.sync")
        assert some[0] == pick and len(some) == min(7, len(schedules)) and len(set(some)) == len(some)
        assert set(some) <= set(schedules)


def test_enumeration_is_deterministic(space):
    p, gpu, schedules = space
    assert enumerate_schedules(p, gpu, family="mma.sync") == schedules
    assert enumerate_schedules(p, gpu, limit=9, family="mma.sync") == enumerate_schedules(p, gpu, limit=9,
                                                                                          family="mma.sync")


def test_pick_is_a_natural_point_of_the_space():
    """For the usual shapes the pick is found by the enumeration itself, with the same resources."""
    for shape in [(4096, 4096, 4096, "bf16"), (1024, 1024, 1024, "bf16"), (3000, 5000, 700, "bf16")]:
        p = GemmProblem(*shape)
        assert configure(p, "h200", family="mma.sync").schedule in mma_sync_space(p, get_target("h200"))


def test_split_k_only_into_f32_without_activation():
    p = GemmProblem(128, 128, 8192, "bf16")                      # bf16 output: no split-K
    assert {s.split_k for s in enumerate_schedules(p, "h200", family="mma.sync")} == {1}
    p = GemmProblem(128, 128, 8192, "bf16", out_dtype="f32")
    pick = configure(p, "h200", family="mma.sync").schedule                         # may split 64 ways: added to the space
    assert {s.split_k for s in enumerate_schedules(p, "h200", family="mma.sync") if s != pick} == {1, 2, 4, 8}
    p = GemmProblem(128, 128, 8192, "tf32", activation="relu")
    assert {s.split_k for s in enumerate_schedules(p, "h200", family="mma.sync")} == {1}


@pytest.mark.parametrize("family", ["mma.sync", None])
def test_tiny_tune_precompile(tmp_path, family):
    """`nova tune` compiles 3 candidates into the cache and writes a manifest naming their keys;
    without --family on the H200 they are wgmma candidates (the path users run)."""
    from nova.runtime.cache import KernelCache, mlir_available
    if not mlir_available():
        pytest.skip("MLIR is not installed")
    from nova.cli.main import main
    manifest = tmp_path / "m.json"
    rc = main(["tune", "gemm", "256x128x64", "--target", "h200", "--dtype", "bf16", "--exhaustive", "--limit", "3",
               "--cache-dir", str(tmp_path / "cache"), "--manifest", str(manifest)]
              + (["--family", family] if family else []))
    assert rc == 0
    m = json.loads(manifest.read_text())
    (entry,) = m["problems"]
    assert entry["family"] == (family or "wgmma")
    assert all(c["schedule"]["mma"]["family"] == entry["family"] for c in entry["candidates"])
    cands = entry["candidates"]
    assert len(cands) == 3 and cands[0]["is_pick"] and sum(c["is_pick"] for c in cands) == 1
    keys = {c["key"] for c in cands}
    assert len(keys) == 3
    cache = KernelCache(tmp_path / "cache")
    assert {e.key for e in cache.entries()} == keys
    assert all(c["status"] == "compiled" and c["entry_bytes"] > 0 for c in cands)
    assert m["summary"]["candidates"] == 3 and m["summary"]["failed"] == 0


# ---- the wgmma (Hopper) family
WGMMA_SHAPES = [(4096, 4096, 4096, "tf32"), (512, 512, 512, "bf16"), (128, 4096, 4096, "bf16"),
                (1000, 33, 7, "tf32"), (255, 511, 300, "bf16"), (8192, 1536, 512, "tf32")]


@pytest.fixture(scope="module", params=WGMMA_SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + s[3])
def wgmma_space(request):
    p = GemmProblem(*request.param)
    gpu = get_target("h200")
    return p, gpu, analytic_pick(p, gpu, "wgmma"), enumerate_schedules(p, gpu, family="wgmma")


def test_wgmma_is_the_default_family_on_hopper():
    p = GemmProblem(1024, 1024, 1024, "bf16")
    assert {s.mma.family for s in enumerate_schedules(p, "h200")} == {"wgmma"}
    assert enumerate_schedules(p, "h200") == enumerate_schedules(p, "h200", family="wgmma")
    assert {s.mma.family for s in enumerate_schedules(p, "rtx3060")} == {"mma.sync"}


def test_every_wgmma_candidate_is_legal(wgmma_space):
    p, gpu, pick, schedules = wgmma_space
    assert schedules and pick in schedules and len(set(schedules)) == len(schedules)
    for s in schedules:
        assert check_schedule(p, s, gpu) == [], label(s)
        check_supported_hopper(p, s)                            # the Hopper code generator accepts it
        assert s.mma.family == "wgmma" and s.consumer_warpgroups in (1, 2, 3) and s.smem_bytes <= gpu.smem_per_block
        assert s.consumer_warpgroups < 3 or s.mma.n <= 192
        assert wgmma_fits(gpu, s.consumer_warpgroups, s.mma.n)


def test_wgmma_space_varies_only_the_searched_fields(wgmma_space):
    """Built by the Hopper rules' schedule builder: every field the space does not search is the pick's,
    the operand plan included; the rest of the Hopper plan (boxes, registers, ring, grid) follows the tiling."""
    _, _, pick, schedules = wgmma_space
    searched = ("mma", "block_m", "block_n", "warps_m", "warps_n", "consumer_warpgroups", "stages", "smem_bytes",
                "group_m", "persistent", "split_k", "split_reduction", "vector_c", "hopper",   # vector_c follows the split
                "cluster_m", "cluster_n", "stream_k_tiles", "consumers",
                "regs_per_thread")                       # the launch's registers follow the warpgroups (512 threads: 128)
    keep = {k: v for k, v in pick.to_dict().items() if k not in searched}
    for s in schedules:
        assert {k: v for k, v in s.to_dict().items() if k not in searched} == keep
        assert replace(s.mma, n=pick.mma.n) == pick.mma and s.hopper.operands == pick.hopper.operands
        assert s.smem_bytes == s.hopper.ring.size(s.stages)
    grid = [s for s in schedules if s != pick]
    assert {s.mma.n for s in grid} <= set(WGMMA_N) and {s.consumer_warpgroups for s in grid} <= {1, 2, 3}
    assert all(s.consumer_warpgroups == 2 and s.tile_slabs in (1, 2) for s in grid if s.pingpong)
    assert len({label(s) for s in schedules}) == len(schedules)


def test_wgmma_space_of_a_large_gemm():
    """4096^3: every warpgroup count, every N (3 warpgroups up to 192), stages 2 up to what fits, both grids
    (more tiles than SMs)."""
    p, gpu = GemmProblem(4096, 4096, 4096, "bf16"), get_target("h200")
    pick = analytic_pick(p, gpu, "wgmma")
    space = wgmma_space_around(p, gpu, pick)
    assert pick in space                                          # a natural point, not added
    coop = [s for s in space if not s.pingpong]
    tiles = {(s.consumer_warpgroups, s.mma.n) for s in coop}
    assert tiles == {(w, n) for w in (1, 2) for n in (64, 128, 192, 256)} | {(3, n) for n in (64, 128, 192)}
    deepest = {t: max(s.stages for s in coop if (s.consumer_warpgroups, s.mma.n) == t) for t in tiles}
    assert deepest[(2, 256)] == 4 and deepest[(1, 64)] == 14      # (232448 - 1024) // ((rows + N) * 128)
    assert deepest[(3, 192)] == 4
    assert {s.persistent for s in space} == {True, False} and {s.split_k for s in space} == {1}
    pingpong = {(s.tile_slabs, s.mma.n) for s in space if s.pingpong}    # ping-pong: 64 or 128 rows x N per warpgroup
    # 2 x 256 needs 256 accumulators; 2 x 192's 192 fit beside PINGPONG_OVERHEAD_REGS (plain epilogue)
    assert pingpong == {(1, 64), (1, 128), (1, 192), (1, 256), (2, 64), (2, 128), (2, 192)}
    assert all(s.persistent for s in space if s.pingpong)
    rasters = {_raster(gpu, 4096, s.block_m, 4096, s.block_n) for s in space}    # each tile's step-14 raster
    assert {s.group_m for s in space if s.consumer_warpgroups < 3} <= {1, 8, 16, pick.group_m} | rasters
    assert {1, 8, 16, pick.group_m} <= {s.group_m for s in space}  # the fixed options, and each tile's own raster


def test_wgmma_register_rule():
    """2 consumer warpgroups x N=256 is the largest tile: 128 accumulators + overhead fit 232 registers."""
    gpu = get_target("h200")
    assert consumer_regs(gpu.regs_per_sm, 2) >= 256 // 2 and wgmma_fits(gpu, 2, 256) and not wgmma_fits(gpu, 3, 256)


def test_wgmma_split_k_values():
    """Split-K into an f32 output without activation, never an empty K slice; the pick's own split is a point."""
    gpu = get_target("h200")
    p = GemmProblem(256, 256, 16384, "tf32")                   # 512 K tiles, 2-8 output tiles
    pick = analytic_pick(p, gpu, "wgmma")
    space = wgmma_space_around(p, gpu, pick)
    assert pick.split_k > 1 and pick in space
    assert {s.split_k for s in space} == {*WGMMA_SPLIT_K, pick.split_k}
    p = GemmProblem(512, 512, 40, "tf32")                       # 2 K tiles: split 2 only
    assert {s.split_k for s in enumerate_schedules(p, gpu, family="wgmma")} == {1, 2}
    # a 16-bit output or an activation: the slices add only through a workspace
    for p in (GemmProblem(256, 256, 16384, "bf16"), GemmProblem(256, 256, 16384, "tf32", activation="relu"),
              GemmProblem(256, 256, 16384, "tf32", deterministic=True)):
        space = enumerate_schedules(p, gpu, family="wgmma")
        assert {s.split_k for s in space} == set(WGMMA_SPLIT_K) == {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 32}
        assert {s.split_reduction for s in space if s.split_k > 1} == {"workspace"}
    # an f32 output: both ways for each split
    space = enumerate_schedules(GemmProblem(256, 256, 16384, "tf32"), gpu, family="wgmma")
    assert {(s.split_k, s.split_reduction) for s in space if s.split_k == 4} == {(4, "atomic"), (4, "workspace")}


def test_wgmma_split_k_follows_codegen(wgmma_space):
    """The space offers split-K exactly when the Hopper code generator builds it."""
    p, _, pick, schedules = wgmma_space
    registers = replace(pick.hopper, epilogue="registers", box_c=None, ring=replace(pick.hopper.ring, staging=0))
    try:
        check_supported_hopper(p, replace(pick, split_k=2, vector_c=output_vector(p, pick.swap_ab, 2), hopper=registers))
        supported = True
    except CodegenError:
        supported = False
    atomics = [s for s in schedules if s.zero_output]
    assert supported or not atomics                  # atomic split-K only where codegen builds it
    if p.out_dtype != "f32" or p.activation != "none" or p.deterministic:
        assert not supported                         # atomics need an f32 output, a linear epilogue
    for s in schedules:
        if s.split_workspace:
            check_supported_hopper(p, s)             # a workspace split builds for any problem


def test_wgmma_model_scores_like_the_configurator():
    """``predict_wgmma`` is hopper.py step 16: the configurator's prediction for its own pick."""
    gpu = get_target("h200")
    for shape in [(4096, 4096, 4096, "tf32"), (4096, 4096, 4096, "bf16"), (8192, 1536, 512, "bf16"),
                  (512, 512, 512, "tf32"), (128, 4096, 4096, "tf32"), (256, 256, 16384, "tf32"), (1000, 33, 7, "bf16"),
                  (1023, 1025, 1027, "tf32")]:
        cfg = configure(GemmProblem(*shape), gpu, family="wgmma")
        got = predict_wgmma(cfg.problem, cfg.schedule, gpu)
        assert got.time_us == pytest.approx(cfg.prediction.time_us) and got.bound == cfg.prediction.bound


def test_wgmma_subsample_holds_the_pick_and_each_tiling():
    p, gpu = GemmProblem(4096, 4096, 4096, "tf32"), get_target("h200")
    pick = analytic_pick(p, gpu, "wgmma")
    some = enumerate_schedules(p, gpu, limit=6, strategy="model", family="wgmma")
    assert some[0] == pick and len(some) == 6
    assert len({(s.block_m, s.block_n, s.warps_m, s.warps_n) for s in some}) == 6   # the model's best of every tiling
    for strategy in ("mixed", "uniform"):
        some = enumerate_schedules(p, gpu, limit=12, strategy=strategy, family="wgmma")
        assert some[0] == pick and len(set(some)) == 12


def test_structure_subsample_keeps_one_of_each_kernel_kind():
    """``structure``: the pick, then the model's best of every coarse kind (split or not, stream-K,
    cluster, ping-pong, epilogue) before any second schedule of a kind, no two of one structure.
    (On the deep-K dW shapes the measured best is a kind the model ranks last: bench/results/h200-2026-12-01/e.)"""
    from nova.kernels.gemm.space import _kind, _structure, schedule_space
    p, gpu = GemmProblem(1536, 512, 16384, "bf16", trans_a=True), get_target("h200")
    pick = analytic_pick(p, gpu, "wgmma")
    kinds = {_kind(s) for s in schedule_space(p, gpu, pick)}
    some = enumerate_schedules(p, gpu, limit=len(kinds) + 3, strategy="structure", family="wgmma")
    assert some[0] == pick and len(some) == len(kinds) + 3
    assert len({_structure(s) for s in some}) == len(some)
    assert {_kind(s) for s in some} == kinds
    assert any(s.pingpong for s in some) and any(s.split_k > 1 for s in some) and any(s.split_k == 1 for s in some)
    with pytest.raises(ValueError, match="structure"):
        enumerate_schedules(p, gpu, limit=4, strategy="fastest", family="wgmma")


def test_wgmma_candidates_compile():
    """Two wgmma candidates through codegen's compile (0.2-0.5 s each)."""
    from nova.runtime.cache import mlir_available
    if not mlir_available():
        pytest.skip("MLIR is not installed")
    from nova.kernels.gemm.compile import compile_gemm
    p, gpu = GemmProblem(1000, 1000, 1000, "bf16"), get_target("h200")
    space = enumerate_schedules(p, gpu, family="wgmma")
    for s in (space[0], space[-1]):                   # 1 warpgroup, shallow ring; 2 warpgroups, N=256
        art = compile_gemm(p, s, cubin=False)
        assert art.grid == (s.hopper.ctas, 1, 1) and art.smem_bytes == s.smem_bytes
        assert f".maxntid {128 * (1 + s.consumer_warpgroups)}" in art.ptx
