"""Step 9's device time of the attention kernels (nova/kernels/attention/device_time.py): the busiest
SM's work, the persistent forward's tile order, the causal K/V bytes, and the bounds it takes."""
from __future__ import annotations

import pytest

from nova.hwmodel import get_target
from nova.kernels.attention.derive import configure_attention, visited_pairs
from nova.kernels.attention.device_time import (block_steps, busiest_sm, dram_bytes, filled_share, grid_rows,
                                                persistent_tiles, visited_kv_rows)
from nova.kernels.attention.problem import AttentionProblem

GPU = get_target("h200")
SHAPES = [AttentionProblem(2, 1, 444, 803, 64, causal=True, dtype="bf16"),
          AttentionProblem(7, 1, 7, 4224, 64, causal=True, dtype="bf16"),
          AttentionProblem(2, 16, 1600, 1600, 64, causal=True, dtype="bf16", kv_heads=2),
          AttentionProblem(1, 5, 5312, 5312, 64, dtype="tf32"),
          AttentionProblem(32, 8, 512, 512, 64, causal=True, dtype="tf32")]


@pytest.mark.parametrize("p", SHAPES, ids=lambda p: p.describe())
def test_block_steps_sum_to_the_visited_pairs(p):
    cfg = configure_attention(p, GPU)
    for role in ("fwd", "bwd_dkv", "bwd_dq"):
        kt = cfg.schedule.kernel(role)
        steps = block_steps(p, role, kt.block_rows, kt.block_cols)
        per_head = p.heads if role != "bwd_dkv" else p.kv_heads
        assert sum(steps) * kt.block_rows * kt.block_cols * p.batch * per_head == \
            visited_pairs(p, role, kt.block_rows, kt.block_cols) * p.batch * p.heads


def test_busiest_sm_is_the_longest_block_when_blocks_fit_and_quantizes_waves():
    assert busiest_sm([3, 9, 5], 4, 132) == (9, 1, 9)                 # 12 blocks, one per SM
    work, blocks, longest = busiest_sm([4] * 10, 20, 132)              # 200 equal blocks: 2 on the busiest SM
    assert (work, blocks, longest) == (8, 2, 4)
    work, blocks, _ = busiest_sm([5] + [0] * 99, 8, 132)               # causal decode: 792 empty blocks spread
    assert work == 5 and blocks == 1


def test_persistent_tiles_cover_the_work_and_the_busiest_cta_bounds_the_average():
    steps = [1 + i for i in range(43)]                                 # a causal head of 43 query tiles
    for rows in (1, 5, 64):
        work, tiles = persistent_tiles(steps, rows, 132)
        total = sum(steps) * rows
        assert work >= total / 132 and tiles >= len(steps) * rows / 132
        assert tiles <= -(-len(steps) * rows // 132)


def test_causal_kernels_read_only_the_keys_they_reach():
    p = AttentionProblem(7, 1, 7, 4224, 64, causal=True, dtype="bf16")
    """Causal, queries i see keys j <= i: 7 queries reach the first 64-key block; dK/dV's 65 other key
    blocks read nothing and write their zeros (the kernel's own bytes: bench/results/h100-2026-12-06/run70's
    decode backwards ran at 0.6-0.8 of a price that charged the whole backward's bytes to dK/dV)."""
    assert visited_kv_rows(p, "fwd", 64) == 64 and visited_kv_rows(p, "bwd_dkv", 64) == 64
    full = AttentionProblem(7, 1, 7, 4224, 64, causal=False, dtype="bf16")
    assert dram_bytes(p, "fwd", 64) < 0.05 * dram_bytes(full, "fwd", 64)
    q, kv, rows = 7 * 7 * 64 * 2, 2 * 7 * 4224 * 64 * 2, 4 * 7 * 7
    assert dram_bytes(p, "bwd_dkv", 64) == 2 * q + kv * 64 / 4224 + kv + 2 * rows      # dK, dV written whole
    assert dram_bytes(full, "bwd_dkv", 64) == 2 * q + 2 * kv + 2 * rows
    assert dram_bytes(full, "bwd_dq", 64) == 3 * q + kv + 2 * rows


@pytest.mark.parametrize("p", SHAPES, ids=lambda p: p.describe())
def test_each_kernel_takes_the_larger_bound_plus_its_launch(p):
    cfg = configure_attention(p, GPU)
    for role, t in cfg.terms.items():
        launch = t["launch"]
        if role == "bwd_pre" or role.endswith("_combine"):   # a DRAM pass: its bytes, at least one latency
            assert t["time_us"] == pytest.approx(t["dram"] + launch, abs=0.02)
            assert t["dram"] >= GPU.mem_latency_ns * 1e-3 - 0.01
            continue
        assert t["time_us"] == pytest.approx(max(t["resources"], t["busiest SM"]) + launch, abs=0.02)
        assert (t["bound"] == "busiest SM") == (t["busiest SM"] > t["resources"])
    assert cfg.prediction.time_us == pytest.approx(sum(t["time_us"] for t in cfg.terms.values()), rel=1e-3)


def test_a_few_blocks_are_priced_by_the_busiest_sm_not_the_average():
    """B2 H1 T444x803 causal: 8 forward blocks on 132 SMs.  The throughput bound spreads their work
    over every SM (0.4 us); one SM runs the longest block (the run8 graph replay: 13.4 us)."""
    cfg = configure_attention(AttentionProblem(2, 1, 444, 803, 64, causal=True, dtype="bf16"), GPU)
    fwd = cfg.terms["fwd"]
    assert fwd["bound"] == "busiest SM" and fwd["busiest SM"] > 10 * fwd["resources"]
    assert grid_rows(cfg.problem, "fwd") == 2


def test_a_persistent_forward_adds_its_cta_and_tile_costs():
    p = AttentionProblem(1, 5, 5312, 5312, 64, dtype="tf32")
    cfg = configure_attention(p, GPU)
    assert cfg.schedule.fwd.persistent
    fwd = cfg.terms["fwd"]
    assert fwd["busiest SM"] > fwd["resources"] > 0


def test_a_decode_block_pays_the_fixed_cost_of_the_rows_it_fills_and_empty_blocks_little():
    """B8 H2 T2x1152 D64 causal bf16 (bench/results/h200-2026-12-07/run110-h200/attention, row 13, 20-call graphs:
    forward 2.5 us, backward 10.3): 2 queries fill 3% of the forward's 64-row query tile, so its 16 blocks
    pay little beyond their launch (5.8 us when every block paid 4.5 latencies); dK/dV's keys fill their
    tiles, and its 272 mma.sync blocks past the last query load nothing and pay a share of the per-block
    cost: the resource bound falls below the throughput model's block term."""
    p = AttentionProblem(8, 2, 2, 1152, 64, causal=True, dtype="bf16")
    assert filled_share(p, "fwd", 64) == pytest.approx(2 / 64) and filled_share(p, "bwd_dkv", 64) == 1.0
    assert filled_share(AttentionProblem(1, 8, 132, 132, 64, dtype="bf16"), "fwd", 128) == pytest.approx(132 / 256)
    cfg = configure_attention(p, GPU)
    fwd, dkv = cfg.terms["fwd"], cfg.terms["bwd_dkv"]
    assert fwd["bound"] == "busiest SM" and fwd["time_us"] < 3.0
    assert not cfg.schedule.bwd_dkv.hopper and dkv["resources"] < dkv["blocks"]
