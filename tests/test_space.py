"""The oracle's schedule space (nova.configurator.space) and the host side of `nova tune`."""
import json

import pytest

from nova.codegen.gemm import check_supported
from nova.configurator import GemmProblem, check_schedule, configure
from nova.configurator.space import MAX_ACC_REGS, _full_space, enumerate_schedules, label
from nova.hwmodel import get_target


SHAPES = [(512, 512, 512, "tf32"), (128, 1024, 2048, "bf16"), (1000, 33, 7, "tf32"), (255, 511, 300, "bf16"),
          (64, 64, 4096, "tf32")]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda s: "x".join(map(str, s[:3])) + s[3])
def space(request):
    M, N, K, dtype = request.param
    p = GemmProblem(M, N, K, dtype)
    return p, get_target("h200"), enumerate_schedules(p, "h200")


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
        some = enumerate_schedules(p, gpu, limit=7, strategy=strategy)
        assert some[0] == pick and len(some) == min(7, len(schedules)) and len(set(some)) == len(some)
        assert set(some) <= set(schedules)


def test_enumeration_is_deterministic(space):
    p, gpu, schedules = space
    assert enumerate_schedules(p, gpu) == schedules
    assert enumerate_schedules(p, gpu, limit=9) == enumerate_schedules(p, gpu, limit=9)


def test_pick_is_a_natural_point_of_the_space():
    """For the usual shapes the pick is found by the enumeration itself, with the same resources."""
    for shape in [(4096, 4096, 4096, "bf16"), (1024, 1024, 1024, "bf16"), (3000, 5000, 700, "bf16")]:
        p = GemmProblem(*shape)
        assert configure(p, "h200", family="mma.sync").schedule in _full_space(p, get_target("h200"))


def test_split_k_only_into_f32_without_activation():
    p = GemmProblem(128, 128, 8192, "bf16")                      # bf16 output: no split-K
    assert {s.split_k for s in enumerate_schedules(p, "h200")} == {1}
    p = GemmProblem(128, 128, 8192, "bf16", out_dtype="f32")
    pick = configure(p, "h200", family="mma.sync").schedule                         # may split 64 ways: added to the space
    assert {s.split_k for s in enumerate_schedules(p, "h200") if s != pick} == {1, 2, 4, 8}
    p = GemmProblem(128, 128, 8192, "tf32", activation="relu")
    assert {s.split_k for s in enumerate_schedules(p, "h200")} == {1}


def test_tiny_tune_precompile(tmp_path):
    """`nova tune` compiles 3 candidates into the cache and writes a manifest naming their keys."""
    from nova.runtime.cache import KernelCache, mlir_available
    if not mlir_available():
        pytest.skip("MLIR is not installed")
    from nova.cli.main import main
    manifest = tmp_path / "m.json"
    rc = main(["tune", "gemm", "256x128x64", "--target", "h200", "--dtype", "bf16", "--exhaustive", "--limit", "3",
               "--cache-dir", str(tmp_path / "cache"), "--manifest", str(manifest)])
    assert rc == 0
    m = json.loads(manifest.read_text())
    (entry,) = m["problems"]
    cands = entry["candidates"]
    assert len(cands) == 3 and cands[0]["is_pick"] and sum(c["is_pick"] for c in cands) == 1
    keys = {c["key"] for c in cands}
    assert len(keys) == 3
    cache = KernelCache(tmp_path / "cache")
    assert {e.key for e in cache.entries()} == keys
    assert all(c["status"] == "compiled" and c["entry_bytes"] > 0 for c in cands)
    assert m["summary"]["candidates"] == 3 and m["summary"]["failed"] == 0
